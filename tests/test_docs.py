"""The user guide's commands, run as written, in order, in one fresh folder: a guide that drifts from
the code fails here."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"(<!-- needs a GPU -->\n)?```(bash|python)\n(.*?)```", re.S)


def blocks() -> list[tuple[str, str, bool]]:
    return [(lang, body, bool(gpu)) for gpu, lang, body in BLOCK.findall(GUIDE.read_text())]


def commands(body: str) -> list[str]:
    """One shell command per line, backslash continuations joined."""
    return [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")]


def test_the_guide_has_commands_of_every_kind():
    kinds = {lang for lang, _, _ in blocks()}
    assert kinds == {"bash", "python"} and len(blocks()) >= 10


@pytest.fixture
def workdir(tmp_path, planetoid_root):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_data_loaders import write_ogb

    shutil.copytree(planetoid_root / "Cora", tmp_path / "data" / "Cora")
    write_ogb(tmp_path / "data", "ogbn-arxiv", n=40)
    return tmp_path


@pytest.mark.slow
def test_every_command_in_the_guide_runs(workdir):
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "LADLE_OFFLINE": "1",
           "LADLE_CACHE": str(workdir / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    ran = 0
    try:
        for lang, body, needs_gpu in blocks():
            if needs_gpu and not torch.cuda.is_available():
                continue
            if lang == "python":
                steps = [[sys.executable, "-c", body]]
            else:
                steps = [["bash", "-c", c] for c in commands(body)]
            for step in steps:
                done = subprocess.run(step, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, f"{step[-1]!r} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                assert "Traceback" not in done.stderr, step[-1]
                ran += 1
    finally:
        subprocess.run(["bash", "-c", "ray stop --force"], cwd=workdir, env=env, capture_output=True)
    assert ran >= 18
    assert (workdir / "predictions.csv").read_text().startswith("node,split,prediction")
