"""Callbacks hear every epoch, model and soup in the driver on every engine; each tracker is read back from what it
wrote (TensorBoard events, MLflow's store, W&B's offline run file); a failing callback never stops the run."""
import glob
import json
import struct

import pytest

import ladle
from ladle import api
from ladle.callbacks import MLflowLogger, TensorBoardLogger, WandbLogger, make_loggers
from ladle.cli import main
from ladle.errors import LadleError

SMALL = "csbm:nodes=300,classes=3,features=8"


def config(**engine):
    return {"dataset": SMALL, "ingredients": 2, "train": {"epochs": 3}, "soups": ["uniform", "gis"],
            "engine": {"name": "serial", **engine}}


class Recorder(ladle.Callback):
    def __init__(self):
        self.epochs, self.ended, self.soups, self.closed = [], [], [], 0

    def on_epoch(self, ingredient, epoch, metrics):
        self.epochs.append((ingredient, epoch, metrics))

    def on_ingredient_end(self, ingredient, summary):
        self.ended.append((ingredient, summary))

    def on_soup_end(self, method, summary):
        self.soups.append((method, summary))

    def close(self):
        self.closed += 1


def check_recorded(recorder: Recorder, results: dict, worker_prefix: str):
    names = ["ingredient-00", "ingredient-01"]
    assert sorted({(name, epoch) for name, epoch, _ in recorder.epochs}) == [(n, e) for n in names for e in (1, 2, 3)]
    for _, _, metrics in recorder.epochs:
        assert {"loss", "train", "val", "best_val", "epochs", "worker"} <= set(metrics)
        assert metrics["worker"].startswith(worker_prefix) and metrics["epochs"] == 3
    assert sorted(name for name, _ in recorder.ended) == names
    for name, summary in recorder.ended:
        stored = next(r for r in results["ingredients"] if r["name"] == name)
        assert summary["val"] == pytest.approx(stored["val"])
    assert [m for m, _ in recorder.soups] == ["uniform", "gis"]
    assert recorder.soups[1][1]["val"] == pytest.approx(results["soups"]["gis"]["val"])
    assert recorder.closed == 1


def test_every_hook_fires_on_serial_with_the_epochs_metrics(tmp_path):
    recorder = Recorder()
    results = api.run(config(), tmp_path / "run", callbacks=[recorder], progress=False)
    check_recorded(recorder, results, "serial-")
    # The epochs' metrics are the ones the sidecar's history keeps.
    history = json.loads((tmp_path / "run" / "ingredients" / "ingredient-00.json").read_text())["history"]
    seen = [m["val"] for n, _, m in recorder.epochs if n == "ingredient-00"]
    assert seen == [h["val"] for h in history]


def test_the_process_engine_forwards_its_workers_epochs(tmp_path):
    recorder = Recorder()
    results = api.run(config(name="process", workers=2), tmp_path / "run", callbacks=[recorder], progress=False)
    check_recorded(recorder, results, "process-")


def test_a_failing_callback_is_dropped_and_the_run_finishes(tmp_path, caplog):
    class Broken(ladle.Callback):
        calls = 0

        def on_epoch(self, ingredient, epoch, metrics):
            Broken.calls += 1
            raise OSError("disk full")

    recorder = Recorder()
    api.run(config(), tmp_path / "run", callbacks=[Broken(), recorder], progress=False)
    assert Broken.calls == 1 and len(recorder.epochs) == 6
    assert "Broken failed in on_epoch" in caplog.text
    with pytest.raises(LadleError, match="ladle.Callback"):
        api.run(config(), tmp_path / "other", callbacks=[print], progress=False)


def test_progress_bars_unless_told_not_to(tmp_path, capfd):
    api.run(config(), tmp_path / "quiet", progress=False)
    assert "ingredient-00" not in capfd.readouterr().err
    api.run(config(), tmp_path / "bars")
    err = capfd.readouterr().err
    assert "ingredient-01" in err and "soup gis" in err


