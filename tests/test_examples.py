from pathlib import Path

import pytest

from ladle.config import load_config
from ladle.soups import get_soup

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "src" / "ladle" / "examples").glob("*.toml"))


def test_one_example_per_soup_method_shipped_or_generated():
    from ladle.examples import example_text, examples
    from ladle.soups import SOUPS
    from ladle.tomlio import parse_toml

    shipped = {m for path in EXAMPLES for m in load_config(path).soups}
    assert {"gis", "pls", "learned"} <= shipped  # the ones that show their options, written by hand
    for name in SOUPS.names():
        if name not in shipped:
            assert name in examples() and name in parse_toml(example_text(name), name)["soups"]["methods"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid_configs(path):
    config = load_config(path)
    for method in config.soups:
        get_soup(method)


def test_examples_ship_with_the_package_and_the_cli_names_them(capsys):
    from ladle.cli import main

    assert main(["examples"]) == 0
    listed = capsys.readouterr().out
    assert all(path.stem in listed for path in EXAMPLES)
    assert main(["examples", "gis"]) == 0
    assert capsys.readouterr().out == (EXAMPLES[[p.stem for p in EXAMPLES].index("gis")]).read_text()
    assert main(["examples", "gsi"]) == 2
    assert "did you mean 'gis'" in capsys.readouterr().err
    assert main(["run", "--config", "example:nope"]) == 2


def test_the_wheel_carries_the_examples_license_urls_and_no_test_files(tmp_path):
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                          str(tmp_path), str(root)], capture_output=True, text=True)
    if out.returncode != 0 and "No module named" in out.stderr:
        pytest.skip("no wheel builder here: " + out.stderr[-200:])
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("ladle-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"ladle/examples/{p.name}" for p in EXAMPLES} <= set(names)
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    urls = [line.rsplit(", ", 1)[1] for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
            if line.startswith("Project-URL: ")]
    assert len(urls) == 3 and all(u.startswith("https://arxiv.org/abs/") for u in urls)


def test_the_pyg_api_example_runs(tmp_path, shared):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "ladle.examples.pyg_api", "--root", str(shared / "data" / "planetoid"),
                          "--out", str(tmp_path / "run"), "--epochs", "3"], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert sum(line.startswith("ingredient-0") for line in lines) == 4
    assert any(line.startswith("gis") for line in lines) and lines[-1].startswith("GIS soup predicts")


def test_the_package_description_has_no_link_that_breaks_on_an_index():
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "package.md").read_text()
    assert 'readme = "docs/package.md"' in (root / "pyproject.toml").read_text()
    assert not [link for link in re.findall(r"\]\(([^)]+)\)", text) if not link.startswith("https://")]
