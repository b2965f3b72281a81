"""Issue 33: graphs on disk (``npy:``), cut into parts out of core (``ladle partition``), trained from the parts.

The writer is checked against the in-memory partition (same membership, the same part graph tensor for tensor),
the reader against tampering, and training from parts against training the same partition in memory, bit for bit.
"""
import json
import os
import shutil

import numpy as np
import pytest
import torch

from ladle import api
from ladle.cli import main
from ladle.config import build_config
from ladle.data import load_graph
from ladle.data.npy import open_npy, save_npy
from ladle.errors import LadleError
from ladle.parts.reader import open_parts
from ladle.parts.writer import open_source, write_parts
from ladle.sampling.partition import membership_for, part_graph

SMALL = "csbm:nodes=600,classes=3,features=8,seed=1"


@pytest.fixture(scope="module")
def graph():
    return load_graph(SMALL)


@pytest.fixture(scope="module")
def npy_dir(graph, tmp_path_factory):
    return save_npy(graph, tmp_path_factory.mktemp("npy") / "g")


# ---------------------------------------------------------------- npy:


def test_npy_round_trip_keeps_the_fingerprint(graph, npy_dir):
    again = load_graph(f"npy:{npy_dir}")
    assert again.fingerprint == graph.fingerprint and again.metric == graph.metric
    opened = open_npy(npy_dir)
    assert isinstance(opened.x, np.memmap) and opened.counts == {s: int(graph.mask(s).sum())
                                                                 for s in ("train", "val", "test")}


def test_npy_is_validated_in_bounded_chunks(npy_dir, tmp_path, monkeypatch):
    import ladle.data.npy as npy

    monkeypatch.setattr(npy, "CHUNK_BYTES", 64)  # many chunks: a bad value late in a file is still found
    bad = tmp_path / "bad"
    shutil.copytree(npy_dir, bad)
    x = np.load(bad / "node_features.npy")
    x[597, 3] = np.inf
    np.save(bad / "node_features.npy", x)
    with pytest.raises(LadleError, match=r"node_features.npy: NaN or infinite values \(first in row 597\)"):
        open_npy(bad)
    np.save(bad / "node_features.npy", np.nan_to_num(x, posinf=0.0))
    edges = np.load(bad / "edges.npy")
    edges[-1, 0] = 600
    np.save(bad / "edges.npy", edges)
    with pytest.raises(LadleError, match=r"edges.npy: node ids in \[.*, 600\].*outside \[0, 599\]"):
        open_npy(bad)


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / "node_labels.npy").unlink(), "has no node_labels.npy"),
    (lambda d: np.save(d / "edges.npy", np.zeros((4, 3), np.int64)), "edges.npy: shape (4, 3), expected [E, 2]"),
    (lambda d: np.save(d / "node_features.npy", np.zeros((600, 8), np.float64)), "expected float32 or float16"),
    (lambda d: (d / "val_masks.npy").write_bytes((d / "val_masks.npy").read_bytes()[:-10]), "claims shape"),
    (lambda d: np.save(d / "val_masks.npy", np.load(d / "train_masks.npy")), "overlap"),
])
def test_bad_npy_folders_get_one_message_naming_the_file(npy_dir, tmp_path, capsys, damage, needle):
    bad = tmp_path / "bad"
    shutil.copytree(npy_dir, bad)
    damage(bad)
    assert main(["run", "--dataset", f"npy:{bad}", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert needle in err and "fix:" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- ladle partition


@pytest.mark.parametrize("method, halo", [("random", 0), ("random", 1), ("metis", 0), ("metis", 1)])
def test_the_written_parts_are_the_in_memory_partition(graph, npy_dir, tmp_path, monkeypatch, method, halo):
    """Same membership, and each part read back is the in-memory part graph tensor for tensor."""
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    spec = f"npy:{npy_dir}" if method == "random" else SMALL  # the streamed source, and an in-memory one
    manifest = write_parts(open_source(spec), tmp_path / "parts", 3, method=method, halo=halo)
    membership = membership_for(graph, method, 3)
    assert manifest["node_map"] == [[int(a), int(b)] for a, b in zip(
        torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(membership).cumsum(0)[:-1]]),
        torch.bincount(membership).cumsum(0))]
    assert manifest["num_edges"] == graph.data.edge_index.size(1)
    source = open_parts(tmp_path / "parts")
    for p in range(3):
        train, mine = source.load_part(p)
        expected = part_graph(graph, membership, p, bool(halo))
        for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask", "n_id"):
            assert torch.equal(train.data[key], expected.data[key]), (p, key)
        assert train.data.num_core_nodes == expected.data.num_core_nodes == int((membership == p).sum())
        own = expected.data.n_id[:expected.data.num_core_nodes]
        assert torch.equal(mine.data.val_mask[:own.numel()], graph.data.val_mask[own])
    whole = source.whole_graph()
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(whole.data[key], graph.data[key]), key


