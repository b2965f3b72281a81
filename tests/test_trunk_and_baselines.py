"""The shared trunk, early stopping, the K-times-budget baseline and the metric of binary graphs."""
import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from ladle import api
from ladle.cli import main
from ladle.config import build_config
from ladle.data import load_graph
from ladle.store import RunDir
from ladle.trainer import train_ingredient

SMALL = "csbm:nodes=400,classes=3,features=8"


def config(**changes):
    values = {"dataset": SMALL, "ingredients": 3, "model": {"hidden": 8}, "train": {"epochs": 6},
              "trunk": {"epochs": 4}, "soups": ["uniform", "gis"]}
    values.update(changes)
    return build_config(values)


def weights(run):
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*.safetensors"))}


@pytest.fixture(scope="module")
def trunk_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trunk") / "run"
    api.run(config(baseline="long"), out)
    return out


def test_the_trunk_is_trained_once_and_every_ingredient_starts_from_it(trunk_run):
    run, cfg = RunDir(trunk_run), config(baseline="long")
    graph = load_graph(SMALL)
    trunk_state, trunk = run.load_checkpoint(cfg.trunk_spec())
    assert [t["name"] for t in run.timeline()].count("trunk") == 1
    assert trunk["train"]["epochs"] == 4 and trunk["epochs_trained"] == 4
    for spec in cfg.ingredient_specs():
        stored, sidecar = run.load_ingredient(spec.name)
        assert sidecar["trunk_sha256"] == trunk["sha256"] and sidecar["trunk_epochs"] == 4
        again = train_ingredient(spec, graph, start_state=trunk_state).state  # the trunk, then its own steps
        assert all(torch.equal(stored[k], again[k]) for k in stored)
        fresh = train_ingredient(replace(spec, trunk_epochs=0), graph).state
        assert any(not torch.equal(stored[k], fresh[k]) for k in stored)
    _, long = run.load_checkpoint(cfg.long_spec())
    assert long["trunk_sha256"] == trunk["sha256"]


def test_the_long_baseline_has_k_times_the_budget_and_is_a_row_of_the_report(trunk_run):
    cfg = config(baseline="long")
    _, long = RunDir(trunk_run).load_checkpoint(cfg.long_spec())
    assert long["train"]["epochs"] == 3 * 6 and long["train"]["patience"] == 0
    assert long["seeds"]["data"] not in {s.data_seed for s in cfg.ingredient_specs()}
    results = json.loads((trunk_run / "results.json").read_text())
    row = results["baselines"]["long"]
    assert row["scores"] == "recomputed" and row["epochs"] == 18
    assert row["gain_test"] == pytest.approx(row["test"] - results["best_ingredient"]["test"])
    assert "single model, 3x budget" in (trunk_run / "report.md").read_text()
    assert results["trunk"]["epochs"] == 4
    patient = config(baseline="long", train={"epochs": 6, "patience": 2})
    assert patient.long_spec().train.patience == 6


def test_a_look_at_the_weights_after_each_epoch_changes_nothing(trunk_run):
    """benchmarks/averaging.py averages the long model's weights over its epochs through ``after_epoch``, scoring a
    copy each time: the model trained beside it is still the stored one, bit for bit, and the hook sees every
    epoch's weights."""
    from ladle.evaluation.evaluator import split_scores
    from ladle.models import build_model

    run, cfg = RunDir(trunk_run), config(baseline="long")
    graph = load_graph(SMALL)
    trunk_state, _ = run.load_checkpoint(cfg.trunk_spec())
    stored, _ = run.load_checkpoint(cfg.long_spec())
    spec = cfg.long_spec()
    shadow = build_model(spec.model, graph.num_features, graph.num_classes)
    seen = []

    def look(epoch, model):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        shadow.load_state_dict(seen[-1])
        split_scores(shadow, graph, ("val", "test"))

    record = train_ingredient(spec, graph, start_state=trunk_state, after_epoch=look)
    assert len(seen) == record.epochs_trained == 18
    assert all(torch.equal(stored[k], record.state[k]) for k in stored)
    best = seen[record.best_epoch - 1]
    assert all(torch.equal(best[k], record.state[k]) for k in best)  # what it saw is what was validated


