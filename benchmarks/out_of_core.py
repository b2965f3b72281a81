"""A graph on disk, cut into parts and trained from them: each stage's time and peak memory, each worker's own.

1. A CSBM-like graph is generated straight to an ``npy:`` folder in chunks of nodes (never whole in memory): node
   ``v`` is in class ``v mod C``; its features are its class mean plus Gaussian noise; each node draws ``degree``
   neighbours, each in its own class with probability ``homophily``, else uniformly.
2. ``ladle partition --dataset npy:G --parts K --out P`` (streamed), under ``prlimit --data=LIMIT``.
3. ``ladle train --dataset parts:P --workers W`` under the same limit: each worker maps its own part. Every
   ingredient's sidecar records its worker's peak memory (the kernel's high-water mark of resident memory, and the
   sampled peak of anonymous memory, which ``prlimit --data`` caps; memory-mapped files count in the first only).
4. The same K parts trained in memory (``--dataset npy:G --partition random --parts K``), with no limit: the
   in-memory engine's workers' peaks on the same graph and parts, and the weights compared.
   Both are validated only at their last epoch, so their weights are comparable bit for bit (in memory an
   ingredient validates on the whole graph, from parts on its own part's nodes).
5. ``ladle soup --graph P`` over the parts' ingredients (uniform, greedy, GIS, ensemble) under the same limit: every
   score streams over the parts, layer by layer, never putting the graph together (``driver_peak`` is the largest
   resident peak of its processes, memory-mapped pages included; the limit caps the anonymous ones).

    python benchmarks/out_of_core.py --nodes 200000 --parts 8           # a few minutes
    python benchmarks/out_of_core.py --nodes 2449029 --features 100 --degree 25 --classes 47 --parts 8

Last line: ``graph_bytes=... ram_bytes=... parts=... worker_peak_max=... worker_anon_max=...
memory_worker_peak_max=... worker_ratio=... driver_peak=... limit=... partition_s=... train_s=... soups_s=...
best_test=... gis_test=... identical=...``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHUNK = 1 << 16  # nodes generated at a time
SOUPS = ("uniform", "greedy", "gis", "ensemble")


def generate(folder: Path, nodes: int, features: int, classes: int, degree: int, homophily: float, signal: float,
             seed: int, fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)) -> int:
    """Write the graph's arrays chunk by chunk with ``numpy.lib.format.open_memmap``; return the bytes written."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(classes, features)).astype(np.float32)
    means *= signal / np.linalg.norm(means, axis=1, keepdims=True)
    x = np.lib.format.open_memmap(folder / "node_features.npy", "w+", np.float32, (nodes, features))
    edges = np.lib.format.open_memmap(folder / "edges.npy", "w+", np.int64, (nodes * degree, 2))
    y = np.lib.format.open_memmap(folder / "node_labels.npy", "w+", np.int64, (nodes,))
    split = rng.random(nodes)  # drawn once: nodes x 8 bytes, the one whole-length array (a chunked draw would do)
    cuts = np.cumsum([0.0, *fractions])  # train, val, test: consecutive ranges of one uniform draw
    for name, low, high in zip(("train", "val", "test"), cuts[:-1], cuts[1:]):
        np.save(folder / f"{name}_masks.npy", (split >= low) & (split < high))
    del split
    for start in range(0, nodes, CHUNK):
        ids = np.arange(start, min(start + CHUNK, nodes))
        label = ids % classes
        y[ids] = label
        x[ids] = means[label] + rng.normal(size=(ids.size, features)).astype(np.float32)
        src = np.repeat(ids, degree)
        same = rng.random(src.size) < homophily
        anywhere = rng.integers(0, nodes, src.size)
        per_class = (nodes - 1 - (src % classes)) // classes + 1  # nodes of the source's class
        in_class = (rng.integers(0, 1 << 62, src.size) % per_class) * classes + src % classes
        edges[start * degree:start * degree + src.size] = np.stack([src, np.where(same, in_class, anywhere)], 1)
    for array in (x, edges, y):
        array.flush()
    np.save(folder / "metric.npy", np.array("acc"))
    return sum(f.stat().st_size for f in folder.iterdir())


def limited(limit: str | None) -> list[str]:
    """``prlimit --data`` takes bytes (a suffix such as 3G is not a size to it)."""
    from ladle.engine_options import size_bytes

    return ["prlimit", f"--data={size_bytes(limit)}", "--"] if limit else []


# Runs a command and reports the largest resident peak among it and its reaped descendants (ru_maxrss).
PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr); "
        "sys.exit(code)")


