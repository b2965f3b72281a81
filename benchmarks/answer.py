"""Does it pay, and when? The payoff records summed up by kind of graph: which row to use, by how much, at what cost.

    python benchmarks/answer.py                     # the committed records (benchmarks/results/payoff_*.jsonl)
    python benchmarks/answer.py --records R.jsonl   # other payoff.py records

Reads only ``payoff.py``'s records (one pipeline per line), trains nothing. Each kind of graph pools its cells, seeds
and trunk settings; where a cell was rerun at a higher epoch cap, its highest cap alone counts (the plan's, as in
``payoff.py``'s table). A row is *chosen* by its mean validation score (never by test), and reported by its mean test
score, in points, beside the best ingredient's (itself chosen on validation in each pipeline): the row whose mean
validation gain over the best ingredient, pipeline by pipeline, is highest, its test gain reported the same way
(rows that only some pipelines ran say in how many). Rows a kind never ran are left empty. Cost: a soup's own
seconds after training (the median over pipelines), and what it costs to serve:
one model for every row but the ensemble's K. The last line is ``key=value`` pairs: for each kind, the chosen row and
its gain over the best ingredient (``small_row=... small_gain=...``).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = [HERE / "results" / "payoff_records.jsonl", HERE / "results" / "payoff_partitions.jsonl",
           HERE / "results" / "payoff_dcsbm.jsonl"]
ROWS = ["best", "uniform", "greedy", "gis", "learned", "pls", "ensemble", "long", "long_swa", "ddp"]
LABELS = {"best": "best ingredient", "uniform": "uniform soup", "greedy": "greedy soup", "gis": "GIS soup",
          "learned": "learned soup", "pls": "partition learned soup", "ensemble": "ensemble (K models)",
          "long": "one model, K x budget", "long_swa": "its SWA", "ddp": "DDP, K ranks"}
KINDS = [  # (key, label, which records)
    ("small", "small graphs, full batch (Cora, CiteSeer, squirrel)",
     lambda r: r.get("partition") is None and any(n in r["dataset"] for n in ("Cora", "CiteSeer", "squirrel"))),
    ("tolokers", "a real graph with ROC-AUC (tolokers, full batch and sampled)",
     lambda r: r.get("partition") is None and "tolokers" in r["dataset"]),
    ("synthetic", "large synthetic, neighbour-sampled (csbm-arxiv, csbm-products)",
     lambda r: r.get("partition") is None and r["dataset"].startswith("csbm")),
    ("dcsbm", "large synthetic, degree-corrected, neighbour-sampled (dcsbm-arxiv, dcsbm-products)",
     lambda r: r.get("partition") is None and r["dataset"].startswith("dcsbm")),
    ("parts", "divided into parts, each ingredient on its own (csbm-arxiv, K = 4 and 8)",
     lambda r: r.get("partition") is not None),
]


def load(paths) -> list[dict]:
    import sys

    if str(HERE) not in sys.path:  # imported from elsewhere (reproduce.py's index, a test)
        sys.path.insert(0, str(HERE))
    from payoff import shared_baselines  # a partition cell's whole-graph rows live in the record that trained them

    records = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines() if line.strip()]
    records = shared_baselines(records)
    top = {}  # each (cell, trunk)'s highest epoch cap: the plan's
    for r in records:
        key = (r["cell"], r["trunk"])
        top[key] = max(top.get(key, 0), r.get("epoch_cap", 0))
    return [r for r in records if r.get("epoch_cap", 0) == top[(r["cell"], r["trunk"])]]


def summary(records: list[dict]) -> dict:
    """Per row: mean validation and test (points) over the pipelines that have it, and how many those are."""
    out = {}
    for row in ROWS:
        have = [r for r in records if isinstance(r.get(row), (int, float)) and isinstance(r.get(f"{row}_val"),
                                                                                           (int, float))]
        if have:
            out[row] = {"val_gain": 100 * statistics.fmean(r[f"{row}_val"] - r["best_val"] for r in have),
                        "test": 100 * statistics.fmean(r[row] for r in have), "n": len(have),
                        "gain": 100 * statistics.fmean(r[row] - r["best"] for r in have),
                        "gain_sd": 100 * statistics.stdev([r[row] - r["best"] for r in have]) if len(have) > 1 else 0.0}
    return out


def cost(records: list[dict], row: str) -> str:
    if row == "best":
        return "1 model; the others trained for nothing"
    if row == "ensemble":
        return f"K = {records[0].get('ingredients', 4)} models at inference"
    if row in ("long", "long_swa", "ddp"):
        timed = [r[f"{'ddp' if row == 'ddp' else 'long'}_seconds"] for r in records
                 if r.get(f"{'ddp' if row == 'ddp' else 'long'}_seconds")]
        what = "1 model, K x one ingredient's epochs one after another" + (" (its SWA: free beside it)"
                                                                         if row == "long_swa" else "")
        if row == "ddp":
            sent = [r["ddp_bytes_per_epoch"] for r in records if r.get("ddp_bytes_per_epoch")]
            what = "1 model on K ranks, gradients all-reduced" + (f" ({statistics.median(sent) / 1e6:.2f} MB an "
                                                                  "epoch)" if sent else "")
        return what + (f"; {statistics.median(timed):.0f} s to train" if timed else "")
    seconds = [r["soup_seconds"][row] for r in records if isinstance(r.get("soup_seconds"), dict)
               and row in r["soup_seconds"]]
    return "1 model" + (f"; {statistics.median(seconds):.2f} s of souping" if seconds else "")


def table(paths=RECORDS) -> tuple[list[str], list[str]]:
    """The answer's markdown lines and its key=value pairs."""
    records = load(paths)
    lines = ["| graph | pipelines | best ingredient | GIS | ensemble | one model, K x | its SWA | DDP | use | gain "
             "over best (± sd) | cost of that row |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    last = []
    for key, label, which in KINDS:
        mine = [r for r in records if which(r)]
        if not mine:
            continue
        rows = summary(mine)
        chosen = max(rows, key=lambda row: rows[row]["val_gain"])
        runs = "" if rows[chosen]["n"] == len(mine) else f" ({rows[chosen]['n']} of {len(mine)} pipelines)"

        def cell(row, rows=rows):
            return "" if row not in rows else f"{rows[row]['test']:.2f}"

        lines.append(f"| {label} | {len(mine)} | {cell('best')} | {cell('gis')} | {cell('ensemble')} | {cell('long')} "
                     f"| {cell('long_swa')} | {cell('ddp')} | {LABELS[chosen]}{runs} | {rows[chosen]['gain']:+.2f} ± "
                     f"{rows[chosen]['gain_sd']:.2f} | "
                     f"{cost(mine, chosen)} |")
        last += [f"{key}_row={chosen}", f"{key}_gain={rows[chosen]['gain']:.3f}",
                 f"{key}_gis_gain={rows['gis']['gain']:.3f}" if "gis" in rows else f"{key}_gis_gain=nan"]
    return lines, last


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", nargs="+", default=[str(p) for p in RECORDS])
    args = parser.parse_args(argv)
    lines, last = table(args.records)
    print("\n".join(lines))
    print()
    print(" ".join(last))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
