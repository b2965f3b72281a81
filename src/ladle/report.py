"""The report, built only from a run directory's files: results.json, results.jsonl, report.md, plots.

The best single ingredient is chosen by validation score; test scores are shown, never used
to choose. Soups fitted on validation are marked, since their validation score is biased.
Ingredient scores come from the soup step, which computes them again from the weights (checked
by checksum); a score only an ingredient's sidecar claims is marked ``recorded``.
"""
from __future__ import annotations

import json
import logging
import os
import statistics

from ladle.files import read_bytes, sha256
from ladle.plots import plot_gis_curves, plot_scores, plot_timeline
from ladle.sampling import DEFAULT_SAMPLER
from ladle.soups import SOUPS
from ladle.store import MAX_WEIGHTS_BYTES, RunDir, is_number, timeline_entry

log = logging.getLogger(__name__)


def recomputed_scores(run_dir: RunDir, sidecars: list[dict], soups: dict[str, dict]) -> dict[str, dict]:
    """Ingredient scores the soup step computed from weights whose checksum matches what is on disk now."""
    on_disk = {}
    for s in sidecars:
        path = run_dir.ingredients / f"{s['name']}.safetensors"
        if not os.path.lexists(path):
            continue
        # The one bounded reader: a link, a FIFO, a device or an oversized file is refused, naming it.
        payload = read_bytes(path, root=run_dir.path, limit=MAX_WEIGHTS_BYTES, what="checkpoint")
        if sha256(payload) == s["sha256"]:
            on_disk[s["name"]] = s["sha256"]
    found = {}
    for soup in soups.values():
        for name, entry in soup.get("ingredient_scores", {}).items():
            if on_disk.get(name) == entry["sha256"]:
                found[name] = {"val": entry["val"], "test": entry["test"]}
    return found


def build_results(run_dir: RunDir) -> dict:
    config = run_dir.config()
    sidecars = run_dir.ingredient_sidecars()
    stored = run_dir.soup_sidecars()
    checked = recomputed_scores(run_dir, sidecars, stored)
    ingredients = [
        {"name": s["name"], **checked.get(s["name"], {"val": s["scores"]["val"], "test": s["scores"]["test"]}),
         "scores": "recomputed" if s["name"] in checked else "recorded", "best_epoch": s["best_epoch"],
         "seconds": s["seconds"], "seeds": s["seeds"], "sampler": s.get("sampler", {"name": DEFAULT_SAMPLER}),
         "partition": s.get("partition"), "epochs": s["train"].get("epochs"),
         "epochs_trained": s.get("epochs_trained", s["train"].get("epochs")),
         **({"stopped": s["stopped"]} if s.get("stopped") else {})}
        for s in sidecars
    ]
    results = {"dataset": sidecars[0]["dataset"] if sidecars else {"name": config.dataset},
               "model": config.model.name, "config": config.to_dict(), "ingredients": ingredients,
               "trunk": _stored(run_dir, config.trunk_spec(), stored), "baselines": {}}
    for spec in config.baseline_specs():
        entry = _stored(run_dir, spec, stored)
        if entry is not None:
            results["baselines"][spec.role] = entry
    if not ingredients:
        return {**results, "best_ingredient": None, "ingredient_mean": None, "soups": {}}
    best = max(ingredients, key=lambda r: r["val"])  # first of equals: the lowest index
    results["best_ingredient"] = {"name": best["name"], "val": best["val"], "test": best["test"]}
    results["ingredient_mean"] = {
        "val": statistics.fmean(r["val"] for r in ingredients), "val_std": _std([r["val"] for r in ingredients]),
        "test": statistics.fmean(r["test"] for r in ingredients), "test_std": _std([r["test"] for r in ingredients]),
    }
    for entry in results["baselines"].values():
        entry["gain_test"] = entry["test"] - best["test"]
    soups = {}
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


