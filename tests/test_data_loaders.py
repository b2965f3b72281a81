"""Loaders on the real Planetoid files and on small files written in each library's on-disk layout."""
import gzip
import json
import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ladle.data import load_graph
from ladle.data.graph import canonical_edges
from ladle.errors import LadleError


def assert_canonical(graph):
    ei = graph.data.edge_index
    assert torch.equal(canonical_edges(ei, graph.num_nodes), ei)


def test_cora_public_split(planetoid_root):
    graph = load_graph("cora", planetoid_root)
    s = graph.summary()
    assert (s["nodes"], s["undirected_edges"], s["features"], s["classes"]) == (2708, 5278, 1433, 7)
    assert (s["train"], s["val"], s["test"]) == (140, 500, 1000)
    assert graph.task == "multiclass" and graph.metric == "acc"
    assert torch.allclose(graph.data.x.sum(1)[graph.data.x.sum(1) > 0], torch.ones(1))  # row-normalised
    assert_canonical(graph)
    assert load_graph("Cora", planetoid_root).fingerprint == graph.fingerprint


def test_citeseer_and_a_read_only_root(planetoid_root, shared):
    graph = load_graph("CiteSeer", shared / "data" / "planetoid")  # read-only in CI: read in place
    assert (graph.num_nodes, graph.num_classes, int(graph.data.train_mask.sum())) == (3327, 6, 120)
    assert graph.fingerprint == load_graph("citeseer", planetoid_root).fingerprint


def test_missing_files_offline_name_dataset_root_and_files(tmp_path):
    with pytest.raises(LadleError) as err:
        load_graph("PubMed", tmp_path)
    text = str(err.value)
    assert "PubMed" in text and str(tmp_path) in text and "ind.pubmed.graph" in text


def test_failed_download_is_one_clear_error(tmp_path, monkeypatch, patch_all):
    monkeypatch.delenv("LADLE_OFFLINE")
    import torch_geometric.datasets as pyg_datasets

    def no_network(*args, **kwargs):
        raise OSError("Network is unreachable")

    patch_all(pyg_datasets, "Planetoid", no_network)
    with pytest.raises(LadleError, match="download failed: OSError: Network is unreachable"):
        load_graph("pubmed", tmp_path)


def test_unknown_dataset_suggests_names():
    with pytest.raises(LadleError, match="did you mean 'Cora'"):
        load_graph("Corra")


# ----------------------------------------------------------------- PyG GraphSAINT layout


def write_saint_layout(folder, n=12, f=5, labels=None, seed=0):
    rng = np.random.default_rng(seed)
    raw = folder / "raw"
    raw.mkdir(parents=True)
    rows = np.arange(n)
    cols = (rows + 1) % n  # a ring, one direction only: the loader must symmetrise it
    adj = sp.csr_matrix((np.ones(n), (rows, cols)), shape=(n, n))
    np.savez(raw / "adj_full.npz", data=adj.data, indices=adj.indices, indptr=adj.indptr, shape=adj.shape)
    np.save(raw / "feats.npy", rng.normal(size=(n, f)).astype(np.float32))
    labels = labels if labels is not None else [int(i % 3) for i in range(n)]
    (raw / "class_map.json").write_text(json.dumps({str(i): labels[i] for i in range(n)}))
    (raw / "role.json").write_text(json.dumps({"tr": list(range(0, 6)), "va": [6, 7, 8], "te": [9, 10, 11]}))


def test_flickr_layout(tmp_path):
    write_saint_layout(tmp_path / "Flickr")
    graph = load_graph("flickr", tmp_path)
    assert graph.num_nodes == 12 and graph.num_classes == 3 and graph.metric == "acc"
    assert graph.data.edge_index.size(1) == 24  # the ring, both directions
    assert graph.data.train_mask.sum() == 6 and graph.data.val_mask.sum() == 3
    assert_canonical(graph)


@pytest.mark.parametrize("name", ["Yelp", "AmazonProducts"])
def test_multilabel_layouts(tmp_path, name):
    labels = [[int(i % 2), int(i % 3 == 0), 1] for i in range(12)]
    write_saint_layout(tmp_path / name, labels=labels)
    graph = load_graph(name.lower(), tmp_path)
    assert graph.task == "multilabel" and graph.metric == "f1" and graph.num_classes == 3
    assert graph.data.y.shape == (12, 3) and graph.data.y.dtype == torch.float32


