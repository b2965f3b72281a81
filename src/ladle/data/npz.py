"""User graphs in the common ``.npz`` node-classification layout.

Keys: ``node_features`` [N, F] float, ``node_labels`` [N] int (or [N, T] 0/1 for a multi-label task),
``edges`` [E, 2] int, and ``train_masks`` / ``val_masks`` / ``test_masks`` as [S, N] (S splits) or [N] bool.
``npz:PATH#K`` picks split K (default 0). An optional ``metric`` ("acc" or "rocauc"; "f1" or "rocauc" for
multi-label) names how the graph is scored; without it a binary task is scored by ROC-AUC, a multi-label
one by micro-F1, others by accuracy. An optional ``edge_attr`` [E, D] (one row per row of ``edges``) holds edge
features, for a user's model whose ``forward`` takes ``edge_attr``. The file is opened with ``allow_pickle=False``.
"""
from __future__ import annotations

import io
import math
import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import torch

from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError
from ladle.files import atomic_write
from ladle.profiling import gib, memory_available, too_big

REQUIRED = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
OPTIONAL = ("metric", "edge_attr")  # the dataset's metric ("acc" or "rocauc"); edge features [E, D]


def parse_npz_spec(spec: str, example: str = "npz:PATH, for example npz:graph.npz#0") -> tuple[Path, int]:
    """``npz:PATH`` or ``npz:PATH#K`` -> (path, split) (``npy:DIR[#K]`` likewise). Only a last ``#`` followed by
    digits picks the split, so a file whose name holds ``#`` is named as it is (``npz:a#b.npz``, or ``npz:run#3#0``
    for split 0)."""
    body = spec.split(":", 1)[1]
    path, hash_sign, split = body.rpartition("#")
    if not hash_sign or not split.isdigit():
        path, split = body, ""
    if not path:
        raise LadleError(f"dataset {spec!r} names no file", fix=f"write {example}")
    return Path(path), int(split) if split else 0


def load_npz(path: str | Path, split: int = 0) -> Graph:
    path = Path(path)
    arrays = _read(path)
    where = f"{path}"
    x = _features(arrays["node_features"], where)
    n = x.shape[0]
    labels = arrays["node_labels"]
    multilabel = labels.ndim == 2
    y = _multilabels(labels, n, where) if multilabel else _labels(labels, n, where)
    edges = _edges(arrays["edges"], n, where)
    masks = {key: _mask(arrays[key], key, n, split, where) for key in REQUIRED[3:]}
    _check_splits(masks, where)
    num_classes = y.shape[1] if multilabel else int(y.max()) + 1 if y.size else 0
    edge_attr = arrays.get("edge_attr")
    if edge_attr is not None and not (np.issubdtype(edge_attr.dtype, np.number) or edge_attr.dtype == np.bool_):
        raise LadleError(f"{where}: edge_attr has dtype {edge_attr.dtype}, expected numbers",
                         fix="store edge_attr as floats [E, D]")
    return make_graph(
        torch.from_numpy(x),
        torch.from_numpy(edges).t().contiguous(),
        torch.from_numpy(y),
        *(torch.from_numpy(masks[k]) for k in REQUIRED[3:]),
        name=f"npz:{path.name}#{split}",
        num_classes=num_classes,
        task="multilabel" if multilabel else "multiclass",
        metric=_metric(arrays.get("metric"), num_classes, where, multilabel),
        edge_attr=None if edge_attr is None else torch.from_numpy(np.ascontiguousarray(edge_attr)),
    )


def _metric(stored, num_classes: int, where: str, multilabel: bool = False) -> str:
    """The file's own ``metric`` key, else micro-F1 for multi-label tasks, ROC-AUC for a binary task (accuracy
    rewards predicting the majority class there), else accuracy."""
    allowed = ("f1", "rocauc") if multilabel else ("acc", "rocauc")
    if stored is None:
        return "f1" if multilabel else "rocauc" if num_classes == 2 else "acc"
    value = str(stored.item()) if stored.shape == () and stored.dtype.kind in "US" else None
    if value not in allowed:
        raise LadleError(f"{where}: metric must be the string {' or '.join(allowed)} for this task, got "
                         f"{str(stored)[:40]!r}", fix=f'save it as metric=np.array("{allowed[-1]}"), or leave it out')
    return value


def _multilabels(y: np.ndarray, n: int, where: str) -> np.ndarray:
    """[N, T] 0/1 labels of a multi-label task."""
    if y.shape[0] != n or y.shape[1] < 1:
        raise LadleError(f"{where}: node_labels has shape {y.shape}, expected [{n}] class ids or [{n}, T] 0/1 labels",
                         fix="store one label, or one row of T 0/1 labels, per node")
    if not np.isin(y, (0, 1)).all():
        raise LadleError(f"{where}: node_labels is [N, T] (multi-label) but holds values other than 0 and 1",
                         fix="store multi-label targets as 0/1")
    return y.astype(np.float32)


