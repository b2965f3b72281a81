"""How soon a mistake is answered: the seconds from starting ``ladle`` to its one-line refusal, for the usual
mistakes, each in a fresh process (what a user waits), median of ``--repeats``. Target: under 1.5 s each.

    python benchmarks/fail_fast.py

Last line: ``dataset_s=… config_s=… flag_s=… model_s=… torch_imported=0 target_s=1.5 all_under=1``
(torch_imported: how many of the refusals imported torch, which costs seconds by itself).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "dataset": (["run", "--dataset", "Coraa"], "unknown dataset"),
    "config": (["run", "--config", "{config}"], "train.epochs must be"),
    "flag": (["run", "--ingrdients", "3"], "did you mean --ingredients"),
    "model": (["run", "--model", "gcnn"], "unknown model"),
}


def once(argv: list[str], needle: str) -> tuple[float, bool]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ladle.cli", *argv], capture_output=True,
                          text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 2 or needle not in done.stdout + done.stderr:
        raise SystemExit(f"{argv}: expected a refusal saying {needle!r}, got rc {done.returncode}:\n{done.stderr[-800:]}")
    return seconds, any(line.rstrip().endswith("| torch") for line in done.stderr.splitlines())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--target", type=float, default=1.5)
    args = parser.parse_args(argv)
    figures, torch_seen = {}, 0
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "bad.toml"
        config.write_text('dataset = "Cora"\n[train]\nepochs = 0\n')
        for name, (command, needle) in CASES.items():
            command = [c.replace("{config}", str(config)) for c in command]
            runs = [once(command, needle) for _ in range(args.repeats)]
            figures[f"{name}_s"] = round(statistics.median(s for s, _ in runs), 3)
            torch_seen += any(t for _, t in runs)
            print(f"{name}: {' '.join(command)} -> {figures[f'{name}_s']} s (median of {args.repeats})", flush=True)
    figures.update(torch_imported=torch_seen, target_s=args.target,
                   all_under=int(all(v < args.target for k, v in figures.items() if k.endswith("_s"))))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
