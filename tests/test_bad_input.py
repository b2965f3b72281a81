"""The bad-input matrix, through the command line: each case exits with status 2, prints one message
that names the file or field and a fix, no traceback, and leaves the finished files as they were."""
import hashlib
import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load, save

from ladle.cli import main

SMALL = "csbm:nodes=300,classes=3,features=8"


def fails(argv, capsys, *needles):
    """Run the CLI; it must exit 2 with every needle and a fix in one message on stderr, no traceback."""
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = " ".join((captured.err + captured.out).split())  # rich wraps long lines
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert "fix:" in err and "Traceback" not in err
    assert err.count("error:") == 1
    return err


# ---- datasets


def write_npz(path, **changes):
    arrays = {"node_features": np.ones((6, 2), np.float32), "node_labels": np.array([0, 1, 0, 1, 2, 2]),
              "edges": np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]),
              "train_masks": np.array([[1, 1, 0, 0, 0, 0]], bool), "val_masks": np.array([[0, 0, 1, 1, 0, 0]], bool),
              "test_masks": np.array([[0, 0, 0, 0, 1, 1]], bool)}
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("changes, needles", [
    ({"edges": None}, ["g.npz", "lacks the keys edges"]),
    ({"node_features": np.ones(6, np.float32)}, ["g.npz", "node_features has shape (6,)"]),
    ({"node_features": np.array([["a", "b"]] * 6)}, ["g.npz", "node_features has dtype"]),
    ({"edges": np.array([[0, 9]])}, ["g.npz", "outside [0, 5]"]),
    ({"edges": np.array([[-1, 2]])}, ["g.npz", "outside [0, 5]"]),
    ({"node_labels": np.array([0, 1, 0, 1, 2, -3])}, ["g.npz", "negative"]),
    ({"node_features": np.full((6, 2), np.inf, np.float32)}, ["g.npz", "NaN or infinite"]),
    ({"val_masks": np.array([[1, 0, 1, 1, 0, 0]], bool)}, ["g.npz", "overlap"]),
    ({"test_masks": np.zeros((1, 6), bool)}, ["g.npz", "test_masks selects no nodes"]),
])
def test_bad_npz(tmp_path, capsys, changes, needles):
    path = write_npz(tmp_path / "g.npz", **changes)
    fails(["run", "--dataset", f"npz:{path}", "--out", str(tmp_path / "r")], capsys, *needles)
    assert not (tmp_path / "r").exists()  # nothing half-made


def test_bad_dataset_names_and_files(tmp_path, capsys):
    fails(["run", "--dataset", "Corra", "--out", str(tmp_path / "r")], capsys, "unknown dataset 'Corra'",
          "did you mean 'Cora'")
    fails(["run", "--dataset", "CiteSeer", "--root", str(tmp_path / "empty"), "--out", str(tmp_path / "r")], capsys,
          "CiteSeer", "missing under root", str(tmp_path / "empty"))
    path = write_npz(tmp_path / "g.npz")
    fails(["run", "--dataset", f"npz:{path}#3", "--out", str(tmp_path / "r")], capsys, "split 3 asked for")


# ---- configs


@pytest.mark.parametrize("text, needles", [
    ("ingrediants = 3\n", ["exp.toml", "did you mean 'ingredients'"]),
    ("[train]\nepochs = 'ten'\n", ["exp.toml", "train.epochs must be an integer"]),
    ("[model]\nhiden = 8\n", ["exp.toml", "did you mean 'model.hidden'"]),
    ("granularity = 1\n", ["exp.toml", "granularity must be"]),
    ("dataset = [\n", ["exp.toml", "not valid TOML"]),
])
def test_bad_config_files(tmp_path, capsys, text, needles):
    config = tmp_path / "exp.toml"
    config.write_text(text)
    fails(["run", "--config", str(config), "--out", str(tmp_path / "r")], capsys, *needles)


@pytest.mark.parametrize("flags, needles", [
    (["--epochs", "0"], ["train.epochs must be"]),
    (["--granularity", "1"], ["granularity must be"]),
    (["--sampler", "neighbor", "--fanouts", "0,5"], ["sampler.fanouts"]),
    (["--sampler", "cluster", "--parts", "5000"], ["sampler.parts = 5000", "300 nodes"]),
    (["--partition", "metis", "--parts", "5000"], ["partition.parts = 5000", "300 nodes"]),
    (["--sampler", "cluster", "--parts", "5000", "--workers", "2"], ["sampler.parts = 5000", "300 nodes"]),
    (["--ingredients", "100000"], ["ingredients must be between 1 and 256"]),
    (["--model", "gcnn"], ["unknown model 'gcnn'"]),
])
def test_bad_values(tmp_path, capsys, flags, needles):
    fails(["run", "--dataset", SMALL, *flags, "--out", str(tmp_path / "r")], capsys, *needles)


def test_an_output_folder_that_is_not_a_run_is_left_alone(tmp_path, capsys):
    busy = tmp_path / "mine"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    fails(["run", "--dataset", SMALL, "--out", str(busy)], capsys, str(busy), "not a ladle run")
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]


# ---- checkpoints


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad-input") / "run"
    assert main(["run", "--dataset", SMALL, "--ingredients", "2", "--epochs", "5", "--hidden", "8",
                 "--soups", "uniform,gis", "--out", str(out), "--quiet"]) == 0
    return out


