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
from torch_geometric.data import Data

from ladle.data.graph import Graph
from ladle.errors import LadleError, install_hint
from ladle.files import atomic_write
from ladle.sampling.base import LocalIndex, edges_of, induced_subgraph

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
    pymetis = require_metis()

    rowptr, col = graph.csr()
    options = pymetis.Options(seed=seed)
    adjacency = pymetis.CSRAdjacency(adj_starts=rowptr.numpy().astype(np.int32),
                                     adjacent=col.numpy().astype(np.int32))
    result = pymetis.part_graph(parts, adjacency=adjacency, options=options)
    membership = np.asarray(result.vertex_part, dtype=np.int32)
    _save(path, membership)
    return torch.from_numpy(membership.astype(np.int64))


def graph_parts(graph: Graph, count: int, seed: int = 0) -> list[torch.Tensor]:
    """The sorted node ids of each of the graph's ``count`` METIS parts, cut on the CPU (and cached on disk)."""
    return part_nodes(metis_parts(graph.to("cpu"), count, seed), count)


def random_parts(graph: Graph, parts: int, seed: int = 0) -> torch.Tensor:
    """[N] part ids of a uniformly random, exactly balanced partition."""
    return random_membership(graph.num_nodes, parts, seed)


def random_membership(num_nodes: int, parts: int, seed: int = 0) -> torch.Tensor:
    """[N] part ids of a uniformly random, exactly balanced partition of ``num_nodes`` nodes: node ``perm[j]`` of a
    seeded permutation goes to part ``j mod parts`` (what ``ladle partition`` writes, without the graph)."""
    if parts > num_nodes:
        raise LadleError(f"cannot cut {num_nodes} nodes into {parts} parts", fix="use fewer --parts")
    gen = torch.Generator().manual_seed(seed)
    membership = torch.empty(num_nodes, dtype=torch.long)
    membership[torch.randperm(num_nodes, generator=gen)] = torch.arange(num_nodes) % parts
    return membership


def part_nodes(membership: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """The sorted node ids of each part."""
    order = torch.argsort(membership, stable=True)
    sizes = torch.bincount(membership, minlength=parts)
    return list(order.split(sizes.tolist()))


def _save(path: Path, membership: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, membership, allow_pickle=False)
    try:
        atomic_write(path, buffer.getvalue())
    except (OSError, LadleError) as err:  # a read-only cache only costs a recomputation next time
        log.warning("could not cache the partition at %s: %s", path, err)


def require_metis():
    """pymetis, or one error saying how to get it (METIS serves ClusterGCN, METIS partitions and the pls soup)."""
    try:
        # optional: the metis extra
        import pymetis
    except ImportError:
        raise LadleError("METIS is not installed: ClusterGCN, partition method metis and the pls soup need it",
                         fix=install_hint("metis", ", or use another sampler, --partition random or other soups")) from None
    return pymetis


def needs_metis(config) -> bool:
    """Whether a run's config cuts the graph with METIS anywhere (:meth:`ladle.config.RunConfig.cuts`)."""
    return any(method == "metis" for _, method, _ in config.cuts())


FEW_TRAINING_NODES = 100  # below this many labelled nodes a part's ingredient is of uneven, often poor, accuracy


def thin_parts(graph: Graph, method: str, parts: int) -> str | None:
    """A warning when the partition leaves a part with fewer than :data:`FEW_TRAINING_NODES` training nodes (the
    numbers and the way out), else None."""
    counts = torch.bincount(membership_for(graph, method, parts)[graph.mask("train")], minlength=parts)
    low = int(counts.min())
    if low >= FEW_TRAINING_NODES:
        return None
    thin = int((counts < FEW_TRAINING_NODES).sum())
    return (f"the {method} partition into {parts} parts leaves {thin} part{'s' if thin > 1 else ''} with fewer than "
            f"{FEW_TRAINING_NODES} training nodes (they hold {low} to {int(counts.max())} of "
            f"{int(counts.sum())}): each ingredient learns from its part's labels alone, so expect uneven, often "
            "poor ingredients; fewer parts (--parts) give each more")


def membership_for(graph: Graph, method: str, parts: int, cache_dir=None) -> torch.Tensor:
    """The run's partition: every ingredient of a run computes (or reads) the same one."""
    if method == "metis":
        return metis_parts(graph, parts, 0, cache_dir)
    return random_parts(graph, parts, 0)


def part_graph(graph: Graph, membership: torch.Tensor, part: int, halo: bool = False) -> Graph:
    """The subgraph one partitioned ingredient trains on: part ``part`` (its core) and, with ``halo``,
    the core's 1-hop neighbours as message sources: the edges that touch the core (between two halo nodes
    none, as ``ladle partition``'s parts hold them). Only core training nodes carry the loss;
    validation and test stay on the whole graph, so the masks here are empty."""
    core = (membership == part).nonzero().view(-1)
    nodes = core
    if halo:
        rowptr, col = graph.csr()
        _, neighbour = edges_of(rowptr, col, core)
        outside = neighbour[membership[neighbour] != part].unique()
        nodes = torch.cat([core, outside])
    local, edge_ids = induced_subgraph(graph, nodes, LocalIndex(graph.num_nodes), with_ids=True)
    if halo:
        touches = (local < core.numel()).any(0)
        local, edge_ids = local[:, touches], edge_ids[touches]
    edge_index = local.flip(0)  # rows sorted: the CSR view stays valid (the edge set is symmetric)
    data = graph.data
    is_core = torch.arange(nodes.numel()) < core.numel()
    none = torch.zeros(nodes.numel(), dtype=torch.bool)
    sub = Data(x=data.x[nodes], y=data.y[nodes], edge_index=edge_index, train_mask=data.train_mask[nodes] & is_core,
               val_mask=none, test_mask=none.clone(), num_nodes=nodes.numel(), n_id=nodes,
               num_core_nodes=core.numel())
    if data.get("edge_attr") is not None:  # the part's edges keep their features (a user's model may read them)
        sub.edge_attr = data.edge_attr[edge_ids]
    return Graph(sub, f"{graph.name}[part {part}]", graph.num_classes, graph.task, graph.metric,
                 f"{graph.fingerprint}:part{part}{'+halo' if halo else ''}")
