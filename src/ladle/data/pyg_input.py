"""Graphs a PyG user already holds: a ``Data``, an ``InMemoryDataset`` or OGB's ``PygNodePropPredDataset``.

:func:`graph_from` turns each into ladle's :class:`Graph` (undirected, deduplicated, self-loops removed), with
the split from the object's masks or from an OGB-style ``split_idx`` dict, and the task and metric inferred:

- ``y`` of integer class ids ([N] or [N, 1]): multi-class, scored by accuracy, or by ROC-AUC when there are
  two classes (accuracy rewards predicting the majority class there);
- ``y`` of 0/1 floats [N, T] with T > 1: multi-label, scored by micro-F1;
- an OGB dataset's own ``eval_metric`` wins over the inference, and ``metric=`` over both.
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from torch_geometric.data import Dataset

from ladle.data.graph import METRICS, Graph, make_graph
from ladle.errors import LadleError

SPLIT_KEYS = {"train": ("train",), "val": ("valid", "val", "validation"), "test": ("test",)}

log = logging.getLogger(__name__)


def graph_from(obj: Any, *, name: str | None = None, split: int = 0, split_idx: dict | None = None,
               metric: str = "auto") -> Graph:
    """A :class:`Graph` from a PyG ``Data``, a PyG dataset (its first graph) or an OGB node-property dataset.

    Args:
        obj: a ``torch_geometric.data.Data`` with ``x``, ``edge_index``, ``y`` and ``train_mask``/``val_mask``/
            ``test_mask`` ([N] bool, or [N, S] for S splits), a PyG ``InMemoryDataset``, an OGB
            ``PygNodePropPredDataset`` (its ``get_idx_split()``), or a ladle ``Graph`` (returned as it is).
        name: the graph's name in reports (default: the dataset's name, else ``graph``).
        split (int, default 0): which column of [N, S] masks.
        split_idx (dict, optional): ``{"train": idx, "valid": idx, "test": idx}`` node indices, as OGB gives;
            replaces the masks.
        metric (str, default ``auto``): ``acc``, ``f1`` or ``rocauc``; ``auto`` infers it (see the module).
    """
    if isinstance(obj, Graph):
        return obj
    dataset_metric = None
    if hasattr(obj, "get_idx_split") and hasattr(obj, "__getitem__"):  # OGB
        split_idx = split_idx if split_idx is not None else obj.get_idx_split()
        dataset_metric = {"acc": "acc", "rocauc": "rocauc", "f1": "f1"}.get(getattr(obj, "eval_metric", ""), None)
        name = name or getattr(obj, "name", None)
        data = obj[0]
    elif isinstance(obj, Dataset):
        if len(obj) != 1:
            raise LadleError(f"the dataset holds {len(obj)} graphs; ladle classifies the nodes of one graph",
                             fix="pass the one graph: graph=dataset[i]")
        name = name or getattr(obj, "name", None) or type(obj).__name__
        data = obj[0]
    else:
        data = obj
    for key in ("x", "edge_index", "y"):
        if getattr(data, key, None) is None:
            raise LadleError(f"the graph given has no {key!r}", fix="a PyG Data with x [N, F], edge_index [2, E] and "
                                                                    "y (class ids [N] or 0/1 labels [N, T])")
    x, edge_index, y = data.x, data.edge_index, data.y
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise LadleError(f"the graph's x must be a float tensor [N, F], got {getattr(x, 'shape', type(x))}",
                         fix="data.x = data.x.float()")
    n = x.size(0)
    if not isinstance(edge_index, torch.Tensor) or edge_index.is_floating_point() or edge_index.is_complex() \
            or edge_index.dtype == torch.bool:
        raise LadleError(f"the graph's edge_index is {getattr(edge_index, 'dtype', type(edge_index).__name__)}; node ids "
                         "are integers (a float id like 2.5 names no node)",
                         fix="data.edge_index = data.edge_index.long() if the values are whole numbers")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise LadleError(f"the graph's edge_index must be [2, E], got {tuple(edge_index.shape)}",
                         fix="edge_index = edge_index.t() if it is [E, 2]")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        raise LadleError(f"the graph's edge_index holds node ids outside [0, {n - 1}]", fix="index rows of x")
    y, task, num_classes = _labels(y, n)
    masks, columns = _masks(data, split_idx, split, n)
    if columns:  # [N, S] masks: which split was used is part of the graph's name (the table's title, results.json)
        name = f"{name or 'graph'}#{split}"
        log.info("%s: split %d of the masks' %d columns (graph_from(..., split=K) takes another)", name, split, columns)
    chosen = metric if metric != "auto" else dataset_metric or ("f1" if task == "multilabel" else
                                                                 "rocauc" if num_classes == 2 else "acc")
    if chosen not in METRICS:
        raise LadleError(f"unknown metric {metric!r}", fix=f"choose from {', '.join(METRICS)}")
    edge_attr = data.get("edge_attr") if hasattr(data, "get") else getattr(data, "edge_attr", None)
    return make_graph(x.detach().cpu().float(), edge_index.detach().cpu().long(), y, *masks, name=name or "graph",
                      num_classes=num_classes, task=task, metric=chosen,
                      edge_attr=None if edge_attr is None else edge_attr.detach().cpu() if torch.is_tensor(edge_attr)
                      else edge_attr)


def _labels(y: torch.Tensor, n: int) -> tuple[torch.Tensor, str, int]:
    y = y.detach().cpu()
    if y.size(0) != n:
        raise LadleError(f"the graph's y has {y.size(0)} rows for {n} nodes", fix="one label (row) per node")
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.dim() == 2:
        if not bool(((y == 0) | (y == 1)).all()):
            raise LadleError("the graph's y is [N, T] but not 0/1", fix="multi-label targets are 0/1 per task")
        return y.float(), "multilabel", int(y.size(1))
    if y.is_floating_point():
        if not bool((y == y.round()).all()):
            raise LadleError("the graph's y holds non-integer values", fix="class ids 0..C-1 as integers")
        y = y.long()
    if int(y.min()) < 0:
        raise LadleError("the graph's y holds negative class ids (unlabelled nodes?)",
                         fix="give unlabelled nodes any class and leave them out of every mask")
    return y.long(), "multiclass", int(y.max()) + 1


def _masks(data, split_idx: dict | None, split: int, n: int) -> tuple[list[torch.Tensor], int]:
    """The train, val and test masks, and the number of columns the masks had (0: one split only)."""
    out, columns = [], 0
    for part, keys in SPLIT_KEYS.items():
        if split_idx is not None:
            idx = next((split_idx[k] for k in keys if k in split_idx), None)
            if idx is None:
                raise LadleError(f"split_idx has no {keys[0]!r} entry", fix="keys train, valid and test")
            mask = torch.zeros(n, dtype=torch.bool)
            mask[torch.as_tensor(idx).long().view(-1)] = True
        else:
            mask = getattr(data, f"{part}_mask", None)
            if mask is None:
                raise LadleError(f"the graph has no {part}_mask and no split_idx was given",
                                 fix="set train_mask/val_mask/test_mask, or pass split_idx={'train': ..., "
                                     "'valid': ..., 'test': ...}")
            mask = mask.detach().cpu()
            if mask.dim() == 2:
                if split >= mask.size(1):
                    raise LadleError(f"split {split} asked for but {part}_mask holds {mask.size(1)} splits",
                                     fix=f"split from 0 to {mask.size(1) - 1}")
                mask, columns = mask[:, split], mask.size(1)
            mask = mask.bool()
        if mask.numel() != n or not bool(mask.any()):
            raise LadleError(f"the {part} split selects no nodes (or has the wrong length)", fix="every split needs nodes")
        out.append(mask)
    for i, a in enumerate(("train", "val", "test")):
        for j in range(i + 1, 3):
            if bool((out[i] & out[j]).any()):
                raise LadleError(f"the {a} and {('train', 'val', 'test')[j]} splits overlap",
                                 fix="a node belongs to at most one of train, val and test")
    return out, columns
