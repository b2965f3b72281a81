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

from ladle.data.graph import Graph
from ladle.sampling.base import LocalIndex, edge_positions, epoch_generator
from ladle.sampling.options import SamplerConfig


def sample_neighbours(rowptr, col, frontier, fanout, gen):
    """Up to ``fanout`` distinct neighbours of each frontier node, uniformly without replacement.

    Returns (position in ``frontier`` of the target, global id of the sampled neighbour). Nodes
    with at most ``fanout`` neighbours keep them all; only the others' edges are shuffled.
    """
    count = rowptr.index_select(0, frontier + 1) - rowptr.index_select(0, frontier)
    big = count > fanout
    small_nodes = (~big).nonzero().view(-1)
    owner, position = edge_positions(rowptr, frontier.index_select(0, small_nodes))
    owner = small_nodes.index_select(0, owner)
    big_nodes = big.nonzero().view(-1)
    if big_nodes.numel() == 0:
        return owner, col.index_select(0, position)
    big_owner, big_position = edge_positions(rowptr, frontier.index_select(0, big_nodes))
    # One sort by (owner, random key) shuffles every node's edges at once; int64 keys sort fastest.
    key = (big_owner << 31) | torch.randint(0, 2**31, (big_owner.numel(),), generator=gen)
    order = torch.argsort(key)
    # Groups stay where they were, so a node's first `fanout` shuffled edges start at its old offset.
    group_start = torch.cumsum(count.index_select(0, big_nodes), 0) - count.index_select(0, big_nodes)
    pick = (group_start[:, None] + torch.arange(fanout)).view(-1)
    owner = torch.cat([owner, big_nodes.repeat_interleave(fanout)])
    position = torch.cat([position, big_position.index_select(0, order.index_select(0, pick))])
    return owner, col.index_select(0, position)


class NeighborSampler:
    name = "neighbor"

    def __init__(self, graph: Graph, config: SamplerConfig, seed: int, **_):
        self.graph, self.config, self.seed = graph, config, seed
        self.train_nodes = graph.mask("train").nonzero().view(-1).cpu()
        self.index = LocalIndex(graph.num_nodes)
        self.first_seen = torch.full((graph.num_nodes,), _NEVER, dtype=torch.long)

    def __len__(self) -> int:
        return -(-self.train_nodes.numel() // self.config.batch_size)

    def batches(self, epoch: int):
        gen = epoch_generator(self.seed, epoch)
        order = self.train_nodes[torch.randperm(self.train_nodes.numel(), generator=gen)]
        for seeds in order.split(self.config.batch_size):
            yield self.sample(seeds, gen)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Data:
        n_id, edge_index, per_hop = self.sample_topology(seeds, gen, with_hops=True)
        data = self.graph.data
        return Data(x=data.x.index_select(0, n_id), y=data.y.index_select(0, n_id), edge_index=edge_index,
                    n_id=n_id, batch_size=seeds.numel(), num_nodes=n_id.numel(),
                    num_sampled_nodes=per_hop[0], num_sampled_edges=per_hop[1])

    def sample_topology(self, seeds: torch.Tensor, gen: torch.Generator, with_hops: bool = False):
        """The sampled nodes (``n_id``, seeds first, then each hop's new nodes) and local edges (hop by
        hop), without gathering features; with ``with_hops`` also PyG's per-hop counts
        ``(num_sampled_nodes, num_sampled_edges)``."""
        rowptr, col = (t.cpu() for t in self.graph.csr())
        index = self.index
        nodes, frontier = [seeds], seeds
        index.assign(seeds)
        total = seeds.numel()
        src, dst = [], []
        for fanout in self.config.fanouts:
            target_pos, neighbour = sample_neighbours(rowptr, col, frontier, fanout, gen)
            target_local = index.buffer.index_select(0, frontier).index_select(0, target_pos)
            local = index.buffer.index_select(0, neighbour)
            new = local < 0
            fresh = self._first_appearance_unique(neighbour[new])
            index.buffer[fresh] = torch.arange(total, total + fresh.numel())
            total += fresh.numel()
            src.append(index.buffer.index_select(0, neighbour))
            dst.append(target_local)
            nodes.append(fresh)
            frontier = fresh
        n_id = torch.cat(nodes)
        index.clear(n_id)
        edge_index = torch.stack([torch.cat(src), torch.cat(dst)]) if src else torch.empty(2, 0, dtype=torch.long)
        if with_hops:
            return n_id, edge_index, ([t.numel() for t in nodes], [t.numel() for t in src])
        return n_id, edge_index


    def _first_appearance_unique(self, ids: torch.Tensor) -> torch.Tensor:
        """Distinct ids in order of first appearance: one scatter-min into a reused [N] buffer, no sort."""
        where = torch.arange(ids.numel())
        self.first_seen.scatter_reduce_(0, ids, where, reduce="amin")
        fresh = ids[self.first_seen.index_select(0, ids) == where]
        self.first_seen[ids] = _NEVER
        return fresh


_NEVER = torch.iinfo(torch.long).max

