"""Graphs as memory-mappable arrays: ``npy:DIR``, the npz layout as one ``.npy`` file per array.

``DIR/node_features.npy`` [N, F] float32 or float16, ``node_labels.npy`` [N] integer class ids (or [N, T] 0/1 for a
multi-label task), ``edges.npy`` [E, 2] int32 or int64, ``train_masks.npy`` / ``val_masks.npy`` / ``test_masks.npy``
[N] or [S, N] bool, and optionally ``metric.npy`` (a 0-d string: ``acc``, ``rocauc``, ``f1``). ``npy:DIR#K`` picks
split K. Every array is opened with ``numpy.load(mmap_mode="r")`` (never ``allow_pickle``), its header checked
against the bytes behind it, and validated in bounded chunks (ids in range, no NaN or infinity, split sizes): opening
a graph never reads it whole, so :mod:`ladle.parts` can cut one larger than memory. :func:`load_npy` then makes the
in-memory :class:`~ladle.data.graph.Graph` of a graph that fits, and :func:`save_npy` writes one.
"""
from __future__ import annotations

import hashlib
import io
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ladle.data.graph import make_graph
from ladle.data.npz import _checked_header, parse_npz_spec
from ladle.data.npz import _metric as npz_metric
from ladle.data.pyg_input import graph_from
from ladle.errors import LadleError
from ladle.files import atomic_write
from ladle.profiling import gib, memory_available, too_big

REQUIRED = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
SPLITS = ("train", "val", "test")
CHUNK_BYTES = 64 * 2**20  # what one validation or copy step holds in memory at most (besides the output)


def parse_npy_spec(spec: str) -> tuple[Path, int]:
    """``npy:DIR`` or ``npy:DIR#K`` -> (folder, split)."""
    return parse_npz_spec(spec, "npy:DIR, for example npy:graphs/mine#0")


def rows_per_chunk(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(row_bytes, 1))


@dataclass
class NpyGraph:
    """An opened ``npy:`` graph: memory-mapped arrays (nothing read whole) and what validation found.

    ``masks[s]`` is split ``s``'s [N] bool row, still memory-mapped.
    """

    folder: Path
    split: int
    x: np.ndarray
    y: np.ndarray
    edges: np.ndarray
    masks: dict[str, np.ndarray]
    num_classes: int
    task: str
    metric: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def name(self) -> str:
        return f"npy:{self.folder.name}#{self.split}"

    def source_sha256(self) -> str:
        """SHA-256 of the arrays' files and the split, read in chunks: the source a partition records."""
        digest = hashlib.sha256(f"npy split {self.split};".encode())
        for key in (*REQUIRED, "metric"):
            path = self.folder / f"{key}.npy"
            if not path.exists():
                continue
            digest.update(f"{key};".encode())
            with open(path, "rb") as f:
                while block := f.read(CHUNK_BYTES):
                    digest.update(block)
        return digest.hexdigest()


def _array(folder: Path, key: str, optional: bool = False) -> np.ndarray | None:
    path = folder / f"{key}.npy"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        if optional:
            return None
        raise LadleError(f"{folder} has no {key}.npy", fix="an npy: folder holds " + ", ".join(f"{k}.npy" for k in
                                                                                               REQUIRED)) from None
    if not stat.S_ISREG(mode):
        raise LadleError(f"{path} is not a regular file", fix=f"write {key}.npy with numpy.save (no link, no folder)")
    with open(path, "rb") as f:
        _checked_header(f, os.fstat(f.fileno()).st_size, str(path))
    try:
        # metric.npy is one short string (and a 0-d array does not memory-map)
        return np.load(path, mmap_mode=None if key == "metric" else "r", allow_pickle=False)
    except ValueError as err:
        raise LadleError(f"{path} is not a readable .npy array: {err}", fix="write it with numpy.save") from None


