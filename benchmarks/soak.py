"""Soak: many short runs back to back, each killed at a random moment and resumed until it finishes.

Each run is ``ladle run`` on a small csbm (3 ingredients, serial or 2 workers, chosen at random),
sent SIGTERM, SIGINT or SIGKILL at a random time after its run directory appears, then resumed with
``ladle run --resume`` (and killed again with some probability) until it completes. Its weights
and soup scores are compared with those of one clean run.

    python benchmarks/soak.py               # 50 runs, about 15 minutes on 2 cores
    python benchmarks/soak.py --runs 5      # a quick look
    python benchmarks/soak.py --disk-full   # instead of killing, fill the disk (needs root: it mounts a tmpfs)

With ``--disk-full`` each run directory lives on a small tmpfs, and at a random moment a filler file
takes every free byte, so the operating system itself answers ladle's next write with ENOSPC,
wherever that write is (a checkpoint, a sidecar, the log, a report, in the driver or a worker). The
run must stop with exit status 2 and one message, or finish; the filler is then removed and the
run resumed until it completes, and it must end bit-identical to the clean run.

The last line is key=value pairs: ``runs=… identical=… kills=… resumes=…`` (``fills=… clean_stops=…``
with ``--disk-full``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
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


def fill(disk: Path) -> None:
    """Take every free byte of ``disk``: the next write anyone makes there fails with ENOSPC."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (2**20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


def run_with_full_disk(out: Path, disk: Path, draw: random.Random, workers: int) -> tuple[int, int, int, int]:
    """Start, fill the disk at a random moment, free it, resume until done: (fills, resumes, clean stops, others)."""
    fills = resumes = clean = unclean = 0
    start = ("run", *FLAGS, "--workers", str(workers), "--out", str(out))
    proc = ladle(*start)
    while True:
        deadline = time.time() + 120
        while not (out / "config.toml").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        if draw.random() < (0.9 if resumes == 0 else 0.3):
            time.sleep(draw.uniform(0.0, 8.0))  # from the first write to the last soup
            if proc.poll() is None:
                fill(disk)
                fills += 1
        _, err = proc.communicate(timeout=300)
        (disk / "filler").unlink(missing_ok=True)
        if proc.returncode == 0:
            return fills, resumes, clean, unclean
        text = err.decode(errors="replace")
        if proc.returncode == 2 and text.count("error:") == 1 and "Traceback" not in text:
            clean += 1
        else:
            unclean += 1
            print(f"  exit {proc.returncode}: {text[-400:]}", flush=True)
        if not (out / "config.toml").exists():  # stopped before its first ingredient: no run was left behind
            proc = ladle(*start)
            continue
        resumes += 1
        proc = ladle("run", "--resume", str(out), "--workers", str(workers))


def disk_full(args, draw: random.Random, tmp: str, expected) -> int:
    disk = Path(tmp) / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        print(f"cannot mount a tmpfs ({mounted.stderr.decode().strip()}): --disk-full needs root")
        return 2
    try:
        identical = fills = resumes = clean = unclean = 0
        start = time.perf_counter()
        for i in range(args.runs):
            out = disk / f"run-{i:02d}"
            workers = draw.choice([1, 2])
            f, r, c, u = run_with_full_disk(out, disk, draw, workers)
            same = outcome(out) == expected
            identical += same
            fills, resumes, clean, unclean = fills + f, resumes + r, clean + c, unclean + u
            print(f"run {i:2d}: {workers} worker(s), disk filled {f} time(s), {r} resume(s), {c} clean stop(s), "
                  f"{'identical' if same else 'DIFFERENT'}", flush=True)
            shutil.rmtree(out)
        seconds = time.perf_counter() - start
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
    print(f"runs={args.runs} identical={identical} fills={fills} clean_stops={clean} other_stops={unclean} "
          f"resumes={resumes} seconds={seconds:.0f}")
    return 0 if identical == args.runs and unclean == 0 else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--disk-full", action="store_true", help="fill a tmpfs at random moments instead of killing")
    args = parser.parse_args(argv)
    draw = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "clean"
        proc = ladle("run", *FLAGS, "--out", str(clean))
        proc.communicate()
        assert proc.returncode == 0, "the clean run failed"
        expected = outcome(clean)
        if args.disk_full:
            return disk_full(args, draw, tmp, expected)
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