def test_partition_streams_the_edges_in_chunks(npy_dir, tmp_path, monkeypatch):
    """A chunk smaller than one part's edges gives the same files as one chunk for everything."""
    import ladle.parts.writer as writer

    one = write_parts(open_source(f"npy:{npy_dir}"), tmp_path / "one", 4)
    monkeypatch.setattr(writer, "CHUNK_BYTES", 512)
    many = write_parts(open_source(f"npy:{npy_dir}"), tmp_path / "many", 4)
    strip = ("partition_seconds", "peak_memory_bytes")
    assert {k: v for k, v in one.items() if k not in strip} == {k: v for k, v in many.items() if k not in strip}


def test_ladle_partition_command_writes_and_reports(npy_dir, tmp_path, capsys):
    out = tmp_path / "pdir"
    assert main(["partition", "--dataset", f"npy:{npy_dir}", "--parts", "4", "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["num_parts"] == 4 and manifest["part_method"] == "random" and manifest["halo_hops"] == 0
    assert manifest["partition_seconds"] > 0 and manifest["peak_memory_bytes"] > 0
    assert "4 parts" in said and "peak memory" in said
    assert main(["partition", "--dataset", f"npy:{npy_dir}", "--parts", "4", "--out", str(out)]) == 2  # exists


# ---------------------------------------------------------------- trust


@pytest.fixture(scope="module")
def pdir(npy_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("parts") / "pdir"
    write_parts(open_source(f"npy:{npy_dir}"), out, 3)
    return out


def _edit(folder, edit):
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("tamper, needle", [
    (lambda d: _edit(d, lambda m: m.update(format="pickle")), "format is 'pickle'"),
    (lambda d: _edit(d, lambda m: m["node_map"].__setitem__(1, [0, 5])), "node_map"),
    (lambda d: _edit(d, lambda m: m["part-1"]["x"].update(file="../../etc/passwd")), "part-1.x does not describe"),
    (lambda d: _edit(d, lambda m: m["part-0"]["indices"].update(dtype="object")), "part-0.indices has dtype"),
    (lambda d: _edit(d, lambda m: m["part-2"]["x"].update(shape=[1, 8])), "part-2.x has shape"),
    (lambda d: (d / "manifest.json").write_text("[]"), "not an object"),
])
def test_a_tampered_manifest_is_refused_before_anything_is_mapped(pdir, tmp_path, tamper, needle):
    bad = tmp_path / "bad"
    shutil.copytree(pdir, bad)
    tamper(bad)
    with pytest.raises(LadleError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        open_parts(bad)


def test_a_changed_or_linked_part_is_refused_with_its_name(pdir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(pdir, bad)
    x = np.load(bad / "part-1" / "x.npy")
    x[0, 0] += 1
    np.save(bad / "part-1" / "x.npy", x)
    source = open_parts(bad)
    source.load_part(0)  # the others are untouched
    with pytest.raises(LadleError, match=r"part-1/x.npy: checksum mismatch: part 1 changed"):
        source.load_part(1)
    (bad / "part-2" / "y.npy").unlink()
    os.symlink(pdir / "part-2" / "y.npy", bad / "part-2" / "y.npy")
    with pytest.raises(LadleError, match="symbolic link"):
        source.load_part(2)


# ---------------------------------------------------------------- training from parts


def _weights(run):
    return {p.name: p.read_bytes() for p in sorted((run / "ingredients").glob("*.safetensors"))}


@pytest.mark.parametrize("halo", [0, 1])
def test_training_from_parts_equals_the_same_partition_in_memory(npy_dir, tmp_path, monkeypatch, halo):
    """Each ingredient trains on its part's files alone; selected at the last epoch (so the in-memory run's
    whole-graph validation and the parts' own-node validation pick the same epoch), the weights are equal."""
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    write_parts(open_source(f"npy:{npy_dir}"), tmp_path / "pdir", 3, halo=halo)
    common = {"ingredients": 3, "train": {"epochs": 3, "eval_every": 3}, "soups": ["uniform"], "model": {"hidden": 8},
              "sampler": {"name": "neighbor", "fanouts": [4, 4], "batch_size": 32}}
    api.train({**common, "dataset": f"parts:{tmp_path / 'pdir'}"}, tmp_path / "parts")
    api.train({**common, "dataset": f"npy:{npy_dir}", "partition": {"method": "random", "parts": 3,
                                                                       "halo": bool(halo)}}, tmp_path / "memory")
    assert _weights(tmp_path / "parts") == _weights(tmp_path / "memory")
    sidecars = [json.loads((tmp_path / r / "ingredients" / "ingredient-01.json").read_text())
                for r in ("parts", "memory")]
    assert sidecars[0]["part_graph"] == sidecars[1]["part_graph"]
    assert sidecars[0]["partition"] == {"method": "random", "parts": 3, "halo": bool(halo), "part": 1}


def test_a_worker_reads_only_its_own_part(pdir, tmp_path, monkeypatch):
    """Part 2's files made unreadable: ingredients 0 and 1 train (in a worker process); 2 is refused by name. One
    worker, so 0 and 1 are done before 2 is tried (with two, 2's refusal could come while 0 still trained, and the
    refusal stops the run)."""
    bad = tmp_path / "pdir"
    shutil.copytree(pdir, bad)
    for f in (bad / "part-2").iterdir():
        f.write_bytes(b"gone")
    config = {"dataset": f"parts:{bad}", "ingredients": 3, "train": {"epochs": 2}, "soups": ["uniform"],
              "engine": {"name": "process", "workers": 1}}
    with pytest.raises(LadleError, match="part-2/.*checksum mismatch"):
        api.train(config, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run" / "ingredients").glob("*.json")) == [
        "ingredient-00.json", "ingredient-01.json"]


def test_a_run_from_parts_soups_and_verifies(pdir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--dataset", f"parts:{pdir}", "--epochs", "3", "--soups", "uniform,gis,ensemble",
                 "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert [i["partition"]["part"] for i in results["ingredients"]] == [0, 1, 2]
    assert set(results["soups"]) == {"uniform", "gis", "ensemble"}
    assert main(["verify", str(out), "--graph", str(pdir)]) == 0


def test_worker_memory_refuses_a_plan_before_training_and_sidecars_record_each_workers_peak(pdir, tmp_path, capsys):
    source = open_parts(pdir)
    largest = max(range(3), key=source.part_bytes)
    too_small = f"{source.part_bytes(largest) - 1}"
    assert main(["train", "--dataset", f"parts:{pdir}", "--epochs", "1", "--worker-memory", too_small,
                 "--out", str(tmp_path / "no"), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"part {largest} of {pdir} holds" in err and "more parts" in err and not (tmp_path / "no").exists()
    assert main(["train", "--dataset", SMALL, "--epochs", "1", "--worker-memory", "1K", "--out",
                 str(tmp_path / "no"), "--quiet"]) == 2
    assert "every worker maps the whole graph" in " ".join(capsys.readouterr().err.split())
    assert main(["train", "--dataset", f"parts:{pdir}", "--epochs", "1", "--worker-memory", "1G",
                 "--out", str(tmp_path / "yes"), "--quiet"]) == 0
    for p in range(3):
        memory = json.loads((tmp_path / "yes" / "ingredients" / f"ingredient-0{p}.json").read_text())["worker_memory"]
        assert memory["part_bytes"] == source.part_bytes(p)
        assert memory["peak_rss_bytes"] >= memory["peak_anon_bytes"] > 0
    with pytest.raises(LadleError, match="is not a size"):
        build_config({"engine": {"worker_memory": "lots"}})
