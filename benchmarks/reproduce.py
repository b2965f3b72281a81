"""Regenerate docs/RESULTS.md and its plots from scratch: every table headed by its command, machine and date.

Runs the other benchmark scripts one after another as subprocesses (the exact command lines are
written above their tables, so any one table can be rerun alone), then renders their records:

1. small real graphs: Cora and CiteSeer x GCN, GraphSAGE, GAT, GIN, every soup including the learned
   ones, mean ± std over 5 pipeline seeds, beside the published single-model figures
   (``accuracy.py``);
2. large synthetic graphs: sampled and partitioned ingredients and their soups, with training and soup
   times (``large_soups.py``);
3. parallel scaling (``scaling.py``) and the worker timeline;
4. soup speed: reference against fast GIS, learned and pls (``soup_speed.py``);
5. soup time against graph size (``soup_speed.py`` at several sizes);
6. soups against converged ingredients and equal compute (``payoff.py``);
7. full mode only: csbm-products end to end, with every stage's time and peak memory (``payoff.py --products``,
   about an hour).

    python benchmarks/reproduce.py --quick     # fewer epochs, smaller graphs: QUICK_DURATION below
    python benchmarks/reproduce.py             # the full figures: FULL_DURATION below (about 9 hours)
    python benchmarks/reproduce.py --quick --sections small,size   # some sections only
    python benchmarks/reproduce.py --resume    # reuse the sections an earlier (stopped) run finished

Raw records, run directories and each finished section go under --work (kept: ``--resume`` skips the
sections already done, and the small-graph sweep resumes where it stopped); the report and its PNGs
go to --out (docs/RESULTS.md for --quick, docs/full/RESULTS.md for the full mode) and the folder
beside it. The report's header gives the time of every section it holds and says which were reused.
The last line is key=value pairs.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SOUPS = "uniform,greedy,gis,learned,pls,ensemble"
LARGE_HARD = "signal=0.6,homophily=0.6"
# What the report says of the full mode's duration; its sections' measured times are in its headings.
# README.md and docs/RESULTS.md quote both verbatim (tests/test_reproduce.py checks that they agree).
FULL_DURATION = ("about 9 hours on 2 cores from scratch, not yet measured as one run: its first five sections took 208 "
                 "minutes on 2026-12-04 (the small-graph sweep 104, speed 66 (24 of them training its ingredients; 41 "
                 "when they are cached), large 30, size 4, scaling 3); the payoff plan and csbm-products, added since, "
                 "hold 5.7 and 1.0 hours of pipeline time in their records (several code versions, partly beside "
                 "other work)")
QUICK_DURATION = "under 20 minutes on 2 cores (10.9 on 2026-12-07, alone)"

# What each mode runs: the arguments of each script. ``smoke`` is for the test that keeps this script working.
MODES = {
    "full": {
        "small": ["--ingredients", "4", "--seeds", "5", "--soups", SOUPS],
        "large": ["--dataset", f"csbm-arxiv:{LARGE_HARD}", "--epochs", "4"],
        "scaling": [],
        "speed": ["--epochs", "2"],
        "size": {"nodes": [10_000, 40_000, 160_000], "args": ["--epochs", "2"]},
        "payoff": [],
        "products": ["--products", "--products-trunk", "2"],
    },
    "quick": {
        "small": ["--models", "gcn,gat", "--ingredients", "3", "--seeds", "5", "--epochs", "40", "--soups", SOUPS],
        "large": ["--dataset", f"csbm:nodes=20000,{LARGE_HARD}", "--epochs", "2"],
        "scaling": [],  # on a 20k-node graph fixed costs dominate and the ratios mean little
        "speed": ["--dataset", "csbm:nodes=20000", "--epochs", "2"],
        "size": {"nodes": [2_000, 8_000, 32_000], "args": ["--epochs", "2"]},
        "payoff": ["--quick"],
    },
    "smoke": {
        "small": ["--datasets", "Cora", "--models", "gcn", "--ingredients", "2", "--seeds", "2", "--epochs", "3",
                  "--soups", SOUPS],
        "large": ["--dataset", "csbm:nodes=600", "--epochs", "1"],
        "scaling": ["--dataset", "csbm:nodes=600", "--epochs", "1", "--no-ray"],
        "speed": ["--dataset", "csbm:nodes=600", "--epochs", "1", "--archs", "gcn,sage"],
        "size": {"nodes": [300, 600], "args": ["--epochs", "1"]},
        "payoff": ["--quick", "--only", "Cora gcn"],
    },
}
SECTIONS = ("small", "large", "scaling", "speed", "size", "payoff", "products")
FULL_ONLY = {"products"}  # csbm-products takes over an hour and most of the machine's memory: the full mode only
RESUMABLE = {"small", "payoff"}  # sections that keep their finished work when stopped (accuracy.py's records)
# Each mode's report has its own folder; their plots share docs/results/, named after the mode. docs/RESULTS.md
# is the index of the two reports.
DEFAULT_OUT = {"full": REPO / "docs" / "full" / "RESULTS.md", "quick": REPO / "docs" / "quick" / "RESULTS.md",
               "smoke": REPO / "runs" / "smoke" / "quick" / "RESULTS.md"}
INDEX = REPO / "docs" / "RESULTS.md"


# ---------------------------------------------------------------- running


def machine() -> dict:
    import torch
    import torch_geometric

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "summary": f"{cpu}, {os.cpu_count()} cores{memory}, {gpu}",
            "torch": torch.__version__, "pyg": torch_geometric.__version__, "python": platform.python_version(),
            "commit": commit or "unknown"}


def run_script(script: str, args: list[str], log: Path) -> dict:
    """Run one benchmark script; return its command, stdout lines, key=value figures and wall time."""
    command = [sys.executable, str(HERE / script), *args]
    shown = "python " + " ".join(shlex.quote(relative(a)) for a in [f"benchmarks/{script}", *args])
    print(f"$ {shown}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with open(log, "w") as err:
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    seconds = time.perf_counter() - start
    lines = done.stdout.splitlines()
    if done.returncode != 0:
        tail = log.read_text()[-2000:]
        raise SystemExit(f"{shown} failed (exit {done.returncode}); its stderr is in {log}:\n{tail}")
    return {"command": shown, "lines": lines, "figures": key_values(lines[-1] if lines else ""),
            "seconds": seconds, "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}


def relative(arg: str) -> str:
    """This machine's paths as a reader can type them: relative to the repository root."""
    for prefix, shown in ((f"{REPO}/", ""), (f"{REPO.parent}/", "../")):
        if arg.startswith(prefix):
            return shown + arg[len(prefix):]
    return arg