def _stored(run_dir: RunDir, spec, soups: dict) -> dict | None:
    """A trunk or baseline's entry: its scores as the soup step recomputed them where the checksum matches."""
    if spec is None or not run_dir.has(spec):
        return None
    _, sidecar = run_dir.load_checkpoint(spec)
    entry = {"val": sidecar["scores"]["val"], "test": sidecar["scores"]["test"], "scores": "recorded",
             "epochs": spec.train.epochs, "epochs_trained": sidecar.get("epochs_trained"),
             "best_epoch": sidecar.get("best_epoch"), "seconds": sidecar["seconds"],
             **({"stopped": sidecar["stopped"]} if sidecar.get("stopped") else {})}
    if sidecar.get("communication"):  # the data-parallel baseline: its ranks and the bytes it all-reduced
        entry["communication"] = sidecar["communication"]
    if sidecar.get("average_of"):
        entry["average"] = spec.train.average
    for soup in soups.values():
        found = soup.get("baseline_scores", {}).get(spec.role)
        if found is not None and found["sha256"] == sidecar["sha256"]:
            entry.update(val=found["val"], test=found["test"], scores="recomputed")
    return entry


def table_rows(results: dict) -> list[dict]:
    """One row per line of the report table: label, val, test, gain over the best ingredient."""
    rows = [{"label": r["name"] + _recipe_note(r) + ("*" if r.get("scores") == "recorded" else ""),
             "kind": "ingredient", "val": r["val"], "test": r["test"], "gain": None, "seconds": r.get("seconds")}
            for r in results["ingredients"]]
    if results.get("best_ingredient"):
        b, m = results["best_ingredient"], results["ingredient_mean"]
        rows.append({"label": f"best ingredient ({b['name']}, by val)", "kind": "summary", "val": b["val"],
                     "test": b["test"], "gain": None})
        rows.append({"label": "ingredients mean ± std", "kind": "summary", "val": m["val"], "test": m["test"],
                     "val_std": m["val_std"], "test_std": m["test_std"], "gain": None})
    for b in results.get("baselines", {}).values():
        k = len(results["ingredients"])
        what = (f"{b['average'].upper()} of its weights, best at epoch {b['best_epoch']}" if b.get("average")
                else f"{b['epochs_trained']} epochs")
        ranks = (b.get("communication") or {}).get("ranks")
        who = f"data-parallel, {ranks} ranks all-reducing" if ranks else "single model"
        rows.append({"label": f"{who}, {k}x budget ({what})"
                              + ("*" if b["scores"] == "recorded" else ""), "kind": "reference",
                     "val": b["val"], "test": b["test"], "gain": b["gain_test"], "seconds": b["seconds"]})
    for name, s in results["soups"].items():
        notes = [] if s["is_soup"] else ["not a soup: K models"]
        if s["fitted_on_val"]:
            notes.append("fitted on val")
        label = name + (f" ({'; '.join(notes)})" if notes else "")
        rows.append({"label": label, "kind": "soup" if s["is_soup"] else "reference", "val": s["val"],
                     "test": s["test"], "gain": s["gain_test"], "seconds": s["seconds"]})
    spread = noise(results)
    for row in rows:
        row["noise"] = spread is not None and row["gain"] is not None and abs(row["gain"]) <= spread
    return rows


def noise(results: dict) -> float | None:
    """The ingredients' test standard deviation: a gain within it is not told apart from which ingredient won."""
    mean = results.get("ingredient_mean")
    return mean["test_std"] if mean and len(results["ingredients"]) > 1 else None


def gain_text(row: dict) -> str:
    return "" if row["gain"] is None else f"{100 * row['gain']:+.2f}" + (" ≈" if row.get("noise") else "")