def timed(command: list[str], env: dict) -> tuple[float, int]:
    """Wall seconds and the largest peak resident bytes of any one process of ``command``."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *command], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    peak = int(next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("PEAK ")))
    return time.perf_counter() - start, peak


def peaks(run: Path) -> list[dict]:
    return [json.loads(p.read_text()).get("worker_memory", {}) for p in sorted((run / "ingredients").glob("*.json"))]


def weights(run: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((run / "ingredients").glob("*.safetensors"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--degree", type=int, default=8, help="edges drawn per node (undirected: about 2x per node)")
    parser.add_argument("--homophily", type=float, default=0.7)
    parser.add_argument("--signal", type=float, default=1.0, help="length of each class mean")
    parser.add_argument("--split", default="0.6,0.2,0.2",
                        help="train, val and test fractions of the nodes (a giant graph labels few: ogbn-papers100M "
                             "about 0.011,0.0011,0.0019)")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--limit", default="3G", help="prlimit --data for partition, training and soups ('' for none)")
    parser.add_argument("--no-memory-baseline", action="store_true", help="skip the in-memory engine's run")
    parser.add_argument("--work", type=Path, default=None, help="a folder for the graph, parts and runs (removed)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --work: keep the stages WORK/stages.json records as done (their figures too) and "
                             "run the rest (the soups again, say, after their stage was stopped)")
    args = parser.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="ladle-ooc-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LADLE_CACHE": str(work / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    ladle = [sys.executable, "-m", "ladle.cli"]
    train_flags = ["--model", "sage", "--sampler", "neighbor", "--fanouts", "10,5", "--batch-size", "1024",
                   "--hidden", "64", "--epochs", str(args.epochs), "--eval-every", str(args.epochs),
                   "--workers", str(args.workers), "--quiet"]  # selected at the last epoch: both runs comparable
    record = work / "stages.json"
    stages = json.loads(record.read_text()) if args.reuse and record.exists() else {}

    def stage(name, run):
        """A stage's figures: recorded ones with --reuse, else run and recorded."""
        if name in stages:
            print(f"{name}: reused {stages[name]}", flush=True)
        else:
            stages[name] = run()
            record.write_text(json.dumps(stages))
        return stages[name]

    try:
        def make_graph():
            start = time.perf_counter()
            made = generate(work / "g", args.nodes, args.features, args.classes, args.degree, args.homophily,
                            args.signal, 0, tuple(float(f) for f in args.split.split(",")))
            print(f"generated {made / 2**30:.2f} GiB in {time.perf_counter() - start:.1f} s", flush=True)
            return made

        graph_bytes = stage("generate", make_graph)
        partition_s = stage("partition", lambda: timed([*limited(args.limit), *ladle, "partition", "--dataset",
                                                       f"npy:{work / 'g'}", "--parts", str(args.parts), "--out",
                                                       str(work / "p")], env)[0])
        manifest = json.loads((work / "p" / "manifest.json").read_text())
        print(f"partition: {partition_s:.1f} s, peak {manifest['peak_memory_bytes'] / 2**30:.2f} GiB", flush=True)
        train_s = stage("train", lambda: timed([*limited(args.limit), *ladle, "train", "--dataset",
                                               f"parts:{work / 'p'}", *train_flags, "--out", str(work / "parts-run")],
                                              env)[0])
        from_parts = peaks(work / "parts-run")
        print(f"train from parts: {train_s:.1f} s, worker peaks (GiB) "
              f"{[round(p['peak_rss_bytes'] / 2**30, 2) for p in from_parts]}", flush=True)
        memory_peak, identical = None, None
        if not args.no_memory_baseline:
            timed([*ladle, "train", "--dataset", f"npy:{work / 'g'}", "--partition", "random", "--parts",
                   str(args.parts), "--ingredients", str(args.parts), *train_flags, "--out", str(work / "memory-run")],
                  env)
            in_memory = peaks(work / "memory-run")
            identical = weights(work / "memory-run") == weights(work / "parts-run")
            memory_peak = max(p["peak_rss_bytes"] for p in in_memory)
            print(f"in memory: worker peaks (GiB) {[round(p['peak_rss_bytes'] / 2**30, 2) for p in in_memory]}",
                  flush=True)
        soups_s, driver_peak = stage("soups", lambda: timed([*limited(args.limit), *ladle, "soup",
                                                             str(work / "parts-run"), "--graph", str(work / "p"),
                                                             *[f for m in SOUPS for f in ("--method", m)], "--quiet"],
                                                            env))
        print(f"soups from parts: {soups_s:.1f} s, peak {driver_peak / 2**30:.2f} GiB", flush=True)
        results = json.loads((work / "parts-run" / "results.json").read_text())
        soups = results["soups"]
        worker_peak = max(p["peak_rss_bytes"] for p in from_parts)
        fields = {
            "graph_bytes": graph_bytes, "ram_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "parts": args.parts, "worker_peak_max": worker_peak,
            "worker_anon_max": max(p["peak_anon_bytes"] for p in from_parts),
            "memory_worker_peak_max": memory_peak,
            "worker_ratio": None if memory_peak is None else round(worker_peak / memory_peak, 3),
            "driver_peak": driver_peak, "limit": args.limit or None, "partition_s": round(partition_s, 1),
            "train_s": round(train_s, 1),
            "soups_s": round(soups_s, 1), "best_test": round(results["best_ingredient"]["test"], 4),
            "gis_test": round(soups["gis"]["test"], 4), "identical": identical,
        }
        print(" ".join(f"{k}={v}" for k, v in fields.items()))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