def test_the_long_model_keeps_the_average_of_its_weights_as_a_second_baseline(trunk_run):
    """The long model's SWA (the strongest single-model baseline: no other worker, no more steps) is stored
    beside it as long-swa: the float64 mean of the long model's weights at the end of epochs 1..its best
    epoch, the best by validation; tracking it changes nothing of the long model, and it is a row of the report
    that `ladle verify` checks."""
    run, cfg = RunDir(trunk_run), config(baseline="long")
    graph = load_graph(SMALL)
    trunk_state, trunk = run.load_checkpoint(cfg.trunk_spec())
    long, swa = cfg.baseline_specs()
    assert (long.role, swa.role, swa.train.average, long.train.average) == ("long", "long-swa", "swa", "none")
    stored_long, _ = run.load_checkpoint(long)
    stored_swa, sidecar = run.load_checkpoint(swa)
    assert sidecar["average_of"] == "long" and sidecar["trunk_sha256"] == trunk["sha256"]
    assert (trunk_run / "baselines" / "long-swa.safetensors").exists()
    seen = []
    alone = train_ingredient(replace(long, track_average="none"), graph, start_state=trunk_state,
                             after_epoch=lambda e, m: seen.append(
                                 {k: v.detach().to(torch.float64, copy=True) for k, v in m.state_dict().items()}))
    assert all(torch.equal(stored_long[k], alone.state[k]) for k in stored_long)  # tracking took nothing from it
    assert alone.companion is None and len(seen) == 18
    history = [h["val"] for h in sidecar["history"]]
    assert len(history) == 18 and sidecar["best_epoch"] == history.index(max(history)) + 1
    upto = seen[:sidecar["best_epoch"]]
    for k, kept in stored_swa.items():
        assert torch.allclose(kept.to(torch.float64), sum(s[k] for s in upto) / len(upto), atol=1e-6)
    results = json.loads((trunk_run / "results.json").read_text())
    row = results["baselines"]["long-swa"]
    assert row["scores"] == "recomputed" and row["average"] == "swa" and row["best_epoch"] == sidecar["best_epoch"]
    assert f"single model, 3x budget (SWA of its weights, best at epoch {row['best_epoch']})" in \
        (trunk_run / "report.md").read_text()
    lines = [json.loads(line) for line in (trunk_run / "results.jsonl").read_text().splitlines()]
    assert [(r["name"], r["test"]) for r in lines if r["kind"] == "baseline"] == \
        [(n, results["baselines"][n]["test"]) for n in ("long", "long-swa")]
    assert main(["verify", str(trunk_run)]) == 0
    averaged = config(baseline="long", train={"epochs": 6, "average": "ema"})
    assert [s.role for s in averaged.baseline_specs()] == ["long"]  # already averaged: nothing more to track


def test_the_baselines_serve_predictions_like_a_soup(trunk_run, tmp_path, capsys):
    """Where one model's SWA is the best row, a user must be able to use it: `ladle predict --model long-swa`
    writes that model's predictions (its test accuracy recomputed from the CSV is the report's)."""
    import csv

    from ladle.store import load_model

    results = json.loads((trunk_run / "results.json").read_text())
    y = load_graph(SMALL).data.y.tolist()
    for name in ("long", "long-swa"):
        assert isinstance(load_model(trunk_run, name), torch.nn.Module)
        out = tmp_path / f"{name}.csv"
        assert main(["predict", str(trunk_run), "--model", name, "--out", str(out)]) == 0
        test = [r for r in csv.DictReader(out.open()) if r["split"] == "test"]
        accuracy = sum(int(r["prediction"]) == y[int(r["node"])] for r in test) / len(test)
        assert accuracy == pytest.approx(results["baselines"][name]["test"])
    capsys.readouterr()
    assert main(["predict", str(trunk_run), "--model", "trunk", "--out", str(tmp_path / "t.csv")]) == 2
    printed = capsys.readouterr()
    assert "choices: gis, uniform, long, long-swa, ingredient-00" in printed.out + printed.err


@pytest.mark.parametrize("stop_at", ["trunk", "ingredient-01"])
def test_a_run_stopped_in_the_trunk_or_the_ingredients_resumes_bit_identical(trunk_run, tmp_path, monkeypatch,
                                                                            stop_at):
    import ladle.engines.base as base

    real = base.train_ingredient

    def stop(spec, *args, **kwargs):
        if spec.name == stop_at:
            raise KeyboardInterrupt
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(base, "train_ingredient", stop)
    out = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        api.run(config(baseline="long"), out)
    monkeypatch.undo()
    assert (out / "trunk" / "trunk.json").exists() == (stop_at != "trunk")
    api.resume(out)
    assert weights(out) == weights(trunk_run)


@pytest.mark.parametrize("engine", [{"workers": 2}, {"name": "ray"}], ids=["process", "ray"])
def test_every_engine_trains_the_same_trunk_and_ingredients(trunk_run, tmp_path, engine, monkeypatch):
    """On Ray the trunk goes to each task from the driver, which read and checked it (no node reads the run)."""
    if engine.get("name") == "ray":
        pytest.importorskip("ray")
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "two"
    api.run(config(baseline="long", engine=engine), out)
    assert weights(out) == weights(trunk_run)


