"""User graphs in the common ``.npz`` node-classification layout.

Keys: ``node_features`` [N, F] float, ``node_labels`` [N] int, ``edges`` [E, 2] int, and
``train_masks`` / ``val_masks`` / ``test_masks`` as [S, N] (S splits) or [N] bool.
``npz:PATH#K`` picks split K (default 0). The file is opened with ``allow_pickle=False``.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError

REQUIRED = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def parse_npz_spec(spec: str) -> tuple[Path, int]:
    """``npz:PATH`` or ``npz:PATH#K`` -> (path, split)."""
    body = spec.split(":", 1)[1]
    path, _, split = body.partition("#")
    if not path:
        raise LadleError(f"dataset {spec!r} names no file", fix="write npz:PATH, for example npz:graph.npz#0")
    if split and not split.isdigit():
        raise LadleError(f"dataset {spec!r}: split {split!r} is not a number", fix="write npz:PATH#K with K = 0, 1, ...")
    return Path(path), int(split) if split else 0


def load_npz(path: str | Path, split: int = 0) -> Graph:
    path = Path(path)
    arrays = _read(path)
    where = f"{path}"
    x = _features(arrays["node_features"], where)
    n = x.shape[0]
    y = _labels(arrays["node_labels"], n, where)
    edges = _edges(arrays["edges"], n, where)
    masks = {key: _mask(arrays[key], key, n, split, where) for key in REQUIRED[3:]}
    _check_splits(masks, where)
    num_classes = int(y.max()) + 1 if y.size else 0
    return make_graph(
        torch.from_numpy(x),
        torch.from_numpy(edges).t().contiguous(),
        torch.from_numpy(y),
        *(torch.from_numpy(masks[k]) for k in REQUIRED[3:]),
        name=f"npz:{path.name}#{split}",
        num_classes=num_classes,
    )


def _read(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        raise LadleError(f"{path} does not exist", fix="check the path after npz:")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":
        kind = "a pickle, which ladle never unpickles" if magic[:1] == b"\x80" else "not a zip archive"
        raise LadleError(f"{path} is not a readable .npz file ({kind})", fix="write it with numpy.savez")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in REQUIRED if k not in f.files]
            if missing:
                raise LadleError(
                    f"{path} lacks the keys {', '.join(missing)} (it has {', '.join(f.files) or 'none'})",
                    fix="save it with np.savez(path, " + ", ".join(f"{k}=..." for k in REQUIRED) + ")",
                )
            return {k: f[k] for k in REQUIRED}
    except LadleError:
        raise
    except ValueError as err:
        if "pickle" in str(err).lower():
            raise LadleError(f"{path}: a key holds Python objects, which ladle never unpickles",
                             fix="store plain numeric arrays") from None
        raise LadleError(f"{path} is not a readable .npz file: {err}", fix="write it with numpy.savez") from None
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise LadleError(f"{path} is not a readable .npz file: {err}", fix="write it with numpy.savez") from None


def _features(x: np.ndarray, where: str) -> np.ndarray:
    if x.ndim != 2 or x.shape[0] == 0:
        raise LadleError(f"{where}: node_features has shape {x.shape}, expected [N, F] with N > 0",
                         fix="store one feature row per node: node_features of shape [N, F]")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer) or x.dtype == bool):
        raise LadleError(f"{where}: node_features has dtype {x.dtype}, expected a float array",
                         fix="store node_features as float32 (or float64)")
    x = x.astype(np.float32, copy=False)
    bad = ~np.isfinite(x)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise LadleError(f"{where}: node_features has {int(bad.sum())} NaN or infinite values (first in row {row})",
                         fix="impute or drop them before saving")
    return x


def _labels(y: np.ndarray, n: int, where: str) -> np.ndarray:
    if y.shape != (n,):
        raise LadleError(f"{where}: node_labels has shape {y.shape}, expected [{n}] (one label per node)",
                         fix="store one integer label per node")
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise LadleError(f"{where}: node_labels has dtype {y.dtype}, expected integer class ids",
                             fix="store node_labels as integers 0..C-1")
    if y.min() < 0:
        raise LadleError(f"{where}: node_labels has negative values (min {int(y.min())})",
                         fix="labels must be class ids 0..C-1")
    return y.astype(np.int64, copy=False)


def _edges(edges: np.ndarray, n: int, where: str) -> np.ndarray:
    if edges.ndim != 2 or edges.shape[1] != 2:
        hint = "transpose it (edges.T)" if edges.ndim == 2 and edges.shape[0] == 2 else "one row per edge: [E, 2]"
        raise LadleError(f"{where}: edges has shape {edges.shape}, expected [E, 2]", fix=hint)
    if not np.issubdtype(edges.dtype, np.integer):
        raise LadleError(f"{where}: edges has dtype {edges.dtype}, expected integer node ids",
                         fix="store edges as integers")
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        lo, hi = int(edges.min()), int(edges.max())
        raise LadleError(f"{where}: edges has node ids in [{lo}, {hi}], outside [0, {n - 1}] for {n} nodes",
                         fix="node ids must index rows of node_features")
    return edges.astype(np.int64, copy=False)


def _mask(mask: np.ndarray, key: str, n: int, split: int, where: str) -> np.ndarray:
    if mask.ndim == 1:
        mask = mask[None]
    if mask.ndim != 2 or mask.shape[1] != n:
        raise LadleError(f"{where}: {key} has shape {mask.shape}, expected [S, {n}] or [{n}]",
                         fix="store one boolean row per split, one column per node")
    if split >= mask.shape[0]:
        raise LadleError(f"{where}: split {split} asked for but {key} holds {mask.shape[0]} splits",
                         fix=f"use npz:PATH#K with K from 0 to {mask.shape[0] - 1}")
    row = mask[split]
    if row.dtype != bool:
        if not np.isin(row, (0, 1)).all():
            raise LadleError(f"{where}: {key} must be boolean (or 0/1), got values other than 0 and 1",
                             fix="store masks as booleans")
        row = row.astype(bool)
    return np.ascontiguousarray(row)


def _check_splits(masks: dict[str, np.ndarray], where: str) -> None:
    for key, mask in masks.items():
        if not mask.any():
            raise LadleError(f"{where}: {key} selects no nodes in this split", fix="every split needs nodes")
    names = list(masks)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = masks[a] & masks[b]
            if both.any():
                raise LadleError(f"{where}: {a} and {b} overlap on {int(both.sum())} nodes "
                                 f"(first: node {int(np.flatnonzero(both)[0])})",
                                 fix="a node belongs to at most one of train, val and test")
