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
- **batched mixes**: the mixes of a step are evaluated in blocks (up to ``block_mixes`` mixes,
  within ``memory_floats``), each node's values for every mix of the block side by side
  ([n, mixes, width]): every layer's weights for all of them are one product of the [mixes,
  ingredients] coefficients with the stacked ingredient weights; their first-layer parts are
  mixed from the bank, first reduced to one row per group of proportional coefficients (for a
  GIS step two rows, soup and candidate); each sparse propagation is one CSR product over the
  concatenated channels of the block (on csbm-arxiv's 2.2M edges, 106 ms per mix for 8 mixes
  against 255 ms for one: each edge's index is read once and each gathered row is longer), and
  the dense products run mix by mix on strided views, with no copies. Each layer's targets are
  the first rows of its input, so root terms need no gather;
- **no repeats**: a mix already scored (GIS's α = 1 is the soup chosen at the step before) is
  answered from memory.

Per architecture: GCN, GraphSAGE and GIN get all four. GAT's attention is not linear in the
weights: its first layer caches ``X W`` per ingredient (the mix's ``X W`` is exact), but the
attention scores, their softmax and the aggregation run per mix (one sparse product per mix and
head), so its blocks hold one mix; the receptive-field restriction and the stacked weights hold.
Norms ``batch`` and ``layer`` (PyG's ``mode="node"``) are per-node affine maps in eval mode and
are applied per mix; residual connections too. Anything else (MLP, a norm that looks at the whole graph) falls back to the
reference path of :class:`~ladle.evaluation.Evaluator`.

The logits equal the reference's (full forward of the mixed weights) up to float rounding, so
the predictions agree except where a node's top two classes are within rounding of each other.
Memory: the bank (K first-layer parts of the receptive field, n x width floats each) and a few
scratch buffers of one block's hidden states, each at most ``memory_floats`` floats (a single
mix always runs); the buffers are kept between calls (fresh pages are costly) until
:meth:`FastEvaluator.release`. A graph where that does not fit needs the chunked reference path.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import add_self_loops, remove_self_loops

from ladle.data.graph import csr_tensor
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
    if out.device.type != "cpu":  # the caching allocator makes the temporary cheap there
        return out.copy_(torch.sparse.mm(adj, h))
    return torch.addmm(out, adj, h, beta=0, out=out)  # beta=0: out's old values are ignored, NaNs included


class FastEvaluator(Evaluator):
    """An :class:`Evaluator` whose ``score_many`` (and ``score``) use the fast path where the model allows.

    Args:
        graph, model_config, split, device, chunk_size: as for :class:`Evaluator`.
        memory_floats: the most floats one block's hidden state may hold (default 2^27, 512 MB in
            float32); more mixes than fit are evaluated in several blocks.
    """

    block_mixes = 8  # past 8 mixes side by side the sparse product gains nothing more (csbm-arxiv, 1 thread)

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
        # much as the product that fills them; every block of mixes reuses the same buffers instead, across
        # calls until release() (CUDA's caching allocator already does this).
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
            adj = csr_tensor(crow, col, weight, (targets.numel(), inputs.numel()))
            self.plans[layer] = LayerPlan(adj, row, col, targets.numel(), inputs.numel())
            targets = inputs
        self.input_nodes = targets
        self._x_in = self.x[self.input_nodes]
        if self.arch != "gat":  # Â X (or the mean or sum of neighbours), shared by every ingredient
            self._ax = _spmm(self.plans[0].adj, self._x_in)

    def _buffer(self, name: str, rows: int, cols: int) -> Tensor:
        """A [rows, cols] scratch tensor, kept for reuse by the next block of mixes on the CPU."""
        if not self._reuse:
            return torch.empty(rows, cols, dtype=self.x.dtype, device=self.device)
        flat = self._buffers.get(name)
        if flat is None or flat.numel() < rows * cols:
            flat = self._buffers[name] = torch.empty(rows * cols, dtype=self.x.dtype, device=self.device)
        return flat[:rows * cols].view(rows, cols)

    def _block(self, name: str, rows: int, mixes: int, width: int) -> Tensor:
        """A [rows, mixes, width] scratch tensor: each node's values for every mix of a block, side by side."""
        return self._buffer(name, rows, mixes * width).view(rows, mixes, width)

    def _block_size(self) -> int:
        """Mixes evaluated side by side: as many as ``memory_floats`` allows, at most ``block_mixes``.

        GAT's attention differs per mix, so its propagation cannot be shared: one mix at a time.
        """
        if self.arch == "gat":
            return 1
        width = max(self.model.config.hidden, self.graph.num_classes)
        return max(1, min(self.block_mixes, self.memory_floats // (self.plans[0].n_in * width)))

    # ---- first layer: linear parts per ingredient, mixed per block

    def _part_widths(self) -> list[int]:
        """The width of each first-layer part: the first linear map's output channels (GIN has two parts)."""
        key = {"gcn": "lin", "sage": "lin_l", "gin": "nn.0", "gat": "lin"}[self.arch]
        width = self.model.get_parameter(f"convs.0.{key}.weight").size(0)
        return [width] * (2 if self.arch == "gin" else 1)

    def _first_parts(self, state: State, out: list[Tensor]) -> None:
        """An ingredient's first-layer linear parts, written into ``out`` (each [n, width]; see the module docstring).

        A bias added after the linear map is linear in the weights too, so it is banked with them
        (GAT's is added after the attention, so not there).
        """
        p, plan = "convs.0.", self.plans[0]
        if self.arch == "gcn":
            torch.addmm(state[p + "bias"], self._ax, state[p + "lin.weight"].t(), out=out[0])
        elif self.arch == "sage":
            torch.addmm(state[p + "lin_l.bias"], self._ax, state[p + "lin_l.weight"].t(), out=out[0])
            out[0].addmm_(self._x_in[:plan.n_out], state[p + "lin_r.weight"].t())
        elif self.arch == "gin":
            w1 = state[p + "nn.0.weight"].t()
            torch.mm(self._x_in[:plan.n_out], w1, out=out[0])
            torch.addmm(state[p + "nn.0.bias"], self._ax, w1, out=out[1])
        else:  # gat: X W on every input of layer 1
            torch.mm(self._x_in, state[p + "lin.weight"].t(), out=out[0])

    def _bank_slots(self, mixes: Sequence[Mix]) -> Tensor:
        """[G, K] coefficients over the bank's rows, banking ingredients not seen before.

        The bank grows by one allocation per call that brings new ingredients, each part computed
        straight into its row: fresh pages are costly here, and the bank is the largest thing held.
        """
        new = []
        for mix in mixes:
            for _, state in mix:
                if id(state) not in self._slot:
                    self._slot[id(state)] = len(self._pinned)
                    self._pinned.append(state)
                    new.append(state)
        if new:
            rows = self.plans[0].n_in if self.arch == "gat" else self.plans[0].n_out
            known = len(self._pinned) - len(new)
            for i, width in enumerate(self._part_widths()):
                bank = torch.empty(len(self._pinned), rows * width, dtype=self.x.dtype, device=self.device)
                if known:
                    bank[:known] = self._bank[i]
                self._bank[i] = bank
            with torch.no_grad():
                for k, state in enumerate(new, known):
                    self._first_parts({key: v.to(self.device) for key, v in state.items()},
                                      [bank[k].view(rows, -1) for bank in self._bank.values()])
        coefficients = torch.zeros(len(mixes), len(self._pinned), dtype=self.x.dtype, device=self.device)
        for g, mix in enumerate(mixes):
            for c, state in mix:
                coefficients[g, self._slot[id(state)]] += float(c)
        return coefficients

    def _mixed_parts(self, coefficients: Tensor, block: int):
        """Per block of mixes, its first-layer parts, each [n, mixes, width].

        The bank holds K rows of n x width floats. The columns of proportional coefficients are
        grouped first (:func:`proportional_basis`: a GIS step's mixes are α·soup + (1−α)·candidate,
        so the soup's members form one group) and the bank is reduced to those r rows once per call;
        each mix then reads only its non-zero rows (two in a GIS step, one when ranking).
        """
        rows = self.plans[0].n_in if self.arch == "gat" else self.plans[0].n_out
        weights, banks = coefficients, list(self._bank.values())
        grouped, members = proportional_basis(coefficients)
        if len(members) < int(coefficients.ne(0).any(0).sum()):
            weights, banks = grouped, [members @ bank for bank in banks]
        blocks = -(-len(weights) // block)
        block = -(-len(weights) // blocks)  # even blocks: 18 mixes at most 8 wide go 6, 6, 6, not 8, 8, 2
        for start in range(0, len(weights), block):
            chunk = weights[start:start + block]
            parts = []
            for j, bank in enumerate(banks):
                width = bank.size(1) // rows
                out = self._block(f"first{j}", rows, len(chunk), width)
                if len(chunk) == 1:  # contiguous: one product reads the bank's rows once
                    torch.mm(chunk, bank, out=out.view(1, -1))
                for m, row in enumerate(chunk.tolist() if len(chunk) > 1 else []):
                    terms = [(r, c) for r, c in enumerate(row) if c != 0]
                    torch.mul(bank[terms[0][0]].view(rows, width), terms[0][1], out=out[:, m])
                    for r, c in terms[1:]:
                        out[:, m].add_(bank[r].view(rows, width), alpha=c)
                parts.append(out)
            yield start, parts

    @staticmethod
    def _mixed_weights(coefficients: Tensor, states: list[State], keys: list[str]) -> dict[str, Tensor]:
        """For each key, every mix's tensor [G, *shape], by one product of the coefficients."""
        stacked = {}
        for key in keys:
            flat = torch.stack([s[key].reshape(-1) for s in states]).to(coefficients)
            stacked[key] = (coefficients @ flat).view(len(coefficients), *states[0][key].shape)
        return stacked

    # ---- one block of mixes through one layer: h [n_in, M, d] -> [n_out, M, d'], the mixes' weights in w [M, ...]

    @staticmethod
    def _per_mix(h: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
        """out[:, m] = h[:, m] @ weight[m]ᵀ (+ bias[m]) for each mix m.

        Strided views, no copies; the biases are added once for the block (addmm into a strided
        ``out`` would first copy its bias there, mix by mix).
        """
        for m in range(out.size(1)):
            torch.mm(h[:, m], weight[m].t(), out=out[:, m])
        return out if bias is None else out.add_(bias[None])

    def _propagate(self, i: int, name: str, h: Tensor) -> Tensor:
        """The layer's sparse product on every mix of the block at once: [n_in, M, d] -> [n_out, M, d].

        One product over the mixes' channels side by side reads each edge's index once; on
        csbm-arxiv's 2.2M edges it costs 106 ms per mix for 8 mixes against 255 ms for one.
        """
        plan, (_, mixes, width) = self.plans[i], h.shape
        out = self._block(name, plan.n_out, mixes, width)
        _spmm(plan.adj, h.view(plan.n_in, mixes * width), out.view(plan.n_out, mixes * width))
        return out

    def _linear_then_propagate(self, i: int, h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """adj @ h @ Wᵀ + b per mix, in the cheaper order (propagate the narrower side)."""
        plan, (_, d_out, d_in), nnz = self.plans[i], weight.shape, self.plans[i].row.numel()
        if nnz * d_in + plan.n_out * d_in * d_out <= plan.n_in * d_in * d_out + nnz * d_out:
            return self._per_mix(self._propagate(i, f"p{i}", h), weight, bias,
                                 self._block(f"z{i}", plan.n_out, h.size(1), d_out))
        y = self._per_mix(h, weight, None, self._block(f"p{i}", plan.n_in, h.size(1), d_out))
        return self._propagate(i, f"z{i}", y).add_(bias[None])

    def _conv(self, i: int, h: Tensor, w: dict[str, Tensor], first: list[Tensor] | None) -> Tensor:
        plan, p = self.plans[i], f"convs.{i}."
        if self.arch in ("gcn", "sage") and first:
            return first[0]  # the bias is banked with the linear part
        if self.arch == "gcn":
            return self._linear_then_propagate(i, h, w[p + "lin.weight"], w[p + "bias"])
        if self.arch == "sage":
            z = self._linear_then_propagate(i, h, w[p + "lin_l.weight"], w[p + "lin_l.bias"])
            for m in range(z.size(1)):
                z[:, m].addmm_(h[:plan.n_out, m], w[p + "lin_r.weight"][m].t())
            return z
        if self.arch == "gin":
            scale = (1 + w[p + "eps"]).view(1, -1, 1)
            mixes = scale.size(1)  # layer 1's input is the features, shared by the mixes
            if first:
                z = first[1].addcmul_(first[0], scale)  # nn.0's bias is banked in first[1]
            else:
                agg = self._propagate(i, f"p{i}", h).addcmul_(h[:plan.n_out], scale)
                width = w[p + "nn.0.weight"].size(1)
                z = self._per_mix(agg, w[p + "nn.0.weight"], w[p + "nn.0.bias"],
                                  self._block(f"y{i}", plan.n_out, mixes, width))
            return self._per_mix(z.clamp_min_(0), w[p + "nn.2.weight"], w[p + "nn.2.bias"],
                                 self._block(f"z{i}", plan.n_out, mixes, w[p + "nn.2.weight"].size(1)))
        # gat: blocks of one mix
        xw = first[0][:, 0] if first else h[:, 0] @ w[p + "lin.weight"][0].t()
        return self._gat(plan, xw, {k: v[0] for k, v in w.items()}, p).unsqueeze(1)

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
        out = [_spmm(csr_tensor(crow, col, alpha[:, k].contiguous(), plan.adj.shape), by_head[k]) for k in range(heads)]
        out = torch.cat(out, 1) if heads > 1 else out[0]
        return out.add_(w[p + "bias"])

    def _finish(self, i: int, h: Tensor, x: Tensor, w: dict[str, Tensor]) -> Tensor:
        """The template's finish_layer for a block of mixes: eval-mode norm, activation, residual."""
        norm = self.model.config.norm
        if norm == "batch":
            p = f"norms.{i}.module."
            scale = w[p + "weight"] / torch.sqrt(w[p + "running_var"] + self.model.norms[i].module.eps)
            h = h.sub_(w[p + "running_mean"][None]).mul_(scale[None]).add_(w[p + "bias"][None])
        elif norm == "layer":
            p = f"norms.{i}."
            h = F.layer_norm(h, h.shape[-1:], None, None, self.model.norms[i].eps)
            h = h.mul_(w[p + "weight"][None]).add_(w[p + "bias"][None])
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
        for start, first in self._mixed_parts(coefficients, self._block_size()):
            w = {k: v[start:start + first[0].size(1)] for k, v in weights.items()}
            h = self._x_in.unsqueeze(1)  # the features, shared by every mix
            for i in range(len(self.plans)):
                z = self._conv(i, h, w, first if i == 0 else None)
                h = z if i == len(self.plans) - 1 else self._finish(i, z, h, w)
            for m in range(h.size(1)):
                yield h[:, m].clone()  # the next block overwrites the buffers

    def release(self) -> None:
        """Free the scratch buffers (kept between calls, so a soup's steps reuse them); the bank and memo stay."""
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
