"""Do soups pay off where the method is meant for? Converged ingredients against the strongest fair baselines.

Each pipeline trains K = 4 ingredients to convergence (early stopping on validation, within an epoch cap),
optionally branched from a shared trunk of E epochs, and beside them one model given the same total compute
(K times the ingredients' epoch cap and patience, from the same trunk: what data-parallel training with K
workers would reach at perfect scaling). Rows: the best ingredient (chosen on validation), the single model with
K times the budget, that model's own weights averaged over its epochs (its SWA, best epoch by validation,
stopped where the model stopped: free, no other worker), the uniform, greedy, GIS and learned soups, and the
ensemble (K models at inference). Every
selection uses validation; test is reported. Metrics are each graph's published one: accuracy for Cora, CiteSeer
(Planetoid public split), squirrel_filtered and the synthetic graphs, ROC-AUC for tolokers (Platonov et al.,
ICLR 2023, score both so); for the npz graphs split s of the file serves seed s.

    python benchmarks/payoff.py --root ../shared/data/planetoid        # every cell but products (~4 h, 2 cores)
    python benchmarks/payoff.py --products                             # csbm-products, 1 seed (~3 h)
    python benchmarks/payoff.py --synthetic dcsbm --only dcsbm         # dcsbm-arxiv instead: 3 seeds
    python benchmarks/payoff.py --synthetic dcsbm --products           # dcsbm-products, 2 seeds
    python benchmarks/payoff.py --quick --root ../shared/data/planetoid   # a few minutes: tiny caps, 1 seed

Each finished pipeline is one JSON object per line in ``--records`` (default runs/payoff/records.jsonl); a rerun
skips the pipelines already there, so a stopped run carries on. The table gives mean ± std over seeds (test, in
points); the last line is key=value pairs: ``gis_wins=N gis_ties=T cells=M gis_mean_gain=…
gis_mean_gain_without_products=… gis_vs_long=… gis_vs_long_swa=… trunk_gain=…`` (a win is above the best ingredient,
a tie apart; GIS's mean gain over the best ingredient, the same without the one-seed products-sized cells, over the
single K-budget model, over that model's SWA in the cells that have it, and what the trunk adds to GIS's gain); with
partition cells also ``part_gis_wins part_gis_ties part_cells part_gis_gain gis_vs_ddp ddp_bytes_per_epoch
random_vs_metis`` (``--partitions 4,8``: K ingredients, ingredient i on part i of a random or METIS cut, the
whole-graph long model, its SWA and DDP trained once per K, trunk and seed).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROWS = ["best", "long", "long_swa", "ddp", "uniform", "greedy", "gis", "learned", "ensemble"]
LABELS = {"best": "best ingredient", "long": "single model, Kx budget", "long_swa": "its SWA",
          "ddp": "DDP, K ranks", "uniform": "uniform", "greedy": "greedy", "gis": "GIS",
          "learned": "learned (fit on val)", "ensemble": "ensemble (K models)"}


@dataclass(frozen=True)
class Cell:
    dataset: str
    model: str
    sampler: dict
    seeds: int
    trunk: int  # the E of the trunk setting; each cell runs with 0 and with E
    epochs: int  # each ingredient's cap
    patience: int
    extra: dict = field(default_factory=dict)
    partition: tuple | None = None  # (method, K, halo): ingredient i trains on part i of K alone
    ingredients: int = 4

    @property
    def label(self) -> str:
        name = self.dataset.split("/")[-1].replace(".npz", "")
        train = self.extra.get("train", {})
        average, decay = train.get("average", "none"), train.get("weight_decay")
        parts = "" if self.partition is None else (f" {self.partition[0]} K{self.partition[1]}"
                                                   + (" halo" if self.partition[2] else ""))
        schedule, start = train.get("lr_schedule", "none"), train.get("average_start", 1)
        return (f"{name} {self.model} {self.sampler['name']}" + ("" if average == "none" else f" {average}")
                + ("" if decay is None else f" wd{decay:g}") + ("" if schedule == "none" else f" {schedule}")
                + ("" if start == 1 else f" from{start}") + parts)

    @property
    def baseline_key(self) -> tuple:
        """What the long model and DDP depend on: not the partition (they train on the whole graph)."""
        return (self.dataset, self.model, self.ingredients, self.epochs)


def cells(args) -> list[Cell]:
    npz = Path(args.shared) / "data" / "npz"
    neighbor = {"name": "neighbor", "fanouts": [10, 5], "batch_size": 512}
    family = getattr(args, "synthetic", "csbm")  # the large synthetic cells' generator
    full = {"name": "full"}
    small = [Cell(name, model, full, 5, 20, 200, 30) for name in ("Cora", "CiteSeer", f"npz:{npz / 'squirrel_filtered.npz'}")
             for model in ("gcn", "sage")]
    tolokers = f"npz:{npz / 'tolokers.npz'}"
    out = small + [
        Cell(tolokers, "sage", neighbor, 3, 5, 50, 10),
        Cell(tolokers, "gcn", full, 3, 30, 300, 50),
        # Caps high enough that the ingredients stop on their own (at a cap of 10 / patience 3 most still improved).
        Cell(f"{family}-arxiv", "sage", {**neighbor, "batch_size": 1024}, 3, 2, 30, 5,
             {"model": {"hidden": 128}, "learned": {"epochs": 20}}),
    ]
    if getattr(args, "partitions", ""):
        # Graph Ladling's data partition soup: K ingredients, each on its own part (neighbour sampling inside it).
        arxiv = Cell(args.partition_dataset, "sage", {**neighbor, "batch_size": 1024}, 3, 2, 30, 5,
                     {"model": {"hidden": 128}, "learned": {"epochs": 20}})
        if args.quick:
            arxiv = replace(arxiv, trunk=1, epochs=2, patience=1, extra={"model": {"hidden": 16},
                                                                          "learned": {"epochs": 2}})
        return [replace(arxiv, partition=(method, k, halo), ingredients=k, seeds=min(arxiv.seeds, args.seeds or 3))
                for k in map(int, args.partitions.split(",")) for method in args.methods.split(",")
                for halo in (False, True)[: 2 if args.halos else 1]]
    if args.products:
        out = [Cell(f"{family}-products", "sage", {**neighbor, "batch_size": 1024},
                    1 if family == "csbm" else 2, args.products_trunk,
                    args.products_epochs, args.products_patience,
                    {"model": {"hidden": 128}, "eval": {"chunk": 100_000}, "soups": ["uniform", "greedy", "gis", "pls",
                                                                                    "ensemble"],
                     "learned": {"epochs": 20, "parts": 32, "parts_per_epoch": 4}})]
    changed = {**({"average": args.average} if getattr(args, "average", "none") != "none" else {}),
               **({"lr_schedule": args.lr_schedule} if getattr(args, "lr_schedule", "none") != "none" else {}),
               **({"average_start": args.average_start} if getattr(args, "average_start", 1) != 1 else {}),
               **({"weight_decay": args.weight_decay} if getattr(args, "weight_decay", None) is not None else {})}
    if changed:  # every model's weights averaged over its epochs, or another weight decay: rows of their own
        out = [replace(c, extra={**c.extra, "train": {**c.extra.get("train", {}), **changed}}) for c in out]
    if args.quick:
        out = [Cell(c.dataset, c.model, c.sampler, 1, max(1, c.trunk // 10), max(2, c.epochs // 10),
                    max(1, c.patience // 10), c.extra) for c in out[:1] + out[6:8]]
    return out


def config_for(cell: Cell, seed: int, trunk: int, args, baselines: str = "long") -> dict:
    dataset = f"{cell.dataset}#{seed}" if cell.dataset.startswith("npz:") else cell.dataset
    extra = {k: dict(v) if isinstance(v, dict) else v for k, v in cell.extra.items()}
    if cell.partition is not None:
        method, parts, halo = cell.partition
        extra["partition"] = {"method": method, "parts": parts, "halo": halo}
    return {"dataset": dataset, "root": args.root, "ingredients": cell.ingredients, "seed": seed, "baseline": baselines,
            "soups": extra.pop("soups", ["uniform", "greedy", "gis", "learned", "ensemble"]),
            "model": {"name": cell.model, **extra.pop("model", {})},
            "train": {"epochs": cell.epochs, "patience": cell.patience, **extra.pop("train", {})},
            "sampler": cell.sampler, "trunk": {"epochs": trunk},
            "engine": {"workers": args.workers, "threads": 1}, **extra}


def run_pipeline(cell: Cell, seed: int, trunk: int, args, baselines: str = "long") -> dict:
    from ladle import api
    from ladle.config import build_config
    from ladle.data import load_graph
    from ladle.report import write_report
    from ladle.store import RunDir
    from scaling import MemoryMonitor  # benchmarks/: the peak summed PSS of this process and its workers

    out = Path(args.work) / f"{cell.label.replace(' ', '-')}-t{trunk}-s{seed}"
    resume = out.exists() and args.keep_trained
    if out.exists() and not resume:
        import shutil

        shutil.rmtree(out)  # an unfinished pipeline starts again (the finished ones are in the records)
    config = build_config(config_for(cell, seed, trunk, args, baselines))
    peaks, clock = {}, {}
    began = time.perf_counter()
    with MemoryMonitor(args.memory) as monitor:
        graph = load_graph(config.dataset, config.root)
    peaks["load"], clock["load"] = monitor.peak, time.perf_counter() - began
    pls = config.soup("pls") if "pls" in config.soups else None
    if pls:
        # The partition learned soup's METIS parts, as a preprocessing stage of their own (as Zuber et al. partition
        # first): ladle caches them on disk, and on csbm-products METIS alone needs more memory than the soups.
        from ladle.sampling.partition import metis_parts

        began = time.perf_counter()
        with MemoryMonitor(args.memory) as monitor:
            metis_parts(graph, pls["parts"], config.seed)
        peaks["partition"], clock["partition"] = monitor.peak, time.perf_counter() - began
    start = time.perf_counter()
    with MemoryMonitor(args.memory) as monitor:
        run_dir, graph, _ = api.train(config, out, graph=graph, progress=False, resume=resume)
    peaks["train"] = monitor.peak
    trained = time.perf_counter()
    with MemoryMonitor(args.memory) as monitor:
        api.soup(run_dir, graph=graph)
    peaks["soups"] = monitor.peak
    souped = time.perf_counter()
    with MemoryMonitor(args.memory) as monitor:
        results = write_report(RunDir(out))
    peaks["report"] = monitor.peak
    trunk_seconds = results["trunk"]["seconds"] if results.get("trunk") else 0.0
    training_s = trained - start - trunk_seconds
    if resume:  # the wall time the stored models took when they were trained (their timeline), not this resume's
        spans = [json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines() if line.strip()]
        spans = [t for t in spans if t.get("name") != "trunk" and "started" in t]
        training_s = max(t["finished"] for t in spans) - min(t["started"] for t in spans)
    record = {"cell": cell.label, "dataset": graph.name, "metric": graph.metric, "model": cell.model,
              "sampler": cell.sampler["name"], "trunk": trunk, "seed": seed,
              "best": results["best_ingredient"]["test"], "best_val": results["best_ingredient"]["val"],
              "epochs_ingredients": [r["epochs_trained"] for r in results["ingredients"]], "epoch_cap": cell.epochs,
              **({"long": long["test"], "long_val": long["val"], "epochs_long": long["epochs_trained"],
                  "long_seconds": round(long["seconds"], 1)} if (long := results["baselines"].get("long")) else {}),
              **({"long_swa": swa["test"], "long_swa_val": swa["val"], "long_swa_epoch": swa["best_epoch"]}
                 if (swa := results["baselines"].get("long-swa")) else {}),
              **({"ddp": ddp["test"], "ddp_val": ddp["val"], "ddp_seconds": round(ddp["seconds"], 1),
                  "ddp_bytes_per_epoch": ddp["communication"]["allreduce_bytes_per_epoch"],
                  "ddp_ranks": ddp["communication"]["ranks"]} if (ddp := results["baselines"].get("ddp")) else {}),
              **({"partition": {"method": cell.partition[0], "parts": cell.partition[1], "halo": cell.partition[2]},
                  "baseline_key": list(cell.baseline_key), "ingredients": cell.ingredients,
                  "part_nodes": [(c.get("part_graph") or {}).get("nodes") for c in RunDir(out).ingredient_sidecars()]}
                 if cell.partition is not None else {}),
              "seconds": {"load": round(clock["load"], 1), "partition": round(clock.get("partition", 0.0), 1),
                          "trunk": round(trunk_seconds, 1),
                          "training": round(training_s, 1), "soups": round(souped - trained, 1),
                          "report": round(time.perf_counter() - souped, 1)}}
    if resume:
        record["resumed"] = True  # its training stage's time and peak are not this run's
    if args.memory:
        record["peak_mb"] = {stage: round(mb) for stage, mb in peaks.items()}
    for name, soup in results["soups"].items():
        record[name] = soup["test"]
        record[f"{name}_val"] = soup["val"]
    # Each soup's own time and peak resident memory above the driver's level when it started (its sidecar).
    record["soup_seconds"] = {name: round(s["seconds"], 1) for name, s in results["soups"].items()}
    record["soup_peak_mb"] = {name: round(s["peak_memory_mb"]) for name, s in results["soups"].items()
                              if s.get("peak_memory_mb") is not None}
    return record


def shared_baselines(records: list[dict]) -> list[dict]:
    """Partition cells with the whole-graph rows (long, its SWA, DDP) of the pipeline of the same K, trunk and seed
    that trained them (they do not depend on the cut), marked ``baselines_from``."""
    trained = {(tuple(r["baseline_key"]), r["trunk"], r["seed"]): r for r in records if "baseline_key" in r and "ddp" in r}
    out = []
    for r in records:
        source = trained.get((tuple(r.get("baseline_key", ())), r["trunk"], r["seed"]))
        if "baseline_key" in r and "long" not in r and source is not None:
            keys = [k for k in source if k.startswith(("long", "ddp")) or k == "epochs_long"]
            r = {**r, **{k: source[k] for k in keys}, "baselines_from": source["cell"]}
        out.append(r)
    return out


def table(records: list[dict], earlier: bool = False) -> tuple[list[str], dict]:
    """The markdown table and the last line's figures; ``earlier`` shows a cell's runs at a lower cap too."""
    records = shared_baselines(records)
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["cell"], r["trunk"], r["epoch_cap"]), []).append(r)
    # A cell rerun with a higher epoch cap keeps its earlier runs in the records (shown, marked "earlier", with
    # ``earlier``), but only its highest cap (the plan's) is in the table's figures.
    plan_cap: dict[tuple, int] = {}
    for cell, trunk, cap in groups:
        plan_cap[cell, trunk] = max(cap, plan_cap.get((cell, trunk), cap))
    head = ("| cell | trunk | n | " + " | ".join(LABELS[r] for r in ROWS)
            + " | GIS − best | epochs (ingr. / long) | s: trunk / train / soups |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    gains, versus_long, versus_swa, wins, ties, by_trunk, real = [], [], [], 0, 0, {}, []
    without_products = []  # one seed and the largest gains: the mean without them says how much they weigh
    part_gains, versus_ddp, ddp_bytes = collections.defaultdict(dict), [], []
    for (cell, trunk, cap), rs in sorted(groups.items()):
        metric = rs[0]["metric"]

        def stat(key, rs=rs):
            values = [100 * r[key] for r in rs if key in r]
            if not values:
                return None, ""
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            return mean, f"{mean:.2f} ± {std:.2f}"

        means = {row: stat(row) for row in ROWS}
        gain = means["gis"][0] - means["best"][0]
        counted = cap == plan_cap[cell, trunk]
        if counted and "partition" in rs[0]:  # the partition cells have figures of their own
            parted = rs[0]["partition"]
            part_gains[(parted["parts"], parted["halo"], trunk)][parted["method"]] = gain
            if means["ddp"][0] is not None:
                versus_ddp.append(means["gis"][0] - means["ddp"][0])
                ddp_bytes.extend(r["ddp_bytes_per_epoch"] for r in rs if "ddp_bytes_per_epoch" in r)
        elif counted:
            gains.append(gain)
            versus_long.append(means["gis"][0] - means["long"][0])
            if means["long_swa"][0] is not None:
                versus_swa.append(means["gis"][0] - means["long_swa"][0])
            wins += gain > 0  # a win is above the best ingredient; a tie is counted apart
            ties += gain == 0
            by_trunk.setdefault((cell, cap), {})[trunk] = gain  # the trunk's effect at one cap, not across caps
            if not cell.startswith(("csbm", "dcsbm")):
                real.append(gain)
            if "products" not in cell:
                without_products.append(gain)
        cells_text = [means[row][1] + (" ↓" if row not in ("best",) and means[row][0] is not None
                                       and means[row][0] < means["best"][0] else "") for row in ROWS]
        long_epochs = [r["epochs_long"] for r in rs if "epochs_long" in r]
        epochs = (f"{statistics.fmean(e for r in rs for e in r['epochs_ingredients']):.0f} / "
                  f"{statistics.fmean(long_epochs) if long_epochs else float('nan'):.0f} (cap {cap})")
        seconds = " / ".join(f"{statistics.fmean(r['seconds'][k] for r in rs):.0f}" for k in ("trunk", "training", "soups"))
        label = f"{cell} ({metric})" + ("" if counted else ", earlier")
        if not counted and not earlier:
            continue
        lines.append(f"| {label} | {trunk} | {len(rs)} | " + " | ".join(cells_text)
                     + f" | {gain:+.2f} | {epochs} | {seconds} |")
    trunk_gain = [g[max(g)] - g[0] for g in by_trunk.values() if 0 in g and len(g) > 1]
    figures = {"gis_wins": wins, "gis_ties": ties, "cells": len(gains),
               "gis_mean_gain": round(statistics.fmean(gains), 3) if gains else "nan",
               "gis_mean_gain_without_products": round(statistics.fmean(without_products), 3)
               if without_products else "nan",
               "gis_vs_long": round(statistics.fmean(versus_long), 3) if versus_long else "nan",
               "gis_vs_long_swa": round(statistics.fmean(versus_swa), 3) if versus_swa else "nan",
               "cells_long_swa": len(versus_swa),
               # The same over the real graphs alone: the synthetic ones (csbm-*) are where soups pay.
               "gis_wins_real": sum(g > 0 for g in real), "cells_real": len(real),
               "gis_mean_gain_real": round(statistics.fmean(real), 3) if real else "nan",
               "trunk_gain": round(statistics.fmean(trunk_gain), 3) if trunk_gain else "nan"}
    if part_gains:  # Graph Ladling's partition soup: GIS over ingredients that each saw one part
        every = [g for by_method in part_gains.values() for g in by_method.values()]
        cut = [m["random"] - m["metis"] for m in part_gains.values() if {"random", "metis"} <= set(m)]
        figures.update(part_gis_wins=sum(g > 0 for g in every), part_gis_ties=sum(g == 0 for g in every),
                       part_cells=len(every), part_gis_gain=round(statistics.fmean(every), 3),
                       gis_vs_ddp=round(statistics.fmean(versus_ddp), 3) if versus_ddp else "nan",
                       ddp_bytes_per_epoch=round(statistics.fmean(ddp_bytes)) if ddp_bytes else "nan",
                       random_vs_metis=round(statistics.fmean(cut), 3) if cut else "nan")
    return lines, figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="data", help="the Planetoid root (Cora, CiteSeer raw files under it)")
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"),
                        help="the shared folder whose data/npz holds tolokers and squirrel_filtered")
    parser.add_argument("--records", default="runs/payoff/records.jsonl")
    parser.add_argument("--work", default="runs/payoff/work", help="where the pipelines' run directories go")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--products", action="store_true", help="the products-sized cell alone")
    parser.add_argument("--synthetic", choices=("csbm", "dcsbm"), default="csbm",
                        help="the large synthetic cells' family: csbm (the older presets, one shared covariance and even "
                             "degrees) or dcsbm (power-law degrees, unequal classes: benchmarks/calibrate.py)")
    parser.add_argument("--products-trunk", type=int, default=2,
                        help="the trunk setting of the products cell (2: the better one, from the runs with 0 and 2)")
    parser.add_argument("--products-epochs", type=int, default=10, help="the products cell's epoch cap per ingredient")
    parser.add_argument("--products-patience", type=int, default=3, help="the products cell's patience per ingredient")
    parser.add_argument("--quick", action="store_true", help="a few cells, one seed, tiny caps")
    parser.add_argument("--average", choices=("none", "swa", "ema"), default="none",
                        help="train every model (ingredients and the long one) with its weights averaged over its "
                             "epochs (train.average); the rows carry its name")
    parser.add_argument("--lr-schedule", choices=("none", "cosine", "step"), default="none",
                        help="every model's learning-rate schedule (the long baseline's stronger recipe); the rows "
                             "carry its name")
    parser.add_argument("--average-start", type=int, default=1,
                        help="the epoch SWA (the long model's, or --average's) starts from, as train.average_start "
                             "(the long model's scaled by K); the rows carry it (from10 ...)")
    parser.add_argument("--weight-decay", type=float, default=None,
                        help="every model's Adam weight decay (default: ladle's, 5e-4); the rows carry it (wd0 ...)")
    parser.add_argument("--stop-after", type=float, default=0, metavar="MINUTES",
                        help="start no pipeline after this many minutes (seed-major order: every cell keeps the "
                             "same seeds so far)")
    parser.add_argument("--trunks", choices=("both", "none", "only"), default="both",
                        help="run each cell without a trunk and with its trunk of E epochs (both), or one of them")
    parser.add_argument("--seeds", type=int, default=0, help="at most this many seeds per cell (0: each cell's own)")
    parser.add_argument("--only", default="", help="run only the cells whose label contains this")
    parser.add_argument("--table-only", action="store_true", help="print the table of the records, run nothing")
    parser.add_argument("--earlier", action="store_true",
                        help="show a cell's earlier runs at a lower epoch cap too (marked; never in the last line)")
    parser.add_argument("--keep-trained", action="store_true",
                        help="a stopped pipeline keeps the models it stored and resumes (its training seconds are "
                             "then the span of the stored models' timeline; 'resumed' in its record)")
    parser.add_argument("--partitions", default="", metavar="K,K",
                        help="the partition cells instead (csbm-arxiv, GraphSAGE): K ingredients, each on part i of a "
                             "K-way cut, for each K given; the long model and DDP trained once per K, trunk and seed")
    parser.add_argument("--methods", default="random,metis", help="the partition cells' cuts")
    parser.add_argument("--partition-dataset", default="csbm-arxiv", help="the partition cells' graph")
    parser.add_argument("--halos", action="store_true", help="the partition cells with a 1-hop halo too")
    parser.add_argument("--memory", action="store_true",
                        help="sample the peak resident memory (PSS) of each stage (on by default with --products)")
    args = parser.parse_args(argv)
    args.memory = args.memory or args.products
    records_path = Path(args.records)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
    done = {(r["cell"], r["trunk"], r["seed"], r["epoch_cap"]) for r in records}
    start = time.perf_counter()
    chosen = [c for c in ([] if args.table_only else cells(args)) if args.only in c.label]
    # Seed-major: a run stopped early still has every cell at the same number of seeds.
    todo = [(seed, cell, trunk) for seed in range(max((c.seeds for c in chosen), default=0)) for cell in chosen
            for trunk in dict.fromkeys([0, cell.trunk] if not args.products else [cell.trunk])
            if args.trunks == "both" or (trunk == 0) == (args.trunks == "none")
            if seed < min(cell.seeds, args.seeds or cell.seeds)]
    for seed, cell, trunk in todo:
        if (cell.label, trunk, seed, cell.epochs) in done:
            continue
        if args.stop_after and time.perf_counter() - start > 60 * args.stop_after:
            print(f"stopped after {args.stop_after} minutes: the table holds the pipelines finished so far", flush=True)
            break
        began = time.perf_counter()
        baselines = "long"
        if cell.partition is not None:  # the whole-graph baselines do not depend on the cut: trained once
            have = {(tuple(r["baseline_key"]), r["trunk"], r["seed"]) for r in records if "ddp" in r and "baseline_key" in r}
            baselines = "none" if (cell.baseline_key, trunk, seed) in have else "long+ddp"
        record = run_pipeline(cell, seed, trunk, args, baselines)
        record["wall_s"] = round(time.perf_counter() - began, 1)
        with open(records_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        records.append(record)
        print(f"{cell.label} trunk {trunk} seed {seed}: best {100 * record['best']:.2f} long "
              f"{100 * record.get('long', float('nan')):.2f} gis {100 * record['gis']:.2f} ({record['wall_s']:.0f} s)",
              flush=True)
    lines, figures = table(records, args.earlier)
    print("\n".join(lines))
    figures["minutes"] = round((time.perf_counter() - start) / 60, 1)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
