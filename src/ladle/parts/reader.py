"""``parts:PDIR``: a partition folder opened as data, and one part read by the worker that trains on it.

:func:`open_parts` checks the manifest before anything is mapped: its format, the parts' node ranges (contiguous,
covering 0..N-1), every file's name (a plain name inside its part folder: no path leaves the folder, no link), shape
and dtype against the manifest. :meth:`PartSource.load_part` then verifies that part's files' SHA-256 (a changed part
is refused by name) and maps them (``mmap_mode="r"``, ``allow_pickle=False``): a worker opens its own part's files and
no other. :meth:`PartSource.whole_graph` puts the parts together again for the steps that still need the whole graph
in memory (soups, report, predict), and says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from ladle.data.graph import Graph
from ladle.errors import LadleError
from ladle.files import check_inside, read_json
from ladle.parts import MANIFEST, PART_FILES, PARTS_FORMAT
from ladle.profiling import gib, memory_available, too_big

PREFIX = "parts:"
MAX_MANIFEST_BYTES = 16 * 2**20
_FIX = "the partition is damaged or was not written by ladle: write it again with ladle partition"
# dtype and rank each part file must have (x: the manifest's feature dtype; y: int64, or uint8 for multi-label)
_SHAPES = {"indptr": (("int64",), 1), "indices": (("int64",), 1), "orig_ids": (("int64",), 1),
           "train_mask": (("bool",), 1), "val_mask": (("bool",), 1), "test_mask": (("bool",), 1)}


def parse_parts_spec(spec: str) -> Path:
    folder = spec[len(PREFIX):] if spec.lower().startswith(PREFIX) else spec
    if not folder:
        raise LadleError(f"dataset {spec!r} names no folder", fix="write parts:PDIR (a folder ladle partition wrote)")
    return Path(folder)


def _bad(folder: Path, what: str) -> LadleError:
    return LadleError(f"{folder / MANIFEST}: {what}", fix=_FIX)


def open_parts(folder: str | Path) -> PartSource:
    """A partition folder's checked manifest, as a handle small enough to send to every worker."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LadleError(f"{folder} is not a folder", fix="parts:PDIR names the folder ladle partition --out wrote")
    if not os.path.lexists(folder / MANIFEST):
        raise LadleError(f"{folder} has no {MANIFEST}", fix="give the folder ladle partition --out wrote")
    m = read_json(folder / MANIFEST, root=folder, what="partition manifest")
    ints = ("num_parts", "num_nodes", "num_edges", "num_features", "num_classes", "halo_hops")
    if m.get("format") != PARTS_FORMAT:
        raise _bad(folder, f"format is {str(m.get('format'))[:40]!r}, not {PARTS_FORMAT}")
    for key in ints:
        if not isinstance(m.get(key), int) or isinstance(m.get(key), bool) or m[key] < 0:
            raise _bad(folder, f"{key} is not a whole number")
    k, n = m["num_parts"], m["num_nodes"]
    if not 1 <= k <= n or m["halo_hops"] not in (0, 1) or m["num_features"] < 1 or m["num_classes"] < 1:
        raise _bad(folder, "num_parts, halo_hops, num_features or num_classes out of range")
    if m.get("task") not in ("multiclass", "multilabel") or m.get("metric") not in ("acc", "rocauc", "f1"):
        raise _bad(folder, "task or metric is not one ladle knows")
    if m.get("feature_dtype") not in ("float32", "float16"):
        raise _bad(folder, "feature_dtype is neither float32 nor float16")
    node_map = m.get("node_map")
    ok = isinstance(node_map, list) and len(node_map) == k and all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
        for r in node_map)
    if not ok or node_map[0][0] != 0 or node_map[-1][1] != n or any(
            a[1] != b[0] for a, b in zip(node_map, node_map[1:])) or any(r[0] >= r[1] for r in node_map):
        raise _bad(folder, "node_map is not K contiguous, non-empty ranges covering 0..num_nodes-1")
    for p in range(k):
        _check_part_entry(folder, m, p)
    return PartSource(str(folder), m)


