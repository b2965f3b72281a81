"""Issue 35, class 1: a run names code, and ladle imports or calls only what the user gave or named.

Built as a sender would: a real run of a user's model, its config and sidecars rewritten to name other code
(a module planted in the run folder, ``os:kill``), opened from a fresh process whose current folder is the run.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import ladle
from ladle.errors import LadleError
from ladle.models.python_model import allow_import

SMALL = "csbm:nodes=200,classes=3,features=8"
TESTS = str(Path(__file__).parent)


class TinyModel(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        return self.lin(x)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("imports") / "run"
    ladle.run({"dataset": SMALL, "ingredients": 2, "train": {"epochs": 2}, "soups": ["uniform"]}, out,
              model=TinyModel, progress=False)
    return out


def rename_model(run: Path, name: str, **channels) -> None:
    """Rewrite every place the run names its model (config.toml, run.json's identity, each sidecar)."""
    own = f"python:{__name__}:TinyModel"
    for path in [run / "config.toml", run / "run.json", *run.glob("*/*.json")]:
        text = path.read_text().replace(own, name)
        if channels and path.parent.name in ("ingredients", "soups"):
            sidecar = json.loads(text)
            sidecar["model"].update(channels)
            text = json.dumps(sidecar)
        path.write_text(text)


def fresh(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_model_passed_from_python_trusts_that_class_alone(clean, tmp_path):
    """``load_model(run, model=TheirClass)`` used to turn imports on for the whole call: a sidecar naming a module
    in the run folder (importable, the current folder being on sys.path) ran it."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(clean), str(run)], check=True)
    marker = tmp_path / "ran"
    (run / "payload.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nimport torch\nEvil = torch.nn.Linear\n")
    rename_model(run, "python:payload:Evil")
    for call in (f"ladle.load_model('.', 'uniform', model={__name__}.TinyModel)",
                 f"ladle.soup('.', ['uniform'], model={__name__}.TinyModel)",
                 f"ladle.resume('.', model={__name__}.TinyModel, progress=False)"):
        done = fresh(f"""
            import ladle, {__name__}
            from ladle.errors import LadleError
            try:
                {call}
            except LadleError as err:
                print("refused:", err.message)
            """, run)
        assert "refused:" in done.stdout and not marker.exists(), (call, done.stdout, done.stderr)
        assert "payload" in done.stdout
    # The same class given again, the run naming it: it loads (nothing else was needed).
    model = ladle.load_model(clean, "uniform", model=TinyModel)
    assert isinstance(model, TinyModel)  # the class itself, not ladle's wrapper


@pytest.mark.parametrize("trusted", [[], ["--allow-import", "os"]])
def test_allow_import_never_calls_a_callable_the_run_picks(clean, tmp_path, trusted):
    """``[model] name = "python:os:kill"`` with in/out channels = (PID, 9) killed that process under
    ``predict --allow-import``. Now a name outside the trusted modules is refused, and inside them only a
    torch.nn.Module class or a function defined there is ever called."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(clean), str(run)], check=True)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        rename_model(run, "python:os:kill", in_channels=victim.pid, out_channels=9)
        done = subprocess.run([sys.executable, "-m", "ladle.cli", "predict", str(run), "--model", "uniform",
                               "--out", str(tmp_path / "p.csv"), *trusted], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": TESTS})
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert victim.poll() is None  # still alive
        needle = "not a torch.nn.Module class" if trusted else "ladle imports only modules you name"
        assert needle in " ".join(done.stderr.split())
    finally:
        victim.kill()


@pytest.mark.parametrize("name, needle", [
    ("python:.payload:Evil", "absolute module"), ("python:os:system", "not a torch.nn.Module class"),
    ("python:torch.nn:functional.relu", "not a torch.nn.Module class"), ("python:os", "absolute module"),
    ("python:os.path:join", "not a torch.nn.Module class")])  # re-exported from posixpath
def test_what_a_trusted_module_exposes_is_type_checked_before_any_call(name, needle):
    from ladle.config import build_config

    module = name[len("python:"):].partition(":")[0].lstrip(".") or "os"
    with pytest.raises(LadleError, match=needle), allow_import(module):
        build_config({"dataset": SMALL, "model": {"name": name}})


def test_allow_import_names_whole_modules_and_their_submodules():
    from ladle.config import build_config

    name = "python:torch_geometric.nn.models:MLP"
    with pytest.raises(LadleError, match="you trust torch_geometric.nn.conv"), allow_import("torch_geometric.nn.conv"):
        build_config({"dataset": SMALL, "model": {"name": name}})
    with allow_import("torch_geometric"):  # a package trusts its submodules
        assert build_config({"dataset": SMALL, "model": {"name": name}}).model.name == name
    with pytest.raises(LadleError, match="not an absolute module name"):
        allow_import("../evil")
