"""Layer-wise full-neighbourhood inference over node chunks, with memory bounded by the chunk size.

Each layer is computed for all nodes, ``chunk_size`` target nodes at a time, from the previous
layer's output: a chunk's subgraph holds its targets, their in-neighbours and only the edges
into the targets, so peak memory grows with the chunk, not the graph (plus the [N, hidden]
input and output of the layer being computed, as in PyG's layer-wise ``inference``; chunks are
written into a preallocated output, never concatenated, and architectures that accept a
bipartite input transform their root term for the targets only). The last layer is computed only for
the nodes asked for. This is exact for every architecture ladle builds:

- SAGE (mean of in-neighbours + root), GIN (sum + (1+ε)·self), GAT (softmax over in-edges and the
  self-loop) and MLP depend only on a target's in-edges;
- GCN's symmetric normalisation also needs the *sources'* degrees, which a chunk does not see,
  so its edge weights (self-loops included) are computed once on the whole graph and passed
  with the layer's own normalisation switched off.

On graphs that fit one forward the results equal ``model(x, edge_index)`` up to float rounding.

Where the model propagates over the graph's sparse adjacency (:attr:`GNN.adjacency`: SAGE, GIN, GCN), a
chunk is a slice of that adjacency's rows, [chunk, N], multiplied with the whole previous layer: no
per-edge gather of source rows, no local relabelling, one sparse product per chunk. SAGE and GIN take
(inputs, targets) as PyG's bipartite pair; GCN's rows are already normalised with the whole graph's
degrees and self-loops, so a chunk is (Â_rows H) W + b (:meth:`GNN.block_conv`). GAT, which scores
every edge, gathers per chunk.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ladle.data.graph import Graph
from ladle.evaluation.field import Block, rows_of
from ladle.sampling.base import LocalIndex, edge_positions


@torch.no_grad()
def can_chunk(model) -> bool:
    """Whether ``model`` is one of ladle's layer-loop models, which chunked inference runs layer by layer."""
    return hasattr(model, "convs") and hasattr(model, "finish_layer")


def chunked_forward(model, graph: Graph, chunk_size: int, out_nodes: Tensor | None = None) -> Tensor:
    """Eval-mode logits of ``out_nodes`` (default: all nodes, [N, C]) by layer-wise chunked inference."""
    was_training = model.training
    model.eval()
    try:
        return _forward(model, graph, chunk_size, out_nodes)
    finally:
        model.train(was_training)


def _forward(model, graph: Graph, chunk_size: int, out_nodes: Tensor | None) -> Tensor:
    n = graph.num_nodes
    device = graph.data.x.device
    rowptr, col = (t.cpu() for t in graph.csr())
    index = LocalIndex(n)
    gcn_inv_sqrt = None
    if model.supports_edge_weight:  # GCN: global degrees with self-loops
        gcn_inv_sqrt = (rowptr[1:] - rowptr[:-1] + 1).to(torch.float32).rsqrt()
    all_nodes = torch.arange(n)
    kind = getattr(model, "adjacency", None)
    adj = graph.adj_t(kind) if kind is not None else None
    h = graph.data.x
    last = len(model.convs) - 1
    bipartite = getattr(model, "trims_by_hop", False)
    for i, conv in enumerate(model.convs):
        targets_all = all_nodes if i < last or out_nodes is None else out_nodes.cpu()
        h_new = None
        for start, targets in zip(range(0, targets_all.numel(), chunk_size), targets_all.split(chunk_size)):
            if adj is not None:
                targets_here = targets.to(device)
                rows = rows_of(adj, targets_here)
                if bipartite:  # the root term reads the targets' own rows
                    out = conv((h, h[targets_here]), rows)
                else:  # GCN: its self-loops are in the normalised rows; the layer's own math on a [chunk, N] block
                    out = model.block_conv(conv, h, Block(rows, targets.numel(), n))
            else:
                out = _layer_chunk(conv, h, rowptr, col, targets, index, gcn_inv_sqrt, device, bipartite)
            if h_new is None:
                h_new = out.new_empty(targets_all.numel(), out.size(1))
            h_new[start:start + targets.numel()] = out
            del out
        if h_new is None:
            h_new = h.new_empty(0, model.convs[i].out_channels)
        if i < last:
            h = model.finish_layer(i, h_new, h)
        else:
            h = h_new
    return h


def _layer_chunk(conv, h, rowptr, col, targets, index: LocalIndex, gcn_inv_sqrt, device, bipartite: bool) -> Tensor:
    owner, position = edge_positions(rowptr, targets)
    sources = col[position]
    # Local ids: targets first, then sources that are not targets (in first-seen order).
    index.assign(targets)
    extra = sources[index[sources] < 0].unique()
    nodes = torch.cat([targets, extra])
    index.assign(nodes)
    edge_index = torch.stack([index[sources], owner])
    index.clear(nodes)
    x = h[nodes.to(device)]
    if gcn_inv_sqrt is None:
        if bipartite:  # targets are the first rows of x: the root term only for them
            return conv((x, x[: targets.numel()]), edge_index.to(device))
        return conv(x, edge_index.to(device))[: targets.numel()]
    loops = torch.arange(targets.numel())
    edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)
    weight = torch.cat([gcn_inv_sqrt[sources] * gcn_inv_sqrt[targets[owner]], gcn_inv_sqrt[targets] ** 2])
    normalize = conv.normalize
    conv.normalize = False
    try:
        return conv(x, edge_index.to(device), weight.to(device))[: targets.numel()]
    finally:
        conv.normalize = normalize
