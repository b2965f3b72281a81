"""Graph partitions: METIS through ``pymetis`` (Karypis & Kumar, 1998), cached on disk, or random.

The cache key is (graph fingerprint, parts, seed); the file is a plain ``.npy`` of int32 part
ids written atomically and read with ``allow_pickle=False``. Set ``LADLE_CACHE`` to move it
(default ``~/.cache/ladle``).
"""
from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import numpy as np
import torch

from ladle.data.graph import Graph
from ladle.errors import LadleError

log = logging.getLogger(__name__)


def cache_root(cache_dir=None) -> Path:
    return Path(cache_dir or os.environ.get("LADLE_CACHE") or Path.home() / ".cache" / "ladle")


def metis_parts(graph: Graph, parts: int, seed: int = 0, cache_dir=None) -> torch.Tensor:
    """[N] int64 part id of every node, balanced by METIS (k-way, default 3% imbalance)."""
    if parts > graph.num_nodes:
        raise LadleError(f"cannot cut {graph.num_nodes} nodes into {parts} parts", fix="use fewer --parts")
    if parts == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.long)
    path = cache_root(cache_dir) / "partitions" / f"{graph.fingerprint[:24]}-metis-{parts}-{seed}.npy"
    if path.exists():
        try:
            membership = np.load(path, allow_pickle=False)
            if membership.shape == (graph.num_nodes,):
                return torch.from_numpy(membership.astype(np.int64))
        except (OSError, ValueError):
            pass
        log.warning("ignoring unreadable partition cache %s", path)
    import pymetis

    rowptr, col = graph.csr()
    options = pymetis.Options(seed=seed)
    result = pymetis.part_graph(parts, xadj=rowptr.numpy().astype(np.int32), adjncy=col.numpy().astype(np.int32),
                                options=options)
    membership = np.asarray(result.vertex_part, dtype=np.int32)
    _save(path, membership)
    return torch.from_numpy(membership.astype(np.int64))


def random_parts(graph: Graph, parts: int, seed: int = 0) -> torch.Tensor:
    """[N] part ids of a uniformly random, exactly balanced partition."""
    if parts > graph.num_nodes:
        raise LadleError(f"cannot cut {graph.num_nodes} nodes into {parts} parts", fix="use fewer --parts")
    gen = torch.Generator().manual_seed(seed)
    membership = torch.empty(graph.num_nodes, dtype=torch.long)
    membership[torch.randperm(graph.num_nodes, generator=gen)] = torch.arange(graph.num_nodes) % parts
    return membership


def part_nodes(membership: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """The sorted node ids of each part."""
    order = torch.argsort(membership, stable=True)
    sizes = torch.bincount(membership, minlength=parts)
    return list(order.split(sizes.tolist()))


def _save(path: Path, membership: np.ndarray) -> None:
    from ladle.store import atomic_write

    buffer = io.BytesIO()
    np.save(buffer, membership, allow_pickle=False)
    try:
        atomic_write(path, buffer.getvalue())
    except OSError as err:  # a read-only cache only costs a recomputation next time
        log.warning("could not cache the partition at %s: %s", path, err)
