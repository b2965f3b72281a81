"""``ladle partition``: cut a graph into K parts on disk, streaming it, never holding it whole.

Memory, stated in advance (N nodes, E undirected edges, F features, K parts, the largest part n nodes and e
neighbour entries): the membership, the renumbering and a halo scratch, 33 N bytes; one chunk of the source
(``CHUNK_BYTES``); then, one part at a time, its sorted neighbour keys (8 e bytes, a few times over while
deduplicating and mapping them to local ids) and one chunk of its features. Disk: the parts' CSR (8 bytes per
neighbour entry), the features once (with ``--halo 1`` also each part's halo's, which on a random cut is most of
the graph), and 8 bytes per entry of scratch while bucketing.
``random`` needs nothing more; ``metis`` (pymetis) needs the graph's adjacency in memory, so it is for graphs that
fit, and says so.

How: the edges are read in chunks, self-loops dropped, each undirected edge written as one key per endpoint
(``row_local * N + neighbour``) appended to that endpoint's part's bucket file; then each part's bucket is sorted
and deduplicated on its own into CSR, its features, labels and masks gathered from the memory-mapped source, every
file written atomically with its SHA-256 recorded in the manifest.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ladle.data import load_graph
from ladle.data.npy import load_npy, open_npy, parse_npy_spec
from ladle.errors import LadleError
from ladle.files import write_json
from ladle.parts import MANIFEST, PARTS_FORMAT
from ladle.profiling import peak_resident
from ladle.sampling.partition import metis_parts, random_membership

log = logging.getLogger(__name__)
CHUNK_BYTES = 64 * 2**20
METHODS = ("random", "metis")


@dataclass
class Source:
    """A graph as arrays (memory-mapped where it came from disk): what the writer streams over."""

    name: str
    x: np.ndarray  # [N, F]
    y: np.ndarray  # [N] or [N, T]
    edges: np.ndarray  # [E, 2], any direction, duplicates and self-loops allowed
    masks: dict  # split -> [N] bool
    num_classes: int
    task: str
    metric: str
    sha256: str
    graph: object = None  # the in-memory Graph, where the source is one
    load: object = None  # makes it, where it is not (METIS needs it)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])


def open_source(spec: str, root: str = "data") -> Source:
    """``npy:DIR[#K]`` memory-mapped (validated in chunks, never read whole); any other dataset loaded in memory."""
    if spec.lower().startswith("npy:"):
        folder, split = parse_npy_spec(spec)
        g = open_npy(folder, split)

        def load():
            return load_npy(folder, split)

        return Source(g.name, g.x, g.y, g.edges, g.masks, g.num_classes, g.task, g.metric, g.source_sha256(),
                      load=load)
    return source_of(load_graph(spec, root))


def source_of(graph) -> Source:
    d = graph.data
    return Source(graph.name, d.x.numpy(), d.y.numpy(), d.edge_index.t().numpy(),
                  {s: getattr(d, f"{s}_mask").numpy() for s in ("train", "val", "test")}, graph.num_classes,
                  graph.task, graph.metric, graph.fingerprint, graph)


def membership(source: Source, method: str, parts: int, seed: int = 0) -> np.ndarray:
    """[N] int64 part ids: the same partition ``--partition METHOD --parts K`` trains on in memory."""
    if not 1 <= parts <= source.num_nodes:
        raise LadleError(f"--parts {parts}: cannot cut {source.num_nodes} nodes into that many parts",
                         fix=f"use --parts between 1 and {source.num_nodes}")
    if method == "random":
        return random_membership(source.num_nodes, parts, seed).numpy()
    if method != "metis":
        raise LadleError(f"--method {method!r} is not a partition method", fix=f"choose from {', '.join(METHODS)}")
    if source.graph is None:  # METIS needs the adjacency in memory
        log.warning("METIS loads %s whole in memory; --method random streams a graph of any size", source.name)
        source.graph = source.load()
    return metis_parts(source.graph.to("cpu"), parts, seed).numpy().astype(np.int64)


def write_parts(source: Source, out: str | Path, parts: int, *, method: str = "random", halo: int = 0,
                seed: int = 0) -> dict:
    """Write ``source`` cut into ``parts`` parts under ``out`` (which must not exist yet); return the manifest."""
    if halo not in (0, 1):
        raise LadleError(f"--halo {halo}: ladle stores 1-hop halos", fix="use --halo 0 or --halo 1")
    out = Path(out)
    if out.exists():
        raise LadleError(f"{out} already exists", fix="choose a new --out folder (a partition is written whole)")
    start = time.perf_counter()
    with peak_resident() as peak:
        out.parent.mkdir(parents=True, exist_ok=True)  # written beside its final place, then renamed into it
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            manifest = _write(source, work, parts, method, halo, seed)
            manifest["partition_seconds"] = round(time.perf_counter() - start, 3)
            manifest["peak_memory_bytes"] = None  # filled in below, once the block has ended
            _dump(work / MANIFEST, manifest)
            os.replace(work, out)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    manifest["peak_memory_bytes"] = peak[0] if peak else None
    _dump(out / MANIFEST, manifest)
    return manifest


def _dump(path: Path, manifest: dict) -> None:
    write_json(path, manifest)


def _write(source: Source, work: Path, parts: int, method: str, halo: int, seed: int) -> dict:
    n = source.num_nodes
    # The N-long arrays below are the writer's one cost that grows with the graph: each in the narrowest integer
    # type its values fit (4 bytes a node below 2^31 nodes), the edges' keys alone in 8.
    index = np.int32 if n < 2**31 else np.int64
    part_of = membership(source, method, parts, seed).astype(np.int32)
    sizes = np.bincount(part_of, minlength=parts)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    order = np.argsort(part_of, kind="stable").astype(index)  # new id -> original id: each part's nodes, ascending
    local = np.empty(n, dtype=index)  # each node's id within its part (its new id less its part's offset)
    for p in range(parts):
        local[order[offsets[p]:offsets[p + 1]]] = np.arange(sizes[p], dtype=index)
    buckets = _bucket_edges(source.edges, part_of, local, n, parts, work)
    seen, halo_position = np.zeros(n, dtype=bool), np.empty(n, dtype=index)  # scratch, reused by every part
    files = {}
    num_edges = 0
    for p in range(parts):
        folder = work / f"part-{p}"
        folder.mkdir()
        own = order[offsets[p]:offsets[p + 1]].astype(np.int64)
        keys = np.fromfile(buckets[p], dtype=np.int64)  # row_local * N + neighbour, one per directed edge
        os.unlink(buckets[p])
        keys.sort()
        if keys.size:
            keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        num_edges += int(keys.size)
        indptr = np.zeros(sizes[p] + 1, dtype=np.int64)
        step = max(1, CHUNK_BYTES // 8)
        for begin in range(0, keys.size, step):  # the rows counted a chunk at a time, never held whole
            indptr[1:] += np.bincount(keys[begin:begin + step] // n, minlength=int(sizes[p]))
        np.cumsum(indptr, out=indptr)
        cols = np.remainder(keys, n, out=keys).astype(index)
        del keys
        outside = part_of[cols] != p
        seen[:] = False
        seen[cols[outside]] = True
        halo_ids = np.flatnonzero(seen)  # ascending original id
        halo_position[halo_ids] = np.arange(sizes[p], sizes[p] + halo_ids.size, dtype=index)
        indices = local[cols].astype(np.int64)
        indices[outside] = halo_position[cols[outside]]
        del cols, outside
        orig = np.concatenate([own, halo_ids])
        # The halo's features and labels only where the parts train with it: on a random cut nearly every node is
        # some part's halo, and K copies of the features would cost K times the graph on disk.
        held = orig if halo else own
        files[f"part-{p}"] = {
            "indptr": _save(folder / "indptr.npy", indptr), "indices": _save(folder / "indices.npy", indices),
            "x": _gather(folder / "x.npy", source.x, held), "y": _gather(folder / "y.npy", source.y, held),
            "orig_ids": _save(folder / "orig_ids.npy", orig),
            **{f"{s}_mask": _gather(folder / f"{s}_mask.npy", source.masks[s], own, bool)
               for s in ("train", "val", "test")},
        }
        files[f"part-{p}"]["num_nodes"], files[f"part-{p}"]["num_halo_nodes"] = int(sizes[p]), int(halo_ids.size)
        files[f"part-{p}"]["split_sizes"] = {s: int(np.count_nonzero(np.load(folder / f"{s}_mask.npy", mmap_mode="r")))
                                             for s in ("train", "val", "test")}
        log.info("part %d: %d nodes, %d halo, %d neighbour entries", p, sizes[p], halo_ids.size, indices.size)
    return {
        "format": PARTS_FORMAT, "graph_name": source.name, "part_method": method, "num_parts": parts,
        "halo_hops": halo, "seed": seed, "num_nodes": n, "num_edges": num_edges,
        "node_map": [[int(offsets[p]), int(offsets[p + 1])] for p in range(parts)],
        "feature_dtype": str(source.x.dtype), "num_features": int(source.x.shape[1]),
        "num_classes": source.num_classes, "task": source.task, "metric": source.metric,
        "source_sha256": source.sha256, **files,
    }


def _bucket_edges(edges: np.ndarray, part_of: np.ndarray, local: np.ndarray, n: int, parts: int,
                  work: Path) -> list[Path]:
    """Append one key per endpoint of every edge (``row_local * N + neighbour``) to that endpoint's part's file."""
    paths = [work / f".bucket-{p}" for p in range(parts)]
    handles = [open(p, "ab") for p in paths]
    try:
        step = max(1, CHUNK_BYTES // (2 * 8 * 4))
        for begin in range(0, edges.shape[0], step):
            chunk = np.asarray(edges[begin:begin + step], dtype=np.int64)
            chunk = chunk[chunk[:, 0] != chunk[:, 1]]
            rows = np.concatenate([chunk[:, 0], chunk[:, 1]])
            cols = np.concatenate([chunk[:, 1], chunk[:, 0]])
            del chunk
            owner = part_of[rows]
            keys = local[rows].astype(np.int64) * n + cols
            by_part = np.argsort(owner, kind="stable")
            counts = np.bincount(owner, minlength=parts)
            for p, block in enumerate(np.split(keys[by_part], np.cumsum(counts)[:-1])):
                if block.size:
                    handles[p].write(block.tobytes())
    finally:
        for h in handles:
            h.close()
    return paths


def _save(path: Path, array: np.ndarray) -> dict:
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)
    return _describe(path, array.shape, array.dtype)


def _gather(path: Path, source: np.ndarray, ids: np.ndarray, dtype=None) -> dict:
    """``source[ids]`` written to ``path`` chunk by chunk (``ids`` ascending reads the memory-mapped source in
    order), never holding more than one chunk of it."""
    shape = (ids.size, *source.shape[1:])
    dtype = np.dtype(dtype or source.dtype)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    row_bytes = max(1, int(np.prod(source.shape[1:], dtype=np.int64)) * source.dtype.itemsize)
    step = max(1, CHUNK_BYTES // row_bytes)
    for begin in range(0, ids.size, step):
        out[begin:begin + step] = np.asarray(source[ids[begin:begin + step]], dtype=dtype)
    out.flush()
    del out
    return _describe(path, shape, dtype)


def _describe(path: Path, shape, dtype) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        while block := f.read(CHUNK_BYTES):
            digest.update(block)
    return {"file": path.name, "shape": [int(s) for s in shape], "dtype": str(np.dtype(dtype)),
            "sha256": digest.hexdigest()}


def summary(manifest: dict) -> str:
    return json.dumps({k: manifest[k] for k in ("num_parts", "num_nodes", "num_edges", "partition_seconds",
                                                 "peak_memory_bytes")})
