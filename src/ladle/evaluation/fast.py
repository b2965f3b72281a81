"""A soup evaluation engine: the validation scores of many weight mixes at once, for GIS.

GIS scores mixes Σ_k c_k θ_k of the ingredients on one fixed graph and split. Four facts make
that cheap, and :class:`FastEvaluator` uses all of them:

- **first-layer linearity**: for a fixed input, layer 1's linear part is linear in its weights
  (GCN ``Â X W``, SAGE ``mean(X) W_l + X W_r``, GIN ``X W_1`` and ``Σ_j x_j W_1``, GAT ``X W``),
  so a mix's is the same mix of the ingredients' own, computed once per ingredient (the
  propagation ``Â X`` once for all of them) and reused by every α of every step;
- **only what validation needs**: layer l runs only on the nodes layer l+1 reads (the validation
  nodes' receptive field, one hop smaller per layer), the last layer only on the validation
  nodes; the full graph's normalisation (degrees) is kept;
- **batched mixes**: the mixes of a step are evaluated together: every layer's weights for all
  of them are one product of the [mixes, ingredients] coefficients with the stacked ingredient
  weights, and so are their first-layer parts (one product with the bank of cached parts; where
  the parts of all the mixes do not fit in memory at once, the bank is first reduced to one row
  per group of proportional coefficients, which for a GIS step is two rows: soup and candidate);
  the later layers then run mix by mix on contiguous tensors, propagating with a CSR sparse
  product, each layer's targets being the first rows of its input (no gather for root terms).
  One product over the concatenated channels of every mix was measured no faster on the CPU
  (MKL's CSR kernel is bandwidth-bound, ~11 ms per mix for 200k edges x 128 channels either
  way) and costs a transposed copy of every hidden state, so ladle does not concatenate;
- **no repeats**: a mix already scored (GIS's α = 1 is the soup chosen at the step before) is
  answered from memory.

Per architecture: GCN, GraphSAGE and GIN get all four. GAT's attention is not linear in the
weights: its first layer caches ``X W`` per ingredient (the mix's ``X W`` is exact), but the
attention scores, their softmax and the aggregation run per mix (one sparse product per mix and
head); the receptive-field restriction and batching hold. Norms ``batch`` and ``layer`` (PyG's
``mode="node"``) are per-node affine maps in eval mode and are applied per mix; residual
connections too. Anything else (MLP, a norm that looks at the whole graph) falls back to the
reference path of :class:`~ladle.evaluation.Evaluator`.

The logits equal the reference's (full forward of the mixed weights) up to float rounding, so
the predictions agree except where a node's top two classes are within rounding of each other.
Memory: the bank (K first-layer parts of the receptive field, n x width floats each), one block
of mixed first-layer parts of at most ``memory_floats`` floats (a single mix always runs), and
one mix's hidden state at a time; a graph where that does not fit needs the chunked reference
path.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

from ladle.evaluation.evaluator import Evaluator, Mix, State
from ladle.evaluation.metrics import score_logits

FAST_ARCHITECTURES = ("gcn", "sage", "gin", "gat")
FAST_NORMS = ("none", "batch", "layer")


@dataclass
class LayerPlan:
    """One layer restricted to what the next reads: ``n_out`` targets from ``n_in`` inputs.

    ``adj`` is the [n_out, n_in] CSR propagation matrix (its rows sorted, ``row``/``col`` the
    same entries in COO form, for GAT's edge softmax). The targets are the first ``n_out``
    inputs, in the same order.
    """

    adj: Tensor
    row: Tensor
    col: Tensor
    n_out: int
    n_in: int


def _csr(crow: Tensor, col: Tensor, values: Tensor, size) -> Tensor:
    """A CSR matrix of rows sorted by construction (no invariant check; torch calls CSR beta)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _edge_softmax(alpha: Tensor, plan: LayerPlan) -> Tensor:
    """Softmax of [nnz, H] edge scores over each target's in-edges, as PyG's ``softmax`` computes it
    (max subtracted, 1e-16 added to the sum), by segment reductions over the sorted rows."""
    crow = plan.adj.crow_indices()
    top = torch.segment_reduce(alpha, "max", offsets=crow, axis=0)
    alpha = (alpha - top[plan.row]).exp_()
    total = torch.segment_reduce(alpha, "sum", offsets=crow, axis=0).add_(1e-16)
    return alpha.div_(total[plan.row])


def proportional_basis(coefficients: Tensor) -> tuple[Tensor, Tensor]:
    """Factor [G, K] mix coefficients as weights [G, r] @ members [r, K], grouping proportional columns.

    Columns (ingredients) whose coefficients across the G mixes are proportional, to a relative
    1e-9, share one basis row: GIS's soup members (all scaled by α) become one row, the candidate
    (1 − α) another, so r = 2 however many ingredients the soup holds. Columns of zeros are
    dropped. The factors multiply back to the coefficients up to float rounding.
    """
    exact = coefficients.double().cpu()
    shapes: list[Tensor] = []  # per group, its column scaled to 1 at its first non-zero entry
    members = []  # per group, {ingredient: its scale}
    for k in range(exact.size(1)):
        column = exact[:, k]
        nonzero = column.nonzero().view(-1)
        if nonzero.numel() == 0:
            continue
        scale = column[nonzero[0]]
        shape = column / scale
        for group, known in enumerate(shapes):
            if torch.allclose(shape, known, rtol=1e-9, atol=1e-12):
                members[group][k] = scale
                break
        else:
            shapes.append(shape)
            members.append({k: scale})
    weights = torch.stack(shapes, 1) if shapes else exact.new_zeros(exact.size(0), 0)
    basis = exact.new_zeros(len(members), exact.size(1))
    for group, scales in enumerate(members):
        for k, scale in scales.items():
            basis[group, k] = scale
    return weights.to(coefficients), basis.to(coefficients)


def _spmm(adj: Tensor, h: Tensor, out: Tensor | None = None) -> Tensor:
    """adj [n_out, n_in] (CSR) times h [n_in, d] -> [n_out, d], into ``out`` when given."""
    if out is None:
        return torch.sparse.mm(adj, h)
    return torch.addmm(out, adj, h, beta=0, out=out)  # beta=0: out's old values are ignored, NaNs included


class FastEvaluator(Evaluator):
    """An :class:`Evaluator` whose ``score_many`` (and ``score``) use the fast path where the model allows.

    Args:
        graph, model_config, split, device, chunk_size: as for :class:`Evaluator`.
        memory_floats: the most floats of mixed first-layer parts one block of mixes may hold
            (default 2^27, 512 MB in float32); more mixes than fit are made in several blocks.
    """

    def __init__(self, graph, model_config, split: str = "val", device=None, chunk_size: int = 0,
                 memory_floats: int = 2**27):
        super().__init__(graph, model_config, split, device, chunk_size)
        self.memory_floats = memory_floats
        self.arch = model_config.name
        self.fast = (self.arch in FAST_ARCHITECTURES and model_config.norm in FAST_NORMS
                     and bool(self.mask.any()))
        self._bank: dict[str, list[Tensor]] = {}  # first-layer parts, one row per ingredient seen
        self._slot: dict[int, int] = {}  # id(state) -> its row in the bank
        self._pinned: list[State] = []  # keeps every banked state alive, so its id stays unique
        self._memo: dict[tuple, float] = {}
        # On the CPU every fresh [n, 128] result is ~80 MB of new pages, and faulting them in costs about as
        # much as the product that fills them; one call's mixes reuse the same buffers instead (CUDA's
        # caching allocator already does this).
        self._reuse = self.device.type == "cpu"
        self._buffers: dict[str, Tensor] = {}
        if self.fast:
            self._plan(model_config.layers)

    # ---- the plan: per layer, top-down, the targets, their inputs and the propagation matrix

    def _propagation(self) -> tuple[Tensor, Tensor]:
        """The full graph's edges [2, E] and weights [E] as the architecture's layer propagates them."""
        n, edge_index = self.graph.num_nodes, self.edge_index
        if self.arch == "gcn":
            return gcn_norm(edge_index, None, n, add_self_loops=True)
        if self.arch == "gat":  # GATConv drops existing self-loops and adds one per node
            edge_index, _ = add_self_loops(remove_self_loops(edge_index)[0], num_nodes=n)
            return edge_index, torch.ones(edge_index.size(1), dtype=self.x.dtype, device=self.device)
        ones = torch.ones(edge_index.size(1), dtype=self.x.dtype, device=self.device)
        if self.arch == "sage":  # mean over in-edges
            degree = torch.bincount(edge_index[1], minlength=n).clamp_min(1).to(self.x.dtype)
            return edge_index, ones / degree[edge_index[1]]
        return edge_index, ones  # gin: sum over in-edges

    def _plan(self, layers: int) -> None:
        (src_all, dst_all), weight_all = self._propagation()
        targets = self.mask.nonzero().view(-1)
        position = torch.full((self.graph.num_nodes,), -1, dtype=torch.long, device=self.device)
        self.plans: list[LayerPlan] = [None] * layers
        for layer in range(layers - 1, -1, -1):
            keep = torch.isin(dst_all, targets)
            src, dst, weight = src_all[keep], dst_all[keep], weight_all[keep]
            # Targets first among the inputs, so a layer's root term reads h[:n_out], a view, not a gather.
            others = torch.unique(src)
            inputs = torch.cat([targets, others[~torch.isin(others, targets)]])
            position[inputs] = torch.arange(inputs.numel(), device=self.device)
            row, col = position[dst], position[src]
            order = torch.argsort(row * inputs.numel() + col, stable=True)
            row, col, weight = row[order], col[order], weight[order]
            crow = torch.zeros(targets.numel() + 1, dtype=torch.long, device=self.device)
            crow[1:] = torch.cumsum(torch.bincount(row, minlength=targets.numel()), 0)
            adj = _csr(crow, col, weight, (targets.numel(), inputs.numel()))
            self.plans[layer] = LayerPlan(adj, row, col, targets.numel(), inputs.numel())
            targets = inputs
        self.input_nodes = targets
        self._x_in = self.x[self.input_nodes]
        if self.arch != "gat":  # Â X (or the mean or sum of neighbours), shared by every ingredient
            self._ax = _spmm(self.plans[0].adj, self._x_in)

    def _buffer(self, name: str, rows: int, cols: int) -> Tensor | None:
        """A [rows, cols] scratch tensor kept for reuse by the next mix (None where not reusing: a new one)."""
        if not self._reuse:
            return None
        flat = self._buffers.get(name)
        if flat is None or flat.numel() < rows * cols:
            flat = self._buffers[name] = torch.empty(rows * cols, dtype=self.x.dtype, device=self.device)
        return flat[:rows * cols].view(rows, cols)

    # ---- first layer: linear parts per ingredient, mixed by one matrix product

    def _first_parts(self, state: State) -> list[Tensor]:
        """An ingredient's first-layer linear parts, each [n, width] (see the module docstring).

        A bias added after the linear map is linear in the weights too, so it is banked with them
        (GAT's is added after the attention, so not there).
        """
        p, plan = "convs.0.", self.plans[0]
        if self.arch == "gcn":
            return [torch.addmm(state[p + "bias"], self._ax, state[p + "lin.weight"].t())]
        if self.arch == "sage":
            part = torch.addmm(state[p + "lin_l.bias"], self._ax, state[p + "lin_l.weight"].t())
            return [part.addmm_(self._x_in[:plan.n_out], state[p + "lin_r.weight"].t())]
        if self.arch == "gin":
            w1 = state[p + "nn.0.weight"].t()
            return [self._x_in[:plan.n_out] @ w1, torch.addmm(state[p + "nn.0.bias"], self._ax, w1)]
        return [self._x_in @ state[p + "lin.weight"].t()]  # gat: X W on every input of layer 1

    def _bank_slots(self, mixes: Sequence[Mix]) -> Tensor:
        """[G, K] coefficients over the bank's rows, banking ingredients not seen before."""
        for mix in mixes:
            for _, state in mix:
                if id(state) not in self._slot:
                    with torch.no_grad():
                        parts = self._first_parts({k: v.to(self.device) for k, v in state.items()})
                    self._slot[id(state)] = len(self._pinned)
                    self._pinned.append(state)
                    for i, part in enumerate(parts):  # grows K times in all, so a cat is cheap enough
                        row = part.reshape(1, -1)
                        self._bank[i] = row if i not in self._bank else torch.cat([self._bank[i], row])
        coefficients = torch.zeros(len(mixes), len(self._pinned), dtype=self.x.dtype, device=self.device)
        for g, mix in enumerate(mixes):
            for c, state in mix:
                coefficients[g, self._slot[id(state)]] += float(c)
        return coefficients

    def _mixed_parts(self, coefficients: Tensor):
        """Per mix, its first-layer parts [n, width], made a block of mixes at a time.

        The bank holds K rows of n x width floats. When the mixes' parts fit in ``memory_floats``
        at once, one product of the coefficients with the bank makes them all (the bank read
        once). When they do not, the blocks would read the whole bank each; instead the columns of
        proportional coefficients are grouped (:func:`proportional_basis`: a GIS step's mixes are
        α·soup + (1−α)·candidate, so the soup's members form one group), the bank is reduced to
        those r rows once, and each block reads r rows, not K.
        """
        rows = self.plans[0].n_in if self.arch == "gat" else self.plans[0].n_out
        banks = list(self._bank.values())
        block = max(1, self.memory_floats // sum(bank.size(1) for bank in banks))
        weights = coefficients
        if block < len(coefficients):
            grouped, members = proportional_basis(coefficients)
            if len(members) < coefficients.size(1):
                weights, banks = grouped, [members @ bank for bank in banks]
        for start in range(0, len(weights), block):
            chunk = weights[start:start + block]
            mixed = [torch.mm(chunk, bank, out=self._buffer(f"first{j}", len(chunk), bank.size(1)))
                     .view(-1, rows, bank.size(1) // rows) for j, bank in enumerate(banks)]
            for g in range(mixed[0].size(0)):
                yield [part[g] for part in mixed]

    @staticmethod
    def _mixed_weights(coefficients: Tensor, states: list[State], keys: list[str]) -> list[dict[str, Tensor]]:
        """Per mix, its tensor for each key, by one product of the coefficients per key."""
        stacked = {}
        for key in keys:
            flat = torch.stack([s[key].reshape(-1) for s in states]).to(coefficients)
            stacked[key] = (coefficients @ flat).view(len(coefficients), *states[0][key].shape)
        return [{k: v[g] for k, v in stacked.items()} for g in range(len(coefficients))]

    # ---- one mix through one layer: h [n_in, d] -> [n_out, d'], the mix's weights in w

    def _linear_then_propagate(self, i: int, h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """adj @ h @ Wᵀ + b, in the cheaper order (propagate the narrower side)."""
        plan, (d_out, d_in), nnz = self.plans[i], weight.shape, self.plans[i].row.numel()
        out = self._buffer(f"z{i}", plan.n_out, d_out)
        if nnz * d_in + plan.n_out * d_in * d_out <= plan.n_in * d_in * d_out + nnz * d_out:
            return torch.addmm(bias, _spmm(plan.adj, h, self._buffer(f"p{i}", plan.n_out, d_in)), weight.t(), out=out)
        return _spmm(plan.adj, torch.mm(h, weight.t(), out=self._buffer(f"p{i}", plan.n_in, d_out)), out).add_(bias)

    def _conv(self, i: int, h: Tensor, w: dict[str, Tensor], first: list[Tensor] | None) -> Tensor:
        plan, p = self.plans[i], f"convs.{i}."
        if self.arch in ("gcn", "sage") and first:
            return first[0]  # the bias is banked with the linear part
        if self.arch == "gcn":
            return self._linear_then_propagate(i, h, w[p + "lin.weight"], w[p + "bias"])
        if self.arch == "sage":
            z = self._linear_then_propagate(i, h, w[p + "lin_l.weight"], w[p + "lin_l.bias"])
            return z.addmm_(h[:plan.n_out], w[p + "lin_r.weight"].t())
        if self.arch == "gin":
            scale = 1 + w[p + "eps"]
            if first:
                z = first[1].addcmul_(first[0], scale)  # nn.0's bias is banked in first[1]
            else:
                agg = _spmm(plan.adj, h, self._buffer(f"p{i}", plan.n_out, h.size(1))).addcmul_(h[:plan.n_out], scale)
                width = w[p + "nn.0.weight"].size(0)
                z = torch.addmm(w[p + "nn.0.bias"], agg, w[p + "nn.0.weight"].t(),
                                out=self._buffer(f"y{i}", plan.n_out, width))
            return torch.addmm(w[p + "nn.2.bias"], z.clamp_min_(0), w[p + "nn.2.weight"].t(),
                               out=self._buffer(f"z{i}", plan.n_out, w[p + "nn.2.weight"].size(0)))
        return self._gat(plan, first[0] if first else h @ w[p + "lin.weight"].t(), w, p)

    def _gat(self, plan: LayerPlan, xw: Tensor, w: dict[str, Tensor], p: str) -> Tensor:
        """GATConv in eval mode: xw [n_in, H*C] -> [n_out, H*C] (heads concatenated) or [n_out, C] (one head)."""
        att_src, att_dst = w[p + "att_src"][0], w[p + "att_dst"][0]  # [H, C]
        heads, channels = att_src.shape
        xw = xw.view(-1, heads, channels)
        score_src = (xw * att_src).sum(-1)  # [n_in, H]
        score_dst = (xw[:plan.n_out] * att_dst).sum(-1)  # [n_out, H]
        alpha = F.leaky_relu(score_src[plan.col] + score_dst[plan.row], 0.2)
        alpha = _edge_softmax(alpha, plan)  # [nnz, H]
        by_head = xw.transpose(0, 1).contiguous() if heads > 1 else xw.view(1, -1, channels)
        crow, col = plan.adj.crow_indices(), plan.adj.col_indices()
        out = [_spmm(_csr(crow, col, alpha[:, k].contiguous(), plan.adj.shape), by_head[k]) for k in range(heads)]
        out = torch.cat(out, 1) if heads > 1 else out[0]
        return out.add_(w[p + "bias"])

    def _finish(self, i: int, h: Tensor, x: Tensor, w: dict[str, Tensor]) -> Tensor:
        """The template's finish_layer for one mix: eval-mode norm, activation, residual."""
        norm = self.model.config.norm
        if norm == "batch":
            p = f"norms.{i}.module."
            scale = w[p + "weight"] / torch.sqrt(w[p + "running_var"] + self.model.norms[i].module.eps)
            h = h.sub_(w[p + "running_mean"]).mul_(scale).add_(w[p + "bias"])
        elif norm == "layer":
            p = f"norms.{i}."
            h = F.layer_norm(h, h.shape[-1:], w[p + "weight"], w[p + "bias"], self.model.norms[i].eps)
        h = h.clamp_min_(0) if self.model.act is F.relu else self.model.act(h)
        if self.model.config.residual and h.shape[-1] == x.shape[-1]:
            h = h.add_(x[:self.plans[i].n_out])
        return h

    @torch.no_grad()
    def iter_logits(self, mixes: Sequence[Mix]):
        """Each mix's [n_split, C] logits on the split's nodes, by the fast path, one mix at a time."""
        coefficients = self._bank_slots(mixes)
        states = self._pinned
        floating = [k for k, v in states[0].items() if v.is_floating_point()]
        weights = self._mixed_weights(coefficients, [{k: s[k].to(self.device) for k in floating} for s in states],
                                      floating)
        try:
            for w, first in zip(weights, self._mixed_parts(coefficients)):
                h = self._x_in
                for i in range(len(self.plans)):
                    z = self._conv(i, h, w, first if i == 0 else None)
                    h = z if i == len(self.plans) - 1 else self._finish(i, z, h, w)
                yield h.clone() if self._reuse else h  # the next mix overwrites the buffers
        finally:
            self._buffers.clear()

    def mix_logits(self, mixes: Sequence[Mix]) -> Tensor:
        """[G, n_split, C] logits of each mix on the split's nodes, by the fast path."""
        return torch.stack(list(self.iter_logits(mixes)))

    # ---- the Evaluator interface

    @staticmethod
    def _key(mix: Mix) -> tuple:
        return tuple(sorted((id(s), float(c)) for c, s in mix if c != 0))

    def score_many(self, mixes: Sequence[Mix]) -> list[float]:
        if not self.fast or not mixes:
            return super().score_many(mixes)
        keys = [self._key(m) for m in mixes]
        todo = list(dict.fromkeys(k for k in keys if k not in self._memo))
        by_key = {k: m for k, m in zip(keys, mixes)}
        self.forwards += len(todo)
        for key, z in zip(todo, self.iter_logits([by_key[k] for k in todo])):
            self._memo[key] = score_logits(self.graph.metric, z, self.y)
        return [self._memo[k] for k in keys]

    def score(self, state: State) -> float:
        if not self.fast:
            return super().score(state)
        return self.score_many([[(1.0, state)]])[0]
