"""End to end through the CLI and the API, on a small csbm and on Cora."""
import csv
import json

import pytest
import torch

from ladle import api, load_model
from ladle.cli import main
from ladle.config import build_config
from ladle.errors import LadleError
from ladle.store import RunDir

SMALL = "csbm:nodes=400,classes=3,features=8,degree=6,signal=0.7"


def small_config(**extra):
    values = {"dataset": SMALL, "ingredients": 3, "train": {"epochs": 25}, "model": {"hidden": 16}}
    values.update(extra)
    return build_config(values)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "small"
    code = main(["run", "--dataset", SMALL, "--ingredients", "3", "--epochs", "25", "--hidden", "16",
                 "--out", str(out), "--quiet"])
    assert code == 0
    return out


def test_run_writes_every_file(small_run):
    names = {p.name for p in small_run.iterdir()}
    assert {"config.toml", "ingredients", "soups", "results.json", "results.jsonl", "report.md", "plots"} <= names
    assert sorted(p.name for p in (small_run / "ingredients").iterdir()) == [
        f"ingredient-0{i}.{ext}" for i in range(3) for ext in ("json", "safetensors")]
    assert {p.name for p in (small_run / "soups").iterdir()} == {
        "uniform.json", "uniform.safetensors", "greedy.json", "greedy.safetensors", "gis.json",
        "gis.safetensors", "ensemble.json"}
    assert {p.name for p in (small_run / "plots").iterdir()} == {"ingredients_vs_soups.png", "gis_curves.png",
                                                                 "timeline.png"}
    sidecar = json.loads((small_run / "ingredients" / "ingredient-01.json").read_text())
    assert {"spec", "seeds", "history", "dataset", "model", "sha256"} - set(sidecar) == {"spec"}
    assert len(sidecar["history"]) == 25 and sidecar["dataset"]["fingerprint"]


