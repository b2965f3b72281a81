"""Accuracy of soups against the best single ingredient on Cora and CiteSeer.

Repeats the whole ladle pipeline (train K ingredients from one shared initialisation, soup,
score) for every dataset x model x pipeline seed, and prints mean ± std test accuracy of the
best ingredient (chosen by validation), each soup and the ensemble, beside the published
single-model figures. Pipelines run in parallel worker processes of one torch thread each.

    python benchmarks/accuracy.py                     # 5 seeds, 8 ingredients, all four models
    python benchmarks/accuracy.py --ingredients 4 --seeds 5 --workers 2
    python benchmarks/accuracy.py --soups uniform,greedy,gis,learned,pls,ensemble   # with the learned soups

The last line is key=value pairs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

PUBLISHED = {("Cora", "gcn"): 81.5, ("CiteSeer", "gcn"): 70.3, ("Cora", "gat"): 83.0, ("CiteSeer", "gat"): 72.5}
DEFAULT_SOUPS = "uniform,greedy,gis,ensemble"
FITTED_ON_VAL = {"learned", "pls"}  # their validation score is fitted, not a selection signal


def one_pipeline(job: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    from ladle import api
    from ladle.config import build_config

    values = {"dataset": job["dataset"], "root": job["root"], "ingredients": job["ingredients"],
              "seed": job["seed"], "model": {"name": job["model"]}, "soups": job["soups"].split(",")}
    if job["epochs"]:
        values["train"] = {"epochs": job["epochs"]}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = api.run(build_config(values), Path(tmp) / "run", progress=False)
    scores = {"best ingredient": results["best_ingredient"], "ingredients mean": results["ingredient_mean"]}
    scores.update({name: s for name, s in results["soups"].items()})
    return {**job, "epochs_used": results["config"]["train"]["epochs"], "seconds": time.perf_counter() - start,
            "test": {k: v["test"] for k, v in scores.items()}, "val": {k: v["val"] for k, v in scores.items()}}


def row_names(records: list[dict]) -> list[str]:
    """best ingredient, ingredients mean, then every soup some record has, in the order the records ran them."""
    names = ["best ingredient", "ingredients mean"]
    for r in records:
        names += [k for k in r["test"] if k not in names]
    return names


def summarise(records: list[dict]) -> tuple[str, dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["model"]), []).append(r)
    rows = row_names(records)
    headers = [f"{row} (fitted on val)" if row in FITTED_ON_VAL else row for row in rows]
    lines = ["| dataset | model | n | " + " | ".join(headers) + " | published single model |",
             "|---" * (len(rows) + 4) + "|"]
    figures = {}
    gis_ok = True
    for (dataset, model), group in sorted(groups.items()):
        cells = []
        for row in rows:
            values = [100 * g["test"][row] for g in group if row in g["test"]]
            if not values:
                cells.append("")
                continue
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.fmean(values):.2f} ± {std:.2f}")
            figures[f"{model}_{dataset.lower()}_{row.replace(' ', '_')}"] = round(statistics.fmean(values), 2)
        best = statistics.fmean(g["test"]["best ingredient"] for g in group)
        gis = statistics.fmean(g["test"].get("gis", 0.0) for g in group)
        gis_ok &= gis >= best
        published = PUBLISHED.get((dataset, model))
        lines.append(f"| {dataset} | {model} | {len(group)} | " + " | ".join(cells) + f" | {published or ''} |")
    figures["gis_ge_best_everywhere"] = str(gis_ok).lower()
    return "\n".join(lines), figures


def main(argv=None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(here.parent.parent / "shared" / "data" / "planetoid"))
    parser.add_argument("--datasets", default="Cora,CiteSeer")
    parser.add_argument("--models", default="gcn,sage,gat,gin")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ingredients", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=0, help="0: each model's default")
    parser.add_argument("--soups", default=DEFAULT_SOUPS, help="soup methods, comma-separated")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jsonl", default=str(here / "results" / "accuracy.jsonl"),
                        help="one JSON object per pipeline; existing records are kept and their jobs skipped")
    parser.add_argument("--summarise", action="store_true", help="only print the table of the records in --jsonl")
    args = parser.parse_args(argv)

    path = Path(args.jsonl)
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    if args.summarise:
        return _print(records, args, 0.0)
    done = {(r["dataset"], r["model"], r["seed"], r["ingredients"], r["epochs"], r.get("soups", DEFAULT_SOUPS))
            for r in records}
    # Seed-major order: a run stopped early still covers every dataset x model.
    jobs = [{"dataset": d, "model": m, "seed": s, "root": args.root, "ingredients": args.ingredients,
             "epochs": args.epochs, "soups": args.soups}
            for s in range(args.seeds) for d in args.datasets.split(",") for m in args.models.split(",")
            if (d, m, s, args.ingredients, args.epochs, args.soups) not in done]
    start = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as log, ProcessPoolExecutor(args.workers) as pool:
        for record in pool.map(one_pipeline, jobs):
            records.append(record)
            log.write(json.dumps(record) + "\n")
            log.flush()
            print(f"{record['dataset']:9s} {record['model']:5s} seed {record['seed']}: "
                  f"best {100 * record['test']['best ingredient']:.2f} gis {100 * record['test']['gis']:.2f} "
                  f"({record['seconds']:.0f}s)", file=sys.stderr, flush=True)
    return _print(records, args, time.perf_counter() - start)


def _print(records: list[dict], args, seconds: float) -> int:
    table, figures = summarise(records)
    seeds = sorted({r["seed"] for r in records})
    print(f"test accuracy (%), mean ± std over pipeline seeds {seeds}, {args.ingredients} ingredients each; "
          "best ingredient chosen by validation; the n column counts the pipelines")
    print(table)
    figures["pipelines"] = len(records)
    figures["minutes"] = round(seconds / 60, 1)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
