"""Node-wise neighbour sampling: Hamilton et al., *GraphSAGE* (NeurIPS 2017).

Seed nodes are the training nodes in shuffled batches of ``batch_size``. Hop ``l`` samples up
to ``fanouts[l]`` neighbours of every node first reached at hop ``l - 1``, without replacement,
all frontier nodes at once: each candidate edge gets a random key, one sort orders every
node's edges randomly, and the first ``fanout`` of each are kept. A node is expanded only once,
so no edge appears twice. Batches follow PyG's ``NeighborLoader``: seed nodes first,
``batch_size`` of them, ``n_id`` the global ids, edges source -> target in local ids.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from ladle.config import SamplerConfig
from ladle.data.graph import Graph
from ladle.sampling.base import LocalIndex, edges_of, epoch_generator


def sample_neighbours(rowptr, col, frontier, fanout, gen):
    """Up to ``fanout`` distinct neighbours of each frontier node.

    Returns (position in ``frontier`` of the target, global id of the sampled neighbour).
    """
    owner, neighbour = edges_of(rowptr, col, frontier)
    if owner.numel() == 0:
        return owner, neighbour
    count = rowptr[frontier + 1] - rowptr[frontier]
    if bool((count <= fanout).all()):
        return owner, neighbour
    # Random key per candidate; sorting by (owner, key) shuffles each node's edges independently.
    key = owner.to(torch.float64) + torch.rand(owner.numel(), generator=gen, dtype=torch.float64)
    order = torch.argsort(key)
    owner, neighbour = owner[order], neighbour[order]
    rank = torch.arange(owner.numel()) - (torch.cumsum(count, 0) - count)[owner]
    keep = rank < fanout
    return owner[keep], neighbour[keep]


class NeighborSampler:
    name = "neighbor"

    def __init__(self, graph: Graph, config: SamplerConfig, seed: int):
        self.graph, self.config, self.seed = graph, config, seed
        self.train_nodes = graph.mask("train").nonzero().view(-1).cpu()
        self.index = LocalIndex(graph.num_nodes)

    def __len__(self) -> int:
        return -(-self.train_nodes.numel() // self.config.batch_size)

    def batches(self, epoch: int):
        gen = epoch_generator(self.seed, epoch)
        order = self.train_nodes[torch.randperm(self.train_nodes.numel(), generator=gen)]
        for seeds in order.split(self.config.batch_size):
            yield self.sample(seeds, gen)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Data:
        rowptr, col = (t.cpu() for t in self.graph.csr())
        index = self.index
        nodes, frontier = [seeds], seeds
        index.assign(seeds)
        total = seeds.numel()
        src, dst = [], []
        for fanout in self.config.fanouts:
            target_pos, neighbour = sample_neighbours(rowptr, col, frontier, fanout, gen)
            target_local = index[frontier][target_pos]
            local = index[neighbour]
            new = local < 0
            fresh = _first_appearance_unique(neighbour[new])
            index.buffer[fresh] = torch.arange(total, total + fresh.numel())
            total += fresh.numel()
            src.append(index[neighbour])
            dst.append(target_local)
            nodes.append(fresh)
            frontier = fresh
        n_id = torch.cat(nodes)
        index.clear(n_id)
        data = self.graph.data
        edge_index = torch.stack([torch.cat(src), torch.cat(dst)]) if src else torch.empty(2, 0, dtype=torch.long)
        return Data(x=data.x[n_id], y=data.y[n_id], edge_index=edge_index, n_id=n_id,
                    batch_size=seeds.numel(), num_nodes=n_id.numel())


def _first_appearance_unique(ids: torch.Tensor) -> torch.Tensor:
    """Distinct ids in order of first appearance (deterministic, vectorised)."""
    if ids.numel() == 0:
        return ids
    unique, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((unique.numel(),), ids.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), reduce="amin")
    return unique[torch.argsort(first)]
