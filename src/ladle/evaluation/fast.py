"""A soup evaluation engine: the validation scores of many weight mixes at once, for GIS.

For a fixed graph and split, GIS scores mixes Σ_k c_k θ_k of the ingredients. Three facts make
that cheap for GCN and GraphSAGE (norm ``none``):

- **first-layer linearity**: layer 1's pre-activation is linear in its weights for a fixed input
  (``Â X W`` plus a bias for GCN, ``mean(X) W_l + b + X W_r`` for SAGE), so a mix's is the same
  mix of the ingredients' own, computed once per ingredient and reused by every α of every step;
- **only what validation needs**: layer l is computed only on the nodes layer l+1 reads (the
  receptive field of the validation nodes, shrinking by one hop per layer), the last layer only
  on the validation nodes; the full graph's normalisation (degrees) is kept;
- **batched mixes**: the layers after the first run for all the mixes of a step together, their
  weights stacked ([G, out, in] batched matmuls, one gather/scatter over the edges).

The logits equal the reference (full forward of the mixed weights) up to float rounding, so the
predictions agree except where a node's top two classes are within rounding of each other.
Other architectures and normalisations fall back to the reference path: GAT's attention and GIN's
MLP are not linear in their weights (the receptive-field restriction would still hold; not done yet).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from ladle.evaluation.evaluator import Evaluator, Mix, State
from ladle.evaluation.metrics import score_logits

FAST_ARCHITECTURES = ("gcn", "sage")


class FastEvaluator(Evaluator):
    """An :class:`Evaluator` whose ``score_many`` uses the fast path where the architecture allows.

    Args:
        graph, model_config, split, device, chunk_size: as for :class:`Evaluator`.
        memory_floats: the largest stacked hidden state, in floats, one batch of mixes may hold
            (default 2^27, 512 MB); more mixes than fit are evaluated in several batches.
    """

    def __init__(self, graph, model_config, split: str = "val", device=None, chunk_size: int = 0,
                 memory_floats: int = 2**27):
        super().__init__(graph, model_config, split, device, chunk_size)
        self.memory_floats = memory_floats
        self.arch = model_config.name
        self.fast = self.arch in FAST_ARCHITECTURES and model_config.norm == "none" and not model_config.residual
        self._first: dict[int, tuple[State, Tensor]] = {}
        if self.fast:
            self._plan(model_config.layers)

    def _plan(self, layers: int) -> None:
        """Per layer, top-down: the nodes it must output, the edges into them (local ids), their weights."""
        n = self.graph.num_nodes
        if self.arch == "gcn":
            edge_index, weight = gcn_norm(self.edge_index, None, n, add_self_loops=True)
        else:
            edge_index = self.edge_index
            degree = torch.bincount(edge_index[1], minlength=n).clamp_min(1).to(self.x.dtype)
            weight = (1.0 / degree)[edge_index[1]]
        needed = [None] * (layers + 1)
        needed[layers] = self.mask.nonzero().view(-1)
        self.layers_plan = [None] * (layers + 1)
        local = torch.full((n,), -1, dtype=torch.long, device=self.device)
        for layer in range(layers, 0, -1):
            targets = needed[layer]
            keep = torch.isin(edge_index[1], targets)
            src, dst, w = edge_index[0][keep], edge_index[1][keep], weight[keep]
            inputs = torch.unique(torch.cat([targets, src]))
            needed[layer - 1] = inputs
            local[inputs] = torch.arange(inputs.numel(), device=self.device)
            src_local, root = local[src], local[targets]
            local[targets] = torch.arange(targets.numel(), device=self.device)
            dst_local = local[dst]
            local[inputs] = -1
            self.layers_plan[layer] = (src_local, dst_local, w, root, targets.numel())
        self.input_nodes = needed[0]

    # ---- one layer for G mixes at once: h [G, n_in, d] -> [G, n_out, d']

    def _layer(self, i: int, h: Tensor, weights: dict[str, Tensor]) -> Tensor:
        src, dst, w, root, n_out = self.layers_plan[i + 1]
        p = f"convs.{i}."
        if self.arch == "gcn":
            z = torch.matmul(h, weights[p + "lin.weight"].transpose(1, 2))
            out = torch.zeros(z.size(0), n_out, z.size(2), dtype=z.dtype, device=z.device)
            out.index_add_(1, dst, z[:, src] * w[None, :, None])
            return out + weights[p + "bias"][:, None, :]
        agg = torch.zeros(h.size(0), n_out, h.size(2), dtype=h.dtype, device=h.device)
        agg.index_add_(1, dst, h[:, src] * w[None, :, None])
        out = torch.matmul(agg, weights[p + "lin_l.weight"].transpose(1, 2)) + weights[p + "lin_l.bias"][:, None, :]
        return out + torch.matmul(h[:, root], weights[p + "lin_r.weight"].transpose(1, 2))

    def _first_layer(self, state: State) -> Tensor:
        """An ingredient's layer-1 pre-activation on the nodes layer 2 reads, computed once."""
        key = id(state)
        if key not in self._first:
            weights = {k: v.to(self.device)[None] for k, v in state.items() if k.startswith("convs.0.")}
            with torch.no_grad():
                pre = self._layer(0, self.x[self.input_nodes][None], weights)[0]
            self._first[key] = (state, pre)  # keeping the state pins its id
        return self._first[key][1]

    @torch.no_grad()
    def mix_logits(self, mixes: Sequence[Mix]) -> Tensor:
        """[G, n_split, C] logits of each mix on the split's nodes, by the fast path."""
        layers = len(self.model.convs)
        pre = torch.stack([sum(float(c) * self._first_layer(s) for c, s in mix if c != 0) for mix in mixes])
        x_in = self.x[self.input_nodes]
        h = pre if layers == 1 else self.model.finish_layer(0, pre, x_in)
        for i in range(1, layers):
            keys = [k for k in mixes[0][0][1] if k.startswith(f"convs.{i}.")]
            weights = {k: torch.stack([sum(float(c) * s[k].to(self.device) for c, s in mix if c != 0)
                                       for mix in mixes]) for k in keys}
            h = self._layer(i, h, weights)
            if i < layers - 1:
                h = self.model.finish_layer(i, h, h)
        return h

    def score_many(self, mixes: Sequence[Mix]) -> list[float]:
        if not self.fast or not mixes:
            return super().score_many(mixes)
        self.forwards += len(mixes)
        widest = max(plan[4] for plan in self.layers_plan[1:]) * max(self.model.config.hidden, self.model.out_channels)
        per_batch = max(1, self.memory_floats // max(widest, 1))
        scores = []
        for start in range(0, len(mixes), per_batch):
            logits = self.mix_logits(mixes[start:start + per_batch])
            scores += [score_logits(self.graph.metric, z, self.y) for z in logits]
        return scores
