"""What does communication-free training save, and lose, against data-parallel training on the same K workers?

One ``ladle run`` with ``--baseline long+ddp`` and K local workers (one torch thread each, one core each on this
machine): the K ingredients train in parallel with no communication and are souped; the long model (one process, K
times an ingredient's epochs) shares the cores with them; then the DDP model (K ranks, the same K-times budget,
gradients all-reduced every step by PyTorch DDP over gloo) trains alone. Every model's validation curve comes from
its sidecar's history (seconds since its own start), so each row's wall-clock to its final validation score is read,
not modelled, and the bytes DDP all-reduced are what its communication hook counted.

``--from-run RUN`` trains nothing: it reads a finished run (a payoff partition cell's, say, where K ingredients
shared fewer cores than K) and ``--baselines RUN`` names the run that holds its long model and DDP when another
cut's pipeline trained them. Two soup clocks are then given, never one for the other: ``wall_s``, the time at K
workers (the slowest ingredient's own seconds, as measured here, plus the soups: it assumes each ingredient gets a
worker as fast as the one it had here), and ``wall_here_s``, the ingredients' measured span on this machine's
workers (first start to last finish) plus the soups. The baselines' clocks are as measured: a DDP of more ranks than
this machine has cores shared the cores, which the row's ``cores`` says (and its worker-seconds count those cores).

Rows: each ingredient, the soups (after the ingredients plus each soup's own time; soups run one after another),
the ensemble, the long model and its SWA, DDP. The plot (``--plot``) has two panels: validation score against
wall-clock seconds, and against worker-seconds (wall-clock x the workers a row held); each row's test score is a
hollow mark at its end.

    python benchmarks/ddp_wallclock.py                       # csbm-arxiv, K = 2, 10 epochs per ingredient
    python benchmarks/ddp_wallclock.py --dataset csbm --epochs 3    # a quick look
    python benchmarks/ddp_wallclock.py --from-run W/metis-K4 --baselines W/random-K4 --plot metis.png

The last line is key=value pairs: ``gis_val gis_test ddp_val ddp_test long_val long_test soup_wall_s ddp_wall_s
long_wall_s ddp_vs_soup_wall ddp_reaches_gis_s ddp_reaches_ensemble_s ddp_bytes_per_epoch ...`` (``ddp_reaches_X_s``:
when DDP's validation first matched row X's, None if never).
"""
from __future__ import annotations

import argparse
import json
import os
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


def first_reaching(sidecar: dict, score: float) -> float | None:
    """Seconds until the model's validation first reaches ``score`` (None: never)."""
    return next((t for t, v in curve(sidecar) if v >= score), None)


def collect(run: Path, baselines_run: Path | None = None, cores: int | None = None) -> dict:
    """Every row of a finished run, with its clocks: ``{"rows", "ingredients", "baselines", "results", "k"}``.

    Args:
        run: the run directory whose ingredients and soups are read.
        baselines_run: the run directory holding the long model, its SWA and DDP (default: ``run``).
        cores: this machine's cores the run's workers had (default: ``os.cpu_count()``); a baseline of more
            processes than cores shared them.
    """
    from ladle.files import read_json
    from ladle.store import RunDir

    cores = cores or os.cpu_count() or 1
    rd, held_by = RunDir(run), RunDir(baselines_run or run)
    results = read_json(rd.path / "results.json", root=rd.path)
    held = read_json(held_by.path / "results.json", root=held_by.path)["baselines"]
    ingredients, soups = rd.ingredient_sidecars(), rd.soup_sidecars()
    k = len(ingredients)
    spans = [t for t in rd.timeline() if t["name"].startswith("ingredient-")]
    here = max(t["finished"] for t in spans) - min(t["started"] for t in spans)
    slowest = max(s["seconds"] for s in ingredients)
    rows = [{"row": s["name"], "val": s["scores"]["val"], "test": s["scores"]["test"], "wall_s": reached(s),
             "processes": 1, "worker_s": reached(s)} for s in ingredients]
    at_k, on_here = slowest, here
    for name, r in results["soups"].items():
        spent = soups[name]["seconds"]
        at_k, on_here = at_k + spent, on_here + spent  # soups run one after another, on the driver
        rows.append({"row": name, "val": r["val"], "test": r["test"], "wall_s": at_k, "wall_here_s": on_here,
                     "processes": k, "worker_s": slowest * k + at_k - slowest})  # K workers held; the driver soups
    baselines = {name: read_json(held_by.path / "baselines" / f"{name}.json", root=held_by.path, what="sidecar")
                 for name in held}
    for name, sidecar in baselines.items():
        processes = sidecar.get("communication", {}).get("ranks", 1)
        wall = reached(sidecar, baselines.get(sidecar.get("average_of")))
        sent = {"communication": sidecar["communication"]} if "communication" in sidecar else {}
        rows.append({"row": name, "val": held[name]["val"], "test": held[name]["test"], "wall_s": wall,
                     "processes": processes, "cores": min(processes, cores), "worker_s": wall * min(processes, cores),
                     **sent})
    return {"rows": rows, "ingredients": ingredients, "baselines": baselines, "results": results, "k": k}


