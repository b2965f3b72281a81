"""benchmarks/reproduce.py end to end on tiny inputs: every section runs, and the report it writes has each
table under its command, the machine and the date, and every plot it links."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench(name: str):
    """A script of benchmarks/ imported as a module (its functions tested without running it)."""
    import importlib

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_the_readme_and_every_results_page_give_the_same_durations():
    """How long reproduce.py takes is said once, in reproduce.py, and quoted as it is everywhere a user reads it."""
    reproduce = bench("reproduce")

    def text(path):
        return " ".join((ROOT / path).read_text().split())

    for path in ("README.md", "docs/RESULTS.md"):
        assert reproduce.QUICK_DURATION in text(path), path
    for path in ("README.md", "docs/RESULTS.md", "docs/full/RESULTS.md", "docs/quick/RESULTS.md"):
        assert reproduce.FULL_DURATION in text(path), path


def reproduce(tmp_path, planetoid_root, *extra):
    command = [sys.executable, str(ROOT / "benchmarks" / "reproduce.py"), "--smoke", "--work", str(tmp_path / "work"),
               "--root", str(planetoid_root), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
@pytest.mark.benchmark
def test_reproduce_writes_every_section_with_its_command_and_plots(tmp_path, planetoid_root):
    out = tmp_path / "docs" / "RESULTS.md"
    done = reproduce(tmp_path, planetoid_root, "--out", str(out))
    figures = dict(item.split("=", 1) for item in done.stdout.splitlines()[-1].split())
    assert figures["mode"] == "smoke" and figures["identical"] == "true"
    for key in ("gcn_cora_best_ingredient", "speedup", "memory_ratio", "speedup_gcn", "speedup_sage",
                "size_speedup_largest", "small_shortfalls", "payoff_gis_wins", "payoff_gis_vs_long"):
        assert key in figures
    report = out.read_text()
    assert "Machine: " in report and "torch " in report and "PyG " in report
    titles = re.findall(r"^## (.+)$", report, re.M)
    assert len(titles) == 6
    commands = re.findall(r"^```\n(python benchmarks/\S+\.py[^\n]*)", report, re.M)
    assert [c.split()[1] for c in commands] == ["benchmarks/accuracy.py", "benchmarks/large_soups.py",
                                              "benchmarks/scaling.py", "benchmarks/soup_speed.py",
                                              "benchmarks/soup_speed.py", "benchmarks/payoff.py"]
    assert report.count("Ran ") == 6
    assert "| Cora gcn full (acc) | 0 | 1 |" in report and "single model, Kx budget" in report
    # every soup of the small-graph sweep, learned ones marked as fitted on validation
    assert "learned (fitted on val)" in report and "pls (fitted on val)" in report and "| Cora | gcn | 2 |" in report
    for recipe in ("neighbor", "cluster", "saint_rw", "partition", "mixed"):
        assert f"| {recipe} | gis |" in report
    for link in re.findall(r"\]\((\.\./results/[^)]+\.png)\)", report):
        assert (out.parent / link).stat().st_size > 1000, link
    assert "../results/smoke_soup_time_vs_size.png" in report and "../results/smoke_timeline_process-2.png" in report
    # the table reproduce.py renders agrees with the records it read
    rows = [line for line in report.splitlines() if line.startswith("| Cora | gcn |")]
    best = float(rows[0].split("|")[4].split("±")[0])
    assert abs(best - float(figures["gcn_cora_best_ingredient"])) < 0.006

    assert "reused" not in report.split("\n\n")[1]

    # --resume reuses every finished section (nothing reruns, so the tables are the same) and says so; the
    # duration it reports is the sum of the sections' own times
    again = reproduce(tmp_path, planetoid_root, "--out", str(tmp_path / "x" / "again.md"), "--resume",
                      "--sections", "size,small")
    assert again.stderr.count("reusing the ") == 2 and "$ python" not in again.stderr
    resumed = (tmp_path / "x" / "again.md").read_text()
    header, *bodies = resumed.split("\n## ")
    assert "reused from earlier runs with `--resume`: small (" in header and ", size (" in header
    assert [b.split("\n")[0] for b in bodies] == [titles[0], titles[4]]  # the report's order, not the order asked
    assert all(f"## {body}".strip() in report for body in bodies)
    links = re.findall(r"\]\((\.\./results/[^)]+\.png)\)", resumed)
    assert "../results/smoke_small_soups.png" in links and "../results/smoke_soup_time_vs_size.png" in links
    for link in links:  # the reused sections' plots come along to the plots folder beside the new report
        assert (tmp_path / "x" / link).read_bytes() == (out.parent / link).read_bytes(), link
    sections = [json.loads(p.read_text()) for p in sorted((tmp_path / "work" / "smoke" / "sections").glob("*.json"))]
    assert len(sections) == 6
    minutes = sum(s["seconds"] for s in sections if s["section"] in ("small", "size")) / 60
    assert f"took {minutes:.1f} minutes in all" in header


@pytest.mark.benchmark
def test_a_stopped_small_sweep_adds_its_time_when_resumed(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import reproduce

    monkeypatch.setitem(reproduce.MACHINE, "commit", "abc1234")
    calls = []

    def section(mode, work, plots):
        calls.append(len(calls))
        if len(calls) == 1:
            time.sleep(0.2)
            raise KeyboardInterrupt  # stopped half way
        return "## a section", {"figure": 1}

    monkeypatch.setattr(reproduce, "small", section)
    monkeypatch.setattr(reproduce, "large", section)
    plots = tmp_path / "plots"
    plots.mkdir()
    with pytest.raises(KeyboardInterrupt):
        reproduce.run_section("small", {}, tmp_path, plots, resume=True)
    stopped = json.loads((tmp_path / "sections" / "small.stopped.json").read_text())
    assert len(stopped) == 1 and stopped[0] >= 0.2
    record = reproduce.run_section("small", {}, tmp_path, plots, resume=True)
    assert record["attempts"] == 2 and record["seconds"] >= stopped[0] and not record["reused"]
    assert not (tmp_path / "sections" / "small.stopped.json").exists()
    assert "small (2 attempts)" in reproduce.duration_line("full", [record], record["seconds"] / 60)
    assert record["stopped_seconds"] == stopped[0]
    note = reproduce.section_text(record).removeprefix("## a section")
    assert f"after 1 stopped attempt: the time above is its last attempt; with the {stopped[0] / 60:.1f} min" in note
    assert f"{record['seconds'] / 60:.1f} min in all" in note
    assert reproduce.run_section("small", {}, tmp_path, plots, resume=True)["reused"] and len(calls) == 2

    # a section that starts again from scratch does not count the time of its stopped attempts
    (tmp_path / "sections" / "large.stopped.json").write_text("[100.0]")
    record = reproduce.run_section("large", {}, tmp_path, plots, resume=True)
    assert record["attempts"] == 1 and record["seconds"] < 100
    assert reproduce.section_text(record) == "## a section"


@pytest.mark.benchmark
def test_payoff_table_counts_only_each_cells_planned_cap():
    """A cell rerun with a higher epoch cap: only the plan's cap is in the table and its figures; the earlier run
    stays in the records and shows, marked, when asked for."""
    payoff = bench("payoff")

    def record(cap, seed, best, gis, long):
        return {"cell": "g sage neighbor", "metric": "acc", "trunk": 2, "seed": seed, "epoch_cap": cap,
                "best": best, "long": long, "gis": gis, "uniform": gis, "greedy": gis, "learned": gis,
                "ensemble": gis, "epochs_ingredients": [cap, cap - 1], "epochs_long": 4 * cap,
                "seconds": {"trunk": 1.0, "training": 2.0, "soups": 3.0}}

    records = [record(10, 0, 0.70, 0.60, 0.72), record(30, 0, 0.70, 0.75, 0.72), record(30, 1, 0.72, 0.77, 0.70)]
    lines, figures = payoff.table(records)
    assert not [line for line in lines if "earlier" in line or "(cap 10)" in line]
    lines, figures = payoff.table(records, earlier=True)
    earlier = [line for line in lines if "earlier" in line]
    assert len(earlier) == 1 and "(cap 10)" in earlier[0] and "| 1 |" in earlier[0] and "-10.00" in earlier[0]
    current = [line for line in lines if "(cap 30)" in line]
    assert len(current) == 1 and "| 2 |" in current[0] and "+5.00" in current[0]
    assert figures["cells"] == 1 and figures["gis_wins"] == 1
    assert figures["gis_mean_gain"] == 5.0 and figures["gis_vs_long"] == 5.0


@pytest.mark.benchmark
def test_payoff_summary_splits_real_from_synthetic_graphs_and_pairs_trunks_at_one_cap():
    """The last line gives GIS's gain over the real graphs alone beside all cells, and the trunk's effect only
    between the two trunk settings of one cell at one epoch cap."""
    payoff = bench("payoff")

    def record(cell, trunk, cap, best, gis):
        return {"cell": cell, "metric": "acc", "trunk": trunk, "seed": 0, "epoch_cap": cap, "best": best,
                "long": best, "gis": gis, "epochs_ingredients": [cap], "epochs_long": 4 * cap,
                "seconds": {"trunk": 0.0, "training": 1.0, "soups": 1.0}}

    arxiv, products = "csbm-arxiv sage neighbor", "csbm-products sage neighbor"
    records = [record("Cora gcn full", 0, 200, 0.80, 0.79), record("Cora gcn full", 20, 200, 0.80, 0.81),
               record(arxiv, 0, 30, 0.70, 0.71), record(arxiv, 2, 30, 0.70, 0.74),
               record(products, 0, 6, 0.75, 0.78), record(products, 2, 10, 0.76, 0.88)]
    _, figures = payoff.table(records)
    assert figures["cells"] == 6 and figures["gis_wins"] == 5
    assert figures["cells_real"] == 2 and figures["gis_wins_real"] == 1 and figures["gis_mean_gain_real"] == 0.0
    assert figures["gis_mean_gain"] == round((-1 + 1 + 1 + 4 + 3 + 12) / 6, 3)
    assert figures["gis_mean_gain_without_products"] == round((-1 + 1 + 1 + 4) / 4, 3)
    # Cora: +2 (from -1 to +1), csbm-arxiv: +3; products' two settings ran at different caps: no pair
    assert figures["trunk_gain"] == 2.5
    assert figures["gis_vs_long_swa"] == "nan" and figures["cells_long_swa"] == 0
    records[3]["long_swa"] = 0.77  # the long model's SWA, recorded where the run kept it: compared there only
    lines, figures = payoff.table(records)
    assert figures["cells_long_swa"] == 1 and figures["gis_vs_long_swa"] == -3.0
    assert "77.00 ± 0.00" in next(line for line in lines if line.startswith(f"| {arxiv} (acc) | 2 |"))


@pytest.mark.benchmark
def test_payoff_variants_change_every_models_training_and_name_their_rows():
    """--average and --weight-decay give every cell's models (ingredients, long model) those settings, under a
    label of their own, so their records never mix with the plan's."""
    payoff = bench("payoff")
    args = payoff.argparse.Namespace(shared="shared", products=False, quick=False, average="none", weight_decay=None)
    plan = payoff.cells(args)
    args.average, args.weight_decay = "swa", 0.0
    variants = payoff.cells(args)
    assert [c.label + " swa wd0" for c in plan] == [c.label for c in variants]
    arxiv = next(c for c in variants if c.dataset == "csbm-arxiv")
    config = payoff.config_for(arxiv, 0, arxiv.trunk, payoff.argparse.Namespace(root="data", workers=1))
    assert config["train"] == {"epochs": 30, "patience": 5, "average": "swa", "weight_decay": 0.0}
    assert config["model"] == {"name": "sage", "hidden": 128}
    args.average, args.weight_decay, args.lr_schedule, args.average_start = "none", None, "cosine", 10
    scheduled = next(c for c in payoff.cells(args) if c.dataset == "csbm-arxiv")
    assert scheduled.label == "csbm-arxiv sage neighbor cosine from10"
    config = payoff.config_for(scheduled, 0, 0, payoff.argparse.Namespace(root="data", workers=1))
    assert config["train"] == {"epochs": 30, "patience": 5, "lr_schedule": "cosine", "average_start": 10}