def _read(path: Path) -> dict[str, np.ndarray]:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        stem, hash_sign, split = str(path).rpartition("#")
        hint = (f"; if #{split} was to pick a split, {split!r} is not a number"
                if hash_sign and os.path.exists(stem) else "")
        raise LadleError(f"{path} does not exist{hint}", fix="check the path after npz: (npz:PATH#K picks split K)") \
            from None
    except OSError as err:
        raise LadleError(f"cannot read {path}: {err.strerror or err}", fix="check the path after npz:") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise LadleError(f"{path} is {kind}, not an .npz file", fix="give the path of the .npz file after npz:")
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
            optional = [k for k in OPTIONAL if k in f.files]
            _check_sizes(path, REQUIRED + tuple(optional))
            return {k: f[k] for k in (*REQUIRED, *optional)}
    except LadleError:
        raise
    except ValueError as err:
        if "pickle" in str(err).lower():
            raise LadleError(f"{path}: a key holds Python objects, which ladle never unpickles",
                             fix="store plain numeric arrays") from None
        raise LadleError(f"{path} is not a readable .npz file: {err}", fix="write it with numpy.savez") from None
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise LadleError(f"{path} is not a readable .npz file: {err}", fix="write it with numpy.savez") from None


def _check_sizes(path: Path, keys) -> None:
    """Read each array's header (not its data): the size it claims must fit the bytes the archive says it holds,
    and all of them the memory free now, before anything is decompressed."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for key in keys:
            info = archive.getinfo(f"{key}.npy")
            with archive.open(info) as member:
                total += _checked_header(member, info.file_size, f"{path}: {key}")
    if too_big(total):
        raise LadleError(f"{path} decompresses to {gib(total)}, more than the {gib(memory_available())} of memory "
                         "free", fix="use a machine with more memory, or a smaller graph")


def _checked_header(stream, size: int, where: str) -> int:
    """The bytes an .npy stream's header promises, checked against the ``size`` the stream really has."""
    try:
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
        header = stream.tell()
    except ValueError as err:
        raise LadleError(f"{where} has no valid array header ({err})", fix="write the file with numpy") from None
    if dtype.hasobject:
        raise LadleError(f"{where} holds Python objects, which ladle never unpickles", fix="store plain numeric arrays")
    nbytes = math.prod(shape) * dtype.itemsize
    if header + nbytes != size:
        raise LadleError(f"{where} claims shape {shape} ({nbytes:,} bytes) but holds {size - header:,} bytes of data",
                         fix="the file is damaged: write it again with numpy")
    return nbytes


def read_arrays(path: Path, keys=None) -> dict[str, np.ndarray]:
    """The arrays of an .npz (all, or ``keys``) or the one array of an .npy, with ``allow_pickle=False``, each
    header checked against the bytes that really follow it before any array is read."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise LadleError(f"cannot read {path}: {err.strerror or err}", fix="check that the file is there") from None
    if not stat.S_ISREG(mode):
        raise LadleError(f"{path} is not a regular file", fix="give the dataset's files themselves")
    try:
        if path.suffix == ".npy":
            with open(path, "rb") as f:
                nbytes = _checked_header(f, os.fstat(f.fileno()).st_size, str(path))
            if too_big(nbytes):
                raise LadleError(f"{path} holds {gib(nbytes)}, more than the memory free", fix="use a bigger machine")
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as f:
            keys = list(f.files) if keys is None else list(keys)
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise LadleError(f"{path} lacks the arrays {', '.join(missing)}", fix="give the dataset's original files")
            _check_sizes(path, keys)
            return {k: f[k] for k in keys}
    except LadleError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise LadleError(f"{path} is not a readable numpy file: {err}", fix="give the dataset's original files") from None


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
    if y.max() >= max(n, 2):
        raise LadleError(f"{where}: node_labels has class id {int(y.max())} for {n} nodes: more classes than nodes",
                         fix="number the classes 0..C-1 (for example with numpy.unique(labels, return_inverse=True))")
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


def save_npz(graph: Graph, path: str | Path, *, root: Path | None = None) -> None:
    """Write ``graph`` in this module's layout (its one split), so that :func:`load_npz` gives it back with the same
    fingerprint (multi-label targets as [N, T] 0/1)."""
    d = graph.data
    buffer = io.BytesIO()
    labels = d.y.cpu().numpy().astype(np.uint8) if graph.task == "multilabel" else d.y.cpu().numpy()
    np.savez(buffer, node_features=d.x.cpu().numpy(), node_labels=labels,
             edges=d.edge_index.t().cpu().numpy(), train_masks=d.train_mask.cpu().numpy()[None],
             val_masks=d.val_mask.cpu().numpy()[None], test_masks=d.test_mask.cpu().numpy()[None],
             metric=np.array(graph.metric),
             **({"edge_attr": d.edge_attr.cpu().numpy()} if d.get("edge_attr") is not None else {}))
    atomic_write(Path(path), buffer.getvalue(), root=root)
