import hashlib
import json
import pickle

import pytest
import torch

from ladle.config import ModelConfig
from ladle.errors import LadleError
from ladle.models import build_model
from ladle.store import RunDir, atomic_write, load_model, read_weights, save_weights


def model_sidecar(config=ModelConfig(hidden=8), in_channels=4, out_channels=3):
    return {"format": "ladle.soup/1", "model": {**config.__dict__, "in_channels": in_channels,
                                                "out_channels": out_channels}}


SIDECAR = model_sidecar()


def test_round_trip_and_load_model(tmp_path):
    model = build_model(ModelConfig(hidden=8), 4, 3, init_seed=0)
    path = tmp_path / "m.safetensors"
    sidecar = save_weights(path, model.state_dict(), model_sidecar())
    assert json.loads(path.with_suffix(".json").read_text())["sha256"] == sidecar["sha256"] == \
        hashlib.sha256(path.read_bytes()).hexdigest()  # the checksum of the file's bytes, as anyone computes it
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


def _append_many(path, writer, count):
    from ladle.files import append_jsonl

    for i in range(count):
        append_jsonl(path, {"writer": writer, "i": i}, root=path.parent)


def test_appends_from_several_processes_are_all_kept(tmp_path):
    import multiprocessing as mp

    from ladle.files import read_jsonl

    log = tmp_path / "timeline.jsonl"
    ctx = mp.get_context("fork")
    writers = [ctx.Process(target=_append_many, args=(log, w, 60)) for w in range(4)]
    for p in writers:
        p.start()
    for p in writers:
        p.join()
    records, torn = read_jsonl(log, root=tmp_path)
    assert not torn and sorted((r["writer"], r["i"]) for r in records) == [(w, i) for w in range(4) for i in range(60)]
    for w in range(4):  # each writer's lines in its own order
        assert [r["i"] for r in records if r["writer"] == w] == list(range(60))


def test_an_append_after_a_torn_line_drops_the_torn_line(tmp_path):
    from ladle.files import append_jsonl, read_jsonl

    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"a": 1}\n{"b": ')  # a crash mid-append
    append_jsonl(log, {"c": 3}, root=tmp_path)
    assert log.read_bytes() == b'{"a": 1}\n{"c": 3}\n' and read_jsonl(log, root=tmp_path) == ([{"a": 1}, {"c": 3}], False)
    only = tmp_path / "only.jsonl"
    only.write_bytes(b'{"a"')
    append_jsonl(only, {"c": 3}, root=tmp_path)
    assert only.read_bytes() == b'{"c": 3}\n'


def test_a_second_writer_of_a_run_is_refused_with_the_holder_named(tmp_path):
    import subprocess
    import sys

    from ladle import api

    config = {"dataset": "csbm:nodes=200,classes=3,features=8,seed=1", "ingredients": 2,
              "engine": {"name": "serial"}, "train": {"epochs": 1}, "soups": {"methods": ["uniform"]}}
    run = tmp_path / "run"
    api.train(config, run, progress=False)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from ladle.files import RunLock\n"
                               f"with RunLock({str(run)!r}, 'soup'):\n    print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        for attempt in (lambda: api.soup(run), lambda: api.train(config, run, resume=True, progress=False)):
            with pytest.raises(LadleError, match=rf"being written by ladle soup \(pid {holder.pid},") as err:
                attempt()
            assert "wait for it to finish" in err.value.fix
        assert not (run / "soups" / "uniform.json").exists()
    finally:
        holder.communicate("")  # let it go: the lock goes with it
    assert holder.returncode == 0
    assert set(api.soup(run)) == {"uniform"}  # the lock is free again; in this process it nests (run: soup, report)
    with RunDir(run).writing("run"):
        api.soup(run)
        from ladle.report import write_report

        write_report(RunDir(run))
