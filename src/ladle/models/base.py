"""The template every ladle model subclasses, after PyG's ``BasicGNN``.

A subclass only says how to build layer ``i`` (:meth:`init_conv`); the template owns the
layer loop, normalisation, activation, residual connections and dropout, so every
architecture has the same parameter names and the soups can mix any two of one kind.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import BatchNorm, LayerNorm

from ladle.data.graph import csr_tensor
from ladle.models.options import ModelConfig


class GNN(nn.Module):
    """Stack of ``layers`` message-passing layers mapping [N, in_channels] to [N, out_channels] logits.

    Args:
        in_channels: input feature width F.
        out_channels: number of classes (or tasks, multi-label).
        config: the :class:`~ladle.config.ModelConfig` (hidden, layers, dropout, norm, residual, heads).
    """

    act = staticmethod(F.relu)
    supports_edge_weight = False  # whether the layers take per-edge weights (GraphSAINT's α)
    # Whether a layer's output at a node depends only on the node and its in-edges, so a
    # neighbour-sampled batch can be trimmed hop by hop (GCN's normalisation also reads the
    # sources' degrees, which trimming would change).
    trims_by_hop = True
    # The sparse adjacency (:meth:`Graph.adj_t` kind) whole-graph passes feed the layers, one sparse
    # matrix product per layer instead of gathering a message per edge; None keeps the edge list
    # (attention computes a value per edge, so GAT has nothing to gain).
    adjacency: str | None = "plain"
    # GIS's fast evaluation path (:class:`FastPath`): the architecture's own math, with the model; None: the
    # soups score this architecture by the reference forward.
    fast_path: type | None = None

    def __init__(self, in_channels: int, out_channels: int, config: ModelConfig):
        super().__init__()
        self.config = config
        self.in_channels, self.out_channels = in_channels, out_channels
        widths = [in_channels] + [config.hidden] * (config.layers - 1) + [out_channels]
        self.convs = nn.ModuleList(
            self.init_conv(widths[i], widths[i + 1], last=i == config.layers - 1) for i in range(config.layers)
        )
        self.norms = nn.ModuleList(_norm(config.norm, config.hidden) for _ in range(config.layers - 1))

    def init_conv(self, in_channels: int, out_channels: int, *, last: bool) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                layer_ptr: Tensor | None = None, self_weight: Tensor | None = None,
                num_sampled_nodes: list[int] | None = None, num_sampled_edges: list[int] | None = None) -> Tensor:
        """x: [N, F] features, edge_index: [2, E], edge_weight: [E] or None -> [N, out_channels] logits.

        ``edge_index`` may instead be a sparse CSR ``adj_t`` [N, N] (PyG's convention; see
        :func:`graph_input`): each layer is then one sparse matrix product, the same logits to
        float rounding.

        ``edge_weight`` is used by layers that take one and ignored by the others. A layer-wise
        sampled batch (FastGCN, LADIES) also passes ``layer_ptr`` [layers + 1], so that layer i
        uses only edges ``layer_ptr[i]:layer_ptr[i+1]``, and ``self_weight`` [N], the exact
        self-loop coefficients; its edge weights are then the whole propagation.

        A neighbour-sampled batch may pass PyG's ``num_sampled_nodes`` (per hop, seeds first) and
        ``num_sampled_edges`` (per hop): where :attr:`trims_by_hop`, layer i then reads only the
        edges of the first ``layers - i`` hops and computes only the nodes of the first
        ``layers - i`` hops (as PyG's ``trim_to_layer``, and also trimming the layer's own outputs),
        so the logits are those of the first ``num_sampled_nodes[0]`` nodes, the seeds, and equal
        the untrimmed forward's there up to rounding. A batch sampled for another number of hops
        than the model has layers runs untrimmed.
        """
        if (num_sampled_edges is not None and len(num_sampled_edges) == len(self.convs) and self.trims_by_hop
                and layer_ptr is None):
            return self._trimmed_forward(x, edge_index, list(num_sampled_nodes), list(num_sampled_edges))
        extra = (edge_weight,) if edge_weight is not None and self.supports_edge_weight else ()
        if layer_ptr is not None and layer_ptr.numel() != len(self.convs) + 1:
            raise ValueError(f"a layer-wise batch for {layer_ptr.numel() - 1} layers given to a "
                             f"{len(self.convs)}-layer model")
        cfg = self.config
        p_in = cfg.dropout if cfg.input_dropout is None else cfg.input_dropout
        x = input_dropout(x, p_in, self.training)
        sparse = edge_index is not None and edge_index.layout == torch.sparse_csr
        for i, conv in enumerate(self.convs):
            if sparse:
                h = self._sparse_conv_in_kernel_dtype(conv, x, edge_index)
            elif layer_ptr is None:
                h = conv(x, edge_index, *extra)
            else:
                lo, hi = int(layer_ptr[i]), int(layer_ptr[i + 1])
                weight = None if edge_weight is None else edge_weight[lo:hi]
                h = self.sampled_conv(conv, x, edge_index[:, lo:hi], weight, self_weight)
            x = self.finish_layer(i, h, x)
        return x

    def _trimmed_forward(self, x: Tensor, edge_index: Tensor, nodes: list[int], edges: list[int]) -> Tensor:
        cfg, layers = self.config, len(self.convs)
        p_in = cfg.dropout if cfg.input_dropout is None else cfg.input_dropout
        x = input_dropout(x, p_in, self.training)
        sparse = self.adjacency == "plain"  # mean or sum over in-edges: one sparse product per layer
        for i, conv in enumerate(self.convs):
            n_out, e_used = sum(nodes[: layers - i]), sum(edges[: layers - i])
            edges_here = edge_index[:, :e_used]
            if sparse:
                edges_here = rows_by_target(edges_here, n_out, x.size(0), x.dtype)
            h = conv((x, x[:n_out]), edges_here)
            x = self.finish_layer(i, h, x[:n_out])
        return x

    def block_forward(self, x: Tensor, blocks: list) -> Tensor:
        """Eval-style forward on a receptive field (:func:`ladle.evaluation.field.receptive_field`): x [n_in of
        block 0, F] -> [n_out of the last block, out_channels], the logits of the field's targets.

        Layer i computes only ``blocks[i].n_out`` nodes, the first rows of its input. Differentiable in the
        weights (the learned soups fit through it); dropout follows ``self.training`` as in :meth:`forward`.
        """
        cfg = self.config
        x = input_dropout(x, cfg.dropout if cfg.input_dropout is None else cfg.input_dropout, self.training)
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            x = self.finish_layer(i, self.block_conv(conv, x, block), x[:block.n_out])
        return x

    def block_conv(self, conv: nn.Module, x: Tensor, block) -> Tensor:
        """One layer on a receptive-field block: x [n_in, d] -> [n_out, d'] for the block's targets.

        Layers that read only a target's in-edges take the bipartite pair (inputs, targets) and the block's
        rectangular adjacency; a model without one (attention, MLP) runs on the block's edge list, whose
        only targets are the first ``n_out`` nodes, and keeps those rows.
        """
        if self.adjacency is None:
            return conv(x, block.edge_index)[:block.n_out]
        if self.trims_by_hop:
            return conv((x, x[:block.n_out]), block.adj)
        return self.sparse_conv(conv, x, block.adj)

    def _sparse_conv_in_kernel_dtype(self, conv: nn.Module, x: Tensor, adj_t: Tensor) -> Tensor:
        # Under bf16 autocast (train.precision) the CPU has no bf16 kernel for a sparse CSR product: that layer
        # runs in fp32 there, the rest of the step in bf16.
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                return self.sparse_conv(conv, x.float(), adj_t)
        return self.sparse_conv(conv, x, adj_t)

    def sparse_conv(self, conv: nn.Module, x: Tensor, adj_t: Tensor) -> Tensor:
        """One layer over a sparse ``adj_t``; PyG's layers take it as they take an edge list."""
        return conv(x, adj_t)

    def sampled_conv(self, conv: nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None,
                     self_weight: Tensor | None) -> Tensor:
        """One layer of a layer-wise sampled batch; layers without edge weights just aggregate the sampled edges."""
        return conv(x, edge_index)

    def finish_layer(self, i: int, h: Tensor, x: Tensor) -> Tensor:
        """After layer ``i``'s convolution: norm, activation, residual and dropout (hidden layers only).

        Shared by :meth:`forward` and layer-wise inference, so both compute the same function.
        """
        if i == len(self.convs) - 1:
            return h
        h = self.act(self.norms[i](h))
        if self.config.residual and h.shape == x.shape:
            h = h + x
        return F.dropout(h, p=self.config.dropout, training=self.training)


class FastPath:
    """What :class:`~ladle.evaluation.fast.FastEvaluator` needs of an architecture, as static methods over the
    evaluator ``ev`` (its plans, first-layer inputs ``ev.x_in`` and ``ev.ax``, and block helpers).

    Layer 1's linear parts are linear in the ingredient's weights for a fixed input, so they are computed once
    per ingredient (:meth:`first_parts`) and mixed; every later layer runs on a block of mixes side by side
    (:meth:`conv`, ``h`` [n_in, mixes, d] -> [n_out, mixes, d']).
    """

    shares_first_propagation = True  # layer 1 propagates the features the same way for every ingredient
    one_mix_per_block = False  # the propagation itself depends on the weights (attention)

    @staticmethod
    def propagation(ev):
        """The whole graph's edges [2, E] and weights [E] as the layer propagates them (target = row 1)."""
        raise NotImplementedError

    @staticmethod
    def part_widths(model) -> list[int]:
        raise NotImplementedError

    @staticmethod
    def first_parts(ev, state, out) -> None:
        raise NotImplementedError

    @staticmethod
    def conv(ev, i, h, w, first):
        raise NotImplementedError


def rows_by_target(edge_index: Tensor, n_out: int, n_in: int, dtype) -> Tensor:
    """The [n_out, n_in] sparse CSR (ones) of a sampled layer's edges (source, target < n_out).

    ladle's neighbour sampler emits each hop's edges grouped by target in target order, so this is one bincount;
    edges in another order (a PyG loader's) are sorted first.
    """
    src, dst = edge_index
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        src, dst = src[order], dst[order]
    crow = torch.zeros(n_out + 1, dtype=torch.long, device=dst.device)
    torch.cumsum(torch.bincount(dst, minlength=n_out), 0, out=crow[1:])
    adj = csr_tensor(crow, src, torch.ones(src.numel(), dtype=dtype, device=src.device), (n_out, n_in))
    adj.ladle_kind = "plain"
    return adj


def mean_over_in_edges(ev):
    """Edges weighted 1 / in-degree: the mean over a target's in-edges."""
    edge_index = ev.edge_index
    degree = torch.bincount(edge_index[1], minlength=ev.graph.num_nodes).clamp_min(1).to(ev.x.dtype)
    return edge_index, (1.0 / degree)[edge_index[1]]


def input_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Dropout on the input features that draws random numbers only for non-zero entries.

    Bag-of-words features (Planetoid, most citation graphs) are ~99% zeros, and a dropped zero
    is still zero, so this is the same distribution as ``F.dropout`` at a fraction of the
    random draws, which dominate a full-batch step on CPU. Dense inputs take ``F.dropout``.
    """
    if not training or p == 0.0:
        return x
    nonzero = torch.count_nonzero(x)
    if nonzero * 4 > x.numel():
        return F.dropout(x, p=p, training=True)
    index = x.nonzero(as_tuple=True)
    keep = (torch.rand(index[0].numel(), device=x.device) >= p).to(x.dtype) / (1.0 - p)
    out = torch.zeros_like(x)
    out[index] = x[index] * keep
    return out


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return BatchNorm(channels)
    if kind == "layer":
        return LayerNorm(channels, mode="node")
    return nn.Identity()