def closing_notes(results: dict) -> list[str]:
    """What the table's marks and columns mean, and where the fair comparison is, for the report and the CLI."""
    notes = ["seconds: training for ingredients and baselines, souping for soups."]
    if (spread := noise(results)) is not None and any(r.get("noise") for r in table_rows(results)):
        notes.append(f"≈: within the ingredients' test spread (std {100 * spread:.2f}): not a difference.")
    if not results.get("baselines") and len(results["ingredients"]) > 1:
        k = len(results["ingredients"])
        notes.append(f"Equal compute: add --baseline long (one model, {k}x budget, its SWA) or ddp.")
    return notes


def markdown_table(results: dict) -> str:
    metric = results["dataset"].get("metric", "score")
    lines = [f"# {results['dataset']['name']} · {results['model']} · {len(results['ingredients'])} ingredients",
             "", f"| model | val {metric} | test {metric} | test gain vs best ingredient | seconds |",
             "|---|---|---|---|---|"]
    for row in table_rows(results):
        val, test = _pct(row["val"], row.get("val_std")), _pct(row["test"], row.get("test_std"))
        secs = "" if row.get("seconds") is None else f"{row['seconds']:.2f}"
        lines.append(f"| {row['label']} | {val} | {test} | {gain_text(row)} | {secs} |")
    lines += ["", "Selection (best ingredient, greedy and GIS decisions) used the validation split only."]
    lines += [line for note in closing_notes(results) for line in ("", note)]
    if any(r.get("scores") == "recorded" for r in results["ingredients"]):
        lines += ["", "\\* scores as recorded in the ingredient's sidecar, not computed again from its weights "
                      "(`ladle soup` computes them; `ladle verify --root ...` checks them)."]
    return "\n".join(lines) + "\n"


def summarise_seeds(by_seed: dict[int, dict]) -> dict:
    """The same pipeline over several seeds (``ladle run --seeds``): each row's validation and test score and its
    test gain over that seed's best ingredient, in points, as mean, sample std and the values seed by seed."""
    def stat(values: list[float]) -> dict:
        points = [100 * v for v in values]
        return {"mean": statistics.fmean(points), "std": statistics.stdev(points) if len(points) > 1 else 0.0,
                "values": points}

    first = next(iter(by_seed.values()))
    rows: dict[str, dict] = {}
    for results in by_seed.values():
        entries = [("best ingredient (by val)", results["best_ingredient"], None)]
        entries += [(name, b, b.get("gain_test")) for name, b in results.get("baselines", {}).items()]
        entries += [(name, s, s.get("gain_test")) for name, s in results["soups"].items()]
        for label, entry, gain in entries:
            row = rows.setdefault(label, {"val": [], "test": [], "gain": []})
            row["val"].append(entry["val"])
            row["test"].append(entry["test"])
            if gain is not None:
                row["gain"].append(gain)
    return {"dataset": first["dataset"]["name"], "model": first["model"],
            "metric": first["dataset"].get("metric", "score"), "seeds": list(by_seed),
            "rows": [{"label": label, "val": stat(r["val"]), "test": stat(r["test"]),
                      "gain": stat(r["gain"]) if r["gain"] else None} for label, r in rows.items()]}


def seeds_markdown(summary: dict) -> str:
    metric = summary["metric"]
    lines = [f"# {summary['dataset']} · {summary['model']} · seeds {', '.join(map(str, summary['seeds']))}", "",
             f"| row | val {metric} | test {metric} | test gain vs best ingredient |", "|---|---|---|---|"]
    for row in summary["rows"]:
        gain = "" if row["gain"] is None else f"{row['gain']['mean']:+.2f} ± {row['gain']['std']:.2f}"
        lines.append(f"| {row['label']} | {row['val']['mean']:.2f} ± {row['val']['std']:.2f} | "
                     f"{row['test']['mean']:.2f} ± {row['test']['std']:.2f} | {gain} |")
    lines += ["", "Mean ± sample standard deviation over the seeds, in points; each seed's run is in seed-S/."]
    return "\n".join(lines) + "\n"


DERIVED_FILES = ("results.json", "results.jsonl", "report.md")


