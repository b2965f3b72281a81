"""Calibrate a synthetic preset: what the strongest single model reaches at each signal, beside the graph's shape.

The synthetic presets imitate OGB graphs in size, degree, classes and split; their ``signal`` (the length of each
class's feature mean against unit noise) sets how hard they are. A preset is calibrated when the strongest single
model (``--strong``: a cosine learning-rate schedule and its SWA from ``--average-start``, as the long baseline is
run) lands near the real graph's published single model (OGB leaderboard, GraphSAGE with neighbour sampling:
ogbn-arxiv 71.5 %, ogbn-products 78.5 %), not the noisy constant-rate model.

    python benchmarks/calibrate.py --preset dcsbm-arxiv --signals 0.8,1.0,1.2 --strong
    python benchmarks/calibrate.py --preset dcsbm-products --nodes 300000 --signals 0.6,0.8 --strong
    python benchmarks/calibrate.py --preset csbm-arxiv --signals 0.5,0.64,0.8      # the older presets' recipe

Each row gives the graph's shape (mean and max degree, the log-log slope of its degree tail P(D >= k), the share of
edges inside a class), then the model's final training loss and its train / val / test accuracy, and with ``--strong``
its SWA's (``--strong`` runs the schedule to the cap: no early stopping); each epoch's scores go to stderr, one JSON
object per line. ``--nodes`` trains on a smaller graph of the
same preset (per node the same problem, fewer training nodes: a slight underestimate). The model is the payoff
benchmark's: 2 layers of width 128, fanouts 10,5, batch 1024, Adam 0.01, early stopping with ``--patience`` within
``--epochs``, the best-validation weights scored on test. Last line: ``preset=… nodes=… test_S=ACC [swa_S=ACC] …``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import replace


def generate(preset: str, nodes: int, signal: float):
    """The preset's graph at ``signal`` (and ``nodes``), and its dataset name."""
    if preset.startswith("dcsbm"):
        from ladle.data.dcsbm import PRESETS, dcsbm_name, generate_dcsbm

        params = replace(PRESETS[preset], signal=signal, **({"nodes": nodes} if nodes else {}))
        return generate_dcsbm(params), dcsbm_name(params)
    from ladle.data.csbm import PRESETS, csbm_name, generate_csbm

    params = replace(PRESETS[preset], signal=signal, **({"nodes": nodes} if nodes else {}))
    return generate_csbm(params), csbm_name(params)


def shape(graph) -> dict:
    """Mean and max degree, the least-squares slope of log P(D >= k) on k log-spaced from the mean to half the max,
    and the edge homophily."""
    import torch

    edges = graph.data.edge_index
    degrees = torch.bincount(edges[0], minlength=graph.num_nodes).double()
    d = degrees[degrees > 0]
    low, high = d.mean().item(), d.max().item() / 2
    slope = float("nan")
    if high > low * 1.5:
        ks = torch.logspace(math.log10(low), math.log10(high), 8, dtype=torch.float64)
        tail = torch.tensor([(d >= k).double().mean().item() for k in ks], dtype=torch.float64)
        design = torch.stack([ks.log(), torch.ones_like(ks)], 1)
        slope = torch.linalg.lstsq(design, tail.log().unsqueeze(1)).solution[0].item()
    same = (graph.data.y[edges[0]] == graph.data.y[edges[1]]).double().mean().item()
    return {"mean_degree": degrees.mean().item(), "max_degree": int(degrees.max()), "tail_slope": slope,
            "homophily": same}


def accuracy(preset: str, nodes: int, signal: float, args) -> dict:
    from ladle.config import build_config
    from ladle.trainer import train_ingredient

    began = time.perf_counter()
    graph, name = generate(preset, nodes, signal)
    generated = time.perf_counter() - began
    train = {"epochs": args.epochs, "patience": args.patience}
    if args.strong:
        # The long baseline's recipe: a cosine schedule run to its end (early stopping would cut it at a high rate,
        # and before the SWA starts, leaving an average of nothing), and the weights' SWA from a late epoch.
        train.update(lr_schedule="cosine", average_start=max(1, round(args.average_start * args.epochs)), patience=0)
    config = build_config({"dataset": name, "ingredients": 1, "seed": args.seed, "train": train,
                           "model": {"name": "sage", "hidden": 128},
                           "sampler": {"name": "neighbor", "fanouts": [10, 5], "batch_size": 1024},
                           "eval": {"chunk": args.chunk}})
    spec = config.ingredient_specs()[0]
    if args.strong:
        spec = dataclasses.replace(spec, track_average="swa")
    record = train_ingredient(spec, graph)
    for h in record.history:  # the curve behind the row (stderr: the table stays on stdout)
        print(json.dumps({"signal": signal, **h}), file=sys.stderr, flush=True)
    out = {"signal": signal, "nodes": graph.num_nodes, **shape(graph), "loss": record.history[-1]["loss"],
           "train": record.train, "val": record.val, "test": record.test, "epochs": record.epochs_trained,
           "best_epoch": record.best_epoch, "seconds": round(record.seconds, 1), "generate_s": round(generated, 1)}
    if record.companion is not None:
        out.update(swa_train=record.companion.train, swa_val=record.companion.val, swa_test=record.companion.test)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="dcsbm-arxiv",
                        choices=("csbm-arxiv", "csbm-products", "dcsbm-arxiv", "dcsbm-products"))
    parser.add_argument("--nodes", type=int, default=0, help="a smaller graph of the same preset (0: the preset's size)")
    parser.add_argument("--signals", default="1.0", help="comma-separated signals to try")
    parser.add_argument("--epochs", type=int, default=30, help="the epoch cap")
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--strong", action="store_true",
                        help="a cosine learning-rate schedule and the weights' SWA from --average-start (the long "
                             "baseline's recipe): the strongest single model, which the calibration targets")
    parser.add_argument("--average-start", type=float, default=0.75, help="with --strong: SWA from this share of "
                                                                          "the epochs")
    parser.add_argument("--chunk", type=int, default=100_000, help="eval.chunk for validation (0: one whole pass)")
    parser.add_argument("--seed", type=int, default=0, help="the pipeline seed (the graph keeps the preset's own)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    figures = {"preset": args.preset, "nodes": args.nodes or "preset", "strong": args.strong}
    print("| signal | nodes | mean deg | max deg | tail slope | homophily | loss | train | val | test | SWA train / "
          "val / test | epochs (best) | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for signal in (float(s) for s in args.signals.split(",")):
        r = accuracy(args.preset, args.nodes, signal, args)
        swa = (f"{100 * r['swa_train']:.2f} / {100 * r['swa_val']:.2f} / {100 * r['swa_test']:.2f}"
               if "swa_test" in r else "")
        print(f"| {signal:g} | {r['nodes']} | {r['mean_degree']:.2f} | {r['max_degree']} | {r['tail_slope']:.2f} | "
              f"{r['homophily']:.3f} | {r['loss']:.3f} | {100 * r['train']:.2f} | {100 * r['val']:.2f} | "
              f"{100 * r['test']:.2f} | {swa} | {r['epochs']} ({r['best_epoch']}) | {r['seconds']} |", flush=True)
        figures[f"test_{signal:g}"] = round(100 * r["test"], 2)
        if "swa_test" in r:
            figures[f"swa_{signal:g}"] = round(100 * r["swa_test"], 2)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