def wandb_records(path):
    """The records of a W&B run file: a LevelDB-style log (32 KiB blocks, 7-byte record headers) after its header."""
    from wandb.proto import wandb_internal_pb2 as pb

    raw = open(path, "rb").read()
    assert raw[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or kind == 0:
            pos += left
            continue
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        pending = data if kind in (1, 2) else pending + data
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def test_each_tracker_is_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    loggers = [TensorBoardLogger(tmp_path / "tb"), MLflowLogger(tmp_path / "ml", params={"model.hidden": 64}),
               WandbLogger(tmp_path / "wb")]
    results = api.run(config(), tmp_path / "run", callbacks=loggers, progress=False)
    history = json.loads((tmp_path / "run" / "ingredients" / "ingredient-01.json").read_text())["history"]
    val = [h["val"] for h in history]
    gis = results["soups"]["gis"]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, round(e.value, 5)) for e in events.Scalars("ingredient-01/val")] == \
        [(i + 1, round(v, 5)) for i, v in enumerate(val)]
    assert events.Scalars("soups/gis/test")[0].value == pytest.approx(gis["test"])

    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=loggers[1].uri)
    run = client.search_runs([client.get_experiment_by_name("ladle").experiment_id])[0]
    assert run.data.params == {"model.hidden": "64"} and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "ingredient-01.val")] == \
        [(i + 1, pytest.approx(v)) for i, v in enumerate(val)]
    assert run.data.metrics["soup.gis.val"] == pytest.approx(gis["val"])

    (path,) = glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    rows, summary = [], {}

    def key(item):  # "a/b" is stored whole or as its parts, by version
        return item.key or "/".join(item.nested_key)

    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            rows.append({key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            summary.update({key(item): json.loads(item.value_json) for item in record.summary.update})
    curve = [(r["ingredient-01/epoch"], r["ingredient-01/val"]) for r in rows if "ingredient-01/val" in r]
    assert curve == [(i + 1, pytest.approx(v)) for i, v in enumerate(val)]
    assert summary["soup/gis/test"] == pytest.approx(gis["test"])


def test_the_cli_logs_inside_the_run_and_the_run_stays_verifiable(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    assert main(["run", "--dataset", SMALL, "--ingredients", "2", "--epochs", "2", "--soups", "uniform",
                 "--log", "tensorboard", "--out", str(out), "--quiet"]) == 0
    assert glob.glob(str(out / "logs" / "tensorboard" / "events.out.tfevents.*"))
    assert main(["verify", str(out)]) == 0
    assert main(["run", "--dataset", SMALL, "--log", "tensorbord", "--out", str(tmp_path / "x")]) == 2


def test_a_missing_tracker_package_is_one_clear_error_before_training(monkeypatch, tmp_path):
    import builtins

    real = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.delitem(__import__("sys").modules, "wandb", raising=False)
    with pytest.raises(LadleError, match="needs wandb") as err:
        make_loggers(["wandb"], tmp_path)
    assert "ladle[wandb]" in err.value.fix
    assert main(["run", "--dataset", SMALL, "--log", "wandb", "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()


class StopAt(ladle.Callback):
    """Asks ``names`` (every model when None) to stop once they reach ``epoch``."""

    def __init__(self, epoch: int, names=None):
        self.epoch, self.names, self.asked = epoch, names, []

    def on_epoch(self, ingredient, epoch, metrics):
        if (self.names is None or ingredient in self.names) and epoch >= self.epoch and not metrics.get("stopped"):
            self.asked.append((ingredient, epoch))
            raise ladle.StopIngredient(f"enough at {epoch}")


def sidecar(run, name):
    return json.loads((run / "ingredients" / f"{name}.json").read_text())


def test_a_callback_stops_one_ingredient_at_that_epoch_on_serial_and_the_reason_is_recorded(tmp_path):
    base = {"dataset": SMALL, "ingredients": 2, "train": {"epochs": 6, "patience": 0}, "soups": ["uniform"],
            "engine": {"name": "serial"}}
    stop = StopAt(2, names={"ingredient-01"})
    results = api.run(base, tmp_path / "run", callbacks=[stop], progress=False)
    assert stop.asked == [("ingredient-01", 2)]  # asked once: the model stopped at the epoch it was asked at
    stopped = sidecar(tmp_path / "run", "ingredient-01")
    assert stopped["stopped"] == {"reason": "enough at 2", "asked_at_epoch": 2, "by": "StopAt", "epoch": 2}
    assert stopped["epochs_trained"] == 2 and [h["epoch"] for h in stopped["history"]] == [1, 2]
    other = sidecar(tmp_path / "run", "ingredient-00")
    assert other["epochs_trained"] == 6 and "stopped" not in other
    entry = next(r for r in results["ingredients"] if r["name"] == "ingredient-01")
    assert entry["stopped"]["reason"] == "enough at 2"
    # What it keeps is what a 2-epoch cap gives: its best validated weights of epochs 1 and 2, bit for bit.
    capped = api.train({**base, "train": {"epochs": 2, "patience": 0}}, tmp_path / "capped", progress=False)[0]
    from ladle.store import RunDir

    mine, _ = RunDir(tmp_path / "run").load_checkpoint(RunDir(tmp_path / "run").config().ingredient_specs()[1])
    theirs, _ = RunDir(capped.path).load_checkpoint(RunDir(capped.path).config().ingredient_specs()[1])
    assert all(mine[k].equal(theirs[k]) for k in theirs)
    table = (tmp_path / "run" / "report.md").read_text()
    assert "stopped by a callback at epoch 2: enough at 2" in table


@pytest.mark.parametrize("workers", [2])
def test_a_callback_stops_the_ingredients_of_process_workers(tmp_path, workers):
    """The stop travels to the worker, which ends at the first epoch end after it arrives (well before the cap)."""
    cap = 3000
    run = {"dataset": SMALL, "ingredients": 2, "train": {"epochs": cap, "patience": 0}, "soups": ["uniform"],
           "engine": {"name": "process", "workers": workers}}
    api.run(run, tmp_path / "run", callbacks=[StopAt(1)], progress=False)
    for name in ("ingredient-00", "ingredient-01"):
        stopped = sidecar(tmp_path / "run", name)["stopped"]
        assert stopped["asked_at_epoch"] == 1 and stopped["reason"] == "enough at 1"
        assert 1 <= stopped["epoch"] < cap and sidecar(tmp_path / "run", name)["epochs_trained"] == stopped["epoch"]


def test_stop_ingredient_raised_outside_on_epoch_is_ignored_and_logged(tmp_path, caplog):
    class Odd(ladle.Callback):
        def on_ingredient_end(self, ingredient, summary):
            raise ladle.StopIngredient("too late")

    odd = Odd()
    api.run(config(), tmp_path / "run", callbacks=[odd], progress=False)
    assert "where nothing trains" in caplog.text
    assert all("stopped" not in sidecar(tmp_path / "run", n) for n in ("ingredient-00", "ingredient-01"))