@pytest.mark.benchmark
def test_payoff_partition_cells_train_each_ingredient_on_its_part_beside_every_row(tmp_path, capsys, monkeypatch):
    """Issue 34, item 3, end to end on a tiny graph: K ingredients, ingredient i on part i of a random and of a
    METIS cut (its sidecar's node checksum is the part's own), every row present (the whole-graph long model, its
    SWA and DDP trained once, in the first cut's pipeline, and shown in both), and the last line's keys."""
    import hashlib
    import json

    import numpy as np

    from ladle.data import load_graph
    from ladle.sampling.partition import membership_for

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # payoff imports scaling.py from there as it runs
    import payoff

    graph = "csbm:nodes=600,classes=3,features=8,seed=1"
    records = tmp_path / "records.jsonl"
    assert payoff.main(["--partitions", "2", "--quick", "--partition-dataset", graph, "--records", str(records),
                        "--work", str(tmp_path / "work"), "--seeds", "1", "--trunks", "none"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = dict(pair.split("=") for pair in last.split())
    assert {"part_gis_wins", "part_gis_gain", "gis_vs_ddp", "ddp_bytes_per_epoch", "random_vs_metis"} <= set(figures)
    assert figures["part_cells"] == "2" and int(figures["ddp_bytes_per_epoch"]) > 0
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert [r["partition"]["method"] for r in rows] == ["random", "metis"]
    assert "ddp" in rows[0] and "long" in rows[0] and "long" not in rows[1]  # trained once
    shared = payoff.shared_baselines(rows)
    assert shared[1]["ddp"] == rows[0]["ddp"] and shared[1]["baselines_from"] == rows[0]["cell"]
    lines, _ = payoff.table(rows)
    assert all(" nan" not in line and "|  |" not in line for line in lines[2:])  # every row of both cells filled
    whole = load_graph(graph)
    for row in rows:
        method = row["partition"]["method"]
        run = tmp_path / "work" / f"{row['cell'].replace(' ', '-')}-t0-s0"
        membership = membership_for(whole, method, 2).numpy()
        sidecars = [json.loads(p.read_text()) for p in sorted((run / "ingredients").glob("ingredient-*.json"))]
        assert [s["partition"]["part"] for s in sidecars] == [0, 1]
        for part, sidecar in enumerate(sidecars):
            nodes = np.flatnonzero(membership == part).astype("<i8")
            assert sidecar["part_graph"]["nodes"] == nodes.size == row["part_nodes"][part]
            assert sidecar["part_graph"]["nodes_sha256"] == hashlib.sha256(nodes.tobytes()).hexdigest()
        assert sum(row["part_nodes"]) == whole.num_nodes  # disjoint parts that cover the graph

    # Item 4: the cell's wall-clock rows and plot, read from its run; the METIS cut's baselines live in the first
    # cut's run. A soup at K workers comes after the slowest ingredient's own seconds; on this machine's workers,
    # after the ingredients' measured span; each soup's seconds follow, one after another.
    import ddp_wallclock

    first, metis = (tmp_path / "work" / f"{r['cell'].replace(' ', '-')}-t0-s0" for r in rows)
    found = ddp_wallclock.collect(metis, first, cores=2)
    by = {r["row"]: r for r in found["rows"]}
    sidecars = [json.loads(p.read_text()) for p in sorted((metis / "ingredients").glob("ingredient-*.json"))]
    spans = [json.loads(line) for line in (metis / "timeline.jsonl").read_text().splitlines()]
    span = max(t["finished"] for t in spans) - min(t["started"] for t in spans)
    results = json.loads((metis / "results.json").read_text())
    at_k, here = max(s["seconds"] for s in sidecars), span
    for name in results["soups"]:
        spent = json.loads((metis / "soups" / f"{name}.json").read_text())["seconds"]
        at_k, here = at_k + spent, here + spent
        assert by[name]["wall_s"] == pytest.approx(at_k) and by[name]["wall_here_s"] == pytest.approx(here)
        assert by[name]["test"] == results["soups"][name]["test"]
    assert by["ddp"]["test"] == rows[0]["ddp"] and by["ddp"]["communication"]["ranks"] == 2
    assert by["ddp"]["worker_s"] == by["ddp"]["wall_s"] * by["ddp"]["cores"] and by["long-swa"]["processes"] == 1
    fig = ddp_wallclock.draw(found, "tiny")
    left, right = fig.axes[:2]
    assert left.get_xlabel() == "wall-clock seconds" and right.get_xlabel().startswith("worker-seconds")
    assert "(%)" in left.get_ylabel() and "validation" in left.get_ylabel() and "test" in left.get_ylabel()
    legend = {t.get_text() for t in right.get_legend().get_texts()}
    assert {"ingredients (no communication)", "one model, K x budget", "DDP, 2 ranks all-reducing",
            "gis (soup, after the ingredients)", "ensemble (2 models, after the ingredients)"} <= legend
    ddp_wallclock.main(["--from-run", str(metis), "--baselines", str(first), "--plot", str(tmp_path / "cell.png")])
    fields = dict(pair.split("=", 1) for pair in capsys.readouterr().out.strip().splitlines()[-1].split())
    assert fields["k"] == "2" and float(fields["soup_wall_s"]) == round(by["gis"]["wall_s"], 1)
    reach = next((h["seconds"] for h in found["baselines"]["ddp"]["history"] if h["val"] >= by["gis"]["val"]), None)
    assert fields["ddp_reaches_gis_s"] == str(None if reach is None else round(reach, 1))
    assert (tmp_path / "cell.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "cell.png").stat().st_size > 10_000


@pytest.mark.benchmark
def test_payoff_counts_a_tie_apart_from_a_win():
    payoff = bench("payoff")
    records = [{"cell": f"c{i}", "metric": "acc", "trunk": 0, "seed": 0, "epoch_cap": 5, "best": 0.7, "long": 0.7,
                "gis": gis, "epochs_ingredients": [5], "epochs_long": 20,
                "seconds": {"trunk": 0.0, "training": 1.0, "soups": 1.0}} for i, gis in enumerate((0.7, 0.71, 0.69))]
    _, figures = payoff.table(records)
    assert (figures["gis_wins"], figures["gis_ties"], figures["cells"]) == (1, 1, 3)


@pytest.mark.benchmark
def test_mistakes_are_refused_before_torch_is_imported(capsys, monkeypatch):
    """Issue 36, item 3: a misspelt dataset, a bad config value, a misspelt flag and an unknown model are each
    refused without importing torch (benchmarks/fail_fast.py times them; no timing is asserted here)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import fail_fast

    assert fail_fast.main(["--repeats", "1"]) == 0
    figures = dict(pair.split("=") for pair in capsys.readouterr().out.strip().splitlines()[-1].split())
    assert figures["torch_imported"] == "0" and {"dataset_s", "config_s", "flag_s", "model_s"} <= set(figures)


@pytest.mark.benchmark
def test_the_user_model_soup_benchmark_times_every_soup_against_an_ingredient(planetoid_root, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import user_model_soups

    assert user_model_soups.main(["--root", str(planetoid_root), "--epochs", "3", "--ingredients", "2"]) == 0
    figures = dict(pair.split("=") for pair in capsys.readouterr().out.strip().splitlines()[-1].split())
    assert {"ingredient_s", "uniform_s", "greedy_s", "gis_s", "ensemble_s", "slowest_soup_vs_ingredient"} == set(figures)
    # The seconds are printed to 2 decimals (each off by up to 0.005) and the ratio comes from the unrounded ones: the
    # tolerance is that rounding carried through s / i (a 0.59 s ingredient and a 1.5 s soup moved it by 0.028).
    i = float(figures["ingredient_s"])
    s = max(float(figures[k]) for k in ("uniform_s", "greedy_s", "gis_s", "ensemble_s"))
    assert float(figures["slowest_soup_vs_ingredient"]) == pytest.approx(
        s / i, abs=0.0005 + 0.0051 / (i - 0.005) + (s + 0.005) * 0.0051 / (i * (i - 0.005)))


def test_the_answer_chooses_each_kinds_row_on_validation_and_reports_test(tmp_path):
    answer = bench("answer")

    def record(cell, seed, best, gis, long, *, best_val, gis_val, long_val, cap=30):
        return {"cell": cell, "dataset": "Cora", "trunk": 0, "seed": seed, "epoch_cap": cap, "best": best,
                "best_val": best_val, "gis": gis, "gis_val": gis_val, "long": long, "long_val": long_val,
                "soup_seconds": {"gis": 2.0}, "seconds": {"training": 10.0}}

    records = tmp_path / "r.jsonl"
    rows = [record("Cora gcn full", 0, 0.70, 0.72, 0.90, best_val=0.70, gis_val=0.75, long_val=0.71),
            record("Cora gcn full", 1, 0.60, 0.64, 0.90, best_val=0.60, gis_val=0.65, long_val=0.61),
            # a cap rerun lower than the plan's is left out, whatever it scored
            record("Cora gcn full", 2, 0.10, 0.99, 0.99, best_val=0.10, gis_val=0.99, long_val=0.99, cap=10)]
    records.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    lines, last = answer.table([records])
    small = next(line for line in lines if line.startswith("| small"))
    # GIS: validation gain +5 points against the long model's +1, so GIS, though long wins on test (+25 against +3).
    assert "| 2 | 65.00 | 68.00 |" in small and "| GIS soup | +3.00 ± 1.41 | 1 model; 2.00 s of souping |" in small
    assert last[:3] == ["small_row=gis", "small_gain=3.000", "small_gis_gain=3.000"]
