"""Soups of sampled ingredients on a graph sized like ogbn-arxiv (csbm-arxiv, made harder).

Five runs of 4 GCN ingredients each: neighbour sampling, ClusterGCN, GraphSAINT random walks,
METIS partitions (ingredient i trains full-batch on part i of 4, with its 1-hop halo), and a mixed
recipe (one neighbour, one ClusterGCN, two GraphSAINT-rw ingredients). For each: the best
ingredient (chosen on validation), uniform, greedy, GIS and the ensemble, on validation and test,
with training and soup times. The preset's signal and homophily are lowered so that accuracy is
far from 100% and the soups have something to show.

    python benchmarks/large_soups.py                 # about 30 minutes on 2 cores
    python benchmarks/large_soups.py --epochs 2      # quicker, less trained

Each run is a normal run directory under --out (inspect it with `ladle report`). The last line
is key=value pairs: ``<recipe>_best_test``, ``<recipe>_gis_test``, ... per recipe.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DATASET = "csbm-arxiv:signal=0.6,homophily=0.6"
NEIGHBOR = {"name": "neighbor", "fanouts": [10, 5], "batch_size": 2048}
CLUSTER = {"name": "cluster", "parts": 64, "parts_per_batch": 4}
SAINT_RW = {"name": "saint-rw", "budget": 3000, "walk_length": 2, "coverage": 5}
RECIPES = {  # the config values each recipe adds
    "neighbor": {"recipes": [{"count": 4, "sampler": NEIGHBOR}]},
    "cluster": {"recipes": [{"count": 4, "sampler": CLUSTER}]},
    "saint_rw": {"recipes": [{"count": 4, "sampler": SAINT_RW}]},
    "partition": {"partition": {"method": "metis", "parts": 4, "halo": True}},
    "mixed": {"recipes": [{"count": 1, "sampler": NEIGHBOR}, {"count": 1, "sampler": CLUSTER},
                          {"count": 2, "sampler": SAINT_RW}]},
}


def run_recipe(name: str, recipe: dict, args) -> dict:
    from ladle import api
    from ladle.config import build_config

    config = build_config({"dataset": args.dataset, "ingredients": 4, **recipe,
                           "model": {"name": "gcn", "hidden": 128}, "train": {"epochs": args.epochs},
                           "soups": ["uniform", "greedy", "gis", "ensemble"], "engine": {"workers": args.workers}})
    start = time.perf_counter()
    results = api.run(config, Path(args.out) / name, progress=False)
    results["wall_s"] = time.perf_counter() - start
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=DATASET)
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--workers", type=int, default=1, help="local worker processes per run")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--out", default="runs/large_soups")
    args = parser.parse_args(argv)
    figures = {}
    print(f"{'recipe':9s} {'row':18s} {'val':>7s} {'test':>7s} {'seconds':>8s}")
    for name in args.recipes.split(","):
        r = run_recipe(name, RECIPES[name], args)
        best = r["best_ingredient"]
        train_s = sum(i["seconds"] for i in r["ingredients"])
        rows = [("best ingredient", best["val"], best["test"], train_s)]
        rows += [(soup, s["val"], s["test"], s["seconds"]) for soup, s in r["soups"].items()]
        for label, val, test, seconds in rows:
            print(f"{name:9s} {label:18s} {val:7.4f} {test:7.4f} {seconds:8.1f}")
        figures[f"{name}_best_test"] = round(best["test"], 4)
        for soup, s in r["soups"].items():
            figures[f"{name}_{soup}_test"] = round(s["test"], 4)
        figures[f"{name}_gis_val_gain"] = round(r["soups"]["gis"]["val"] - best["val"], 4)
        with open(Path(args.out) / "large_soups.jsonl", "a") as f:
            f.write(json.dumps({"dataset": args.dataset, "epochs": args.epochs, "recipe": name, "rows": rows,
                                "wall_s": r["wall_s"], "run": str(Path(args.out) / name)}) + "\n")
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