def open_npy(folder: str | Path, split: int = 0) -> NpyGraph:
    """Open and validate ``folder`` in bounded chunks; one LadleError names the file and array that is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LadleError(f"{folder} is not a folder", fix="npy:DIR names a folder of .npy files (ladle.save_npy writes one)")
    x = _array(folder, "node_features")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise LadleError(f"{folder / 'node_features.npy'}: shape {x.shape}, expected [N, F] with N, F >= 1",
                         fix="one feature row per node")
    if x.dtype not in (np.float32, np.float16):
        raise LadleError(f"{folder / 'node_features.npy'}: dtype {x.dtype}, expected float32 or float16",
                         fix="save it as float32: np.save(path, x.astype(np.float32))")
    n = x.shape[0]
    step = rows_per_chunk(x.shape[1] * x.dtype.itemsize)
    for start in range(0, n, step):
        bad = ~np.isfinite(x[start:start + step])
        if bad.any():
            row = start + int(np.argwhere(bad)[0][0])
            raise LadleError(f"{folder / 'node_features.npy'}: NaN or infinite values (first in row {row})",
                             fix="impute or drop them before saving")
    y, task, classes = _labels(folder, _array(folder, "node_labels"), n)
    edges = _array(folder, "edges")
    _edges(folder, edges, n)
    masks, counts = _masks(folder, n, split)
    metric = _metric(folder, _array(folder, "metric", optional=True), classes, task)
    return NpyGraph(folder, split, x, y, edges, masks, classes, task, metric, counts)


def _labels(folder: Path, y: np.ndarray, n: int) -> tuple[np.ndarray, str, int]:
    where = folder / "node_labels.npy"
    if y.shape[0] != n or y.ndim not in (1, 2):
        raise LadleError(f"{where}: shape {y.shape}, expected [{n}] class ids or [{n}, T] 0/1 labels",
                         fix="one label (row) per node")
    if not (np.issubdtype(y.dtype, np.integer) or y.dtype == bool):
        raise LadleError(f"{where}: dtype {y.dtype}, expected integers", fix="save class ids (or 0/1 labels) as int64")
    step = rows_per_chunk(y.itemsize * (y.shape[1] if y.ndim == 2 else 1))
    top = 0
    for start in range(0, n, step):
        chunk = y[start:start + step]
        if y.ndim == 2 and not np.isin(chunk, (0, 1)).all():
            raise LadleError(f"{where}: [N, T] (multi-label) but holds values other than 0 and 1", fix="0/1 targets")
        if chunk.size and chunk.min() < 0:
            raise LadleError(f"{where}: negative class ids (first in row {start + int(np.argmin(chunk))})",
                             fix="class ids 0..C-1; give unlabelled nodes any class and leave them out of every mask")
        top = max(top, int(chunk.max()) if chunk.size else 0)
    if y.ndim == 2:
        return y, "multilabel", int(y.shape[1])
    if top + 1 < 2:
        raise LadleError(f"{where}: one class only; a classifier needs at least two", fix="check the labels")
    return y, "multiclass", top + 1


def _edges(folder: Path, edges: np.ndarray, n: int) -> None:
    where = folder / "edges.npy"
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise LadleError(f"{where}: shape {edges.shape}, expected [E, 2]",
                         fix="transpose it (edges.T)" if edges.ndim == 2 and edges.shape[0] == 2 else "one row per edge")
    if edges.dtype not in (np.int32, np.int64):
        raise LadleError(f"{where}: dtype {edges.dtype}, expected int32 or int64", fix="save node ids as int64")
    step = rows_per_chunk(2 * edges.dtype.itemsize)
    for start in range(0, edges.shape[0], step):
        chunk = edges[start:start + step]
        if chunk.size and (chunk.min() < 0 or chunk.max() >= n):
            raise LadleError(f"{where}: node ids in [{int(chunk.min())}, {int(chunk.max())}] (rows from {start}), "
                             f"outside [0, {n - 1}]", fix="node ids index rows of node_features")


def _masks(folder: Path, n: int, split: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    masks = {}
    for name in SPLITS:
        where = folder / f"{name}_masks.npy"
        mask = _array(folder, f"{name}_masks")
        mask = mask[None] if mask.ndim == 1 else mask
        if mask.ndim != 2 or mask.shape[1] != n:
            raise LadleError(f"{where}: shape {mask.shape}, expected [{n}] or [S, {n}]", fix="one column per node")
        if mask.dtype not in (np.bool_, np.uint8):
            raise LadleError(f"{where}: dtype {mask.dtype}, expected bool", fix="save masks as booleans")
        if split >= mask.shape[0]:
            raise LadleError(f"{where}: split {split} asked for but it holds {mask.shape[0]} splits",
                             fix=f"use npy:DIR#K with K from 0 to {mask.shape[0] - 1}")
        masks[name] = mask[split]
    counts = dict.fromkeys(SPLITS, 0)
    step = rows_per_chunk(3)
    for start in range(0, n, step):
        rows = {s: np.asarray(m[start:start + step]) for s, m in masks.items()}
        for s, row in rows.items():
            if row.dtype == np.uint8 and row.max(initial=0) > 1:
                raise LadleError(f"{folder / f'{s}_masks.npy'}: values other than 0 and 1", fix="save masks as booleans")
            counts[s] += int(row.astype(bool).sum())
        for i, a in enumerate(SPLITS):
            for b in SPLITS[i + 1:]:
                both = rows[a].astype(bool) & rows[b].astype(bool)
                if both.any():
                    raise LadleError(f"{folder}: {a}_masks and {b}_masks overlap (first: node "
                                     f"{start + int(np.flatnonzero(both)[0])})",
                                     fix="a node belongs to at most one of train, val and test")
    for s, count in counts.items():
        if not count:
            raise LadleError(f"{folder / f'{s}_masks.npy'}: split {split} selects no nodes", fix="every split needs nodes")
    return masks, counts


def _metric(folder: Path, stored, classes: int, task: str) -> str:
    return npz_metric(None if stored is None else np.asarray(stored), classes, str(folder / "metric.npy"),
                      task == "multilabel")


def load_npy(folder: str | Path, split: int = 0):
    """The in-memory Graph of an ``npy:`` folder (validated in chunks first; the graph must fit in memory)."""
    g = open_npy(folder, split)
    need = g.num_nodes * g.num_features * 4 + g.edges.shape[0] * 2 * 8 * 3
    if too_big(need):
        raise LadleError(f"{g.folder} needs about {gib(need)} in memory, more than the {gib(memory_available())} free",
                         fix=f"partition it on disk (ladle partition --dataset npy:{g.folder} --parts K --out PDIR) and "
                             "train from the parts (--dataset parts:PDIR)")
    y = torch.from_numpy(np.asarray(g.y, dtype=np.float32 if g.task == "multilabel" else np.int64))
    return make_graph(torch.from_numpy(np.asarray(g.x, dtype=np.float32)),
                      torch.from_numpy(np.asarray(g.edges, dtype=np.int64)).t().contiguous(), y,
                      *(torch.from_numpy(np.asarray(g.masks[s], dtype=bool)) for s in SPLITS),
                      name=g.name, num_classes=g.num_classes, task=g.task, metric=g.metric)


def save_npy(graph, folder: str | Path) -> Path:
    """Write ``graph`` (a ladle Graph, or anything :func:`ladle.graph_from` takes) as an ``npy:`` folder whose
    :func:`load_npy` gives the same graph (same fingerprint). Each file is written atomically."""
    graph = graph_from(graph)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    d = graph.data
    labels = d.y.cpu().numpy().astype(np.uint8) if graph.task == "multilabel" else d.y.cpu().numpy()
    arrays = {"node_features": d.x.cpu().numpy(), "node_labels": labels, "edges": d.edge_index.t().cpu().numpy(),
              "train_masks": d.train_mask.cpu().numpy(), "val_masks": d.val_mask.cpu().numpy(),
              "test_masks": d.test_mask.cpu().numpy(), "metric": np.array(graph.metric)}
    for key, array in arrays.items():
        buffer = io.BytesIO()
        np.save(buffer, array if array.ndim == 0 else np.ascontiguousarray(array), allow_pickle=False)
        atomic_write(folder / f"{key}.npy", buffer.getvalue())
    return folder
