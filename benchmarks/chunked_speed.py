"""Chunked inference: sparse row slices of the adjacency against the per-edge gather, on csbm-arxiv.

    python benchmarks/chunked_speed.py            # GraphSAGE, GIN and GCN, 2 x 128, chunk 20000, one thread

Both paths run side by side in one process on the same weights; the last line is key=value pairs
(``sage_ratio`` = gather seconds / sparse seconds, ``*_maxdiff`` the largest logit difference).
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--chunk", type=int, default=20_000)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args(argv)
    import torch

    from ladle.data import load_graph
    from ladle.evaluation.chunked import chunked_forward
    from ladle.models import build_model
    from ladle.models.options import ModelConfig

    torch.set_num_threads(1)
    torch.set_grad_enabled(False)  # as ladle's evaluators run it
    graph = load_graph(args.dataset, "data")
    graph.csr(), graph.adj_t("plain"), graph.adj_t("gcn")  # built once per graph in real runs too: not timed
    figures = {}
    for name in ("sage", "gin", "gcn"):
        model = build_model(ModelConfig(name=name, hidden=args.hidden, layers=2), graph.num_features,
                            graph.num_classes, init_seed=0).eval()
        began = time.perf_counter()
        sparse = chunked_forward(model, graph, args.chunk)
        middle = time.perf_counter()
        model.adjacency = None  # this instance only: the per-edge gather
        gathered = chunked_forward(model, graph, args.chunk)
        end = time.perf_counter()
        print(f"{name}: sparse {middle - began:.2f} s, gather {end - middle:.2f} s", flush=True)
        figures[f"{name}_sparse_s"] = round(middle - began, 3)
        figures[f"{name}_gather_s"] = round(end - middle, 3)
        figures[f"{name}_ratio"] = round((end - middle) / (middle - began), 2)
        figures[f"{name}_maxdiff"] = float((sparse - gathered).abs().max())
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