def rewrite(path, state, **sidecar_changes):
    """Write ``state`` as the checkpoint with a consistent checksum and tensor list: only the content is wrong."""
    payload = save(state)
    path.write_bytes(payload)
    sidecar_path = path.with_suffix(".json")
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["sha256"] = hashlib.sha256(payload).hexdigest()
    sidecar["tensors"] = {k: [str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in state.items()}
    for key, value in sidecar_changes.items():
        sidecar[key] = value(sidecar[key]) if callable(value) else value
    sidecar_path.write_text(json.dumps(sidecar))


def truncated(path):
    path.write_bytes(path.read_bytes()[:-7])
    return ["ingredient-01.safetensors", "checksum mismatch"]


def flipped_byte(path):
    payload = bytearray(path.read_bytes())
    payload[-3] ^= 0xFF
    path.write_bytes(bytes(payload))
    return ["ingredient-01.safetensors", "checksum mismatch"]


def other_architecture(path):
    rewrite(path, load(path.read_bytes()), model=lambda m: {**m, "name": "gin"})
    return ["ingredient-01.safetensors", "do not fit the gin model"]


def other_dataset(path):
    rewrite(path, load(path.read_bytes()), dataset=lambda d: {**d, "fingerprint": "0" * 64})
    return ["ingredient-01.safetensors", "different graph"]


def missing_tensor(path):
    state = load(path.read_bytes())
    state.pop("convs.0.bias")
    rewrite(path, state)
    return ["ingredient-01.safetensors", "missing convs.0.bias"]


def extra_tensor(path):
    rewrite(path, {**load(path.read_bytes()), "backdoor.weight": torch.ones(2)})
    return ["ingredient-01.safetensors", "extra backdoor.weight"]


def nan_weights(path):
    state = load(path.read_bytes())
    state["convs.0.lin.weight"][0, 0] = float("nan")
    rewrite(path, state)
    return ["ingredient-01.safetensors", "NaN or infinite", "convs.0.lin.weight"]


def sidecar_disagrees(path):
    sidecar = json.loads(path.with_suffix(".json").read_text())
    sidecar["tensors"]["convs.9.weight"] = ["float32", [1]]
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return ["ingredient-01.safetensors", "disagree with the sidecar"]


def a_pickle(path):
    class Payload:
        def __reduce__(self):
            return (exec, ("open('PWNED', 'w').write('x')",))

    payload = pickle.dumps(Payload())
    path.write_bytes(payload)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    sidecar["sha256"] = hashlib.sha256(payload).hexdigest()  # even with a matching checksum
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    return ["ingredient-01.safetensors", "not a safetensors file"]


@pytest.mark.parametrize("damage", [truncated, flipped_byte, other_architecture, other_dataset, missing_tensor,
                                    extra_tensor, nan_weights, sidecar_disagrees, a_pickle])
def test_damaged_checkpoints_are_refused(finished_run, tmp_path, capsys, monkeypatch, damage):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    monkeypatch.chdir(tmp_path)
    needles = damage(run / "ingredients" / "ingredient-01.safetensors")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    fails(["soup", str(run), "--quiet"], capsys, *needles)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing lost or rewritten
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("name", ["../ingredients/ingredient-00", "/etc/passwd", "gis.safetensors/../../x"])
def test_model_names_cannot_escape_the_run(finished_run, tmp_path, capsys, name):
    fails(["predict", str(finished_run), "--model", name, "--out", str(tmp_path / "p.csv")], capsys,
          "has no model named", "choices:")
    assert not (tmp_path / "p.csv").exists()


def test_a_missing_metis_is_one_clear_error_before_training(monkeypatch, tmp_path):
    import builtins
    import sys

    from ladle.cli import main

    real = builtins.__import__

    def no_pymetis(name, *args, **kwargs):
        if name == "pymetis":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pymetis)
    monkeypatch.delitem(sys.modules, "pymetis", raising=False)
    for flags in (["--sampler", "cluster"], ["--partition", "metis"], ["--soups", "pls"]):
        out = tmp_path / flags[1]
        assert main(["run", "--dataset", "csbm:nodes=200,classes=2,features=4", *flags, "--out", str(out)]) == 2
        assert not out.exists()
    assert main(["run", "--dataset", "csbm:nodes=200,classes=2,features=4", "--partition", "random", "--epochs", "1",
                 "--ingredients", "2", "--out", str(tmp_path / "random"), "--quiet"]) == 0


@pytest.mark.parametrize("spec", ["npz:graphs[v2]/g.npz", "npz:graphs[/v2]/g.npz", "npz:[bold]x.npz"])
def test_brackets_in_user_data_are_printed_as_they_are(spec, tmp_path, capsys, monkeypatch):
    """The CLI prints through rich: markup in a path or name is the user's text, never styling (nor a crash)."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--dataset", spec, "--epochs", "1", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert spec[len("npz:"):] in err and "MarkupError" not in err


def test_every_install_hint_names_the_extra(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pymetis", None)  # as if the metis extra were not installed
    assert main(["run", "--dataset", "csbm:nodes=200,classes=2,features=4", "--sampler", "cluster",
                 "--epochs", "1", "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pip install 'ladle[metis]' (in a clone: pip install -e '.[metis]')" in err


@pytest.mark.parametrize("argv, said", [
    (["train", "--ingrdients", "3"], ["ladle train: error: unrecognized arguments: --ingrdients 3",
                                      "--ingrdients: did you mean --ingredients?"]),
    (["run", "--sampler=cluster", "--fanotus=10,5"], ["ladle run: error:", "--fanotus: did you mean --fanouts?"]),
    (["soup", "RUN", "--methd", "gis"], ["ladle soup: error:", "did you mean --method?"]),
    (["tarin"], ["invalid choice: 'tarin'", "did you mean 'train'?"]),
    (["train", "--zzzzzz"], ["ladle train: error: unrecognized arguments: --zzzzzz\n"]),  # nothing near: no guess
])
def test_a_misspelt_flag_or_command_is_answered_with_the_nearest(argv, said, capsys):
    """Refused by the command's own parser, before anything is loaded, naming the nearest flag of that command."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and all(s in err for s in said), err
