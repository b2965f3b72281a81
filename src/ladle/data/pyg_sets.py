"""Flickr, Reddit, Yelp (multi-label) and AmazonProducts (multi-label), from the raw files PyG downloads.

Each lives under ``ROOT/<Name>/raw`` in the layout its PyG class documents (GraphSAINT's
``adj_full.npz, feats.npy, class_map.json, role.json``; Reddit's ``reddit_data.npz,
reddit_graph.npz``). ladle reads those files itself, numpy arrays with ``allow_pickle=False`` and
JSON, the way PyG's ``process`` reads them. It never loads PyG's ``processed/*.pt``: PyG falls
back to unrestricted unpickling for those, and a dataset folder is not trusted. Missing files are
downloaded by PyG's class into a fresh folder, and only the raw files are kept.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch_geometric.datasets as pyg_datasets

from ladle.data.fetch import download_raw, require_files
from ladle.data.graph import Graph, make_graph
from ladle.data.npz import read_arrays
from ladle.errors import LadleError
from ladle.files import read_bytes

SAINT_FILES = ["adj_full.npz", "feats.npy", "class_map.json", "role.json"]
REDDIT_FILES = ["reddit_data.npz", "reddit_graph.npz"]
SETS = {
    # key: (PyG class name, folder, raw files, task, metric)
    "flickr": ("Flickr", "Flickr", SAINT_FILES, "multiclass", "acc"),
    "reddit": ("Reddit", "Reddit", REDDIT_FILES, "multiclass", "acc"),
    "yelp": ("Yelp", "Yelp", SAINT_FILES, "multilabel", "f1"),
    "amazonproducts": ("AmazonProducts", "AmazonProducts", SAINT_FILES, "multilabel", "f1"),
}
FIX = "restore the dataset's original files (or delete them and let ladle download them again)"


def load_pyg_set(key: str, root: str | Path) -> Graph:
    cls_name, folder, files, task, metric = SETS[key]
    base = Path(root) / folder
    cls = getattr(pyg_datasets, cls_name)
    require_files(cls_name, root, base / "raw", files, lambda: download_raw(lambda tmp: cls(str(tmp)), base))
    raw = base / "raw"
    if key == "reddit":
        x, y, edge_index, masks = _reddit(raw)
    else:
        x, y, edge_index, masks = _saint(raw, task)
    num_classes = int(y.size(1)) if task == "multilabel" else int(y.max()) + 1
    return make_graph(x, edge_index, y, *masks, name=cls_name, num_classes=num_classes, task=task, metric=metric)


def _saint(raw: Path, task: str):
    adj = read_arrays(raw / "adj_full.npz", ["data", "indices", "indptr", "shape"])
    x = read_arrays(raw / "feats.npy")[""]
    if x.ndim != 2 or x.dtype.kind not in "biuf":
        raise LadleError(f"{raw / 'feats.npy'}: features of shape {x.shape} and type {x.dtype}, not [N, F] numbers",
                         fix=FIX)
    n = x.shape[0]
    edge_index = _csr_edges(adj, n, raw / "adj_full.npz")
    class_map = _json(raw / "class_map.json")
    role = _json(raw / "role.json")
    width = None
    labels = np.full(n, -1, np.int64) if task == "multiclass" else None
    for key, item in class_map.items():
        node = _node(key, n, raw / "class_map.json")
        if task == "multiclass":
            if not isinstance(item, int) or isinstance(item, bool) or item < 0:
                raise LadleError(f"{raw / 'class_map.json'}: node {node} has label {item!r}, not a class id", fix=FIX)
            labels[node] = item
        else:
            if not isinstance(item, list) or not all(v in (0, 1) for v in item) or (width not in (None, len(item))):
                raise LadleError(f"{raw / 'class_map.json'}: node {node} has label {str(item)[:40]!r}, not one 0/1 "
                                 "list of the others' length", fix=FIX)
            if labels is None:
                width = len(item)
                labels = np.zeros((n, width), np.float32)
            labels[node] = item
    if labels is None or (task == "multiclass" and (labels < 0).any()):
        raise LadleError(f"{raw / 'class_map.json'}: not every node has a label", fix=FIX)
    if task == "multiclass" and labels.max() >= max(n, 2):
        raise LadleError(f"{raw / 'class_map.json'}: class id {int(labels.max())} for {n} nodes", fix=FIX)
    masks = []
    for part in ("tr", "va", "te"):
        nodes = role.get(part)
        if not isinstance(nodes, list):
            raise LadleError(f"{raw / 'role.json'}: {part!r} is not a list of nodes", fix=FIX)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.tensor([_node(v, n, raw / "role.json") for v in nodes], dtype=torch.long)] = True
        masks.append(mask)
    return torch.from_numpy(x).float(), torch.from_numpy(labels), edge_index, masks


def _reddit(raw: Path):
    data = read_arrays(raw / "reddit_data.npz", ["feature", "label", "node_types"])
    x, y, types = data["feature"], data["label"], data["node_types"]
    if x.ndim != 2 or y.shape != (x.shape[0],) or types.shape != y.shape or y.dtype.kind not in "iu":
        raise LadleError(f"{raw / 'reddit_data.npz'}: feature, label and node_types do not describe one graph", fix=FIX)
    if y.size and (y.min() < 0 or y.max() >= max(x.shape[0], 2)):
        raise LadleError(f"{raw / 'reddit_data.npz'}: labels outside [0, {x.shape[0] - 1}]", fix=FIX)
    graph = read_arrays(raw / "reddit_graph.npz")
    fmt = graph.get("format", np.array("coo")).item()
    fmt = fmt.decode("ascii", "replace") if isinstance(fmt, bytes) else str(fmt)
    n = x.shape[0]
    if fmt == "coo" and {"row", "col", "shape"} <= set(graph):
        row, col = graph["row"], graph["col"]
        _check_nodes(row, col, n, raw / "reddit_graph.npz")
        edge_index = torch.stack([torch.from_numpy(row.astype(np.int64)), torch.from_numpy(col.astype(np.int64))])
    elif fmt == "csr":
        edge_index = _csr_edges(graph, n, raw / "reddit_graph.npz")
    else:
        raise LadleError(f"{raw / 'reddit_graph.npz'}: a sparse matrix in {fmt!r} layout, not coo or csr", fix=FIX)
    types = torch.from_numpy(types.astype(np.int64))
    return (torch.from_numpy(x).float(), torch.from_numpy(y.astype(np.int64)), edge_index,
            [types == 1, types == 2, types == 3])


def _csr_edges(arrays: dict, n: int, path: Path) -> torch.Tensor:
    indptr, indices, shape = arrays["indptr"], arrays["indices"], arrays["shape"]
    if (indptr.ndim != 1 or indices.ndim != 1 or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu"
            or tuple(shape.tolist()) != (n, n) or indptr.size != n + 1 or indptr[0] != 0 or indptr[-1] != indices.size
            or np.any(np.diff(indptr) < 0)):
        raise LadleError(f"{path}: not a CSR adjacency of the {n} nodes", fix=FIX)
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    _check_nodes(row, indices, n, path)
    return torch.stack([torch.from_numpy(row), torch.from_numpy(indices.astype(np.int64))])


def _check_nodes(row: np.ndarray, col: np.ndarray, n: int, path: Path) -> None:
    if row.shape != col.shape or (row.size and (min(row.min(), col.min()) < 0 or max(row.max(), col.max()) >= n)):
        raise LadleError(f"{path}: edges name nodes outside [0, {n - 1}]", fix=FIX)


def _json(path: Path) -> dict:
    try:
        value = json.loads(read_bytes(path, limit=8 * 2**30, what="dataset file"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise LadleError(f"{path} is not valid JSON ({type(err).__name__})", fix=FIX) from None
    if not isinstance(value, dict):
        raise LadleError(f"{path} holds a JSON {type(value).__name__}, not an object", fix=FIX)
    return value


def _node(value, n: int, path: Path) -> int:
    try:
        node = int(value)
    except (TypeError, ValueError):
        node = -1
    if not 0 <= node < n or isinstance(value, bool):
        raise LadleError(f"{path}: {str(value)[:20]!r} is not a node id in [0, {n - 1}]", fix=FIX)
    return node