def key_values(line: str) -> dict:
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


# ---------------------------------------------------------------- sections


def small(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    jsonl = work / "accuracy.jsonl"
    ran = run_script("accuracy.py", [*mode["small"], "--workers", "2", "--root", mode["root"],
                                     "--jsonl", str(jsonl)], work / "small.log")
    sys.path.insert(0, str(HERE))
    import accuracy

    args = mode["small"]
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    wanted = {"ingredients": int(_arg(args, "--ingredients", 8)), "epochs": int(_arg(args, "--epochs", 0)),
              "soups": _arg(args, "--soups", accuracy.DEFAULT_SOUPS)}
    records = [r for r in records if all(r.get(k) == v for k, v in wanted.items())]
    table, figures = accuracy.summarise(records)
    plot_small(records, accuracy.row_names(records), plots / "small_soups.png")
    short = shortfalls(records, accuracy.row_names(records))
    epochs = f"{wanted['epochs']} epochs" if wanted["epochs"] else "each model's default epochs"
    text = [heading("Soups against the best single ingredient: Cora and CiteSeer", ran),
            f"Test accuracy (%), mean ± std over pipeline seeds {sorted({r['seed'] for r in records})}; each "
            f"pipeline trains {wanted['ingredients']} ingredients from one shared initialisation "
            f"({epochs}), full "
            "batch, and soups them. The best ingredient is the one with the highest validation accuracy; every "
            "choice uses validation only. `learned` and `pls` fit their mixing weights on the validation nodes, so "
            "their validation score is not a selection signal. Published single-model figures: Kipf & Welling "
            "(GCN), Veličković et al. (GAT).", "", table, "",
            f"![ingredients against soups]({link('small_soups.png')})", "",
            "Where a soup did **not** beat the best ingredient (test mean below the best ingredient's mean):", ""]
    text += [f"- {s}" for s in short] or ["- nowhere"]
    figures = {k: v for k, v in figures.items() if k.endswith(("_best_ingredient", "_gis"))}
    figures["small_shortfalls"] = len(short)
    return "\n".join(text), figures


def _arg(args: list[str], flag: str, default):
    return args[args.index(flag) + 1] if flag in args else default


def shortfalls(records: list[dict], rows: list[str]) -> list[str]:
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["model"]), []).append(r)
    for (dataset, model), group in sorted(groups.items()):
        best = statistics.fmean(100 * g["test"]["best ingredient"] for g in group)
        for row in rows[2:]:
            values = [100 * g["test"][row] for g in group if row in g["test"]]
            if values and statistics.fmean(values) < best:
                out.append(f"{dataset} {model}: {row} {statistics.fmean(values):.2f} < {best:.2f}")
    return out