def derived_files(run_dir: RunDir) -> tuple[dict, dict[str, bytes]]:
    """The results and the bytes of each file ``ladle report`` derives from a run's files (plots aside): what
    ``verify`` compares the files on disk with."""
    results = build_results(run_dir)
    timeline = [t for t in run_dir.timeline() if _timeline_entry(t)]
    results["timeline"] = timeline
    lines = [json.dumps({"kind": "ingredient", **r}) for r in results["ingredients"]]
    lines += [json.dumps({"kind": "baseline", "name": n, **b}) for n, b in results["baselines"].items()]
    lines += [json.dumps({"kind": "soup" if s["is_soup"] else "reference", "name": n, **s})
              for n, s in results["soups"].items()]
    return results, {"results.json": (json.dumps(results, indent=2) + "\n").encode(),
                     "results.jsonl": ("\n".join(lines) + "\n").encode(),
                     "report.md": markdown_table(results).encode()}


def write_report(run_dir: RunDir) -> dict:
    with run_dir.writing("report"):
        return _write_report(run_dir)


def _write_report(run_dir: RunDir) -> dict:
    results, files = derived_files(run_dir)
    for name, payload in files.items():
        run_dir.write(name, payload)
    timeline = results["timeline"]
    if results["ingredients"]:
        plot_scores(results, run_dir.plots / "ingredients_vs_soups.png", run_dir.path)
        stored = run_dir.soup_sidecars()
        for name in SOUPS.with_trait("curves"):  # GIS: its interpolation curves
            sidecar = stored.get(name)
            if sidecar is not None and _gis_trace(sidecar.get("trace")):
                plot_gis_curves(sidecar, run_dir.plots / f"{name}_curves.png", run_dir.path,
                                results["dataset"].get("metric", ""))
            elif sidecar is not None:
                log.warning("%s: the trace is not the one ladle writes; no %s_curves.png", run_dir.soups /
                            f"{name}.json", name)
        if timeline:
            plot_timeline(timeline, run_dir.plots / "timeline.png", run_dir.path)
    return results


def _timeline_entry(entry: dict) -> bool:
    """A timeline record as workers write it; others (a hand-edited log) are left out of the report."""
    ok = timeline_entry(entry)
    if not ok:
        log.warning("timeline.jsonl: a record ladle did not write is left out of the report: %.80s", entry)
    return ok


def _gis_trace(trace) -> bool:
    if not isinstance(trace, list) or not trace:
        return False
    steps = trace[1:]
    return all(isinstance(e, dict) and isinstance(e.get("alphas"), list) and isinstance(e.get("scores"), list)
               and len(e["alphas"]) == len(e["scores"]) <= 100_000 and all(map(is_number, e["alphas"] + e["scores"]))
               and is_number(e.get("alpha")) and is_number(e.get("score")) for e in steps)


def _recipe_note(ingredient: dict) -> str:
    notes = []
    stopped = ingredient.get("stopped")
    if isinstance(stopped, dict):
        reason = str(stopped.get("reason", ""))
        notes.append(f"stopped by a callback at epoch {stopped.get('epoch')}: "
                     + (reason if len(reason) <= 40 else reason[:39] + "…"))
    elif isinstance(ingredient.get("epochs_trained"), int) and ingredient["epochs_trained"] != ingredient.get("epochs"):
        notes.append(f"stopped at epoch {ingredient['epochs_trained']}")
    sampler = ingredient.get("sampler") or {}
    if sampler.get("name", DEFAULT_SAMPLER) != DEFAULT_SAMPLER:
        notes.append(sampler["name"])
    part = ingredient.get("partition")
    if part:
        notes.append(f"{part['method']} part {part['part']}" + (" + halo" if part["halo"] else ""))
    return f" ({', '.join(notes)})" if notes else ""


def _std(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _pct(value: float, std: float | None = None) -> str:
    return f"{100 * value:.2f}" + ("" if std is None else f" ± {100 * std:.2f}")
