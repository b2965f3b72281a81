"""The steps of one prepared GPU run (``benchmarks/gpu.sh`` runs them in order, each with its own time budget).

    python benchmarks/gpu.py STEP [--device cuda] [--tiny]

Steps, each printing what it does and ending with one line of ``key=value`` pairs:

- ``env``: the device, torch, PyG and ladle.
- ``smoke``: 2 SAGE ingredients (neighbour sampling) with the ``serial``, ``process`` (2 workers) and ``ray``
  engines, through the ``ladle run`` command; wall time, GIS test score, and whether the engines' weights are
  identical (reported, not asserted: CUDA's scatter kernels add in no fixed order).
- ``throughput``: GraphSAGE with neighbour sampling on csbm-arxiv: one ingredient alone, 4 one after another
  (``serial``) and 4 sharing the device (``process``, 4 workers), the same threads each: epochs per second,
  device memory per worker (the CUDA allocator's peak, from the sidecars, and what nvidia-smi saw per process,
  CUDA context included), and the speedup of 4 at once over 4 in turn. The sampler runs in each worker on the
  CPU; the step also times an epoch of sampling alone, to say what share of an epoch it takes.
- ``fullbatch``: full-batch GCN (3 layers, 256 hidden) on csbm-products: seconds per epoch and peak device
  memory, propagating with the graph's sparse adjacency (what ladle does), then with the edge list (PyG's
  gather/scatter messages, what ladle did before; expected not to fit).
- ``gis``: ``soup_speed.py`` on the device: 8 ingredients of csbm-arxiv per architecture, reference GIS against
  the fast evaluator (same α choices, same weights), then the learned and partition learned soups.

``--tiny`` runs every step on small graphs in seconds: ``LADLE_SMOKE_DEVICE=cpu bash benchmarks/gpu.sh`` does,
and the test suite runs it that way so the script cannot rot.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kv(figures: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in figures.items())


def sidecars(run: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run / "ingredients").glob("ingredient-*.json"))]


def weights_diff(runs: list[Path]) -> tuple[bool, float]:
    """Whether every run's ingredient files are byte-identical, and the largest weight difference to the first."""
    from safetensors.torch import load_file

    blobs = [{p.name: p.read_bytes() for p in (r / "ingredients").glob("*.safetensors")} for r in runs]
    identical = all(b == blobs[0] for b in blobs)
    worst = 0.0
    for run in runs[1:]:
        for path in (runs[0] / "ingredients").glob("*.safetensors"):
            a, b = load_file(path), load_file(run / "ingredients" / path.name)
            worst = max([worst] + [float((a[k] - b[k]).abs().max()) for k in a if a[k].is_floating_point()])
    return identical, worst


def env(args) -> dict:
    import torch
    import torch_geometric

    import ladle

    figures = {"torch": torch.__version__, "pyg": torch_geometric.__version__, "ladle": ladle.__version__,
               "cuda": torch.cuda.is_available()}
    if args.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        figures.update(gpu=props.name.replace(" ", "_"), gpu_gib=round(props.total_memory / 2**30, 1),
                       sms=props.multi_processor_count, cuda_version=torch.version.cuda)
    figures["cpus"] = os.cpu_count()
    from importlib.metadata import PackageNotFoundError, version

    for optional in ("ray", "pymetis"):
        try:
            __import__(optional)
            figures[optional] = version(optional)
        except (ImportError, PackageNotFoundError):
            figures[optional] = "missing"
    return figures