def _check_part_entry(folder: Path, m: dict, p: int) -> None:
    entry = m.get(f"part-{p}")
    if not isinstance(entry, dict):
        raise _bad(folder, f"part-{p} is missing")
    own = m["node_map"][p][1] - m["node_map"][p][0]
    if entry.get("num_nodes") != own or not isinstance(entry.get("num_halo_nodes"), int) or entry["num_halo_nodes"] < 0:
        raise _bad(folder, f"part-{p}: num_nodes disagrees with node_map, or num_halo_nodes is not a count")
    sizes = entry.get("split_sizes")
    if not (isinstance(sizes, dict) and all(isinstance(sizes.get(s), int) and not isinstance(sizes[s], bool)
                                            and 0 <= sizes[s] <= own for s in ("train", "val", "test"))):
        raise _bad(folder, f"part-{p}: split_sizes are not counts of its own nodes")
    ids = own + entry["num_halo_nodes"]
    held = ids if m["halo_hops"] else own  # features and labels: of the halo too where the parts train with it
    y_rank = 2 if m["task"] == "multilabel" else 1
    expected = {"indptr": [own + 1], "orig_ids": [ids], "x": [held, m["num_features"]], "y": [held],
                **{f"{s}_mask": [own] for s in ("train", "val", "test")}}
    for key in PART_FILES:
        f = entry.get(key)
        if not (isinstance(f, dict) and f.get("file") == f"{key}.npy" and isinstance(f.get("sha256"), str)
                and len(f["sha256"]) == 64 and isinstance(f.get("shape"), list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in f["shape"])):
            raise _bad(folder, f"part-{p}.{key} does not describe the file {key}.npy (name, shape, sha256)")
        dtypes, rank = _SHAPES.get(key, ((m["feature_dtype"],), 2) if key == "x" else
                                   ((("uint8",) if y_rank == 2 else ("int64",)), y_rank))
        if f.get("dtype") not in dtypes or len(f["shape"]) != rank:
            raise _bad(folder, f"part-{p}.{key} has dtype {f.get('dtype')!r} and rank {len(f['shape'])}")
        if key in expected and f["shape"][:len(expected[key])] != expected[key]:
            raise _bad(folder, f"part-{p}.{key} has shape {f['shape']}, the node counts say {expected[key]}")


