"""The Sampler protocol and the vectorised pieces samplers share.

A sampler is built from ``(graph, config, seed)`` and yields PyG ``Data`` mini-batches for an
epoch: ``x``, ``y``, local ``edge_index`` (source -> target), ``n_id`` (global ids) and either
``batch_size`` (node-wise samplers: the seed nodes come first and carry the loss) or
``loss_mask`` (subgraph samplers), with optional GraphSAINT ``loss_weight`` and ``edge_weight``;
layer-wise samplers add ``layer_ptr`` and ``self_weight`` (see :mod:`ladle.sampling.layerwise`).
Batches depend only on (seed, epoch): the same arguments give the same batches.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from torch_geometric.data import Data

from ladle.data.graph import Graph
from ladle.seeding import derive_seed


class Sampler(Protocol):
    name: str

    def batches(self, epoch: int) -> Iterator[Data]: ...


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A generator of its own per (seed, epoch): batches never share a stream with dropout."""
    return torch.Generator().manual_seed(derive_seed(seed, "sampler", epoch))


def seed_batches(train_nodes: torch.Tensor, seed: int, epoch: int, batch_size: int, rank: int = 0, world: int = 1):
    """``(seeds, generator)`` for each batch of a seed-node sampler's epoch: the training nodes in the epoch's
    permutation, ``batch_size`` at a time, and the generator that batch's neighbours are drawn from.

    With ``world`` > 1 (one rank of a data-parallel model, :mod:`ladle.ddp`), each global batch holds ``world``
    times ``batch_size`` seeds and rank ``rank`` gets the rank-th of its ``world`` consecutive shares; rank 0 draws
    from the single model's stream, the others each from their own; a last global batch too small to give every
    rank a node is left out. ``world`` = 1 is the single model's epoch.
    """
    gen = epoch_generator(seed, epoch)
    order = train_nodes[torch.randperm(train_nodes.numel(), generator=gen)]
    if rank:
        gen = torch.Generator().manual_seed(derive_seed(seed, f"ddp-rank-{rank}", epoch))
    for seeds in order.split(batch_size * world):
        if seeds.numel() < world:
            return
        yield (seeds if world == 1 else seeds.tensor_split(world)[rank]), gen


class Categorical:
    """Draws with replacement from fixed weights by inverse CDF (``torch.multinomial`` caps at 2^24 categories)."""

    def __init__(self, weights: torch.Tensor):
        self.cdf = torch.cumsum(weights.to(torch.float64), 0)

    def sample(self, count: int, gen: torch.Generator) -> torch.Tensor:
        u = torch.rand(count, generator=gen, dtype=torch.float64) * self.cdf[-1]
        return torch.searchsorted(self.cdf, u, right=True).clamp_max(self.cdf.numel() - 1)


def edge_positions(rowptr: torch.Tensor, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every CSR position of the edges of ``nodes``, without a Python loop.

    Returns ``owner`` (the position in ``nodes`` of each edge's node) and ``position`` (index into ``col``).
    """
    start, count = rowptr[nodes], rowptr[nodes + 1] - rowptr[nodes]
    owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=rowptr.device), count)
    offset = torch.arange(owner.numel(), device=rowptr.device) - (torch.cumsum(count, 0) - count)[owner]
    return owner, start[owner] + offset


def edges_of(rowptr: torch.Tensor, col: torch.Tensor, nodes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All (node, neighbour) pairs of ``nodes``: ``owner`` positions in ``nodes``, ``neighbour`` global ids."""
    owner, position = edge_positions(rowptr, nodes)
    return owner, col[position]


class LocalIndex:
    """Global -> local id map for one batch, reusing one [N] buffer across batches (reset in O(batch))."""

    def __init__(self, num_nodes: int):
        self.buffer = torch.full((num_nodes,), -1, dtype=torch.long)

    def assign(self, nodes: torch.Tensor) -> None:
        self.buffer[nodes] = torch.arange(nodes.numel())

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.buffer[ids]

    def clear(self, nodes: torch.Tensor) -> None:
        self.buffer[nodes] = -1


def induced_subgraph(graph: Graph, nodes: torch.Tensor, index: LocalIndex, *, with_ids: bool = False):
    """Local edge_index of every edge of ``graph`` with both ends in ``nodes`` (source -> target).

    With ``with_ids`` also the CSR position of each kept edge (the edge of ``owner`` to ``neighbour``).
    """
    rowptr, col = graph.csr()
    index.assign(nodes)
    owner, position = edge_positions(rowptr, nodes)
    local = index[col[position]]
    keep = local >= 0
    index.clear(nodes)
    # The CSR lists each node's neighbours; messages run neighbour -> node (both directions exist).
    edge_index = torch.stack([local[keep], owner[keep]])
    return (edge_index, position[keep]) if with_ids else edge_index


def subgraph_batch(graph: Graph, nodes: torch.Tensor, index: LocalIndex, edge_index=None, edge_ids=None,
                   **extra) -> Data:
    """A whole-subgraph batch: the loss covers the training nodes inside it; a graph's edge features come with
    its edges (``edge_ids``, the kept edges' ids, when ``edge_index`` is given)."""
    data = graph.data
    edge_attr = data.get("edge_attr")
    if edge_index is None:
        edge_index, edge_ids = induced_subgraph(graph, nodes, index, with_ids=True)
    if edge_attr is not None:
        extra["edge_attr"] = edge_attr.index_select(0, edge_ids)
    return Data(x=data.x.index_select(0, nodes), y=data.y.index_select(0, nodes), edge_index=edge_index,
                n_id=nodes, loss_mask=data.train_mask[nodes], num_nodes=nodes.numel(), **extra)