def test_early_stopping_stops_where_a_hand_made_validation_curve_says(monkeypatch):
    import importlib

    train = importlib.import_module("ladle.trainer")  # (the package's ``train`` is the pipeline function)
    curve = iter([0.1, 0.5, 0.4, 0.45, 0.3, 0.9, 0.95])  # best at epoch 2, then two without a better one

    def scripted(model, graph, splits=("train", "val", "test"), chunk_size=0):
        return {s: (next(curve) if s == "val" else 0.0) for s in splits} if "val" in splits and len(splits) == 2 \
            else {s: 0.0 for s in splits}

    monkeypatch.setattr(train, "split_scores", scripted)
    spec = replace(config().ingredient_specs()[0], trunk_epochs=0)
    spec = replace(spec, train=replace(spec.train, epochs=7, patience=2))
    record = train.train_ingredient(spec, load_graph(SMALL))
    assert (record.epochs_trained, record.best_epoch) == (4, 2)
    assert [h["epoch"] for h in record.history] == [1, 2, 3, 4]


def test_an_edited_trunk_setting_is_refused_on_resume(trunk_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trunk_run, run)
    text = (run / "config.toml").read_text()
    (run / "config.toml").write_text(text.replace("[trunk]\nepochs = 4", "[trunk]\nepochs = 5"))
    assert main(["run", "--resume", str(run), "--quiet"]) == 2
    assert "trunk.epochs" in " ".join(capsys.readouterr().err.split())


def binary_graph(path, **extra):
    rng = np.random.default_rng(0)
    n = 300
    labels = (rng.random(n) < 0.2).astype(np.int64)  # a minority class: accuracy rewards the majority
    features = rng.normal(size=(n, 6)).astype(np.float32) + labels[:, None] * 0.8
    edges = rng.integers(0, n, (4 * n, 2))
    split = rng.random(n)
    np.savez(path, node_features=features, node_labels=labels, edges=edges, train_masks=split < 0.5,
             val_masks=(split >= 0.5) & (split < 0.75), test_masks=split >= 0.75, **extra)
    return path


def test_binary_graphs_are_scored_by_rocauc_unless_told_otherwise(tmp_path, capsys):
    path = binary_graph(tmp_path / "b.npz")
    assert load_graph(f"npz:{path}").metric == "rocauc"
    assert load_graph(f"npz:{binary_graph(tmp_path / 'a.npz', metric=np.array('acc'))}").metric == "acc"
    run = tmp_path / "run"
    assert main(["run", "--dataset", f"npz:{path}", "--model", "mlp", "--ingredients", "2", "--epochs", "5",
                 "--soups", "gis", "--out", str(run), "--quiet"]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["dataset"]["metric"] == "rocauc"
    assert 0.0 <= results["soups"]["gis"]["test"] <= 1.0
    flagged = tmp_path / "flagged"
    assert main(["run", "--dataset", f"npz:{path}", "--model", "mlp", "--ingredients", "2", "--epochs", "5",
                 "--soups", "gis", "--metric", "acc", "--out", str(flagged), "--quiet"]) == 0
    assert json.loads((flagged / "results.json").read_text())["dataset"]["metric"] == "acc"
    assert main(["run", "--dataset", SMALL, "--metric", "f1", "--out", str(tmp_path / "x")]) == 2
    assert "does not fit" in capsys.readouterr().err


def test_rocauc_of_class_ids_uses_class_ones_log_odds():
    from ladle.evaluation.metrics import rocauc, score_logits

    y = torch.tensor([0, 0, 1, 1, 0])
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.5], [0.0, 1.0], [1.0, 3.0], [0.0, -1.0]])
    assert score_logits("rocauc", logits, y) == rocauc(y, logits[:, 1] - logits[:, 0])
    assert score_logits("rocauc", logits, y) == pytest.approx(5 / 6)  # 5 of the 6 positive-negative pairs ordered


@pytest.mark.parametrize("kind", ["swa", "ema"])
def test_weight_averaging_keeps_the_average_it_validated(kind):
    """train.average: the kept weights are the mean (swa) or the moving average (ema) of the weights at the end
    of each epoch up to the best-validated one, computed here by hand in float64; the trunk stays unaveraged."""
    cfg = config(train={"epochs": 6, "average": kind, "ema_decay": 0.6}, baseline="long")
    spec, graph = cfg.ingredient_specs()[0], load_graph(SMALL)
    seen = []
    record = train_ingredient(spec, graph, after_epoch=lambda e, m: seen.append(
        {k: v.detach().to(torch.float64, copy=True) for k, v in m.state_dict().items()}))
    assert len(seen) == 6 and 1 <= record.best_epoch <= 6
    upto = seen[:record.best_epoch]
    for k, kept in record.state.items():
        if kind == "swa":
            expected = sum(s[k] for s in upto) / len(upto)
        else:
            expected = upto[0][k]
            for s in upto[1:]:
                expected = 0.6 * expected + 0.4 * s[k]
        assert torch.allclose(kept.to(torch.float64), expected, atol=1e-6)
    if record.best_epoch > 1:  # the average, not the last weights it saw
        assert any(not torch.allclose(kept.to(torch.float64), upto[-1][k]) for k, kept in record.state.items())
    assert cfg.trunk_spec().train.average == "none" and cfg.long_spec().train.average == kind
    assert "average" in cfg.identity()["train"] and "average" not in config().identity()["train"]

