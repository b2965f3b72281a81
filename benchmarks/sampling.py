"""Sampler throughput on graphs sized like ogbn-arxiv and ogbn-products (synthetic csbm presets).

For each sampler, on one torch thread: sampled nodes and edges per second, the time one epoch of
sampling takes (measured over a bounded number of batches and scaled to the epoch's batch
count), and the peak resident memory above the graph's own. Beside them, one full-graph sparse
propagation pass A @ X as the memory-bandwidth yardstick.

    python benchmarks/sampling.py                       # csbm-arxiv and csbm-products
    python benchmarks/sampling.py --datasets csbm-arxiv --seconds 5

The last line is key=value pairs (``neighbor_edges_per_s`` is csbm-arxiv's).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

SAMPLERS = {
    "neighbor": {"name": "neighbor", "fanouts": (15, 10), "batch_size": 1024},
    "cluster": {"name": "cluster", "parts": 64, "parts_per_batch": 4},
    "saint-node": {"name": "saint-node", "budget": 8000, "coverage": 2},
    "saint-edge": {"name": "saint-edge", "budget": 4000, "coverage": 2},
    "saint-rw": {"name": "saint-rw", "budget": 2000, "walk_length": 2, "coverage": 2},
    "fastgcn": {"name": "fastgcn", "budget": 4000, "batch_size": 1024},
    "ladies": {"name": "ladies", "budget": 4000, "batch_size": 1024},
}


def propagate_once(graph) -> dict:
    from torch_geometric.utils import to_torch_csr_tensor

    adj = to_torch_csr_tensor(graph.data.edge_index, size=(graph.num_nodes, graph.num_nodes))
    x = graph.data.x
    import warnings

    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    start = time.perf_counter()
    out = adj @ x
    seconds = time.perf_counter() - start
    moved = graph.data.edge_index.size(1) * (8 + 4 * x.size(1)) + out.numel() * 4
    return {"seconds": seconds, "gb_per_s": moved / seconds / 1e9}


def measure_sampler(graph, spec: dict, seconds: float, cache: str) -> dict:
    from ladle.profiling import measure
    from ladle.sampling import build_sampler
    from ladle.sampling.options import SamplerConfig

    with measure() as usage:
        build_start = time.perf_counter()
        sampler = build_sampler(graph, SamplerConfig(**spec), seed=0, cache_dir=cache)
        build = time.perf_counter() - build_start
        nodes = edges = batches = 0
        start = time.perf_counter()
        for batch in sampler.batches(epoch=1):
            nodes += batch.num_nodes
            edges += batch.edge_index.size(1)
            batches += 1
            if time.perf_counter() - start > seconds:
                break
        elapsed = time.perf_counter() - start
    per_epoch = len(sampler) if hasattr(sampler, "__len__") else batches
    out = {"setup_s": build, "nodes_per_s": nodes / elapsed, "edges_per_s": edges / elapsed,
           "epoch_s": elapsed / batches * per_epoch, "batches": batches, "peak_mb": usage.peak_mb}
    if spec["name"] == "neighbor":  # the sampler alone, without gathering the batch's features
        gen = torch.Generator().manual_seed(0)
        seeds = sampler.train_nodes[torch.randperm(sampler.train_nodes.numel(), generator=gen)]
        edges, start = 0, time.perf_counter()
        for chunk in seeds.split(spec["batch_size"]):
            edges += sampler.sample_topology(chunk, gen)[1].size(1)
            if time.perf_counter() - start > seconds:
                break
        out["topology_edges_per_s"] = edges / (time.perf_counter() - start)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="csbm-arxiv,csbm-products")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling time measured per sampler")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from ladle.data import load_graph

    figures = {}
    with tempfile.TemporaryDirectory() as cache:
        for dataset in args.datasets.split(","):
            start = time.perf_counter()
            graph = load_graph(dataset)
            graph.csr()
            print(f"{dataset}: {graph.num_nodes:,} nodes, {graph.data.edge_index.size(1) // 2:,} undirected edges "
                  f"(generated in {time.perf_counter() - start:.1f}s)")
            yard = propagate_once(graph)
            print(f"  A @ X: {yard['seconds']:.2f}s, {yard['gb_per_s']:.2f} GB/s")
            tag = dataset.replace("csbm-", "")
            figures[f"{tag}_spmm_s"] = round(yard["seconds"], 3)
            print(f"  {'sampler':11s} {'setup s':>8s} {'nodes/s':>12s} {'edges/s':>12s} {'epoch s':>9s} {'peak MB':>8s}")
            for name in args.samplers.split(","):
                r = measure_sampler(graph, SAMPLERS[name], args.seconds, cache)
                print(f"  {name:11s} {r['setup_s']:8.1f} {r['nodes_per_s']:12,.0f} {r['edges_per_s']:12,.0f} "
                      f"{r['epoch_s']:9.1f} {r['peak_mb']:8.0f}")
                key = name.replace("-", "_")
                figures[f"{tag}_{key}_edges_per_s"] = int(r["edges_per_s"])
                figures[f"{tag}_{key}_epoch_s"] = round(r["epoch_s"], 2)
                if name == "neighbor":
                    print(f"  neighbor sampling alone (no feature gather): {r['topology_edges_per_s']:,.0f} edges/s")
                    figures[f"{tag}_neighbor_topology_edges_per_s"] = int(r["topology_edges_per_s"])
                    figures.setdefault("neighbor_edges_per_s", int(r["topology_edges_per_s"]))
            del graph
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