def test_reddit_layout(tmp_path):
    raw = tmp_path / "Reddit" / "raw"
    raw.mkdir(parents=True)
    n = 10
    np.savez(raw / "reddit_data.npz", feature=np.eye(n, 4, dtype=np.float32), label=np.arange(n) % 2,
             node_types=np.array([1, 1, 1, 1, 2, 2, 3, 3, 3, 3]))
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(n - 1), (np.arange(n - 1), np.arange(1, n))),
                                                         shape=(n, n)))
    graph = load_graph("Reddit", tmp_path)
    assert graph.num_nodes == 10 and graph.data.edge_index.size(1) == 18
    assert (int(graph.data.train_mask.sum()), int(graph.data.val_mask.sum()), int(graph.data.test_mask.sum())) == (4, 2, 4)


# ----------------------------------------------------------------- OGB raw layout


def write_csv_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def write_ogb(root, name, *, n=10, features=True, edge_feat=False, labels=None, split="time"):
    base = root / name.replace("-", "_")
    raw = base / "raw"
    edges = [(i, (i + 1) % n) for i in range(n)]
    write_csv_gz(raw / "edge.csv.gz", edges)
    write_csv_gz(raw / "num-node-list.csv.gz", [n])
    write_csv_gz(raw / "num-edge-list.csv.gz", [len(edges)])
    if features:
        write_csv_gz(raw / "node-feat.csv.gz", np.arange(n * 3, dtype=float).reshape(n, 3) / 10)
    if edge_feat:
        write_csv_gz(raw / "edge-feat.csv.gz", np.ones((len(edges), 8)) * 0.5)
    write_csv_gz(raw / "node-label.csv.gz", labels if labels is not None else np.arange(n) % 4)
    for part, ids in (("train", range(0, 5)), ("valid", range(5, 7)), ("test", range(7, n))):
        write_csv_gz(base / "split" / split / f"{part}.csv.gz", list(ids))
    return base


def test_ogbn_arxiv_layout(tmp_path):
    write_ogb(tmp_path, "ogbn-arxiv")
    graph = load_graph("OGBN-Arxiv", tmp_path)
    assert graph.name == "ogbn-arxiv" and graph.num_classes == 40 and graph.metric == "acc"
    assert graph.num_nodes == 10 and graph.data.edge_index.size(1) == 20
    assert graph.data.x[2].tolist() == pytest.approx([0.6, 0.7, 0.8])
    assert (int(graph.data.train_mask.sum()), int(graph.data.val_mask.sum()), int(graph.data.test_mask.sum())) == (5, 2, 3)
    assert_canonical(graph)


def test_ogbn_proteins_layout_is_multilabel_rocauc(tmp_path):
    labels = (np.arange(10 * 112).reshape(10, 112) % 3 == 0).astype(int)
    write_ogb(tmp_path, "ogbn-proteins", features=False, edge_feat=True, labels=labels, split="species")
    graph = load_graph("ogbn-proteins", tmp_path)
    assert graph.task == "multilabel" and graph.metric == "rocauc" and graph.num_classes == 112
    assert graph.data.x.shape == (10, 8) and torch.allclose(graph.data.x, torch.full((10, 8), 0.5))


def test_ogb_missing_split_files(tmp_path):
    base = write_ogb(tmp_path, "ogbn-arxiv")
    os.remove(base / "split" / "time" / "valid.csv.gz")
    with pytest.raises(LadleError) as err:
        load_graph("ogbn-arxiv", tmp_path)
    assert "valid.csv.gz" in str(err.value) and "ogbn-arxiv" in str(err.value)


def test_read_only_root_for_saint_layout_needs_processed(tmp_path):
    write_saint_layout(tmp_path / "Flickr")
    load_graph("flickr", tmp_path)  # processes once
    os.chmod(tmp_path / "Flickr", stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert load_graph("flickr", tmp_path).num_nodes == 12
    finally:
        os.chmod(tmp_path / "Flickr", stat.S_IRWXU)
