import json
import pickle

import pytest
import torch

from ladle.config import ModelConfig
from ladle.errors import LadleError
from ladle.models import build_model, load_model
from ladle.store import RunDir, atomic_write, read_weights, save_weights


def model_sidecar(config=ModelConfig(hidden=8), in_channels=4, out_channels=3):
    return {"format": "ladle.soup/1", "model": {**config.__dict__, "in_channels": in_channels,
                                                "out_channels": out_channels}}


SIDECAR = model_sidecar()


def test_round_trip_and_load_model(tmp_path):
    model = build_model(ModelConfig(hidden=8), 4, 3, init_seed=0)
    path = tmp_path / "m.safetensors"
    sidecar = save_weights(path, model.state_dict(), model_sidecar())
    assert json.loads(path.with_suffix(".json").read_text())["sha256"] == sidecar["sha256"]
    state, _ = read_weights(path)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    loaded = load_model(path)
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1], [1, 0]])
    assert torch.equal(loaded(x, ei), model.eval()(x, ei)) and not loaded.training
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.safetensors"]  # no temporaries left


def test_truncated_or_changed_weights_are_refused(tmp_path):
    path = tmp_path / "m.safetensors"
    save_weights(path, {"w": torch.ones(3)}, SIDECAR)
    payload = path.read_bytes()
    path.write_bytes(payload[:-4])
    with pytest.raises(LadleError, match="checksum mismatch"):
        read_weights(path)
    path.write_bytes(payload[:-1] + b"\x01")
    with pytest.raises(LadleError, match="checksum mismatch"):
        read_weights(path)


def test_a_pickle_is_never_loaded(tmp_path):
    path = tmp_path / "m.safetensors"
    save_weights(path, {"w": torch.ones(3)}, SIDECAR)

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled!')",))

    payload = pickle.dumps(Boom())
    path.write_bytes(payload)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    import hashlib

    sidecar["sha256"] = hashlib.sha256(payload).hexdigest()  # even with a matching checksum
    path.with_suffix(".json").write_text(json.dumps(sidecar))
    with pytest.raises(LadleError, match="not a safetensors file"):
        read_weights(path)


def test_weights_that_do_not_fit_the_sidecar(tmp_path):
    path = tmp_path / "m.safetensors"
    model = build_model(ModelConfig(hidden=8), 4, 3, init_seed=0)
    save_weights(path, model.state_dict(), model_sidecar(ModelConfig(hidden=16)))
    with pytest.raises(LadleError, match="do not fit the gcn model"):
        load_model(path)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "f.json"
    atomic_write(path, b"old")
    import os

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(LadleError, match=r"cannot write .*f\.json: No space left on device"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_run_dir_refuses_existing_folders(tmp_path):
    from ladle.config import RunConfig

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(LadleError, match="already exists and is not a ladle run"):
        RunDir(tmp_path / "busy").create(RunConfig())
    RunDir(tmp_path / "run").create(RunConfig())
    with pytest.raises(LadleError, match="already exists and is a ladle run"):
        RunDir(tmp_path / "run").create(RunConfig())
    with pytest.raises(LadleError, match="not a ladle run"):
        RunDir(tmp_path / "busy").config()
