"""Flickr, Reddit, Yelp (multi-label) and AmazonProducts (multi-label), through PyG's classes.

Each lives under ``ROOT/<Name>/raw`` in the layout its PyG class documents (GraphSAINT's
``adj_full.npz, feats.npy, class_map.json, role.json``; Reddit's ``reddit_data.npz,
reddit_graph.npz``). PyG processes them into ``ROOT/<Name>/processed`` on first use.
"""
from __future__ import annotations

from pathlib import Path

from ladle.data.fetch import require_files
from ladle.data.graph import Graph, make_graph

SAINT_FILES = ["adj_full.npz", "feats.npy", "class_map.json", "role.json"]
SETS = {
    # key: (PyG class name, folder, raw files, task, metric)
    "flickr": ("Flickr", "Flickr", SAINT_FILES, "multiclass", "acc"),
    "reddit": ("Reddit", "Reddit", ["reddit_data.npz", "reddit_graph.npz"], "multiclass", "acc"),
    "yelp": ("Yelp", "Yelp", SAINT_FILES, "multilabel", "f1"),
    "amazonproducts": ("AmazonProducts", "AmazonProducts", SAINT_FILES, "multilabel", "f1"),
}


def load_pyg_set(key: str, root: str | Path) -> Graph:
    import torch_geometric.datasets as pyg_datasets

    cls_name, folder, files, task, metric = SETS[key]
    base = Path(root) / folder
    cls = getattr(pyg_datasets, cls_name)
    require_files(cls_name, root, base / "raw", files, lambda: cls(str(base)))
    data = cls(str(base))[0]
    num_classes = int(data.y.size(1)) if task == "multilabel" else int(data.y.max()) + 1
    return make_graph(data.x, data.edge_index, data.y, data.train_mask, data.val_mask, data.test_mask,
                      name=cls_name, num_classes=num_classes, task=task, metric=metric)
