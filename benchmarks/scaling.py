"""Communication-free scaling: 4 ingredients trained with 1 and 2 local workers, and on Ray with 2 CPUs.

GraphSAGE with neighbour sampling on csbm-arxiv, one torch thread per worker, all three timed
side by side in one run (machines are noisy: compare the ratios). Memory is the peak, over the
run, of the proportional set size (PSS: shared pages such as the graph in shared memory and the
torch libraries are split between the processes that map them) summed over this process and
all its worker processes, sampled every second (reading a process's PSS walks its page tables,
some 10 ms per GB: sampled faster, the monitor takes a visible share of the two cores).
Ray is timed only, with no monitor running: its local cluster (GCS, raylet, object store, workers) is
some 3 GB of PSS to walk every second, a cost the process runs do not pay. The weights are checked
bit-identical across the three.

    python benchmarks/scaling.py                      # ~5 minutes on 2 cores
    python benchmarks/scaling.py --dataset csbm --epochs 2   # a quick look

The last line is key=value pairs: ``speedup=… memory_ratio=… ray_vs_process=…`` (Ray's wall
time over the 2-worker process engine's) and ``identical=true|false``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    children = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # the process ended while we looked
        return []
    for task in tasks:
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return children + [d for c in children for d in descendants(c)]


class MemoryMonitor:
    """Peak resident memory of this process tree (or nothing, when not ``enabled``): the summed PSS of the process
    and its workers, sampled every second in a thread, and at least this process's own peak RSS as the kernel
    recorded it, which catches what the sampler misses while a C call (METIS, a sort) holds the interpreter."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def __enter__(self):
        from ladle.profiling import peak_resident

        self.peak, self.running, self.kernel = 0.0, True, None
        self.stack = contextlib.ExitStack()
        self.thread = threading.Thread(target=self._sample, daemon=True) if self.enabled else None
        if self.thread:
            # Shares the kernel's one counter with the soups' own measure(): nesting-safe.
            self.kernel = self.stack.enter_context(peak_resident())
            self.thread.start()
        return self

    def _sample(self):
        while self.running:
            pids = [os.getpid()] + descendants(os.getpid())
            self.peak = max(self.peak, sum(pss_mb(p) for p in pids))
            time.sleep(1.0)

    def __exit__(self, *exc):
        self.running = False
        if self.thread:
            self.thread.join()
        self.stack.close()  # the kernel's peak is final once its block has closed
        if self.kernel:
            self.peak = max(self.peak, self.kernel[0] / 2**20)


def _idle_worker(ready, done) -> None:
    import ladle.engines.process  # noqa: F401  (what every worker imports before training)
    import ladle.trainer  # noqa: F401

    ready.set()
    done.wait(60)


def idle_worker_mb() -> float:
    """PSS of a worker process started as the process engine starts them (forked from a server that
    has imported torch, PyG and ladle), having done nothing else: the floor each extra worker adds,
    whatever the graph."""
    from ladle.engines.process import context

    ctx = context()
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_idle_worker, args=(ready, done))
    child.start()
    ready.wait(120)
    time.sleep(0.5)
    mb = pss_mb(child.pid)
    done.set()
    child.join()
    return mb


def _import_ladle() -> int:
    import ladle.engines.ray_cluster  # noqa: F401  (torch, PyG and ladle, as a long-lived worker has them)

    return os.getpid()


def warm_up_ray_workers(ray, count: int) -> None:
    """Have ``count`` Ray workers import ladle before the clock starts, as on a cluster that is already up.

    The process engine pays its imports inside the timing (one fresh process per ingredient);
    a Ray cluster's workers are long-lived and reused across tasks, so their first import is setup.
    """
    task = ray.remote(num_cpus=1)(_import_ladle)
    pids = set(ray.get([task.remote() for _ in range(count * 2)]))
    print(f"  ray: {len(pids)} warm worker(s)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray engine")
    parser.add_argument("--eval-chunk", type=int, default=4096,
                        help="eval.chunk: validation by layer-wise chunks, bounding each worker's memory")
    parser.add_argument("--keep", default="", help="keep the three run directories under this folder")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from ladle.config import build_config
    from ladle.data import load_graph

    def config(**engine):
        return build_config({"dataset": args.dataset, "ingredients": 4, "model": {"name": "sage", "hidden": 128},
                             "sampler": {"name": "neighbor", "fanouts": [10, 5], "batch_size": 1024},
                             "train": {"epochs": args.epochs}, "eval": {"chunk": args.eval_chunk},
                             "engine": {"threads": 1, **engine}})

    graph = load_graph(args.dataset)
    graph.csr()
    graph_bytes = sum(t.numel() * t.element_size() for t in [*graph.data.to_dict().values(), *graph.csr()]
                      if hasattr(t, "numel"))
    print(f"{graph.name}: {graph.num_nodes:,} nodes; 4 SAGE ingredients, {args.epochs} epoch(s), 1 thread each")
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        runs = {"process-1": {"name": "process", "workers": 1}, "process-2": {"name": "process", "workers": 2}}
        if not args.no_ray:
            runs["ray-2cpu"] = {"name": "ray", "cpus_per_ingredient": 1}
        from ladle import api
        from ladle.engines.process import prepare

        prepare()  # the forkserver, like the Ray cluster, is set up before the clock: else only process-1 pays it
        for label, engine in runs.items():
            if label.startswith("ray"):  # started before the clock, and after the process runs' memory was read
                import ray

                from ladle.engines.ray_cluster import start_local

                start_local(num_cpus=2)  # as `ladle run --engine ray` starts one without --address
                warm_up_ray_workers(ray, 2)
            out = Path(tmp) / label
            with MemoryMonitor(enabled=not label.startswith("ray")) as memory:
                start = time.perf_counter()
                api.train(config(**engine), out, graph=graph, progress=False)
                seconds = time.perf_counter() - start
            results[label] = (seconds, memory.peak, out)
            peak = f"peak PSS {memory.peak:7.0f} MB" if memory.enabled else "(memory not sampled)"
            print(f"  {label:10s} wall {seconds:7.1f}s  {peak}")
        blobs = {label: {p.name: p.read_bytes() for p in sorted((out / "ingredients").glob("*.safetensors"))}
                 for label, (_, _, out) in results.items()}
        identical = all(b == blobs["process-1"] for b in blobs.values())
        if not args.no_ray:
            ray.shutdown()
    one, two = results["process-1"], results["process-2"]
    figures = {"speedup": round(one[0] / two[0], 3), "memory_ratio": round(two[1] / one[1], 3),
               "process1_s": round(one[0], 1), "process2_s": round(two[0], 1),
               "process1_peak_mb": round(one[1]), "process2_peak_mb": round(two[1])}
    if "ray-2cpu" in results:
        figures["ray_vs_process"] = round(results["ray-2cpu"][0] / two[0], 3)
        figures["ray_s"] = round(results["ray-2cpu"][0], 1)
    figures["idle_worker_mb"] = round(idle_worker_mb())
    figures["graph_mb"] = round(graph_bytes / 2**20)
    figures["identical"] = str(identical).lower()
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
