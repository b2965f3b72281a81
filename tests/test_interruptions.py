"""Nothing lost: a full disk mid-run, and SIGTERM / SIGINT at random points, then --resume, give the
results of an uninterrupted run, bit for bit."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_until, workers_training
from ladle import api
from ladle.cli import main
from ladle.config import build_config
from ladle.errors import LadleError
from ladle.store import RunDir

DATASET = "csbm:nodes=300,classes=3,features=8"
FLAGS = ["--dataset", DATASET, "--ingredients", "3", "--epochs", "300", "--hidden", "8",
         "--soups", "uniform,greedy,gis", "--quiet"]


def outcome(run: Path) -> tuple[dict, dict]:
    """What a run produced: every weight file's bytes, and each soup's scores."""
    weights = {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.glob("*/*.safetensors"))}
    soups = json.loads((run / "results.json").read_text())["soups"]
    return weights, {name: (s["val"], s["test"]) for name, s in soups.items()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "run"
    assert main(["run", *FLAGS, "--out", str(out)]) == 0
    return outcome(out)


@pytest.mark.slow
def test_sigterm_and_sigint_at_each_stage_then_resume(clean, tmp_path):
    """Each signal lands at a stage of the run, waited for as an event: before anything trained, while two workers
    train, after the first model is stored, after two (the third still training)."""
    stored = lambda out, n: lambda: len(list((out / "ingredients").glob("ingredient-*.json"))) >= n  # noqa: E731
    stages = [(signal.SIGTERM, 1, lambda out, proc: lambda: (out / "config.toml").exists()),
              (signal.SIGINT, 2, lambda out, proc: workers_training(proc.pid, 2)),
              (signal.SIGTERM, 2, lambda out, proc: stored(out, 1)),
              (signal.SIGINT, 1, lambda out, proc: stored(out, 2))]
    for k, (sig, workers, stage) in enumerate(stages):
        out = tmp_path / f"killed-{k}"
        cmd = [sys.executable, "-m", "ladle.cli", "run", *FLAGS, "--workers", str(workers), "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        wait_until(stage(out, proc), proc, f"stage {k}")
        os.killpg(proc.pid, sig)  # the whole group, as a terminal or a job scheduler does
        err = proc.communicate(timeout=120)[1].decode()
        assert proc.returncode in (130, 143), err  # stopped mid-run
        assert "Traceback" not in err and f"ladle run --resume {out}" in err
        assert main(["run", "--resume", str(out), "--quiet"]) == 0
        assert outcome(out) == clean, f"kill {k} ({sig.name}, {workers} workers)"


def test_a_full_disk_mid_run_keeps_what_was_written_and_resumes(clean, tmp_path, monkeypatch):
    import ladle.files

    config = build_config({"dataset": DATASET, "ingredients": 3, "train": {"epochs": 150},
                           "model": {"hidden": 8}, "soups": ["uniform", "greedy", "gis"]})
    out = tmp_path / "full"
    real_fsync, calls = os.fsync, []

    def fsync_until_full(fd):
        calls.append(fd)
        if len(calls) > 8:  # config, run.json and the first ingredient's files fit, then the disk is full
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(ladle.files.os, "fsync", fsync_until_full)
    with pytest.raises(LadleError, match="No space left on device") as err:
        api.run(config, out)
    assert "ladle run --resume" in err.value.fix
    monkeypatch.setattr(ladle.files.os, "fsync", real_fsync)
    run = RunDir(out)
    assert run.ingredient_names() == ["ingredient-00"]  # finished before the disk filled, and intact
    run.load_ingredient("ingredient-00")  # verifies its checksum
    assert not [p for p in out.rglob(".*tmp*")]  # no half-written temporaries
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert outcome(out) == clean
