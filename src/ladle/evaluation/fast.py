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

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ladle.data.graph import csr_tensor, spmm
from ladle.evaluation.evaluator import Evaluator, Mix, State
from ladle.evaluation.metrics import score_logits

log = logging.getLogger(__name__)
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
        self.path = getattr(type(self.model), "fast_path", None)  # the model's own math (see FastPath)
        self.fast = self.path is not None and model_config.norm in FAST_NORMS and bool(self.mask.any())
        if not self.fast:
            log.info("%s: no fast evaluation path; scoring by the reference forward", model_config.name)
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

    def _plan(self, layers: int) -> None:
        (src_all, dst_all), weight_all = self.path.propagation(self)
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
        self.x_in = self.x[self.input_nodes]
        if self.path.shares_first_propagation:  # Â X (or the mean or sum of neighbours), shared by all
            self.ax = spmm(self.plans[0].adj, self.x_in)

    def describe(self) -> dict:
        if not self.fast:
            return super().describe()
        # The bank and the blocks hold the validation nodes' receptive field: a chunk size does not bound them.
        return {"path": "fast", "chunk": self.chunk_size, "chunk_bound": False}

    def _buffer(self, name: str, rows: int, cols: int) -> Tensor:
        """A [rows, cols] scratch tensor, kept for reuse by the next block of mixes on the CPU."""
        if not self._reuse:
            return torch.empty(rows, cols, dtype=self.x.dtype, device=self.device)
        flat = self._buffers.get(name)
        if flat is None or flat.numel() < rows * cols:
            flat = self._buffers[name] = torch.empty(rows * cols, dtype=self.x.dtype, device=self.device)
        return flat[:rows * cols].view(rows, cols)

    def block(self, name: str, rows: int, mixes: int, width: int) -> Tensor:
        """A [rows, mixes, width] scratch tensor: each node's values for every mix of a block, side by side."""
        return self._buffer(name, rows, mixes * width).view(rows, mixes, width)

    def _part_rows(self) -> int:
        """Rows of a first-layer part: the targets of layer 1, or all its inputs when the propagation is per mix."""
        return self.plans[0].n_out if self.path.shares_first_propagation else self.plans[0].n_in

    def _block_size(self) -> int:
        """Mixes evaluated side by side: as many as ``memory_floats`` allows, at most ``block_mixes``.

        GAT's attention differs per mix, so its propagation cannot be shared: one mix at a time.
        """
        if self.path.one_mix_per_block:
            return 1
        width = max(self.model.config.hidden, self.graph.num_classes)
        return max(1, min(self.block_mixes, self.memory_floats // (self.plans[0].n_in * width)))

    # ---- first layer: linear parts per ingredient, mixed per block

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
            rows = self._part_rows()
            known = len(self._pinned) - len(new)
            for i, width in enumerate(self.path.part_widths(self.model)):
                bank = torch.empty(len(self._pinned), rows * width, dtype=self.x.dtype, device=self.device)
                if known:
                    bank[:known] = self._bank[i]
                self._bank[i] = bank
            with torch.no_grad():
                for k, state in enumerate(new, known):
                    self.path.first_parts(self, {key: v.to(self.device) for key, v in state.items()},
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
        rows = self._part_rows()
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
                out = self.block(f"first{j}", rows, len(chunk), width)
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
    def per_mix(h: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
        """out[:, m] = h[:, m] @ weight[m]ᵀ (+ bias[m]) for each mix m.

        Strided views, no copies; the biases are added once for the block (addmm into a strided
        ``out`` would first copy its bias there, mix by mix).
        """
        for m in range(out.size(1)):
            torch.mm(h[:, m], weight[m].t(), out=out[:, m])
        return out if bias is None else out.add_(bias[None])

    def propagate(self, i: int, name: str, h: Tensor) -> Tensor:
        """The layer's sparse product on every mix of the block at once: [n_in, M, d] -> [n_out, M, d].

        One product over the mixes' channels side by side reads each edge's index once; on
        csbm-arxiv's 2.2M edges it costs 106 ms per mix for 8 mixes against 255 ms for one.
        """
        plan, (_, mixes, width) = self.plans[i], h.shape
        out = self.block(name, plan.n_out, mixes, width)
        spmm(plan.adj, h.view(plan.n_in, mixes * width), out.view(plan.n_out, mixes * width))
        return out

    def linear_then_propagate(self, i: int, h: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """adj @ h @ Wᵀ + b per mix, in the cheaper order (propagate the narrower side)."""
        plan, (_, d_out, d_in), nnz = self.plans[i], weight.shape, self.plans[i].row.numel()
        if nnz * d_in + plan.n_out * d_in * d_out <= plan.n_in * d_in * d_out + nnz * d_out:
            return self.per_mix(self.propagate(i, f"p{i}", h), weight, bias,
                                 self.block(f"z{i}", plan.n_out, h.size(1), d_out))
        y = self.per_mix(h, weight, None, self.block(f"p{i}", plan.n_in, h.size(1), d_out))
        return self.propagate(i, f"z{i}", y).add_(bias[None])

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
            h = self._layers(first, {k: v[start:start + first[0].size(1)] for k, v in weights.items()})
            for m in range(h.size(1)):
                yield h[:, m].clone()  # the next block overwrites the buffers

    def _layers(self, first: list[Tensor], w: dict[str, Tensor]) -> Tensor:
        """A block of mixes through every layer, from their first-layer parts: [n_split, mixes, C]."""
        h = self.x_in.unsqueeze(1)  # the features, shared by every mix
        for i in range(len(self.plans)):
            z = self.path.conv(self, i, h, w, first if i == 0 else None)
            h = z if i == len(self.plans) - 1 else self._finish(i, z, h, w)
        return h

    @torch.no_grad()
    def _unbanked_logits(self, state: State) -> Tensor:
        """[n_split, C] logits of one state by the fast path, its first-layer parts computed for this call only.

        The same numbers as banking it (a bank row read with coefficient 1 is that row), without growing the bank:
        each row of the bank holds the whole receptive field, and a soup's result or a baseline is scored once.
        """
        state = {k: v.to(self.device) for k, v in state.items()}
        rows = self._part_rows()
        parts = [torch.empty(rows, width, dtype=self.x.dtype, device=self.device)
                 for width in self.path.part_widths(self.model)]
        self.path.first_parts(self, state, parts)
        w = {k: v[None] for k, v in state.items() if v.is_floating_point()}
        return self._layers([p.unsqueeze(1) for p in parts], w)[:, 0].clone()

    def release(self) -> None:
        """Free the scratch buffers (kept between calls, so a soup's steps reuse them) and what
        :meth:`Evaluator.release` frees; the bank and memo stay."""
        super().release()
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
        """One state's score. States already in the bank (GIS's ingredients) are answered from it and the memo;
        any other is scored by the fast path without joining the bank (see :meth:`_unbanked_logits`)."""
        if not self.fast:
            return super().score(state)
        if id(state) in self._slot:
            return self.score_many([[(1.0, state)]])[0]
        self.forwards += 1
        return score_logits(self.graph.metric, self._unbanked_logits(state), self.y)
