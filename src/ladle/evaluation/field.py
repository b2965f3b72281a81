"""Forwards restricted to what some target nodes' logits read: their receptive field, one hop smaller per layer.

An L-layer message-passing model's logits at a node depend only on its L-hop in-neighbourhood: layer l
is needed only on the nodes within L - l hops of the targets. :func:`receptive_field` builds, once, one
:class:`Block` per layer over the model's own sparse adjacency (its rows sliced, so the whole graph's
normalisation is kept), and :meth:`~ladle.models.base.GNN.block_forward` runs the layers on them,
differentiably: the learned soups fit their mixing weights on it (Zuber et al. fit on the validation
nodes; this is the same loss at the cost of their receptive field, as the fast GIS evaluator scores).

Within each block the targets are the first ``n_out`` of its ``n_in`` inputs, and the inputs of a block
are the targets of the block before it, so a layer's root term reads ``h[:n_out]``, a view. The logits
equal those of a whole-graph forward at the targets up to float rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.utils import spmm

from ladle.data.graph import csr_tensor
from ladle.sampling.base import edge_positions


@dataclass
class Block:
    """One layer restricted to what the next reads: ``n_out`` targets (the first ``n_out`` inputs) from ``n_in``.

    ``adj`` is the [n_out, n_in] sparse CSR of the propagation (the model's adjacency's rows, columns relabelled
    to the inputs, ``ladle_kind`` kept); ``edge_index`` the same entries as a [2, nnz] edge list (source, target)
    for layers that take one (attention).
    """

    adj: Tensor
    n_out: int
    n_in: int
    _memo: tuple | None = None

    def aggregate(self, x: Tensor, reduce: str = "sum") -> Tensor:
        """``adj @ x`` ([n_out, d], or the mean over each row's entries), remembered for the same ``x`` when it
        needs no gradient: the first layer's inputs are the features, the same in every epoch of a fit."""
        key = (x, reduce)
        if x.requires_grad or self._memo is None or self._memo[0][0] is not x or self._memo[0][1] != reduce:
            value = spmm(self.adj, x, reduce=reduce)
            if x.requires_grad:
                return value
            self._memo = (key, value)
        return self._memo[1]

    @property
    def edge_index(self) -> Tensor:
        crow = self.adj.crow_indices()
        row = torch.repeat_interleave(torch.arange(self.n_out, device=crow.device), crow[1:] - crow[:-1])
        return torch.stack([self.adj.col_indices(), row])


def receptive_field(adj: Tensor, targets: Tensor, layers: int) -> tuple[Tensor, list[Block]]:
    """(input nodes [n_0], blocks bottom-up) for the logits of ``targets`` through ``layers`` layers of ``adj``.

    Args:
        adj: the [N, N] sparse CSR adjacency the model propagates with (row i: i's in-neighbours).
        targets: [T] node ids (no repeats); the last block's outputs are these, in this order.
        layers: the model's number of message-passing layers.

    Returns the ids of the first layer's inputs (gather the features with them) and one :class:`Block` per layer.
    """
    n, device = adj.size(0), adj.crow_indices().device
    position = torch.full((n,), -1, dtype=torch.long, device=device)
    blocks: list[Block] = []
    for _ in range(layers):
        sub = rows_of(adj, targets)
        sources = sub.col_indices()
        # Targets first among the inputs, then the other sources in id order.
        position[targets] = torch.arange(targets.numel(), device=device)
        others = torch.unique(sources)
        others = others[position[others] < 0]
        inputs = torch.cat([targets, others])
        position[others] = torch.arange(targets.numel(), inputs.numel(), device=device)
        blocks.append(_relabel(sub, position[sources], inputs.numel(), getattr(adj, "ladle_kind", None)))
        position[inputs] = -1
        targets = inputs
    return targets, blocks[::-1]


def induced(adj: Tensor, nodes: Tensor) -> Tensor:
    """The [n, n] sparse CSR of ``adj`` between ``nodes`` (sorted ids): rows and columns relabelled to positions.

    Kept entries keep their values; a row's entries to nodes outside are dropped (the subgraph's adjacency).
    """
    n, device = adj.size(0), adj.crow_indices().device
    position = torch.full((n,), -1, dtype=torch.long, device=device)
    position[nodes] = torch.arange(nodes.numel(), device=device)
    sub = rows_of(adj, nodes)
    sources = sub.col_indices()
    local = position[sources]
    keep = local >= 0
    crow = sub.crow_indices()
    owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=device), crow[1:] - crow[:-1])
    counts = torch.bincount(owner[keep], minlength=nodes.numel())
    new_crow = torch.zeros(nodes.numel() + 1, dtype=torch.long, device=device)
    torch.cumsum(counts, 0, out=new_crow[1:])
    # Sorted ids relabel monotonically: each row's columns stay sorted.
    return csr_tensor(new_crow, local[keep], sub.values()[keep], (nodes.numel(), nodes.numel()))


def rows_of(adj: Tensor, rows: Tensor) -> Tensor:
    """The [len(rows), N] sparse CSR of ``adj``'s ``rows`` (in that order), its ``ladle_kind`` kept."""
    rowptr, col, values = adj.crow_indices(), adj.col_indices(), adj.values()
    count = rowptr[rows + 1] - rowptr[rows]
    crow = torch.zeros(rows.numel() + 1, dtype=rowptr.dtype, device=rowptr.device)
    torch.cumsum(count, 0, out=crow[1:])
    if rows.numel() and bool((rows[1:] - rows[:-1] == 1).all()):  # a contiguous range: a slice, no gather
        a, b = int(rowptr[rows[0]]), int(rowptr[rows[-1] + 1])
        sub_col, sub_values = col[a:b], values[a:b]
    else:
        _, position = edge_positions(rowptr, rows)
        sub_col, sub_values = col[position], values[position]
    out = csr_tensor(crow, sub_col, sub_values, (rows.numel(), adj.size(1)))
    out.ladle_kind = getattr(adj, "ladle_kind", None)
    return out


def _relabel(sub: Tensor, local_col: Tensor, n_in: int, kind) -> Block:
    """A [n_out, n_in] block from rows ``sub`` with their columns relabelled, sorted within each row."""
    crow, n_out = sub.crow_indices(), sub.size(0)
    row = torch.repeat_interleave(torch.arange(n_out, device=crow.device), crow[1:] - crow[:-1])
    order = torch.argsort(row * n_in + local_col)
    adj = csr_tensor(crow, local_col[order], sub.values()[order], (n_out, n_in))
    adj.ladle_kind = kind
    return Block(adj, n_out, n_in)