LABELS = {"long": "one model, K x budget", "long-swa": "its SWA", "ddp": "DDP, {k} ranks all-reducing"}


def draw(found: dict, title: str):
    """The two-panel figure: validation (lines, filled marks) and test (hollow marks) against wall-clock seconds
    and against worker-seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, results, baselines = found["k"], found["results"], found["baselines"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    metric = results["dataset"].get("metric", "score")
    for panel, (ax, scale) in enumerate(zip(axes, ("wall", "worker"))):
        for s in found["ingredients"]:
            xs, ys = zip(*curve(s))
            ax.plot(xs, [100 * y for y in ys], color="tab:gray", alpha=0.6, lw=1,
                    label="ingredients (no communication)" if s is found["ingredients"][0] else None)
        for name, colour in (("long", "tab:red"), ("ddp", "tab:blue")):
            if name not in baselines:
                continue
            sidecar = baselines[name]
            factor = 1 if scale == "wall" else next(r["cores"] for r in found["rows"] if r["row"] == name)
            xs, ys = zip(*curve(sidecar))
            ax.plot([x * factor for x in xs], [100 * y for y in ys], color=colour, lw=1.5,
                    label=LABELS[name].format(k=sidecar.get("communication", {}).get("ranks", k)))
        marks = iter([("*", "tab:green"), ("P", "tab:orange"), ("X", "tab:purple"), ("D", "tab:brown"),
                      ("s", "tab:olive"), ("^", "tab:cyan"), ("v", "tab:pink"), ("h", "black")])
        for r in found["rows"]:
            if r["row"].startswith("ingredient-"):
                continue
            x = r["wall_s"] if scale == "wall" else r["worker_s"]
            marker, colour = next(marks)
            if r["row"] in results["soups"]:
                what = "soup" if results["soups"][r["row"]]["is_soup"] else f"{k} models"
                label = f"{r['row']} ({what}, after the ingredients)"
            else:
                label = f"{LABELS.get(r['row'], r['row']).format(k=r['processes'])}, its kept weights"
            ax.scatter([x], [100 * r["val"]], marker=marker, color=colour, s=70, zorder=3, label=label)
            ax.scatter([x], [100 * r["test"]], marker=marker, facecolors="none", edgecolors=colour, s=70, zorder=3)
        ax.set_xlabel("wall-clock seconds" if scale == "wall" else "worker-seconds (wall-clock x workers held)")
        if panel == 0:
            ax.set_ylabel(f"{metric} (%): validation (filled), test (hollow)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _train(args, work: Path) -> Path:
    from ladle import api

    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    config = {"dataset": args.dataset, "ingredients": args.workers, "seed": args.seed, "baseline": "long+ddp",
              "model": {"name": "sage", "hidden": 128},
              "train": {"epochs": args.epochs, "patience": args.patience},
              "sampler": {"name": "neighbor", "fanouts": [10, 5], "batch_size": args.batch_size},
              "engine": {"name": "process", "workers": args.workers, "threads": 1},
              "soups": {"methods": ["uniform", "greedy", "gis", "ensemble"]}}
    api.run(config, run, progress=False)
    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--workers", type=int, default=2, help="K: ingredients, workers and DDP ranks")
    parser.add_argument("--epochs", type=int, default=10, help="per ingredient (the long and DDP models: K times)")
    parser.add_argument("--patience", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=None, help="keep the run here (default: a temporary folder)")
    parser.add_argument("--from-run", default=None, metavar="RUN", help="read this finished run, train nothing")
    parser.add_argument("--baselines", default=None, metavar="RUN",
                        help="with --from-run: the run holding the long model and DDP (default: the same run)")
    parser.add_argument("--cores", type=int, default=None, help="the cores the run had (default: this machine's)")
    parser.add_argument("--plot", default=None, help="write the two-panel wall-clock plot here (PNG)")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    work = None
    if args.from_run:
        run = Path(args.from_run)
    else:
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ddp-wallclock-"))
        run = _train(args, work)
    found = collect(run, Path(args.baselines) if args.baselines else None, args.cores)
    total = time.perf_counter() - began
    rows, k, results = found["rows"], found["k"], found["results"]
    for r in rows:
        print(json.dumps(r), flush=True)
    dataset = results["dataset"].get("name", args.dataset)
    if args.plot:
        cut = results["config"].get("partition") or {}
        part = f", {cut['method']} parts" + (" with halo" if cut.get("halo") else "") if cut.get("method") else ""
        epochs = results["config"]["train"]["epochs"]
        found_fig = draw(found, f"{dataset}, GraphSAGE, K = {k} ingredients{part}, at most {epochs} epochs each")
        found_fig.savefig(args.plot, dpi=120)

    by = {r["row"]: r for r in rows}
    ddp, gis = by.get("ddp"), by.get("gis")
    fields = {"dataset": dataset, "k": k, "epochs": results["config"]["train"]["epochs"],
              "best_ingredient_test": round(results["best_ingredient"]["test"], 4)}
    if gis:
        fields.update(gis_val=round(gis["val"], 4), gis_test=round(gis["test"], 4))
    if "ensemble" in by:
        fields["ensemble_test"] = round(by["ensemble"]["test"], 4)
    if ddp:
        fields.update(ddp_val=round(ddp["val"], 4), ddp_test=round(ddp["test"], 4))
    if "long" in by:
        fields.update(long_val=round(by["long"]["val"], 4), long_test=round(by["long"]["test"], 4))
    fields["long_swa_test"] = round(by["long-swa"]["test"], 4) if "long-swa" in by else None
    if gis:
        fields.update(soup_wall_s=round(gis["wall_s"], 1), soup_wall_here_s=round(gis["wall_here_s"], 1))
    if ddp:
        fields["ddp_wall_s"] = round(ddp["wall_s"], 1)
        fields["ddp_cores"] = ddp["cores"]
    if "long" in by:
        fields["long_wall_s"] = round(by["long"]["wall_s"], 1)
    if ddp and gis:
        fields["ddp_vs_soup_wall"] = round(ddp["wall_s"] / gis["wall_s"], 3)
    for name in ("gis", "ensemble"):  # when the communicating model first matches the row's validation score
        if ddp and name in by:
            reach = first_reaching(found["baselines"]["ddp"], by[name]["val"])
            fields[f"ddp_reaches_{name}_s"] = None if reach is None else round(reach, 1)
    if ddp:
        fields.update(ddp_bytes_per_epoch=ddp["communication"]["allreduce_bytes_per_epoch"],
                      ddp_bytes=ddp["communication"]["allreduce_bytes"])
    fields["total_s"] = round(total, 1)
    if work is not None and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(" ".join(f"{key}={value}" for key, value in fields.items()))


if __name__ == "__main__":
    main()
