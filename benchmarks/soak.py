"""Soak: many short runs back to back, each killed at a random moment and resumed until it finishes.

Each run is ``ladle run`` on a small csbm (3 ingredients, serial or 2 workers, chosen at random),
sent SIGTERM, SIGINT or SIGKILL at a random time after its run directory appears, then resumed with
``ladle run --resume`` (and killed again with some probability) until it completes. Its weights
and soup scores are compared with those of one clean run.

    python benchmarks/soak.py               # 50 runs, about 15 minutes on 2 cores
    python benchmarks/soak.py --runs 5      # a quick look

The last line is key=value pairs: ``runs=… identical=… kills=… resumes=…``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGS = ["--dataset", "csbm:nodes=300,classes=3,features=8", "--ingredients", "3", "--epochs", "40",
         "--hidden", "8", "--soups", "uniform,greedy,gis", "--quiet"]
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL]


def outcome(run: Path):
    weights = {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.glob("*/*.safetensors"))}
    soups = json.loads((run / "results.json").read_text())["soups"]
    return weights, {name: (s["val"], s["test"]) for name, s in soups.items()}


def ladle(*argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ladle.cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def run_with_kills(out: Path, draw: random.Random, workers: int) -> tuple[int, int]:
    """Start, kill at random moments, resume until done; returns (kills, resumes)."""
    kills = resumes = 0
    proc = ladle("run", *FLAGS, "--workers", str(workers), "--out", str(out))
    while True:
        deadline = time.time() + 120
        while not (out / "config.toml").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        if draw.random() < (0.9 if resumes == 0 else 0.3):
            time.sleep(draw.uniform(0.0, 4.0))
            if proc.poll() is None:
                os.killpg(proc.pid, draw.choice(SIGNALS))
                kills += 1
        proc.communicate(timeout=300)
        if proc.returncode == 0:
            return kills, resumes
        if not (out / "config.toml").exists():  # killed before the run existed: start it again
            proc = ladle("run", *FLAGS, "--workers", str(workers), "--out", str(out))
            continue
        resumes += 1
        proc = ladle("run", "--resume", str(out), "--workers", str(workers))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    draw = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "clean"
        proc = ladle("run", *FLAGS, "--out", str(clean))
        proc.communicate()
        assert proc.returncode == 0, "the clean run failed"
        expected = outcome(clean)
        identical = kills = resumes = 0
        start = time.perf_counter()
        for i in range(args.runs):
            out = Path(tmp) / f"run-{i:02d}"
            workers = draw.choice([1, 2])
            k, r = run_with_kills(out, draw, workers)
            same = outcome(out) == expected
            identical += same
            kills, resumes = kills + k, resumes + r
            print(f"run {i:2d}: {workers} worker(s), {k} kill(s), {r} resume(s), "
                  f"{'identical' if same else 'DIFFERENT'}", flush=True)
        seconds = time.perf_counter() - start
    print(f"runs={args.runs} identical={identical} kills={kills} resumes={resumes} seconds={seconds:.0f}")
    return 0 if identical == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
