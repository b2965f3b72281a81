"""Nothing lost: a full disk mid-run, and SIGTERM / SIGINT at random points, then --resume, give the
results of an uninterrupted run, bit for bit."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def test_sigterm_and_sigint_at_random_points_then_resume(clean, tmp_path):
    draw, interrupted = random.Random(11), 0
    for k, (sig, workers) in enumerate([(signal.SIGTERM, 1), (signal.SIGINT, 2), (signal.SIGTERM, 2),
                                         (signal.SIGINT, 1)]):
        out = tmp_path / f"killed-{k}"
        cmd = [sys.executable, "-m", "ladle.cli", "run", *FLAGS, "--workers", str(workers), "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + 120
        while not (out / "config.toml").exists() and proc.poll() is None:
            assert time.time() < deadline
            time.sleep(0.02)
        time.sleep(draw.uniform(0.0, 1.5))
        if proc.poll() is None:
            os.killpg(proc.pid, sig)  # the whole group, as a terminal or a job scheduler does
        err = proc.communicate(timeout=120)[1].decode()
        assert proc.returncode in (0, 130, 143), err
        assert "Traceback" not in err
        if proc.returncode:
            interrupted += 1
            assert f"ladle run --resume {out}" in err
            assert main(["run", "--resume", str(out), "--quiet"]) == 0
        assert outcome(out) == clean, f"kill {k} ({sig.name}, {workers} workers)"
    assert interrupted >= 3  # the signals landed mid-run, not after it had finished


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
