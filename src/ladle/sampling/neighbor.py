"""Node-wise neighbour sampling: Hamilton et al., *GraphSAGE* (NeurIPS 2017).

Seed nodes are the training nodes in shuffled batches of ``batch_size``. Hop ``l`` samples up
to ``fanouts[l]`` neighbours of every node first reached at hop ``l - 1``, without replacement,
all frontier nodes at once: each node with more neighbours than the fanout draws ``fanout``
distinct edge offsets by Floyd's algorithm, vectorised over the frontier (no sort, no pass over
the edges it does not keep). A node is expanded only once,
so no edge appears twice. Batches follow PyG's ``NeighborLoader``: seed nodes first,
``batch_size`` of them, ``n_id`` the global ids, edges source -> target in local ids.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from ladle.data.graph import Graph
from ladle.sampling.base import edge_positions, seed_batches
from ladle.sampling.options import SamplerConfig

FLOYD_MAX_FANOUT = 32  # past this, Floyd's k(k-1)/2 comparisons per node cost more than one sort of the edges


def sample_neighbours(rowptr, col, frontier, fanout, gen, with_positions: bool = False):
    """Up to ``fanout`` distinct neighbours of each frontier node, uniformly without replacement.

    Returns (position in ``frontier`` of the target, global id of the sampled neighbour), sorted by
    target; with ``with_positions`` also each pick's CSR position (its edge id in the graph's sorted
    ``edge_index``). Nodes with at most ``fanout`` neighbours keep them all; the others draw ``fanout`` of their edge
    offsets by Floyd's algorithm (:func:`floyd_offsets`), all nodes at once, touching only the
    edges drawn; fanouts above ``FLOYD_MAX_FANOUT`` shuffle every edge of those nodes instead
    (:func:`shuffled_offsets`).
    """
    start = rowptr.index_select(0, frontier)
    count = rowptr.index_select(0, frontier + 1) - start
    big = count > fanout
    big_nodes = big.nonzero().view(-1)
    if big_nodes.numel() == 0:
        owner, position = edge_positions(rowptr, frontier)
        return (owner, col.index_select(0, position)) + ((position,) if with_positions else ())
    degree = count.index_select(0, big_nodes)
    if fanout <= FLOYD_MAX_FANOUT:
        columns = _floyd_columns(degree, fanout, gen)  # [fanout, big], distinct per column, each in [0, degree)
    else:
        columns = shuffled_offsets(degree, fanout, gen).t()
    # The output in frontier order, each node's picks together (a layer reads them as CSR rows without a sort):
    # a node keeps all its edges or `fanout` drawn offsets.
    kept = count.clamp_max(fanout)
    owner = torch.repeat_interleave(torch.arange(frontier.numel()), kept)
    rank = torch.arange(owner.numel()) - (torch.cumsum(kept, 0) - kept).index_select(0, owner)
    # A big node's k-th pick is its k-th drawn offset; the others' picks are their edges in order: one gather from
    # the drawn offsets with an identity column appended for them.
    table = torch.cat([columns, torch.arange(fanout)[:, None]], dim=1).view(-1)
    column = torch.full((frontier.numel(),), big_nodes.numel(), dtype=torch.long)
    column.index_copy_(0, big_nodes, torch.arange(big_nodes.numel()))
    rank = table.index_select(0, rank * (big_nodes.numel() + 1) + column.index_select(0, owner))
    position = start.index_select(0, owner) + rank
    return (owner, col.index_select(0, position)) + ((position,) if with_positions else ())


def floyd_offsets(degree: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """[n, k] distinct offsets in [0, degree) per row, every k-subset equally likely (Floyd's algorithm).

    Step i draws t uniformly in [0, d - k + i] and takes d - k + i instead when t was already taken
    (Bentley & Floyd, "A sample of brilliance", CACM 1987): k draws and k(k-1)/2 comparisons per node,
    with no sort and nothing proportional to the degree. Needs ``degree >= k``.
    """
    return _floyd_columns(degree, k, gen).t().contiguous()


def _floyd_columns(degree: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """:func:`floyd_offsets` as [k, n]: every step's draw at once, then k - 1 steps of one contiguous row each
    (few operations per step, since a small batch pays for each)."""
    u = torch.rand(degree.numel(), k, generator=gen, dtype=torch.float64).t()
    top = degree - torch.arange(k, 0, -1)[:, None]  # [k, n]: the largest offset step i may draw
    chosen = (u * (top + 1).to(torch.float64)).long().minimum(top)
    for i in range(1, k):
        taken = (chosen[:i] == chosen[i]).view(torch.uint8).amax(0).view(torch.bool)
        chosen[i] = torch.where(taken, top[i], chosen[i])
    return chosen


def shuffled_offsets(degree: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
    """[n, k] distinct offsets in [0, degree) per row, uniformly: every edge gets a random key, one sort of
    (row, key) shuffles each row's edges at once, and the first k of each row are kept."""
    rowptr = torch.zeros(degree.numel() + 1, dtype=torch.long)
    torch.cumsum(degree, 0, out=rowptr[1:])
    owner = torch.repeat_interleave(torch.arange(degree.numel()), degree, output_size=int(rowptr[-1]))
    key = (owner << 31) | torch.randint(0, 2**31, (owner.numel(),), generator=gen)  # int64 keys sort fastest
    order = torch.argsort(key)
    # Groups stay where they were, so a row's first k shuffled edges start at its old offset.
    pick = (rowptr[:-1, None] + torch.arange(k)).view(-1)
    return (order.index_select(0, pick) - rowptr[:-1].repeat_interleave(k)).view(-1, k)


class NeighborSampler:
    name = "neighbor"

    def __init__(self, graph: Graph, config: SamplerConfig, seed: int):
        self.graph, self.config, self.seed = graph, config, seed
        self.train_nodes = graph.mask("train").nonzero().view(-1).cpu()
        # Global -> local id of this batch's nodes, _NEVER elsewhere; reset in O(batch) after each batch.
        self.local = torch.full((graph.num_nodes,), _NEVER, dtype=torch.long)

    def __len__(self) -> int:
        return -(-self.train_nodes.numel() // self.config.batch_size)

    def batches(self, epoch: int):
        for seeds, gen in seed_batches(self.train_nodes, self.seed, epoch, self.config.batch_size):
            yield self.sample(seeds, gen)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Data:
        data = self.graph.data
        edge_attr = data.get("edge_attr")
        n_id, edge_index, per_hop, *e_id = self.sample_topology(seeds, gen, with_hops=True,
                                                               with_edge_ids=edge_attr is not None)
        extra = {} if edge_attr is None else {"edge_attr": edge_attr.index_select(0, e_id[0])}
        return Data(x=data.x.index_select(0, n_id), y=data.y.index_select(0, n_id), edge_index=edge_index,
                    n_id=n_id, batch_size=seeds.numel(), num_nodes=n_id.numel(),
                    num_sampled_nodes=per_hop[0], num_sampled_edges=per_hop[1], **extra)

    def sample_topology(self, seeds: torch.Tensor, gen: torch.Generator, with_hops: bool = False,
                        with_edge_ids: bool = False):
        """The sampled nodes (``n_id``, seeds first, then each hop's new nodes in order of first appearance)
        and local edges (hop by hop), without gathering features; with ``with_hops`` also PyG's per-hop counts
        ``(num_sampled_nodes, num_sampled_edges)``; with ``with_edge_ids`` (after them) each sampled edge's id in
        the graph (PyG's ``e_id``; the edge's two directions share their features)."""
        rowptr, col = (t.cpu() for t in self.graph.csr())
        local = self.local
        local.index_copy_(0, seeds, torch.arange(seeds.numel()))
        nodes, frontier, first_local = [seeds], seeds, 0
        total = seeds.numel()
        src, dst, ids = [], [], []
        for fanout in self.config.fanouts:
            target_pos, neighbour, *position = sample_neighbours(rowptr, col, frontier, fanout, gen,
                                                                 with_positions=with_edge_ids)
            ids += position
            # One scatter-min marks each new node with its first position (offset past every local id
            # given so far, so a node already in the batch keeps its id); the nodes whose mark is their
            # own position are the new ones, in order of first appearance, and get the next ids.
            where = torch.arange(total, total + neighbour.numel())
            local.scatter_reduce_(0, neighbour, where, reduce="amin")
            fresh = neighbour.masked_select(local.index_select(0, neighbour) == where)
            local.index_copy_(0, fresh, torch.arange(total, total + fresh.numel()))
            src.append(local.index_select(0, neighbour))
            dst.append(target_pos + first_local)  # a frontier holds consecutive local ids
            nodes.append(fresh)
            frontier, first_local = fresh, total
            total += fresh.numel()
        n_id = torch.cat(nodes)
        local.index_fill_(0, n_id, _NEVER)
        edge_index = torch.stack([torch.cat(src), torch.cat(dst)]) if src else torch.empty(2, 0, dtype=torch.long)
        out = (n_id, edge_index)
        if with_hops:
            out += (([t.numel() for t in nodes], [t.numel() for t in src]),)
        if with_edge_ids:
            out += (torch.cat(ids) if ids else torch.empty(0, dtype=torch.long),)
        return out


_NEVER = torch.iinfo(torch.long).max
