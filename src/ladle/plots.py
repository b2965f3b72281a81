"""PNG plots of a run: ingredients against soups, GIS's validation score against α per step, the worker timeline."""
from __future__ import annotations

import io
from pathlib import Path

from ladle.files import atomic_write
from ladle.sampling import DEFAULT_SAMPLER


def _pyplot():
    # start-up: matplotlib loads when a plot is drawn, its Agg backend chosen first
    import matplotlib

    matplotlib.use("Agg")
    # start-up: matplotlib loads when a plot is drawn, its Agg backend chosen first
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, root: Path | None = None) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    _pyplot().close(fig)
    atomic_write(path, buffer.getvalue(), root=root)


METRIC_NAMES = {"acc": "accuracy", "rocauc": "ROC-AUC", "f1": "F1"}


def metric_label(results: dict, split: str) -> str:
    """``validation accuracy (%)``: the split, the metric's name and the unit the table uses."""
    metric = results["dataset"].get("metric", "")
    return f"{'validation' if split == 'val' else split} {METRIC_NAMES.get(metric, metric or 'score')} (%)"


def _recipe(ingredient: dict) -> str:
    sampler = (ingredient.get("sampler") or {}).get("name", DEFAULT_SAMPLER)
    part = (ingredient.get("partition") or {}).get("part")
    return sampler + ("" if part is None else f", part {part}")


def plot_scores(results: dict, path: Path, root: Path | None = None) -> None:
    _save(scores_figure(results), path, root)


def scores_figure(results: dict):
    """Validation and test score (in percent, as the table) of each ingredient, soup, the ensemble and each
    baseline: points on an axis that starts where the scores are (no bar whose height the cut would exaggerate);
    ingredients one per column, labelled by their recipe; every series in the legend."""
    plt = _pyplot()
    ingredients, soups = results["ingredients"], results["soups"]
    many = len(ingredients) > 16  # then one column of ingredients, their spread visible
    labels = ([f"ingredients ({len(ingredients)})"] if many else
              [f"{r['name'].removeprefix('ingredient-')} {_recipe(r)}" for r in ingredients])
    names = list(soups)
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 0.55 * (len(labels) + len(names)) * 2), 4.2), sharey=True)
    for ax, split in zip(axes, ("val", "test")):
        xs = [0] * len(ingredients) if many else list(range(len(ingredients)))
        ax.scatter(xs, [100 * r[split] for r in ingredients], color="grey", zorder=3, label="ingredient")
        first = len(labels)
        for i, name in enumerate(names):
            soup = soups[name]
            ax.scatter([first + i], [100 * soup[split]], zorder=4, s=60,
                       marker="D" if soup["is_soup"] else "s", color="tab:blue" if soup["is_soup"] else "tab:orange",
                       label="soup (one model)" if soup["is_soup"] else f"{name} (K models, not a soup)")
        ax.axhline(100 * results["best_ingredient"][split], color="black", ls="--", lw=1,
                   label="best ingredient (by val)")
        for (name, b), colour in zip(results.get("baselines", {}).items(), ("tab:red", "tab:purple", "tab:green")):
            what = f"its weights' {b['average'].upper()}" if b.get("average") else "K× budget"
            ax.axhline(100 * b[split], color=colour, ls=":", lw=1.5, label=f"{name} ({what})")
        ax.set_xticks(range(first + len(names)), labels + names, rotation=35, ha="right", fontsize=8)
        ax.axvline(first - 0.5, color="lightgrey", lw=0.8)
        ax.set_ylabel(metric_label(results, split))
        ax.grid(axis="y", alpha=0.3)
    handles = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 4), fontsize=8,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"{results['dataset']['name']} · {results['model']}: ingredients, soups and references")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig


def plot_gis_curves(gis_sidecar: dict, path: Path, root: Path | None = None, metric: str = "") -> None:
    _save(gis_figure(gis_sidecar, metric), path, root)


def gis_figure(gis_sidecar: dict, metric: str = ""):
    """One curve per GIS step: the validation score of α·soup + (1−α)·ingredient, the chosen α marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    for step, entry in enumerate(gis_sidecar["trace"][1:], start=1):
        ax.plot(entry["alphas"], [100 * v for v in entry["scores"]], marker=".",
                label=f"step {step}: {entry['ingredient']}")
        ax.scatter([entry["alpha"]], [100 * entry["score"]], color="black", zorder=3, s=14)
    ax.scatter([], [], color="black", s=14, label="chosen α")
    ax.set_xlabel("α, the weight of the soup so far (α = 0: the ingredient alone)")
    ax.set_ylabel(f"validation {METRIC_NAMES.get(metric, metric or 'score')} (%)")
    ax.set_title("GIS: each ingredient mixed into the soup so far")
    ax.grid(alpha=0.3)
    fig.text(0.01, -0.04, "α = 1 keeps the soup as it was: that ingredient is left out (ties go to the larger α).",
             fontsize=8)
    ax.legend(fontsize=7)
    return fig


def plot_timeline(timeline: list[dict], path: Path, root: Path | None = None) -> None:
    _save(timeline_figure(timeline), path, root)


def timeline_figure(timeline: list[dict]):
    """One row per model, in the order they started: when it trained, on which worker (the colour), with a second
    try hatched; where a run was stopped and resumed, the gap is shaded and the resume marked."""
    plt = _pyplot()
    # start-up: matplotlib loads when a plot is drawn, its Agg backend chosen first
    from matplotlib.patches import Patch

    entries = sorted(timeline, key=lambda t: t["started"])
    origin = entries[0]["started"]
    slot = {t["worker"]: t["worker"].split(" (")[0] for t in entries}  # process-1 (pid 123): a fresh pid per model
    workers = sorted(set(slot.values()))
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.32 * len(entries)))
    for row, t in enumerate(entries):
        attempts = t.get("attempts") if isinstance(t.get("attempts"), int) else 1
        ax.barh(row, t["finished"] - t["started"], left=t["started"] - origin, height=0.6, edgecolor="black",
                color=colours(workers.index(slot[t["worker"]]) % 10), hatch="//" if attempts > 1 else None)
        if attempts > 1:
            ax.text(t["finished"] - origin, row, f"  try {attempts}", va="center", fontsize=7)
    sessions = [t.get("session", "") for t in entries]
    for row in range(1, len(entries)):
        if sessions[row] != sessions[row - 1] and sessions[row]:
            stopped = max(t["finished"] for t in entries[:row]) - origin
            ax.axvspan(stopped, entries[row]["started"] - origin, color="lightgrey", alpha=0.6, zorder=0)
            ax.axvline(entries[row]["started"] - origin, color="black", ls="--", lw=1)
            ax.text(stopped, -0.55, " stopped; resumed at the dashed line,\n the unfinished models trained again",
                    fontsize=7, va="center")
    ax.set_yticks(range(len(entries)), [f"{t['name']} · {t['worker']}" for t in entries], fontsize=7)
    ax.set_ylim(len(entries) - 0.5, -1.1)  # one row per model, the first on top, room above for the notes
    ax.set_xlabel("seconds since the first model started")
    handles = [Patch(color=colours(i % 10), label=worker) for i, worker in enumerate(workers)]
    if any(isinstance(t.get("attempts"), int) and t["attempts"] > 1 for t in entries):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="trained again (worker died)"))
    ax.legend(handles=handles, fontsize=7, title="worker", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("which model trained when, on which worker")
    return fig
