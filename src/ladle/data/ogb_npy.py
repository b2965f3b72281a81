"""An ogbn dataset's raw files written as an ``npy:`` folder, streamed: never the whole graph in memory.

OGB (Hu et al., NeurIPS 2020) ships an ogbn dataset as ``raw/*.csv.gz`` (``edge``, ``node-feat``, ``node-label``,
``num-node-list``, ``num-edge-list``) or, for ogbn-papers100M, ``raw/data.npz`` and ``raw/node-label.npz``, with the
official split as index lists in ``split/<type>/{train,valid,test}.csv.gz``. :func:`ogb_to_npy` reads the CSV files
in chunks of rows and copies each binary array out of its zip member in chunks, into memory-mapped ``.npy`` files:
its memory is one chunk plus the split's index lists, whatever the graph's size. Unlabelled nodes (papers100M's NaN
labels) get class 0 and lie in no split, as the npy layout asks. ogbn-proteins, whose node features are the mean of
its edges' features, is left to the in-memory loader (``ladle.save_npy(ladle.load_graph("ogbn-proteins"), DIR)``).

The folder it writes loads (``npy:DIR``) as the same graph as ``load_graph(name)``: the same fingerprint.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ladle.data.fetch import require_files
from ladle.data.ogb import SETS, _download, _meta, expected_files
from ladle.errors import LadleError, normalise_name

ROWS = 1 << 18  # CSV rows (or array rows) per chunk


def ogb_to_npy(name: str, root: str | Path, out: str | Path) -> Path:
    """Write ogbn dataset ``name`` (read from ``root``, OGB's layout, downloaded if missing) as ``npy:`` folder ``out``.

    Returns ``out``. Memory: one chunk of ``ROWS`` rows and the split's index lists.
    """
    key = normalise_name(name)
    if key not in SETS:
        raise LadleError(f"{name} is not an ogbn dataset ladle knows", fix=f"one of {', '.join(SETS.values())}")
    name = SETS[key]
    meta = _meta(name)
    if meta["has_node_attr"] != "True":
        raise LadleError(f"{name} has no node features (ladle takes the mean of its edges' features, in memory)",
                         fix=f"ladle.save_npy(ladle.load_graph({name!r}), DIR) in Python")
    base = Path(root) / name.replace("-", "_")
    raw_files, split_files = expected_files(meta)
    split_dir = base / "split" / meta["split"]
    for folder, files in ((base / "raw", raw_files), (split_dir, split_files)):
        require_files(name, root, folder, files, lambda: _download(meta, Path(root), base))
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise LadleError(f"{out} already holds files", fix="give a new folder to --out")
    out.mkdir(parents=True, exist_ok=True)
    raw = base / "raw"
    tasks = int(meta["num tasks"])
    if meta["binary"] == "True":
        n = _binary_graph(raw / "data.npz", out)
        _binary_labels(raw / "node-label.npz", out, n, tasks)
    else:
        n = _csv_graph(raw, out)
        _csv_labels(raw / "node-label.csv.gz", out, n, tasks)
    for split, file in zip(("train", "val", "test"), split_files):
        mask = np.lib.format.open_memmap(out / f"{split}_masks.npy", "w+", np.bool_, (n,))
        for chunk in _csv_chunks(split_dir / file, np.int64):
            ids = chunk[:, 0]
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise LadleError(f"{split_dir / file} holds node ids outside [0, {n - 1}]",
                                 fix="the split does not belong to this graph")
            mask[ids] = True
        mask.flush()
    np.save(out / "metric.npy", np.array(meta["eval metric"]))
    return out


def _csv_chunks(path: Path, dtype):
    # optional: the ogb extra
    import pandas as pd

    with pd.read_csv(path, compression="gzip", header=None, chunksize=ROWS, dtype=dtype) as reader:
        for frame in reader:
            yield frame.to_numpy()


def _count(path: Path) -> int:
    return int(next(_csv_chunks(path, np.int64))[0, 0])


def _csv_graph(raw: Path, out: Path) -> int:
    n, e = _count(raw / "num-node-list.csv.gz"), _count(raw / "num-edge-list.csv.gz")
    x, at = None, 0
    for chunk in _csv_chunks(raw / "node-feat.csv.gz", np.float32):
        if x is None:
            x = np.lib.format.open_memmap(out / "node_features.npy", "w+", np.float32, (n, chunk.shape[1]))
        _put(x, at, chunk, raw / "node-feat.csv.gz")
        at += len(chunk)
    _complete(at, n, raw / "node-feat.csv.gz")
    edges, at = np.lib.format.open_memmap(out / "edges.npy", "w+", np.int64, (e, 2)), 0
    for chunk in _csv_chunks(raw / "edge.csv.gz", np.int64):
        _put(edges, at, chunk, raw / "edge.csv.gz")
        at += len(chunk)
    _complete(at, e, raw / "edge.csv.gz")
    x.flush(), edges.flush()
    return n


def _csv_labels(path: Path, out: Path, n: int, tasks: int) -> None:
    y, at = _labels_file(out, n, tasks), 0
    for chunk in _csv_chunks(path, np.float64):
        _put(y, at, _as_labels(chunk, tasks), path)
        at += len(chunk)
    _complete(at, n, path)
    y.flush()


def _labels_file(out: Path, n: int, tasks: int) -> np.ndarray:
    shape, dtype = ((n, tasks), np.uint8) if tasks > 1 else ((n,), np.int64)
    return np.lib.format.open_memmap(out / "node_labels.npy", "w+", dtype, shape)


def _as_labels(chunk: np.ndarray, tasks: int) -> np.ndarray:
    chunk = np.nan_to_num(np.asarray(chunk, dtype=np.float64).reshape(len(chunk), -1), nan=0.0)
    return chunk.astype(np.uint8) if tasks > 1 else chunk[:, 0].astype(np.int64)


def _put(target: np.ndarray, at: int, chunk: np.ndarray, path: Path) -> None:
    if at + len(chunk) > target.shape[0] or chunk.shape[1:] != target.shape[1:] and target.ndim > 1:
        raise LadleError(f"{path}: more rows, or other columns, than the dataset's counts say", fix="download it again")
    target[at:at + len(chunk)] = chunk


def _complete(rows: int, expected: int, path: Path) -> None:
    if rows != expected:
        raise LadleError(f"{path}: {rows} rows, the dataset's counts say {expected}", fix="download it again")


def _binary_graph(path: Path, out: Path) -> int:
    """papers100M's ``data.npz``: each array copied out of its zip member in chunks (``edge_index`` transposed)."""
    with zipfile.ZipFile(path) as archive:
        n = int(_small(archive, "num_nodes_list", path)[0])
        shape, dtype, stream = _member(archive, "node_feat", path)
        x = np.lib.format.open_memmap(out / "node_features.npy", "w+", np.float32, shape)
        _stream_rows(stream, dtype, shape, lambda a, b, rows: x.__setitem__(slice(a, b), rows))
        shape, dtype, stream = _member(archive, "edge_index", path)
        edges = np.lib.format.open_memmap(out / "edges.npy", "w+", np.int64, (shape[1], 2))
        flat = (shape[0] * shape[1],)  # [2, E] in C order: every source, then every target
        _stream_rows(stream, dtype, flat, lambda a, b, values: _edge_values(edges, shape[1], a, b, values))
        x.flush(), edges.flush()
    if x.shape[0] != n:
        raise LadleError(f"{path}: node_feat has {x.shape[0]} rows, num_nodes_list says {n}", fix="download it again")
    return n


def _edge_values(edges: np.ndarray, e: int, a: int, b: int, values: np.ndarray) -> None:
    while a < b:  # a run of the flat [2, E] array, split where it passes from sources to targets
        row, col = divmod(a, e)
        stop = min(b, (row + 1) * e)
        edges[col:col + stop - a, row] = values[:stop - a]
        values, a = values[stop - a:], stop


def _binary_labels(path: Path, out: Path, n: int, tasks: int) -> None:
    with zipfile.ZipFile(path) as archive:
        shape, dtype, stream = _member(archive, "node_label", path)
        if shape[0] != n:
            raise LadleError(f"{path}: {shape[0]} labels for {n} nodes", fix="download it again")
        y = _labels_file(out, n, tasks)
        _stream_rows(stream, dtype, shape, lambda a, b, rows: y.__setitem__(slice(a, b), _as_labels(rows, tasks)))
        y.flush()


def _member(archive: zipfile.ZipFile, key: str, path: Path):
    """(shape, dtype, open stream positioned at the data) of ``key.npy`` in an npz, its header read, no pickle."""
    try:
        stream = archive.open(f"{key}.npy")
    except KeyError:
        raise LadleError(f"{path} has no array {key!r}", fix="download the dataset again") from None
    version = np.lib.format.read_magic(stream)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(stream)
    if fortran or dtype.hasobject:
        raise LadleError(f"{path}: {key} is not a plain C-ordered array", fix="download the dataset again")
    return shape, dtype, stream


def _small(archive: zipfile.ZipFile, key: str, path: Path) -> np.ndarray:
    shape, dtype, stream = _member(archive, key, path)
    return np.frombuffer(stream.read(), dtype=dtype).reshape(shape)


def _stream_rows(stream, dtype: np.dtype, shape: tuple, write) -> None:
    """Read a C-ordered array of ``shape`` from ``stream`` ``ROWS`` rows at a time, calling ``write(a, b, rows)``."""
    width = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    for a in range(0, shape[0], ROWS):
        b = min(a + ROWS, shape[0])
        data = stream.read((b - a) * width * dtype.itemsize)
        if len(data) != (b - a) * width * dtype.itemsize:
            raise LadleError("an npz member ends early", fix="download the dataset again")
        write(a, b, np.frombuffer(data, dtype=dtype).reshape((b - a, *shape[1:])))
