"""What does communication-free training save, and lose, against data-parallel training on the same K workers?

One ``ladle run`` with ``--baseline long+ddp`` and K local workers (one torch thread each, one core each on this
machine): the K ingredients train in parallel with no communication and are souped; the long model (one process, K
times an ingredient's epochs) shares the cores with them; then the DDP model (K ranks, the same K-times budget,
gradients all-reduced every step by PyTorch DDP over gloo) trains alone. Every model's validation curve comes from
its sidecar's history (seconds since its own start), so each row's wall-clock to its final validation score is read,
not modelled, and the bytes DDP all-reduced are what its communication hook counted.

Rows: each ingredient, the soups (at the last ingredient's end plus the soup's own time), the ensemble, the long
model and its SWA, DDP. The plot (``--plot``) has two panels: validation score against wall-clock seconds, and
against worker-seconds (wall-clock x the processes a row occupied).

    python benchmarks/ddp_wallclock.py                       # csbm-arxiv, K = 2, 10 epochs per ingredient
    python benchmarks/ddp_wallclock.py --dataset csbm --epochs 3    # a quick look

The last line is key=value pairs: ``gis_val gis_test ddp_val ddp_test long_val long_test soup_wall_s ddp_wall_s
long_wall_s ddp_vs_soup_wall ddp_bytes_per_epoch ...``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


def curve(sidecar: dict) -> list[tuple[float, float]]:
    """(seconds since the model started, validation score) at each validation."""
    return [(h["seconds"], h["val"]) for h in sidecar["history"] if "val" in h]


def reached(sidecar: dict, clock: dict | None = None) -> float:
    """Seconds until the model's best validation (the weights it keeps); an average of a model's weights is timed
    on that model's ``clock`` (its sidecar: the average is validated beside it)."""
    seconds = {h["epoch"]: h["seconds"] for h in (clock or sidecar)["history"]}
    return seconds[sidecar["best_epoch"]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--workers", type=int, default=2, help="K: ingredients, workers and DDP ranks")
    parser.add_argument("--epochs", type=int, default=10, help="per ingredient (the long and DDP models: K times)")
    parser.add_argument("--patience", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="keep the run here (default: a temporary folder)")
    parser.add_argument("--plot", default=None, help="write the two-panel wall-clock plot here (PNG)")
    args = parser.parse_args(argv)

    from ladle import api
    from ladle.store import RunDir

    k = args.workers
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ddp-wallclock-"))
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    config = {"dataset": args.dataset, "ingredients": k, "seed": args.seed, "baseline": "long+ddp",
              "model": {"name": "sage", "hidden": 128},
              "train": {"epochs": args.epochs, "patience": args.patience},
              "sampler": {"name": "neighbor", "fanouts": [10, 5], "batch_size": args.batch_size},
              "engine": {"name": "process", "workers": k, "threads": 1},
              "soups": {"methods": ["uniform", "greedy", "gis", "ensemble"]}}
    began = time.perf_counter()
    results = api.run(config, run, progress=False)
    total = time.perf_counter() - began
    rd = RunDir(run)
    ingredients = rd.ingredient_sidecars()
    baselines = {name: rd.load_checkpoint(spec)[1] for name, spec in
                 ((s.role, s) for s in rd.config().baseline_specs())}
    soups = rd.soup_sidecars()
    trained = max(s["seconds"] for s in ingredients)  # the K ingredients train at once, one per worker
    rows = []
    for s in ingredients:
        rows.append({"row": s["name"], "val": s["scores"]["val"], "test": s["scores"]["test"],
                     "wall_s": reached(s), "processes": 1})
    elapsed = trained
    for name in results["soups"]:
        elapsed += soups[name]["seconds"]  # soups run one after another, on the driver
        r = results["soups"][name]
        rows.append({"row": name, "val": r["val"], "test": r["test"], "wall_s": elapsed, "processes": k,
                     "worker_s": trained * k + elapsed - trained})  # K workers train; the driver alone soups
    for name, sidecar in baselines.items():
        r = results["baselines"][name]
        processes = sidecar.get("communication", {}).get("ranks", 1)
        wall = reached(sidecar, baselines.get(sidecar.get("average_of")))
        sent = {"communication": sidecar["communication"]} if "communication" in sidecar else {}
        rows.append({"row": name, "val": r["val"], "test": r["test"], "wall_s": wall, "processes": processes, **sent})
    for r in rows:
        r.setdefault("worker_s", r["wall_s"] * r["processes"])
        print(json.dumps(r), flush=True)

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        metric = results["dataset"].get("metric", "score")
        for panel, (ax, scale) in enumerate(zip(axes, ("wall", "worker"))):
            for s in ingredients:
                xs, ys = zip(*curve(s))
                ax.plot(xs, [100 * y for y in ys], color="tab:gray", alpha=0.6, lw=1,
                        label="ingredients (no communication)" if s is ingredients[0] else None)
            for name, colour in (("long", "tab:red"), ("ddp", "tab:blue")):
                sidecar = baselines[name]
                factor = 1 if scale == "wall" else sidecar.get("communication", {}).get("ranks", 1)
                xs, ys = zip(*curve(sidecar))
                label = {"long": "one model, K x budget", "ddp": f"DDP, {k} ranks all-reducing"}[name]
                ax.plot([x * factor for x in xs], [100 * y for y in ys], color=colour, lw=1.5, label=label)
            marks = iter([("*", "tab:green"), ("P", "tab:orange"), ("X", "tab:purple"), ("D", "tab:brown"),
                          ("s", "tab:olive"), ("^", "tab:cyan")])
            for r in rows:
                if r["row"] in results["soups"]:
                    x = r["wall_s"] if scale == "wall" else r["worker_s"]
                    marker, colour = next(marks)
                    what = "soup" if results["soups"][r["row"]]["is_soup"] else f"{k} models"
                    ax.scatter([x], [100 * r["val"]], marker=marker, color=colour, s=70, zorder=3,
                               label=f"{r['row']} ({what}, after the ingredients)")
            ax.set_xlabel("wall-clock seconds" if scale == "wall" else "worker-seconds (wall-clock x processes)")
            if panel == 0:
                ax.set_ylabel(f"validation {metric} (%)")
            ax.grid(alpha=0.3)
        axes[1].legend(fontsize=7, loc="lower right")
        fig.suptitle(f"{args.dataset}, GraphSAGE, K = {k} workers, {args.epochs} epochs per ingredient", fontsize=10)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)

    by = {r["row"]: r for r in rows}
    ddp = by["ddp"]
    fields = {"dataset": args.dataset, "k": k, "epochs": args.epochs,
              "best_ingredient_test": round(results["best_ingredient"]["test"], 4),
              "gis_val": round(by["gis"]["val"], 4), "gis_test": round(by["gis"]["test"], 4),
              "ensemble_test": round(by["ensemble"]["test"], 4),
              "ddp_val": round(ddp["val"], 4), "ddp_test": round(ddp["test"], 4),
              "long_val": round(by["long"]["val"], 4), "long_test": round(by["long"]["test"], 4),
              "long_swa_test": round(by["long-swa"]["test"], 4) if "long-swa" in by else None,
              "soup_wall_s": round(by["gis"]["wall_s"], 1), "ddp_wall_s": round(ddp["wall_s"], 1),
              "long_wall_s": round(by["long"]["wall_s"], 1),
              "ddp_vs_soup_wall": round(ddp["wall_s"] / by["gis"]["wall_s"], 3),
              "ddp_bytes_per_epoch": ddp["communication"]["allreduce_bytes_per_epoch"],
              "ddp_bytes": ddp["communication"]["allreduce_bytes"], "total_s": round(total, 1)}
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(" ".join(f"{key}={value}" for key, value in fields.items()))


if __name__ == "__main__":
    main()
