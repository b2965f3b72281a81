"""Soups over a user's own model against training one of its ingredients (issue 36, item 5): a PyG model given as
``model=``, which ladle scores by whole-graph passes (its fast GIS path knows only ladle's layers).

    python benchmarks/user_model_soups.py --root ../shared/data/planetoid

Cora, PyG's ``GraphSAGE(in, 64, 2, out)``, 4 ingredients of 200 full-batch epochs on the serial engine, one thread;
each soup's own seconds (its sidecar) against the slowest ingredient's training seconds. Last line:
``ingredient_s=… uniform_s=… greedy_s=… gis_s=… ensemble_s=… slowest_soup_vs_ingredient=…`` (below 1: every soup
is faster than training one ingredient).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="data", help="the Planetoid root (Cora's raw files under it)")
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--ingredients", type=int, default=4)
    args = parser.parse_args(argv)
    import torch
    from torch_geometric.nn.models import GraphSAGE

    import ladle

    torch.set_num_threads(1)
    config = {"dataset": args.dataset, "root": args.root, "ingredients": args.ingredients,
              "train": {"epochs": args.epochs}, "engine": {"name": "serial"},
              "soups": ["uniform", "greedy", "gis", "ensemble"]}
    with tempfile.TemporaryDirectory() as folder:
        results = ladle.run(config, Path(folder) / "run", model=lambda i, o: GraphSAGE(i, 64, 2, o), progress=False)
    ingredient = max(r["seconds"] for r in results["ingredients"])
    figures = {"ingredient_s": round(ingredient, 2),
               **{f"{name}_s": round(s["seconds"], 2) for name, s in results["soups"].items()}}
    figures["slowest_soup_vs_ingredient"] = round(max(s["seconds"] for s in results["soups"].values()) / ingredient, 3)
    print(f"{args.dataset}, GraphSAGE from PyG as model=, {args.ingredients} ingredients x {args.epochs} epochs: "
          f"GIS test {100 * results['soups']['gis']['test']:.2f}, best ingredient "
          f"{100 * results['best_ingredient']['test']:.2f}")
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
