"""Cora, CiteSeer and PubMed with the public Planetoid split (Yang et al., ICML 2016).

With the raw files present under ``ROOT/<Name>/raw`` they are read in place (no network, no
writes, so a read-only root works); otherwise PyG's ``Planetoid`` downloads them, into a fresh
folder first, and only the raw files are moved to the root. Features are row-normalised (each
row sums to 1), as Kipf & Welling and PyG's examples do.

The raw files are Python 2 pickles, by nature of the format. ladle reads them with a restricted
unpickler that can build nothing but arrays, sparse-matrix fields, lists and dicts: any other
name in the file (the way a pickle runs code) is refused, and each array's size is checked
before it becomes a tensor. PyG's own reader unpickles them without restriction.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import torch
from torch_geometric.datasets import Planetoid

from ladle.data.fetch import download_raw, require_files
from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError
from ladle.files import read_bytes
from ladle.profiling import gib, too_big

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
MAX_RAW_BYTES = 2**30


def load_planetoid(key: str, root: str | Path) -> Graph:
    name = NAMES[key]
    raw = Path(root) / name / "raw"
    expected = [f"ind.{name.lower()}.{s}" for s in SUFFIXES]

    def download():
        download_raw(lambda tmp: Planetoid(str(tmp), name), Path(root) / name, "raw")

    require_files(name, root, raw, expected, download)
    x, y, edge_index, train, val, test = read_planetoid(raw, name.lower())
    x = x / x.sum(dim=1, keepdim=True).clamp_min(1.0)
    return make_graph(x, edge_index, y, train, val, test, name=name, num_classes=int(y.max()) + 1)


def read_planetoid(raw: Path, prefix: str):
    """(x [N, F], y [N], edge_index [2, E], train, val, test masks) from the eight ``ind.PREFIX.*`` files.

    The public split: the first ``len(y)`` nodes train, the next 500 validate, the nodes listed in
    ``test.index`` test; the test rows of ``tx``/``ty`` are put at those indices. CiteSeer lists
    test indices with gaps (isolated nodes): the gaps get zero features and no label.
    """
    def array(suffix):
        return _restricted_load(raw / f"ind.{prefix}.{suffix}")

    x, tx, allx = (_dense(array(s), raw / f"ind.{prefix}.{s}") for s in ("x", "tx", "allx"))
    y, ty, ally = (_dense(array(s), raw / f"ind.{prefix}.{s}") for s in ("y", "ty", "ally"))
    graph = array("graph")
    test_index = _test_index(raw / f"ind.{prefix}.test.index")
    if not isinstance(graph, dict) or not all(isinstance(v, list) for v in graph.values()):
        raise LadleError(f"{raw / f'ind.{prefix}.graph'} is not a dict of neighbour lists",
                         fix="restore the original Planetoid file")
    sorted_test = np.sort(test_index)
    if prefix == "citeseer":
        span = int(test_index.max() - test_index.min()) + 1
        tx_full = np.zeros((span, tx.shape[1]), tx.dtype)
        tx_full[sorted_test - test_index.min()] = tx
        ty_full = np.zeros((span, ty.shape[1]), ty.dtype)
        ty_full[sorted_test - test_index.min()] = ty
        tx, ty = tx_full, ty_full
    features = np.concatenate([allx, tx])
    features[test_index] = features[sorted_test]
    onehot = np.concatenate([ally, ty])
    onehot[test_index] = onehot[sorted_test]
    labels = onehot.argmax(1)
    n = labels.shape[0]
    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][: y.shape[0]] = True
    masks[1][y.shape[0]: y.shape[0] + 500] = True
    masks[2][test_index] = True
    rows = np.repeat(np.fromiter(graph.keys(), np.int64, len(graph)), [len(v) for v in graph.values()])
    cols = np.fromiter((c for v in graph.values() for c in v), np.int64)
    if rows.size and (rows.min() < 0 or max(rows.max(), cols.max()) >= n or cols.min() < 0):
        raise LadleError(f"{raw / f'ind.{prefix}.graph'} names nodes outside [0, {n - 1}]",
                         fix="restore the original Planetoid file")
    edge_index = torch.from_numpy(np.stack([rows, cols]))
    return (torch.from_numpy(features).float(), torch.from_numpy(labels).long(), edge_index,
            *(torch.from_numpy(m) for m in masks))


def _test_index(path: Path) -> np.ndarray:
    try:
        values = np.array([int(line) for line in path.read_text().split()], dtype=np.int64)
    except (ValueError, OSError) as err:
        raise LadleError(f"{path} is not a list of node indices ({err})", fix="restore the original Planetoid file") \
            from None
    if values.size == 0 or values.min() < 0:
        raise LadleError(f"{path} lists no valid node index", fix="restore the original Planetoid file")
    return values


class _SparseFields:
    """What a pickled scipy CSR matrix carries (its ``__dict__``), kept as plain data; nothing of scipy runs."""


def _dict_of_lists(factory=None) -> dict:
    return {}


def _array_shell(cls=None, shape=None, dtype=None) -> np.ndarray:
    # numpy's own _reconstruct, with the shape the stream asks for ignored: __setstate__ then gives the real
    # shape, with data of exactly that many bytes, or fails.
    return np.ndarray((0,), np.uint8)


_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _array_shell,
    ("numpy._core.multiarray", "_reconstruct"): _array_shell,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("scipy.sparse.csr", "csr_matrix"): _SparseFields,
    ("scipy.sparse._csr", "csr_matrix"): _SparseFields,
    ("collections", "defaultdict"): _dict_of_lists,
    ("__builtin__", "list"): list,
    ("builtins", "list"): list,
}


class _Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"{module}.{name} is not an array, a sparse matrix or a list") from None


def _restricted_load(path: Path):
    payload = read_bytes(path, limit=MAX_RAW_BYTES, what="Planetoid file")
    try:
        return _Restricted(io.BytesIO(payload), encoding="latin1").load()
    except (pickle.UnpicklingError, ValueError, TypeError, EOFError, AttributeError, IndexError, KeyError) as err:
        raise LadleError(f"{path}: not a Planetoid file ladle can read safely ({err}); it reads these pickles with a "
                         "restricted unpickler and never runs code from them",
                         fix="restore the original file (or let ladle download it into an empty root)") from None


def _dense(value, path: Path) -> np.ndarray:
    """A float32 [rows, cols] array from a pickled CSR matrix's fields or a pickled dense array, size-checked."""
    fix = "restore the original Planetoid file"
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.ndim != 2:
            raise LadleError(f"{path}: holds a {value.dtype} array of {value.ndim} dimensions, not a matrix", fix=fix)
        return value.astype(np.float32)
    if not isinstance(value, _SparseFields):
        raise LadleError(f"{path}: holds a {type(value).__name__}, not a matrix", fix=fix)
    fields = value.__dict__
    shape = fields.get("_shape", fields.get("shape"))
    data, indices, indptr = (fields.get(k) for k in ("data", "indices", "indptr"))
    if not (isinstance(shape, tuple) and len(shape) == 2 and all(isinstance(d, int) and d >= 0 for d in shape)
            and all(isinstance(a, np.ndarray) and a.ndim == 1 for a in (data, indices, indptr))
            and data.dtype.kind in "biuf" and indices.dtype.kind in "iu" and indptr.dtype.kind in "iu"):
        raise LadleError(f"{path}: not the fields of a CSR matrix", fix=fix)
    rows, cols = shape
    if too_big(4.0 * rows * cols):
        raise LadleError(f"{path}: a {rows} x {cols} matrix ({gib(4.0 * rows * cols)} dense) does not fit in memory",
                         fix=fix)
    if (indptr.size != rows + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != data.size
            or indices.size != data.size or (indices.size and (indices.min() < 0 or indices.max() >= cols))):
        raise LadleError(f"{path}: its CSR fields do not describe a {rows} x {cols} matrix", fix=fix)
    dense = np.zeros((rows, cols), np.float32)
    row_of = np.repeat(np.arange(rows), np.diff(indptr))
    np.add.at(dense, (row_of, indices), data.astype(np.float32))
    return dense