def smoke(args) -> dict:
    dataset = "csbm:nodes=2000" if args.tiny else "csbm-arxiv"
    common = ["--dataset", dataset, "--model", "sage", "--sampler", "neighbor", "--fanouts", "10,5",
              "--batch-size", "1024", "--epochs", "2", "--ingredients", "2", "--device", args.device,
              "--soups", "uniform,gis,ensemble", "--quiet"]
    engines = {"serial": ["--engine", "serial"], "process": ["--engine", "process", "--workers", "2"]}
    try:
        import ray  # noqa: F401

        gpus = ["--gpus-per-ingredient", "0.5"] if args.device.startswith("cuda") else []
        engines["ray"] = ["--engine", "ray", "--cpus-per-ingredient", "1", *gpus]
    except ImportError:
        print("ray is not installed: no ray engine (pip install -e '.[ray]')")
    figures, runs = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for label, flags in engines.items():
            out = Path(tmp) / label
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "ladle.cli", "run", *common, *flags, "--out", str(out)],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if done.returncode != 0:
                print(f"{label}: failed ({done.returncode})\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
                figures[f"{label}_s"] = "failed"
                continue
            results = json.loads((out / "results.json").read_text())
            devices = sorted({s.get("device") for s in sidecars(out)})
            print(f"{label:8s} {seconds:6.1f} s  best ingredient test {results['best_ingredient']['test']:.4f}  "
                  f"gis test {results['soups']['gis']['test']:.4f}  trained on {','.join(devices)}", flush=True)
            figures[f"{label}_s"], figures[f"{label}_gis"] = round(seconds, 1), round(results["soups"]["gis"]["test"], 4)
            runs.append(out)
        identical, worst = weights_diff(runs) if len(runs) > 1 else (False, float("nan"))
    figures.update(identical_across_engines=str(identical).lower(), max_weight_diff=f"{worst:.2e}")
    return figures


class GpuMemoryByProcess:
    """Peak memory nvidia-smi reports per process (CUDA context included), polled in a thread."""

    def __init__(self, enabled: bool):
        self.enabled, self.peak = enabled, {}

    def __enter__(self):
        self.running = True
        self.thread = threading.Thread(target=self._poll, daemon=True) if self.enabled else None
        if self.thread:
            self.thread.start()
        return self

    def _poll(self):
        while self.running:
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,"
                                      "nounits"], capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in out.splitlines():
                pid, _, mb = line.partition(",")
                if mb.strip().isdigit():
                    self.peak[pid.strip()] = max(self.peak.get(pid.strip(), 0), int(mb))
            time.sleep(0.5)

    def __exit__(self, *exc):
        self.running = False
        if self.thread:
            self.thread.join()