def plot_small(records: list[dict], rows: list[str], path: Path) -> None:
    from ladle.plots import _pyplot, _save

    plt = _pyplot()
    datasets = sorted({r["dataset"] for r in records})
    models = sorted({r["model"] for r in records})
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4), squeeze=False)
    width = 0.8 / len(rows)
    for ax, dataset in zip(axes[0], datasets):
        for j, row in enumerate(rows):
            means, stds, xs = [], [], []
            for i, model in enumerate(models):
                values = [100 * r["test"][row] for r in records
                          if r["dataset"] == dataset and r["model"] == model and row in r["test"]]
                if values:
                    xs.append(i - 0.4 + (j + 0.5) * width)
                    means.append(statistics.fmean(values))
                    stds.append(statistics.stdev(values) if len(values) > 1 else 0.0)
            ax.errorbar(xs, means, yerr=stds, fmt="o", ms=4, capsize=2, label=row)
        ax.set_xticks(range(len(models)), models)
        ax.set_title(f"{dataset}: test accuracy (%), mean ± std over seeds")
    axes[0][0].legend(fontsize=7, ncol=2)
    _save(fig, path)
    plt.close(fig)


def large(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    out = work / "large"
    shutil.rmtree(out, ignore_errors=True)
    ran = run_script("large_soups.py", [*mode["large"], "--out", str(out)], work / "large.log")
    records = [json.loads(line) for line in (out / "large_soups.jsonl").read_text().splitlines()]
    lines = ["| recipe | row | val % | test % | seconds |", "|---|---|---|---|---|"]
    for r in records:
        for label, val, test, seconds in r["rows"]:
            what = "training (sum over ingredients)" if label == "best ingredient" else "soup"
            lines.append(f"| {r['recipe']} | {label} | {100 * val:.2f} | {100 * test:.2f} | {seconds:.1f} ({what}) |")
    worse = [f"{r['recipe']}: {label} {100 * test:.2f} < {100 * r['rows'][0][2]:.2f}"
             for r in records for label, _, test, _ in r["rows"][1:]
             if label != "ensemble" and test < r["rows"][0][2]]
    pictures = []
    for r in records:
        for png in ("ingredients_vs_soups.png", "gis_curves.png"):
            source = Path(r["run"]) / "plots" / png
            if source.exists():
                shutil.copyfile(source, plots / f"large_{r['recipe']}_{png}")
                name = f"large_{r['recipe']}_{png}"
                pictures.append(f"![{r['recipe']} {png[:-4]}]({link(name)})")
    dataset = records[0]["dataset"]
    text = [heading(f"Sampled and partitioned ingredients on a large synthetic graph ({dataset})", ran),
            f"4 GCN ingredients per recipe, {records[0]['epochs']} epochs each; the best ingredient is chosen on "
            "validation. `partition`: ingredient i trains full batch on METIS part i of 4 with its 1-hop halo; "
            "`mixed`: 1 neighbour + 1 ClusterGCN + 2 GraphSAINT-rw ingredients. Each run is a normal run "
            f"directory under `{out.relative_to(REPO) if out.is_relative_to(REPO) else out}`.", "", *lines, "",
            "Where a soup did **not** beat the best ingredient on test:", ""]
    text += [f"- {w}" for w in worse] or ["- nowhere"]
    text += ["", "GIS curves (validation score against α at each step) and ingredients against soups, per recipe:",
             "", *pictures]
    figures = {k: v for k, v in ran["figures"].items() if k.endswith(("_best_test", "_gis_test"))}
    return "\n".join(text), figures


def scaling(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    keep = work / "scaling"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    ran = run_script("scaling.py", [*mode["scaling"], "--keep", str(keep)], work / "scaling.log")
    from ladle.plots import plot_timeline

    pictures = []
    for label in ("process-2", "ray-2cpu"):
        timeline = keep / label / "timeline.jsonl"
        if timeline.exists():
            plot_timeline([json.loads(x) for x in timeline.read_text().splitlines()], plots / f"timeline_{label}.png")
            pictures.append(f"![worker timeline, {label}]({link(f'timeline_{label}.png')})")
    f = ran["figures"]
    targets = {"speedup": ("≥ 1.8", lambda v: v >= 1.8), "memory_ratio": ("≤ 1.3", lambda v: v <= 1.3),
               "ray_vs_process": ("≤ 1.15", lambda v: v <= 1.15)}
    lines = ["| figure | value | target | met |", "|---|---|---|---|"]
    for key, value in f.items():
        target, check = targets.get(key, ("", None))
        met = ("yes" if check(float(value)) else "**no**") if check else ""
        lines.append(f"| {key} | {value} | {target} | {met} |")
    text = [heading("Parallel scaling: 4 GraphSAGE ingredients, 1 and 2 workers, Ray", ran),
            "Wall time with 1 and 2 local worker processes and on Ray with 2 CPUs, one torch thread per worker; "
            "memory is the peak summed PSS of the process tree; weights compared bit for bit.", "", *lines, "",
            "```", *ran["lines"][:-1], "```", "", *pictures]
    return "\n".join(text), {k: f[k] for k in ("speedup", "memory_ratio", "ray_vs_process", "identical") if k in f}


def speed(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    ran = run_script("soup_speed.py", [*mode["speed"], "--cache", str(work / "soup_speed")], work / "speed.log")
    rows = [line.split() for line in ran["lines"][2:-1]]
    lines = ["| arch | soup | seconds | peak MB | val % | test % |", "|---|---|---|---|---|---|"]
    for row in rows:
        note = " (fitted on val)" if "fitted" in " ".join(row) else ""
        lines.append(f"| {row[0]} | {row[1]}{note} | {row[2]} | {row[3]} | {100 * float(row[4]):.2f} | "
                     f"{100 * float(row[5]):.2f} |")
    f = ran["figures"]
    text = [heading("Soup speed: reference against fast GIS, and the learned soups", ran),
            ran["lines"][0] + ". Reference and fast GIS run side by side in one process; `identical` says whether "
            "they chose the same α at every step and the same soup weights. Targets: 10× for GCN and GraphSAGE, "
            "3× for GAT; `pls` peak memory below `learned`'s.", "", *lines, "",
            "| " + " | ".join(f) + " |", "|---" * len(f) + "|", "| " + " | ".join(f.values()) + " |"]
    return "\n".join(text), {k: v for k, v in f.items() if k.startswith("speedup") or k == "identical"}


def size(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    points, commands, seconds = [], [], 0.0
    for nodes in mode["size"]["nodes"]:
        ran = run_script("soup_speed.py", ["--dataset", f"csbm:nodes={nodes}", "--archs", "gcn", "--ingredients", "4",
                                           "--granularity", "10", "--no-learned", *mode["size"]["args"],
                                           "--cache", str(work / "soup_size")], work / f"size-{nodes}.log")
        f = ran["figures"]
        points.append((int(f["nodes"]), int(f["edges"]), float(f["gcn_ref_s"]), float(f["gcn_fast_s"])))
        commands.append(ran["command"])
        seconds += ran["seconds"]
    plot_size(points, plots / "soup_time_vs_size.png")
    lines = ["| nodes | directed edges | reference GIS s | fast GIS s | speedup |", "|---|---|---|---|---|"]
    lines += [f"| {n:,} | {e:,} | {r:.2f} | {fa:.2f} | {r / fa:.1f} |" for n, e, r, fa in points]
    ran = {"command": "\n".join(commands), "seconds": seconds, "date": ran["date"]}
    text = [heading("Soup time against graph size", ran),
            "GIS over 4 GCN ingredients (3 layers, 128 hidden, granularity 10) on csbm graphs of growing size, "
            "reference (full forward per α) and fast path, side by side.", "", *lines, "",
            f"![soup time against graph size]({link('soup_time_vs_size.png')})"]
    return "\n".join(text), {"size_speedup_largest": round(points[-1][2] / points[-1][3], 2)}


def plot_size(points: list[tuple], path: Path) -> None:
    from ladle.plots import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    nodes = [p[0] for p in points]
    ax.plot(nodes, [p[2] for p in points], marker="o", label="reference GIS")
    ax.plot(nodes, [p[3] for p in points], marker="o", label="fast GIS")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("seconds")
    ax.set_title("GIS time against graph size (4 GCN ingredients)")
    ax.legend()
    _save(fig, path)
    plt.close(fig)


def payoff(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    ran = run_script("payoff.py", [*mode["payoff"], "--root", mode["root"], "--records", str(work / "payoff.jsonl"),
                                   "--work", str(work / "payoff")], work / "payoff.log")
    table = [line for line in ran["lines"] if line.startswith("|")]
    body = [heading("Soups against converged ingredients and equal compute", ran), "",
            "K = 4 ingredients trained to convergence (early stopping on validation within an epoch cap), with no "
            "trunk and with a shared trunk of E epochs, against the best ingredient (by validation), one model "
            "given K times the budget from the same start, that model's weights averaged over its epochs (its "
            "SWA), and the ensemble; test, mean ± std over seeds, in "
            "points of each graph's metric; ↓ marks a row below the best ingredient. Seconds are per pipeline.",
            "", *table]
    return "\n".join(body), {f"payoff_{k}": v for k, v in ran["figures"].items() if k != "minutes"}


def products(mode: dict, work: Path, plots: Path) -> tuple[str, dict]:
    records = work / "products.jsonl"
    ran = run_script("payoff.py", [*mode["products"], "--records", str(records), "--work", str(work / "products")],
                     work / "products.log")
    record = json.loads(records.read_text().splitlines()[-1])
    rows = [("best ingredient", "best"), ("single model, 4x budget", "long"),
            ("its SWA (its weights averaged over its epochs)", "long_swa"), ("uniform", "uniform"),
            ("greedy", "greedy"), ("GIS", "gis"), ("learned (fit on val)", "learned"),
            ("partition learned (fit on val)", "pls"), ("ensemble (4 models)", "ensemble")]
    table = ["| row | val | test | test − best ingredient |", "|---|---|---|---|"]
    for label, key in rows:
        if key in record:
            gain = "" if key == "best" else f"{100 * (record[key] - record['best']):+.2f}"
            table.append(f"| {label} | {100 * record[key + '_val']:.2f} | {100 * record[key]:.2f} | {gain} |")
    stages = ["| stage | seconds | peak memory (MB) |", "|---|---|---|"]
    peaks = record.get("peak_mb", {})
    for stage, seconds in record["seconds"].items():
        # One monitor covers the trunk and the ingredients (api.train runs both), so its peak goes on one row.
        peak = peaks.get({"training": "train"}.get(stage, stage), "")
        if stage == "trunk":
            peak = "in the training row's"
        elif stage == "training" and record.get("resumed"):
            peak = "not recorded (a resumed run: its models were trained by an earlier attempt)"
        elif stage == "training" and peak != "":
            peak = f"{peak} (trunk and training)"
        stages.append(f"| {stage} | {seconds:.0f} | {peak} |")
    body = [heading("csbm-products end to end: 4 GraphSAGE ingredients, every soup, within 24 GiB", ran), "",
            "2.45 M nodes, neighbour-sampled GraphSAGE 2 × 128 from a 2-epoch trunk, early stopping within the epoch "
            "caps below; METIS for the partition learned soup is a stage of its own (cached on disk). Test at the "
            f"best validation, 1 seed. Epochs reached: ingredients {record['epochs_ingredients']} (cap "
            f"{record['epoch_cap']}), long model {record['epochs_long']}. Soups' seconds: "
            + ", ".join(f"{k} {v}" for k, v in record.get("soup_seconds", {}).items()) + ".", "", *table, "",
            *stages]
    return "\n".join(body), {f"products_{k}": v for k, v in ran["figures"].items() if k != "minutes"}


def link(png: str) -> str:
    """A plot's link from the report: every mode's plots share docs/results/, each named after its mode."""
    return f"../results/{MACHINE['mode']}_{png}"


def heading(title: str, ran: dict) -> str:
    command = ran["command"]
    return (f"## {title}\n\n```\n{command}\n```\n\n"
            f"Ran {ran['date']}, {ran['seconds'] / 60:.1f} min, on {MACHINE['summary']}, commit {MACHINE['commit']}.\n")


# ---------------------------------------------------------------- finished sections

# A full run takes hours on 2 cores, so each finished section is kept under --work and ``--resume`` reuses it
# instead of running it again: a stopped run loses at most the section it was in.


def run_section(section: str, mode: dict, work: Path, plots: Path, resume: bool) -> dict:
    """Run one section, or reuse its saved record; either way its plots end up in ``plots``."""
    saved, staged = work / "sections" / f"{section}.json", work / "sections" / section
    if resume and saved.exists():
        record = json.loads(saved.read_text())
        print(f"reusing the {section} section of {record['date']} (commit {record['commit']}) from {saved}",
              file=sys.stderr)
        record["reused"] = True
    else:
        from ladle.files import atomic_write

        # The small-graph sweep keeps its finished records when stopped, so with --resume the time its stopped
        # attempts spent counts towards the section (the record in flight when stopped is counted twice).
        stopped = work / "sections" / f"{section}.stopped.json"
        before = json.loads(stopped.read_text()) if resume and section in RESUMABLE and stopped.exists() else []
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        start = time.perf_counter()
        try:
            body, figures = globals()[section](mode, work, staged)
        except BaseException:  # Ctrl-C, SIGTERM (made SystemExit in main) or a failed script
            atomic_write(stopped, json.dumps(before + [time.perf_counter() - start]).encode())
            raise
        record = {"section": section, "body": body, "figures": figures,
                  "seconds": time.perf_counter() - start + sum(before), "attempts": len(before) + 1,
                  "stopped_seconds": sum(before),
                  "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                  "commit": MACHINE["commit"]}
        atomic_write(saved, json.dumps(record).encode())
        stopped.unlink(missing_ok=True)
        record["reused"] = False
    for png in sorted(staged.glob("*.png")):
        shutil.copyfile(png, plots / f"{MACHINE['mode']}_{png.name}")
    return record


def section_text(record: dict) -> str:
    """A section's body; a resumed one says what its stopped attempts added to the time under its heading."""
    stopped = record.get("stopped_seconds", 0.0)  # 0 when it ran in one attempt
    if not stopped:
        return record["body"]
    before = record["attempts"] - 1
    return (record["body"] + f"\n\nThis section was resumed after {before} stopped attempt{'s' * (before > 1)}: "
            f"the time above is its last attempt; with the {stopped / 60:.1f} min before it, "
            f"{record['seconds'] / 60:.1f} min in all.")


def duration_line(name: str, records: list[dict], minutes: float) -> str:
    """How long the report took to make (``minutes``, the sum of its sections), and which came from earlier runs."""
    reused = [f"{r['section']} ({r['date']}, commit {r['commit']})" for r in records if r["reused"]]
    resumed = [f"{r['section']} ({r['attempts']} attempts)" for r in records if r.get("attempts", 1) > 1]
    line = f"The {name} mode took {minutes:.1f} minutes in all, the sum of its sections' times"
    line += f"; reused from earlier runs with `--resume`: {', '.join(reused)}" if reused else ""
    line += f"; resumed after a stop, their attempts' times added: {', '.join(resumed)}" if resumed else ""
    return line + "."


# ---------------------------------------------------------------- main

MACHINE: dict = {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller graphs and fewer epochs: under 20 minutes")
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tiny inputs, for the test
    parser.add_argument("--sections", default="", help=f"comma-separated from {', '.join(SECTIONS)} (default: all; "
                        f"{', '.join(sorted(FULL_ONLY))} only in the full mode)")
    parser.add_argument("--out", help="the report (default docs/RESULTS.md; docs/full/RESULTS.md in full mode)")
    parser.add_argument("--work", default=str(REPO / "runs" / "reproduce"))
    parser.add_argument("--resume", action="store_true",
                        help="reuse the sections a stopped or earlier run of this mode finished under --work")
    parser.add_argument("--root", default=str(REPO.parent / "shared" / "data" / "planetoid"),
                        help="folder holding Cora/ and CiteSeer/ raw files")
    args = parser.parse_args(argv)
    name = "smoke" if args.smoke else "quick" if args.quick else "full"
    asked = {s.strip() for s in args.sections.split(",") if s.strip()} or (
        set(SECTIONS) if name == "full" else set(SECTIONS) - FULL_ONLY)
    unknown = sorted(asked - set(SECTIONS))
    sections = [s for s in SECTIONS if s in asked]  # the report's order, whatever the order asked
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    mode, work = {**MODES[name], "root": args.root}, Path(args.work).resolve() / name
    out = Path(args.out or DEFAULT_OUT[name]).resolve()
    plots = out.parent.parent / "results"
    work.mkdir(parents=True, exist_ok=True)
    plots.mkdir(parents=True, exist_ok=True)
    MACHINE.update(machine(), mode=name)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so a stopped section records its time
    records = [run_section(section, mode, work, plots, args.resume) for section in sections]
    figures = {k: v for r in records for k, v in r["figures"].items()}
    minutes = sum(r["seconds"] for r in records) / 60
    flag = {"full": "", "quick": " --quick", "smoke": " --smoke"}[name]
    header = [
        "# Results", "",
        f"Generated by `python benchmarks/reproduce.py{flag}` on {datetime.date.today().isoformat()}, "
        f"commit {MACHINE['commit']}. {duration_line(name, records, minutes)}", "",
        f"Machine: {MACHINE['summary']}; Python {MACHINE['python']}, torch {MACHINE['torch']}, "
        f"PyG {MACHINE['pyg']}. Machines are noisy: compare the ratios measured side by side in one run, not "
        "absolute times across machines. Accuracies are exact for the given seeds on CPU.", "",
        "Quick mode uses fewer epochs and smaller graphs than the full mode; `python benchmarks/reproduce.py` "
        f"({FULL_DURATION}) regenerates the full figures. Each table can be rerun alone with the command above it.",
        ""]
    from ladle.files import atomic_write

    atomic_write(out, ("\n".join(header + ["\n\n".join(section_text(r) for r in records)]) + "\n").encode())
    print(f"wrote {out}", file=sys.stderr)
    if out == DEFAULT_OUT.get(name, None) and name != "smoke":
        write_index()
    figures.update({"mode": name, "minutes": round(minutes, 1)})
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


def write_index() -> None:
    """docs/RESULTS.md: the two reports, when each was made, and the measurements made outside them."""
    from answer import table
    from ladle.files import atomic_write

    answer, _ = table()
    lines = ["# Results", "", "## Does it pay, and when?", "",
             "`python benchmarks/answer.py` (from the committed payoff records; it trains nothing): each kind of graph's "
             "pipelines pooled, test accuracy (ROC-AUC for tolokers) in points. The row to use is the one with the "
             "highest validation gain over the best ingredient, pipeline by pipeline (never chosen on test); its test "
             "gain is given with its spread over pipelines. A soup is one model at inference, the ensemble K.", "",
             *answer, "",
             "In words: on small full-batch graphs nothing beats the best ingredient by more than the noise; on the "
             "large CSBM graphs (even degrees, one shared covariance) the soups beat the best ingredient, the "
             "ensemble more, and one model trained K "
             "times as long, its weights averaged over its epochs (its SWA), more still; on the degree-corrected "
             "synthetic graphs (power-law degrees, calibrated against the strongest single model) the soups pay only "
             "from a shared trunk (GIS +2.2 on dcsbm-arxiv, level with that model's SWA; +3.3 on dcsbm-products, "
             "0.7 above it) and not at all without one; where each "
             "ingredient sees "
             "only its own part of the graph, the soups barely beat the best ingredient, and one model on the whole "
             "graph (its SWA, or DDP across the workers) is far ahead. Souping pays where neither of those can run. "
             "Every cell, where a soup loses included, is in the reports below and in "
             "[benchmarks/RESULTS.md](../benchmarks/RESULTS.md).", "",
             "## The reports", "",
             "Every figure comes from a script in `benchmarks/`, headed by its command, machine and "
             "date. `python benchmarks/reproduce.py` regenerates these reports (and this index):", ""]
    for name, what in (("quick", f"fewer epochs and smaller graphs, {QUICK_DURATION}"),
                       ("full", f"the full settings, {FULL_DURATION}")):
        report = DEFAULT_OUT[name]
        made = report.read_text().split("\n")[2] if report.exists() else "not generated yet"
        lines.append(f"- [{name}]({name}/RESULTS.md) (`reproduce.py{' --quick' if name == 'quick' else ''}`: {what}). "
                     + made.split(". ")[0].replace("Generated by", "Made by").rstrip(".") + ".")
    lines += ["", "## Appendices", "",
              "Measured by scripts that reproduce.py does not run (a GPU, a disk filled on purpose, long soaks, "
              "graphs larger than memory, the partition cells and DDP, the DGL peer), one section per benchmark in "
              "[benchmarks/RESULTS.md](../benchmarks/RESULTS.md), each with its command, date, commit and records:", ""]
    appendix = HERE / "RESULTS.md"
    for line in appendix.read_text().splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")  # GitHub's heading anchors
            lines.append(f"- [{title}](../benchmarks/RESULTS.md#{anchor})")
    lines.append("")
    peer = sorted((HERE / "results").glob("peer*.md"))  # benchmarks/peer.py's tables: it needs the peer's environment
    if peer:
        lines += ["## ladle beside the DGL-based peer (Enhanced Soups), `benchmarks/peer.py`", "",
                  "The peer's code, unmodified, in its own environment (torch 2.2.1, DGL 2.1.0), and ladle, on the same "
                  "npz graphs and the same model, run by run alternately on one machine. Peer/ladle time ratios above "
                  "1 (and ladle/peer rates above 1) mean ladle is faster.", ""]
        for table in peer:
            lines += [table.read_text().strip(), ""]
    atomic_write(INDEX, "\n".join(lines).encode())


if __name__ == "__main__":
    sys.exit(main())
