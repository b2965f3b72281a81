"""The report, built only from a run directory's files: results.json, results.jsonl, report.md, plots.

The best single ingredient is chosen by validation score; test scores are shown, never used
to choose. Soups fitted on validation are marked, since their validation score is biased.
"""
from __future__ import annotations

import json
import statistics

from ladle.store import RunDir, atomic_write, write_json


def build_results(run_dir: RunDir) -> dict:
    config = run_dir.config()
    sidecars = run_dir.ingredient_sidecars()
    ingredients = [
        {"name": s["name"], "val": s["scores"]["val"], "test": s["scores"]["test"], "best_epoch": s["best_epoch"],
         "seconds": s["seconds"], "seeds": s["seeds"], "sampler": s.get("sampler", {"name": "full"}),
         "partition": s.get("partition")}
        for s in sidecars
    ]
    results = {"dataset": sidecars[0]["dataset"] if sidecars else {"name": config.dataset},
               "model": config.model.name, "config": config.to_dict(), "ingredients": ingredients}
    if not ingredients:
        return {**results, "best_ingredient": None, "ingredient_mean": None, "soups": {}}
    best = max(ingredients, key=lambda r: r["val"])  # first of equals: the lowest index
    results["best_ingredient"] = {"name": best["name"], "val": best["val"], "test": best["test"]}
    results["ingredient_mean"] = {
        "val": statistics.fmean(r["val"] for r in ingredients), "val_std": _std([r["val"] for r in ingredients]),
        "test": statistics.fmean(r["test"] for r in ingredients), "test_std": _std([r["test"] for r in ingredients]),
    }
    soups = {}
    stored = run_dir.soup_sidecars()
    order = [m for m in config.soups if m in stored] + sorted(set(stored) - set(config.soups))
    for name, s in ((n, stored[n]) for n in order):
        soups[name] = {
            "val": s["scores"]["val"], "test": s["scores"]["test"],
            "gain_val": s["scores"]["val"] - best["val"], "gain_test": s["scores"]["test"] - best["test"],
            "seconds": s["seconds"], "peak_memory_mb": s.get("peak_memory_mb"),
            "is_soup": s["is_soup"], "fitted_on_val": s["fitted_on_val"],
            "members": [n for n, c in s["coefficients"].items() if c],
        }
    results["soups"] = soups
    return results


def table_rows(results: dict) -> list[dict]:
    """One row per line of the report table: label, val, test, gain over the best ingredient."""
    rows = [{"label": r["name"] + _recipe_note(r), "kind": "ingredient", "val": r["val"], "test": r["test"],
             "gain": None} for r in results["ingredients"]]
    if results.get("best_ingredient"):
        b, m = results["best_ingredient"], results["ingredient_mean"]
        rows.append({"label": f"best ingredient ({b['name']}, by val)", "kind": "summary", "val": b["val"],
                     "test": b["test"], "gain": None})
        rows.append({"label": "ingredients mean ± std", "kind": "summary", "val": m["val"], "test": m["test"],
                     "val_std": m["val_std"], "test_std": m["test_std"], "gain": None})
    for name, s in results["soups"].items():
        notes = [] if s["is_soup"] else ["not a soup: K models"]
        if s["fitted_on_val"]:
            notes.append("fitted on val")
        label = name + (f" ({'; '.join(notes)})" if notes else "")
        rows.append({"label": label, "kind": "soup" if s["is_soup"] else "reference", "val": s["val"],
                     "test": s["test"], "gain": s["gain_test"], "seconds": s["seconds"]})
    return rows


def markdown_table(results: dict) -> str:
    metric = results["dataset"].get("metric", "score")
    lines = [f"# {results['dataset']['name']} · {results['model']} · {len(results['ingredients'])} ingredients",
             "", f"| model | val {metric} | test {metric} | test gain vs best ingredient | seconds |",
             "|---|---|---|---|---|"]
    for row in table_rows(results):
        val, test = _pct(row["val"], row.get("val_std")), _pct(row["test"], row.get("test_std"))
        gain = "" if row["gain"] is None else f"{100 * row['gain']:+.2f}"
        secs = "" if row.get("seconds") is None else f"{row['seconds']:.2f}"
        lines.append(f"| {row['label']} | {val} | {test} | {gain} | {secs} |")
    lines += ["", "Selection (best ingredient, greedy and GIS decisions) used the validation split only."]
    return "\n".join(lines) + "\n"


def write_report(run_dir: RunDir) -> dict:
    results = build_results(run_dir)
    results["timeline"] = run_dir.timeline()
    write_json(run_dir.path / "results.json", results)
    lines = [json.dumps({"kind": "ingredient", **r}) for r in results["ingredients"]]
    lines += [json.dumps({"kind": "soup" if s["is_soup"] else "reference", "name": n, **s})
              for n, s in results["soups"].items()]
    atomic_write(run_dir.path / "results.jsonl", ("\n".join(lines) + "\n").encode())
    atomic_write(run_dir.path / "report.md", markdown_table(results).encode())
    if results["ingredients"]:
        from ladle.plots import plot_gis_curves, plot_scores, plot_timeline

        plot_scores(results, run_dir.plots / "ingredients_vs_soups.png")
        gis = run_dir.soup_sidecars().get("gis")
        if gis is not None:
            plot_gis_curves(gis, run_dir.plots / "gis_curves.png")
        timeline = run_dir.timeline()
        if timeline:
            plot_timeline(timeline, run_dir.plots / "timeline.png")
    return results


def _recipe_note(ingredient: dict) -> str:
    notes = []
    sampler = ingredient.get("sampler") or {}
    if sampler.get("name", "full") != "full":
        notes.append(sampler["name"])
    part = ingredient.get("partition")
    if part:
        notes.append(f"{part['method']} part {part['part']}" + (" + halo" if part["halo"] else ""))
    return f" ({', '.join(notes)})" if notes else ""


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _pct(value: float, std: float | None = None) -> str:
    return f"{100 * value:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")
