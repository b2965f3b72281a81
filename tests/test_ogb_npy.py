"""Issue 33, item 7: an ogbn dataset's raw files written as an npy: folder in chunks (``ladle convert``).

The streamed folder loads as the graph the in-memory OGB loader gives: the same fingerprint for the CSV layout,
the same arrays for papers100M's binary layout (whose unlabelled nodes get class 0 and lie in no split).
"""
import numpy as np
import pytest
import torch

import ladle.data.ogb_npy as ogb_npy
from ladle.cli import main
from ladle.data import load_graph
from ladle.errors import LadleError
from test_data_loaders import write_csv_gz, write_ogb

pytest.importorskip("ogb")


def test_the_csv_layout_streamed_in_chunks_is_the_in_memory_graph(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ogb_npy, "ROWS", 7)  # many chunks: 40 nodes, 40 edges, splits of 5 to 33 ids
    write_ogb(tmp_path, "ogbn-arxiv", n=40)
    assert main(["convert", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--out", str(tmp_path / "npy")]) == 0
    assert "streamed from OGB's raw files" in capsys.readouterr().out
    streamed, reference = load_graph(f"npy:{tmp_path / 'npy'}"), load_graph("ogbn-arxiv", tmp_path)
    assert streamed.fingerprint == reference.fingerprint and streamed.metric == "acc"
    assert isinstance(np.load(tmp_path / "npy" / "node_features.npy", mmap_mode="r"), np.memmap)
    with pytest.raises(LadleError, match="already holds files"):
        ogb_npy.ogb_to_npy("ogbn-arxiv", tmp_path, tmp_path / "npy")


def test_the_binary_layout_is_copied_out_of_its_zip_members_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb_npy, "ROWS", 6)
    n, rng = 30, np.random.default_rng(0)
    base = tmp_path / "ogbn_papers100M"
    edge_index = np.stack([np.arange(n), (np.arange(n) * 7 + 3) % n]).astype(np.int64)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    (base / "raw").mkdir(parents=True)
    np.savez_compressed(base / "raw" / "data.npz", edge_index=edge_index, node_feat=x,
                        num_nodes_list=np.array([n]), num_edges_list=np.array([edge_index.shape[1]]))
    labels = (np.arange(n) % 172).astype(np.float64).reshape(n, 1)
    labels[25:] = np.nan  # unlabelled, in no split
    np.savez_compressed(base / "raw" / "node-label.npz", node_label=labels)
    for part, ids in (("train", range(0, 15)), ("valid", range(15, 20)), ("test", range(20, 25))):
        write_csv_gz(base / "split" / "time" / f"{part}.csv.gz", list(ids))
    ogb_npy.ogb_to_npy("ogbn-papers100M", tmp_path, tmp_path / "npy")
    streamed, reference = load_graph(f"npy:{tmp_path / 'npy'}"), load_graph("ogbn-papers100M", tmp_path)
    a, b = streamed.data, reference.data
    assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
    for split in ("train", "val", "test"):
        assert torch.equal(streamed.mask(split), reference.mask(split))
    labelled = b.y >= 0
    assert torch.equal(a.y[labelled], b.y[labelled]) and int(a.y[~labelled].abs().sum()) == 0


def test_a_dataset_without_node_features_is_left_to_the_in_memory_loader(tmp_path):
    with pytest.raises(LadleError, match="has no node features") as err:
        ogb_npy.ogb_to_npy("ogbn-proteins", tmp_path, tmp_path / "npy")
    assert "save_npy" in err.value.fix