def throughput(args) -> dict:
    import torch

    from ladle import api
    from ladle.config import build_config
    from ladle.data import load_graph
    from ladle.sampling.neighbor import NeighborSampler

    dataset = "csbm:nodes=3000" if args.tiny else "csbm-arxiv"
    epochs, threads = (2, 1) if args.tiny else (args.epochs, args.threads)
    graph = load_graph(dataset)
    graph.csr()

    def config(n, engine, workers=1):
        return build_config({"dataset": dataset, "ingredients": n, "device": args.device,
                             "model": {"name": "sage", "hidden": 256},
                             "sampler": {"name": "neighbor", "fanouts": [15, 10], "batch_size": 1024},
                             "train": {"epochs": epochs},
                             "engine": {"name": engine, "workers": workers, "threads": threads}})

    torch.set_num_threads(threads)
    sampler = NeighborSampler(graph, config(1, "serial").sampler, seed=0)
    start = time.perf_counter()
    batches = sum(1 for _ in sampler.batches(1))
    sample_s = time.perf_counter() - start
    print(f"{graph.name}: {graph.num_nodes:,} nodes; SAGE 2x256, fanouts 15,10, batch 1024, {epochs} epochs, "
          f"{threads} thread(s) per ingredient; sampling one epoch alone ({batches} batches): {sample_s:.2f} s")
    figures = {"sample_epoch_s": round(sample_s, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        for label, n, engine, workers in (("alone", 1, "serial", 1), ("sequential", 4, "serial", 1),
                                          ("concurrent", 4, "process", 4)):
            out = Path(tmp) / label
            with GpuMemoryByProcess(args.device.startswith("cuda")) as smi:
                start, clock = time.perf_counter(), time.time()
                api.train(config(n, engine, workers), out, graph=graph, progress=False)
                wall = time.perf_counter() - start
            cars = sidecars(out)
            # The timeline splits the wall time: until the first ingredient starts (workers starting, imports,
            # CUDA contexts) and from then until the last is stored.
            timeline = [json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines()]
            first = min(t["started"] for t in timeline) - clock
            span = max(t["finished"] for t in timeline) - min(t["started"] for t in timeline)
            per = [epochs / s["seconds"] for s in cars]
            peaks = [s.get("peak_device_mb") or 0 for s in cars]
            smi_peaks = sorted(smi.peak.values())
            print(f"{label:10s} {n} ingredient(s), {workers} worker(s): {wall:6.1f} s wall, "
                  f"{n * epochs / wall:.2f} epochs/s in all, {sum(per) / len(per):.2f} epochs/s per ingredient, "
                  f"allocator peak {max(peaks):.0f} MB per worker, nvidia-smi per process {smi_peaks} MB; "
                  f"first ingredient started after {first:.1f} s, training span {span:.1f} s", flush=True)
            figures.update({f"{label}_s": round(wall, 1), f"{label}_start_s": round(first, 1),
                            f"{label}_span_s": round(span, 1), f"{label}_epochs_per_s": round(n * epochs / wall, 3),
                            f"{label}_alloc_mb": round(max(peaks)), f"{label}_smi_mb": max(smi_peaks, default=0)})
    figures["speedup_4_concurrent"] = round(figures["sequential_s"] / figures["concurrent_s"], 2)
    figures["speedup_4_concurrent_training"] = round(figures["sequential_span_s"] / figures["concurrent_span_s"], 2)
    figures["sampling_share"] = round(sample_s * epochs / (figures["alone_s"] or 1), 2)
    return figures


def fullbatch(args) -> dict:
    import torch

    from ladle.config import IngredientSpec, TrainConfig
    from ladle.data import load_graph
    from ladle.models.gcn import GCN
    from ladle.models.options import ModelConfig
    from ladle.sampling.options import SamplerConfig
    from ladle.trainer import train_ingredient

    dataset = "csbm:nodes=3000,degree=20,features=100,classes=47" if args.tiny else "csbm-products"
    epochs = 3 if args.tiny else args.epochs
    start = time.perf_counter()
    graph = load_graph(dataset)
    print(f"{graph.name}: {graph.num_nodes:,} nodes, {graph.data.edge_index.size(1):,} directed edges "
          f"(generated in {time.perf_counter() - start:.0f} s); GCN 3x256, {epochs} full-batch epochs", flush=True)
    spec = IngredientSpec(index=0, model=ModelConfig(name="gcn", layers=3, hidden=256),
                          train=TrainConfig(epochs=epochs), sampler=SamplerConfig(), init_seed=0, data_seed=1)
    figures = {"nodes": graph.num_nodes, "edges": graph.data.edge_index.size(1)}
    for label in ("sparse", "edge_list"):
        if label == "edge_list":
            GCN.adjacency = None  # what ladle did before: PyG's per-edge messages
        try:
            record = train_ingredient(spec, graph, device=args.device)
        except torch.OutOfMemoryError as exc:
            print(f"{label:9s} out of device memory: {str(exc).splitlines()[0]}")
            figures[f"{label}_s_per_epoch"] = "oom"
            continue
        finally:
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
        seconds = [h["seconds"] for h in record.history]
        per_epoch = (seconds[-1] - seconds[0]) / max(len(seconds) - 1, 1)  # the first epoch also builds and warms
        peak = record.peak_device_mb or 0.0
        print(f"{label:9s} {per_epoch:.3f} s per epoch (first {seconds[0]:.2f} s), peak {peak / 1024:.2f} GiB, "
              f"val {record.val:.4f} test {record.test:.4f}", flush=True)
        figures.update({f"{label}_s_per_epoch": round(per_epoch, 3), f"{label}_first_epoch_s": round(seconds[0], 2),
                        f"{label}_peak_gib": round(peak / 1024, 2), f"{label}_val": round(record.val, 4)})
    return figures


def gis(args) -> dict:
    dataset = "csbm:nodes=2000" if args.tiny else "csbm-arxiv"
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, str(ROOT / "benchmarks" / "soup_speed.py"), "--dataset", dataset, "--cache", tmp,
                   "--device", args.device, "--eval-chunk", "0"]
        command += ["--epochs", "1", "--archs", "gcn,gat", "--ingredients", "3", "--granularity", "5",
                    "--learned-epochs", "3"] if args.tiny else ["--epochs", "5"]
        done = subprocess.run(command, text=True, stdout=subprocess.PIPE)
    lines = done.stdout.strip().splitlines()
    print("\n".join(lines[:-1]))
    if done.returncode != 0 or not lines:
        return {"status": f"failed_{done.returncode}"}
    return dict(pair.split("=", 1) for pair in lines[-1].split())


STEPS = {"env": env, "smoke": smoke, "throughput": throughput, "fullbatch": fullbatch, "gis": gis}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=list(STEPS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="small graphs, seconds per step (for tests and the CPU)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the throughput and fullbatch steps")
    parser.add_argument("--threads", type=int, default=4, help="torch threads per ingredient (throughput)")
    args = parser.parse_args(argv)
    print(kv(STEPS[args.step](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