@dataclass(frozen=True)
class PartSource:
    """A checked partition folder: what an engine sends its workers instead of a graph (a path and a manifest)."""

    folder: str
    manifest: dict

    @property
    def num_parts(self) -> int:
        return self.manifest["num_parts"]

    @property
    def name(self) -> str:
        return f"{PREFIX}{Path(self.folder).name}"

    # What a Graph tells about itself, from the manifest (nothing is mapped).
    num_nodes = property(lambda self: self.manifest["num_nodes"])
    num_features = property(lambda self: self.manifest["num_features"])
    num_classes = property(lambda self: self.manifest["num_classes"])
    task = property(lambda self: self.manifest["task"])
    metric = property(lambda self: self.manifest["metric"])

    def split_size(self, split: str) -> int:
        """The number of ``split``'s nodes (``train``, ``val``, ``test``), from the manifest."""
        return sum(self.manifest[f"part-{p}"]["split_sizes"][split] for p in range(self.num_parts))

    @property
    def fingerprint(self) -> str:
        """The partition's identity: its source, its cut and every file's checksum (timings left out)."""
        stable = {k: v for k, v in self.manifest.items() if k not in ("partition_seconds", "peak_memory_bytes")}
        return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()

    def part_bytes(self, p: int) -> int:
        """The bytes part ``p``'s files hold: what its worker maps."""
        entry = self.manifest[f"part-{p}"]
        return sum(int(np.prod(entry[k]["shape"], dtype=np.int64)) * np.dtype(entry[k]["dtype"]).itemsize
                   for k in PART_FILES)

    def arrays(self, p: int, *, verify: bool = True) -> dict[str, np.ndarray]:
        """Part ``p``'s files, memory-mapped, each checked against the manifest (and its SHA-256)."""
        if not 0 <= p < self.num_parts:
            raise LadleError(f"{self.folder}: no part {p} (it holds {self.num_parts})", fix="use a part below num_parts")
        root, entry, out = Path(self.folder), self.manifest[f"part-{p}"], {}
        for key in PART_FILES:
            path = check_inside(root, root / f"part-{p}" / f"{key}.npy")
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                raise LadleError(f"{path} is missing", fix=_FIX) from None
            if not stat.S_ISREG(mode):
                raise LadleError(f"{path} is not a regular file", fix=_FIX)
            if verify and _sha256(path) != entry[key]["sha256"]:
                raise LadleError(f"{path}: checksum mismatch: part {p} changed since it was written", fix=_FIX)
            try:
                array = np.load(path, mmap_mode="r", allow_pickle=False)
            except ValueError as err:
                raise LadleError(f"{path} is not a readable .npy array: {err}", fix=_FIX) from None
            if list(array.shape) != entry[key]["shape"] or str(array.dtype) != entry[key]["dtype"]:
                raise LadleError(f"{path} holds {array.dtype} {list(array.shape)}, the manifest says "
                                 f"{entry[key]['dtype']} {entry[key]['shape']}", fix=_FIX)
            out[key] = array
        own = entry["num_nodes"]
        indptr, indices = out["indptr"], out["indices"]
        if indptr[0] != 0 or indptr[-1] != indices.shape[0] or (indices.size and (
                indices.min() < 0 or indices.max() >= own + entry["num_halo_nodes"])) or np.any(np.diff(indptr) < 0):
            raise LadleError(f"{root / f'part-{p}'}: its CSR is not consistent (indptr, indices out of range)", fix=_FIX)
        if out["orig_ids"].size and (out["orig_ids"].min() < 0 or out["orig_ids"].max() >= self.manifest["num_nodes"]):
            raise LadleError(f"{root / f'part-{p}' / 'orig_ids.npy'}: ids outside the graph", fix=_FIX)
        return out

    def load_part(self, p: int, *, halo: bool | None = None, verify: bool = True):
        """``(train_graph, own_graph)`` of part ``p``: the graph ingredient training samples from (the part's own
        nodes, with its halo as message sources where ``halo``; validation and test masks empty, as in memory), and
        the same graph with the own nodes' validation and test masks, which the ingredient validates on."""
        if halo and not self.manifest["halo_hops"]:
            raise LadleError(f"{self.folder} was cut with --halo 0: its parts hold no halo features",
                             fix="cut the graph again with ladle partition --halo 1")
        halo = bool(self.manifest["halo_hops"]) if halo is None else halo
        a = self.arrays(p, verify=verify)
        own = self.manifest[f"part-{p}"]["num_nodes"]
        with warnings.catch_warnings():  # memory-mapped and read-only: training never writes the graph
            warnings.simplefilter("ignore", UserWarning)
            indptr = torch.from_numpy(a["indptr"])
            indices = torch.from_numpy(a["indices"])
            x = torch.from_numpy(a["x"])
            y = torch.from_numpy(a["y"])
            orig = torch.from_numpy(a["orig_ids"])
        owner = torch.repeat_interleave(torch.arange(own), indptr[1:] - indptr[:-1])
        held = own + (self.manifest[f"part-{p}"]["num_halo_nodes"] if halo else 0)
        if halo:  # the halo's rows: the edges that touch the own nodes, reversed (a symmetric edge set)
            into = indices >= own
            back = torch.stack([indices[into], owner[into]])
            back = back[:, torch.argsort(back[0] * own + back[1])]
            edge_index = torch.cat([torch.stack([owner, indices]), back], 1)
        else:
            inside = indices < own
            edge_index = torch.stack([owner[inside], indices[inside]])
        x = x[:held] if x.dtype == torch.float32 else x[:held].float()
        y = y[:held].float() if self.manifest["task"] == "multilabel" else y[:held]
        pad = torch.zeros(held - own, dtype=torch.bool)
        masks = {s: torch.cat([torch.from_numpy(np.asarray(a[f"{s}_mask"])), pad]) for s in ("train", "val", "test")}
        none = torch.zeros(held, dtype=torch.bool)
        name = f"{self.manifest['graph_name']}[part {p}]"
        fingerprint = f"{self.fingerprint}:part{p}{'+halo' if halo else ''}"
        common = dict(x=x, y=y, edge_index=edge_index.contiguous(), num_nodes=held, n_id=orig[:held],
                      num_core_nodes=own)
        m = self.manifest
        train = Graph(Data(**common, train_mask=masks["train"], val_mask=none, test_mask=none.clone()), name,
                      m["num_classes"], m["task"], m["metric"], fingerprint)
        if [int(masks[s].sum()) for s in masks] != [m[f"part-{p}"]["split_sizes"][s] for s in masks]:
            raise LadleError(f"{self.folder}/part-{p}: its masks disagree with the manifest's split_sizes", fix=_FIX)
        mine = Graph(Data(**common, train_mask=masks["train"], val_mask=masks["val"], test_mask=masks["test"]),
                     name, m["num_classes"], m["task"], m["metric"], fingerprint)
        return train, mine

    def whole_graph(self):
        """The graph put together again from its parts, in memory (the fitted soups, learned and pls, and
        ``load_graph("parts:PDIR")`` need it; scoring streams over the parts): every node's features, label and
        masks from its own part, every edge from its endpoints' rows. Refused where it would not fit."""
        m = self.manifest
        need = m["num_nodes"] * m["num_features"] * 4 + m["num_edges"] * 16 * 2
        if too_big(need):
            raise LadleError(f"{self.folder}: the learned and partition learned soups fit their weights through "
                             f"the whole graph, put together in memory (about {gib(need)}, {gib(memory_available())} "
                             "free)", fix="soup with --method uniform, greedy, gis or ensemble (they stream over "
                                          "the parts), or run the fitted soups on a machine that holds the graph")
        n = m["num_nodes"]
        y_shape = (n, m["num_classes"]) if m["task"] == "multilabel" else (n,)
        x = torch.empty(n, m["num_features"])
        y = torch.empty(y_shape, dtype=torch.float32 if m["task"] == "multilabel" else torch.long)
        masks = {s: torch.zeros(n, dtype=torch.bool) for s in ("train", "val", "test")}
        rows, cols = [], []
        for p in range(m["num_parts"]):
            a = self.arrays(p)
            own = m[f"part-{p}"]["num_nodes"]
            orig = torch.from_numpy(np.array(a["orig_ids"]))
            x[orig[:own]] = torch.from_numpy(np.array(a["x"][:own], dtype=np.float32))
            y[orig[:own]] = torch.from_numpy(np.array(a["y"][:own])).to(y.dtype)
            for s in masks:
                masks[s][orig[:own]] = torch.from_numpy(np.array(a[f"{s}_mask"]))
            indptr = torch.from_numpy(np.array(a["indptr"]))
            rows.append(orig[:own].repeat_interleave(indptr[1:] - indptr[:-1]))
            cols.append(orig[torch.from_numpy(np.array(a["indices"]))])
        row, col = torch.cat(rows), torch.cat(cols)
        order = torch.argsort(row * n + col)
        data = Data(x=x, edge_index=torch.stack([row[order], col[order]]), y=y, train_mask=masks["train"],
                    val_mask=masks["val"], test_mask=masks["test"], num_nodes=n)
        return Graph(data, self.name, m["num_classes"], m["task"], m["metric"], self.fingerprint)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(64 * 2**20):
            digest.update(block)
    return digest.hexdigest()


def load_parts_dataset(spec: str, root=None):
    """The ``parts:PDIR`` dataset's loader (the registry's signature; a partition folder needs no root)."""
    return load_parts_graph(spec)


def load_parts_graph(spec: str):
    """``load_graph("parts:PDIR")``: the whole graph, put together from the parts (see :meth:`whole_graph`)."""
    return open_parts(parse_parts_spec(spec)).whole_graph()