def test_results_json_shape_and_honesty(small_run):
    results = json.loads((small_run / "results.json").read_text())
    assert {"name", "val", "test"} <= set(results["ingredients"][0])
    assert set(results["best_ingredient"]) == {"name", "val", "test"}
    best = max(results["ingredients"], key=lambda r: r["val"])
    assert results["best_ingredient"]["name"] == best["name"]  # chosen by validation
    for name in ("uniform", "greedy", "gis", "ensemble"):
        assert {"val", "test", "seconds"} <= set(results["soups"][name])
    assert results["soups"]["ensemble"]["is_soup"] is False
    # GIS and greedy start from the best ingredient and never accept a drop on validation.
    assert results["soups"]["gis"]["val"] >= best["val"]
    assert results["soups"]["greedy"]["val"] >= best["val"]
    lines = (small_run / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 + 4 and all(json.loads(line) for line in lines)


def test_soup_command_reproduces_weights_bit_for_bit(small_run):
    before = {p.name: p.read_bytes() for p in (small_run / "soups").glob("*.safetensors")}
    assert main(["soup", str(small_run), "--quiet"]) == 0
    after = {p.name: p.read_bytes() for p in (small_run / "soups").glob("*.safetensors")}
    assert before == after
    assert main(["soup", str(small_run), "--method", "GIS", "--quiet"]) == 0
    assert (small_run / "soups" / "gis.safetensors").read_bytes() == before["gis.safetensors"]


def test_same_config_gives_bit_identical_ingredients(tmp_path):
    a, _, _ = api.train(small_config(ingredients=2), tmp_path / "a")
    b, _, _ = api.train(small_config(ingredients=2), tmp_path / "b")
    states_a = [a.load_ingredient(n)[0] for n in a.ingredient_names()]
    states_b = [b.load_ingredient(n)[0] for n in b.ingredient_names()]
    for sa, sb in zip(states_a, states_b):
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # Different data seeds: the two ingredients differ.
    assert any(not torch.equal(states_a[0][k], states_a[1][k]) for k in states_a[0])


def test_shared_initialisation_by_default(tmp_path):
    from ladle.models import build_model

    config = small_config(init="shared")
    specs = config.ingredient_specs()
    assert len({s.init_seed for s in specs}) == 1 and len({s.data_seed for s in specs}) == len(specs)
    first = [build_model(config.model, 8, 3, init_seed=s.init_seed).state_dict() for s in specs]
    assert all(torch.equal(first[0][k], other[k]) for other in first[1:] for k in first[0])
    independent = small_config(init="independent").ingredient_specs()
    assert len({s.init_seed for s in independent}) == len(independent)
    other = build_model(config.model, 8, 3, init_seed=independent[1].init_seed).state_dict()
    assert not torch.equal(other["convs.0.lin.weight"], first[0]["convs.0.lin.weight"])


def test_load_model_and_predict(small_run, tmp_path):
    model = load_model(small_run, "gis")
    assert isinstance(model, torch.nn.Module) and not model.training
    out = tmp_path / "preds.csv"
    assert main(["predict", str(small_run), "--model", "gis", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 400 and {r["split"] for r in rows} == {"train", "val", "test"}
    assert {r["prediction"] for r in rows} <= {"0", "1", "2"}
    # The predictions are the soup's: test accuracy recomputed from the CSV equals results.json.
    from ladle.data import load_graph

    graph = load_graph(SMALL)
    y = graph.data.y.tolist()
    test_rows = [r for r in rows if r["split"] == "test"]
    acc = sum(int(r["prediction"]) == y[int(r["node"])] for r in test_rows) / len(test_rows)
    assert acc == pytest.approx(json.loads((small_run / "results.json").read_text())["soups"]["gis"]["test"])
    assert main(["predict", str(small_run), "--model", "ensemble", "--out", str(out), "--force"]) == 0


def test_predict_gives_probabilities_logits_and_embeddings(small_run, tmp_path):
    """``ladle.predict`` and ``ladle predict --output``, each output recomputed here from the stored models."""
    import numpy as np

    import ladle
    from ladle.data import load_graph
    from ladle.evaluation.evaluator import whole_graph_logits

    graph = load_graph(SMALL)
    soup = load_model(small_run, "gis")
    logits = whole_graph_logits(soup, graph)
    torch.testing.assert_close(ladle.predict(small_run, "gis", "logits", graph=graph.data), logits, rtol=0, atol=0)
    proba = ladle.predict(small_run, "gis", graph=graph)
    torch.testing.assert_close(proba, torch.softmax(logits, -1), rtol=0, atol=0)
    members = [load_model(small_run, f"ingredient-{i:02d}") for i in range(3)]
    mean = sum(torch.softmax(whole_graph_logits(m, graph), -1) for m in members) / 3
    torch.testing.assert_close(ladle.predict(small_run, "ensemble", "proba", graph=graph), mean, rtol=0, atol=1e-6)
    ensemble_logits = ladle.predict(small_run, "ensemble", "logits", graph=graph)
    assert torch.equal(ensemble_logits.argmax(-1), mean.argmax(-1))
    # embeddings: what the last layer reads, so that layer on them gives the logits
    embeddings = ladle.predict(small_run, "gis", "embeddings", graph=graph)
    assert embeddings.shape == (400, 16) and bool((embeddings >= 0).all())  # after the ReLU
    with torch.no_grad():
        again = soup.sparse_conv(soup.convs[-1], embeddings, graph.adj_t(soup.adjacency))
    torch.testing.assert_close(again, logits, rtol=0, atol=1e-5)
    # the CLI: .npy in node order, CSV with a column per class
    for output, shape in (("proba", (400, 3)), ("labels", (400,)), ("embeddings", (400, 16))):
        assert main(["predict", str(small_run), "--output", output, "--out", str(tmp_path / f"{output}.npy")]) == 0
        assert np.load(tmp_path / f"{output}.npy", allow_pickle=False).shape == shape
    assert np.array_equal(np.load(tmp_path / "labels.npy"), logits.argmax(-1).numpy())
    assert main(["predict", str(small_run), "--output", "logits", "--out", str(tmp_path / "l.csv")]) == 0
    rows = list(csv.reader((tmp_path / "l.csv").open()))
    assert rows[0] == ["node", "split", "c0", "c1", "c2"] and len(rows) == 401
    torch.testing.assert_close(torch.tensor([[float(v) for v in r[2:]] for r in rows[1:]]), logits, rtol=1e-6, atol=1e-6)
    with pytest.raises(LadleError, match="ensemble has no embeddings"):
        ladle.predict(small_run, "ensemble", "embeddings", graph=graph)


def test_report_command_and_table(small_run, capsys):
    assert main(["report", str(small_run)]) == 0
    printed = capsys.readouterr().out
    assert "best ingredient" in printed and "gis" in printed and "not a soup" in printed
    assert "| gis |" in (small_run / "report.md").read_text()


def test_soup_refuses_ingredients_of_another_graph(small_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(small_run, copy)
    config = (copy / "config.toml").read_text().replace("signal=0.7", "signal=0.8")
    (copy / "config.toml").write_text(config)
    assert main(["soup", str(copy), "--quiet"]) == 2


def test_cora_end_to_end(planetoid_root, tmp_path):
    config = build_config({"dataset": "Cora", "root": str(planetoid_root), "ingredients": 2,
                           "train": {"epochs": 40}, "soups": ["uniform", "gis"], "granularity": 5})
    results = api.run(config, tmp_path / "cora")
    assert results["dataset"]["name"] == "Cora"
    assert results["best_ingredient"]["test"] > 0.7
    assert results["soups"]["gis"]["val"] >= results["best_ingredient"]["val"]
    assert RunDir(tmp_path / "cora").config() == config


@pytest.mark.parametrize("argv, needle", [
    (["run", "--dataset", "Corra"], "did you mean 'Cora'"),
    (["run", "--epochs", "0"], "train.epochs must be"),
    (["run", "--soups", "gis,greedie"], "unknown soup method 'greedie'"),
    (["run", "--model", "gcnn"], "unknown model"),
    (["soup", "/nonexistent/run"], "is not a ladle run"),
    (["run", "--device", "cuda:64"], "CUDA GPU"),  # none visible here; on a GPU host, fewer than 65
])
def test_cli_errors_are_one_clear_message(argv, needle, capsys, tmp_path):
    if argv[0] == "run":
        argv = argv + ["--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_config_file_with_flag_override(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f'dataset = "{SMALL}"\ningredients = 2\nsoups = ["uniform"]\n[train]\nepochs = 5\n'
                   '[model]\nname = "sage"\nhidden = 8\n')
    out = tmp_path / "r"
    assert main(["run", "--config", str(cfg), "--hidden", "12", "--out", str(out), "--quiet"]) == 0
    saved = RunDir(out).config()
    assert saved.model.name == "sage" and saved.model.hidden == 12 and saved.soups == ("uniform",)


def test_training_keeps_the_best_validation_weights():
    from ladle.data import load_graph
    from ladle.evaluation import split_scores
    from ladle.models import build_model
    from ladle.trainer import train_ingredient

    graph = load_graph(SMALL)
    spec = small_config(train={"epochs": 30, "eval_every": 3}).ingredient_specs()[0]
    record = train_ingredient(spec, graph)
    vals = [h["val"] for h in record.history]
    assert [h["epoch"] for h in record.history] == list(range(3, 31, 3))
    assert record.val == max(vals)
    assert record.best_epoch == record.history[vals.index(max(vals))]["epoch"]  # ties keep the earlier epoch
    model = build_model(spec.model, graph.num_features, graph.num_classes)
    model.load_state_dict(record.state)
    assert split_scores(model, graph)["val"] == record.val


def test_the_table_says_what_is_noise_and_where_equal_compute_is(small_run, capsys):
    """Issue 36, item 4: a gain within the ingredients' test spread is marked, the closing lines say what the
    seconds are and point to the equal-compute baseline, ingredients show their training seconds."""
    results = json.loads((small_run / "results.json").read_text())
    assert main(["report", str(small_run)]) == 0
    out = capsys.readouterr().out
    std = results["ingredient_mean"]["test_std"]
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    for name, soup in results["soups"].items():
        row = next(line for label, line in rows.items() if label.startswith(name))
        assert ("≈" in row) == (abs(soup["gain_test"]) <= std), name
    for ingredient in results["ingredients"]:
        assert f"{ingredient['seconds']:.2f}" in rows[ingredient["name"]]
    assert "seconds: training for ingredients and baselines, souping for soups." in out
    assert "Equal compute: add --baseline long (one model, 3x budget, its SWA) or ddp." in out
    report = (small_run / "report.md").read_text()
    assert "--baseline long" in report and ("≈" in report) == any("≈" in line for line in rows.values())


def test_the_progress_bars_show_the_seconds_results_json_records():
    from rich.console import Console

    from ladle.callbacks import ProgressBar

    console = Console(record=True, width=120, force_terminal=False)
    bar = ProgressBar(console)
    bar.on_epoch("ingredient-00", 1, {"epochs": 1, "best_val": 0.5, "worker": "serial-0"})
    bar.on_ingredient_end("ingredient-00", {"val": 0.5, "test": 0.5, "seconds": 12.345, "worker": "", "host": ""})
    bar.on_soup_end("uniform", {"val": 0.6, "test": 0.6, "seconds": 0.25, "is_soup": True})
    bar.progress.refresh()
    bar.close()
    text = console.export_text()
    assert "12.35s" in text and "0.25s" in text


def test_output_fits_80_columns_and_cuts_no_name(small_run):
    """Issue 36, item 6: ``verify`` shows every file's name whole, ``examples`` every description to its end, and
    neither is wider than an 80-column terminal."""
    import os
    import subprocess
    import sys

    from rich.cells import cell_len

    env = {**os.environ, "COLUMNS": "80", "LINES": "50"}
    out = {}
    for command in (["verify", str(small_run)], ["examples"]):
        done = subprocess.run([sys.executable, "-m", "ladle.cli", *command], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        out[command[0]] = done.stdout
        assert max(cell_len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    for name in ("ingredient-00.safetensors", "ingredient-02.json", "gis.safetensors", "config.toml"):
        assert f"│ {name} " in out["verify"]
    joined = " ".join(line.strip("│ ").split("│")[-1].strip() for line in out["examples"].splitlines())
    assert "fitted on the validation nodes (so its validation score is not a selection signal)." in " ".join(
        joined.split())


def test_run_over_seeds_gives_one_run_per_seed_and_a_mean_and_std_per_row(tmp_path, capsys):
    import statistics

    out = tmp_path / "seeds"
    assert main(["run", "--dataset", SMALL, "--ingredients", "2", "--epochs", "5", "--hidden", "8",
                 "--soups", "uniform,gis", "--seeds", "0,3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    per_seed = {s: json.loads((out / f"seed-{s}" / "results.json").read_text()) for s in (0, 3)}
    assert [json.loads((out / f"seed-{s}" / "config.toml").read_text().split("seed = ")[1].split("\n")[0])
            for s in (0, 3)] == [0, 3]
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["label"]: r for r in summary["rows"]}
    assert summary["seeds"] == [0, 3] and set(rows) == {"best ingredient (by val)", "uniform", "gis"}
    tests = [100 * per_seed[s]["soups"]["gis"]["test"] for s in (0, 3)]
    assert rows["gis"]["test"]["values"] == tests
    assert rows["gis"]["test"]["mean"] == statistics.fmean(tests) and rows["gis"]["test"]["std"] == statistics.stdev(tests)
    gains = [100 * per_seed[s]["soups"]["uniform"]["gain_test"] for s in (0, 3)]
    assert rows["uniform"]["gain"]["mean"] == pytest.approx(statistics.fmean(gains))
    assert f"{statistics.fmean(tests):.2f} ± {statistics.stdev(tests):.2f}" in printed
    assert "| gis |" in (out / "summary.md").read_text()
    assert main(["run", "--dataset", SMALL, "--seed", "1", "--seeds", "0,1", "--out", str(tmp_path / "x")]) == 2
    assert "--seed and --seeds were both given" in capsys.readouterr().err
