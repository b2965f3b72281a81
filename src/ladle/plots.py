"""PNG plots of a run: ingredients against soups, GIS's validation score against α per step, the worker timeline."""
from __future__ import annotations

import io
from pathlib import Path

from ladle.files import atomic_write


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, root: Path | None = None) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    _pyplot().close(fig)
    atomic_write(path, buffer.getvalue(), root=root)


def plot_scores(results: dict, path: Path, root: Path | None = None) -> None:
    """Validation and test score of each ingredient (dots), each soup (bars) and each baseline (dotted lines)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    soups = results["soups"]
    for ax, split in zip(axes, ("val", "test")):
        scores = [r[split] for r in results["ingredients"]]
        ax.scatter([0] * len(scores), scores, color="grey", zorder=3, label="ingredients")
        names = list(soups)
        ax.bar(range(1, len(names) + 1), [soups[n][split] for n in names],
               color=["tab:blue" if soups[n]["is_soup"] else "tab:orange" for n in names])
        ax.axhline(results["best_ingredient"][split], color="black", ls="--", lw=1, label="best ingredient (by val)")
        for (name, b), colour in zip(results.get("baselines", {}).items(), ("tab:red", "tab:purple")):
            what = f"its weights' {b['average'].upper()}" if b.get("average") else "one model, K× budget"
            ax.axhline(b[split], color=colour, ls=":", lw=1.5, label=f"{name} ({what})")
        ax.set_xticks(range(len(names) + 1), ["ingredients"] + names, rotation=30)
        ax.set_title(f"{split} {results['dataset'].get('metric', '')}")
        low = min(scores + [soups[n][split] for n in names] + [b[split] for b in results.get("baselines", {}).values()])
        ax.set_ylim(max(0.0, low - 0.05), None)
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle(f"{results['dataset']['name']} · {results['model']}")
    _save(fig, path, root)


def plot_gis_curves(gis_sidecar: dict, path: Path, root: Path | None = None) -> None:
    """One curve per GIS step: validation score of α·soup + (1−α)·ingredient."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for step, entry in enumerate(gis_sidecar["trace"][1:], start=1):
        ax.plot(entry["alphas"], entry["scores"], marker=".", label=f"step {step}: {entry['ingredient']}")
        ax.scatter([entry["alpha"]], [entry["score"]], color="black", zorder=3, s=12)
    ax.set_xlabel("α (weight of the soup so far)")
    ax.set_ylabel("validation score")
    ax.set_title("GIS: validation score against α (black: chosen)")
    if len(gis_sidecar["trace"]) > 1:
        ax.legend(fontsize=7)
    _save(fig, path, root)


def plot_timeline(timeline: list[dict], path: Path, root: Path | None = None) -> None:
    """Which worker trained which ingredient, and when (one row per worker, one bar per ingredient)."""
    plt = _pyplot()
    workers = sorted({t["worker"] for t in timeline})
    origin = min(t["started"] for t in timeline)
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.5 * len(workers)))
    for t in timeline:
        row = workers.index(t["worker"])
        ax.barh(row, t["finished"] - t["started"], left=t["started"] - origin, height=0.6, edgecolor="black")
        ax.text(t["started"] - origin + 0.01 * (t["finished"] - t["started"]), row, t["name"].removeprefix("ingredient-"),
                va="center", fontsize=7)
    ax.set_yticks(range(len(workers)), workers, fontsize=7)
    ax.set_xlabel("seconds since the first ingredient started")
    ax.set_title("worker timeline")
    _save(fig, path, root)
