"""Is a soup more than one model's own averaged weights? The single K-budget model with weight averaging.

payoff.py's equal-compute baseline is one model trained K times as long, its best-validation weights kept. A
stronger baseline costs nothing more: average that one model's weights over its own epochs (stochastic weight
averaging, Izmailov et al., UAI 2018, "Averaging Weights Leads to Wider Optima and Better Generalization"; and an
exponential moving average, Polyak & Juditsky, 1992). If it reaches the soup, the soup's gain is SGD noise averaged
out, which one model gets without K workers; if not, the K ingredients bring something one model does not.

This trains the payoff cell's trunk and its long model exactly as ladle does (the raw track is ladle's long model,
bit for bit: its scores must equal the payoff record's for the same seed), and beside the raw weights keeps
    swa: the uniform average of the weights at the end of every epoch after the trunk,
    ema: an exponential moving average of them (``--decay`` per epoch),
each validated every epoch, test read at its best validation; the run stops when the raw model stops (the same
early stopping rule, K times the patience). The soups' rows come from payoff's record of the same cell and seed.

    python benchmarks/averaging.py --cell csbm-arxiv --trunk 2 --seed 0   # beside payoff_records.jsonl's seed 0
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default="csbm-arxiv", help="a payoff cell whose label contains this")
    parser.add_argument("--trunk", type=int, default=2, help="the cell's trunk setting (0 or its E)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decay", type=float, default=0.8, help="the EMA's weight on its past, per epoch")
    parser.add_argument("--eval-threads", type=int, default=2, help="threads for scoring the averaged weights "
                        "(training keeps the run's own engine.threads, so the raw track is ladle's model bit for bit)")
    parser.add_argument("--payoff-records", default="benchmarks/results/payoff_records.jsonl")
    parser.add_argument("--root", default="data")
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import payoff
    from ladle.config import build_config
    from ladle.data import load_graph
    from ladle.evaluation.evaluator import split_scores
    from ladle.models import build_model
    from ladle.trainer import train_ingredient

    plan = argparse.Namespace(root=args.root, shared=args.shared, workers=1, products=False, quick=False,
                              products_trunk=2, products_epochs=10, products_patience=3)
    cell = next(c for c in payoff.cells(plan) if args.cell in c.label)
    config = build_config(payoff.config_for(cell, args.seed, args.trunk, plan))
    graph = load_graph(config.dataset, config.root)
    torch.set_num_threads(config.engine.threads)
    began = time.perf_counter()
    start_state = None
    if config.trunk_spec() is not None:
        start_state = train_ingredient(config.trunk_spec(), graph).state
    spec = config.long_spec()
    shadow = build_model(spec.model, graph.num_features, graph.num_classes)  # scores the averaged weights
    tracks = {name: {"state": None, "best_val": float("-inf"), "test": None, "epoch": 0} for name in ("swa", "ema")}

    def after_epoch(epoch: int, model: torch.nn.Module) -> None:
        weights = {k: v.detach().to("cpu", torch.float64) for k, v in model.state_dict().items()}
        for name, track in tracks.items():
            if track["state"] is None:
                track["state"] = weights
            else:
                keep = (epoch - 1) / epoch if name == "swa" else args.decay  # swa: the mean of epochs 1..epoch
                track["state"] = {k: keep * v + (1 - keep) * weights[k] for k, v in track["state"].items()}
            shadow.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in track["state"].items()})
            torch.set_num_threads(args.eval_threads)
            scores = split_scores(shadow, graph, ("val", "test"), spec.eval.chunk)
            torch.set_num_threads(config.engine.threads)
            if scores["val"] > track["best_val"]:
                track.update(best_val=scores["val"], test=scores["test"], epoch=epoch)

    raw = train_ingredient(spec, graph, start_state=start_state, after_epoch=after_epoch)
    seconds = time.perf_counter() - began
    record = next((r for r in map(json.loads, Path(args.payoff_records).read_text().splitlines())
                   if r["cell"] == cell.label and r["trunk"] == args.trunk and r["seed"] == args.seed
                   and r["epoch_cap"] == cell.epochs), None) if Path(args.payoff_records).exists() else None
    rows = [("single model, 4x budget (ladle's)", raw.val, raw.test, raw.best_epoch),
            ("  its weights averaged: swa", tracks["swa"]["best_val"], tracks["swa"]["test"], tracks["swa"]["epoch"]),
            (f"  its weights averaged: ema {args.decay}", tracks["ema"]["best_val"], tracks["ema"]["test"],
             tracks["ema"]["epoch"])]
    if record:
        rows += [(f"{name} (payoff record)", record[f"{key}_val"], record[key], None)
                 for name, key in (("best ingredient", "best"), ("GIS", "gis"), ("uniform", "uniform"),
                                   ("ensemble", "ensemble"))]
    print(f"{cell.label}, trunk {args.trunk}, seed {args.seed}: the long model trained {raw.epochs_trained} epochs "
          f"(cap {spec.train.epochs}, patience {spec.train.patience}) in {seconds:.0f} s")
    print("| row | val | test | best epoch |\n|---|---|---|---|")
    for name, val, test, epoch in rows:
        print(f"| {name} | {100 * val:.2f} | {100 * test:.2f} | {epoch or ''} |")
    figures = {"raw_test": round(100 * raw.test, 2), "swa_test": round(100 * tracks["swa"]["test"], 2),
               "ema_test": round(100 * tracks["ema"]["test"], 2), "epochs": raw.epochs_trained}
    if record:
        figures.update(raw_matches_record=abs(raw.test - record["long"]) < 1e-9 and abs(raw.val - record["long_val"]) < 1e-9,
                       gis_test=round(100 * record["gis"], 2),
                       gis_minus_best_averaged=round(100 * (record["gis"] - max(
                           (tracks[t] for t in tracks), key=lambda t: t["best_val"])["test"]), 2))
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
