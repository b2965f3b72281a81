"""The Evaluator: scores weights on one split of one graph for one architecture.

Soups see only this interface: ``score(state)``, ``score_many(mixes)`` and
``score_ensemble(states)``, where a *mix* is a list of ``(coefficient, state)`` pairs. This is
the reference path: every call materialises the mixed weights and runs a full forward.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import Tensor
from torch.func import functional_call
from torch_geometric.utils import subgraph

from ladle.data.graph import Graph, build_adjacency
from ladle.evaluation.chunked import can_chunk, chunked_forward
from ladle.evaluation.field import induced, receptive_field
from ladle.evaluation.metrics import score_logits
from ladle.models import build_model, edge_features, graph_input
from ladle.models.options import ModelConfig
from ladle.sampling.partition import graph_parts

log = logging.getLogger(__name__)

State = dict[str, Tensor]
Mix = Sequence[tuple[float, State]]


def mix_states(mix: Mix) -> State:
    """Σ cᵢ·stateᵢ over floating tensors, summed in the mix's order.

    Integer tensors (BatchNorm's ``num_batches_tracked``) are counters, not weights: they are
    taken unchanged from the mix's first state. Zero coefficients are skipped, so a mix of one
    state with coefficient 1 returns that state's values exactly.
    """
    terms = [(float(c), s) for c, s in mix if c != 0]
    if not terms:
        raise ValueError("a mix needs at least one non-zero coefficient")
    first = terms[0][1]
    out = {}
    for key, ref in first.items():
        if not ref.is_floating_point():
            out[key] = ref.clone()
            continue
        acc = ref * terms[0][0]
        for coef, state in terms[1:]:
            acc = acc + state[key] * coef
        out[key] = acc
    return out


@torch.no_grad()
def whole_graph_logits(model: torch.nn.Module, graph: Graph, chunk_size: int = 0, nodes: Tensor | None = None) -> Tensor:
    """Eval-mode logits of ``nodes`` (default all): the one place that chooses between layer-wise inference over
    chunks of ``chunk_size`` nodes (``eval.chunk``) and one forward on the graph's sparse adjacency."""
    was_training = model.training
    model.eval()
    try:
        if chunk_size and can_chunk(model):
            return chunked_forward(model, graph, chunk_size, nodes)
        logits = model(graph.data.x, graph_input(model, graph), **edge_features(model, graph))
        return logits if nodes is None else logits[nodes]
    finally:
        model.train(was_training)


def ensemble_probabilities(logits: Sequence[Tensor], multilabel: bool) -> Tensor:
    """The members' averaged probabilities (softmax, or sigmoid for multi-label): the ensemble's prediction."""
    return torch.stack([torch.sigmoid(z) if multilabel else torch.softmax(z, -1) for z in logits]).mean(0)


def probabilities_as_logits(mean: Tensor, multilabel: bool) -> Tensor:
    """The ensemble's mean probabilities as logits (log-odds for multi-label), clamped away from 0 and 1."""
    mean = mean.clamp(1e-12, 1 - 1e-7)
    return torch.log(mean) - torch.log1p(-mean) if multilabel else torch.log(mean)


def split_scores(model: torch.nn.Module, graph: Graph, splits=("train", "val", "test"),
                 chunk_size: int = 0) -> dict[str, float]:
    """Eval-mode logits of the splits' nodes (see :func:`whole_graph_logits`), scored on each split."""
    wanted = torch.stack([graph.mask(s) for s in splits]).any(0)
    logits = torch.zeros(graph.num_nodes, model.out_channels, device=graph.data.x.device)
    logits[wanted] = whole_graph_logits(model, graph, chunk_size, wanted.nonzero().view(-1))
    y = graph.data.y
    return {s: score_logits(graph.metric, logits[graph.mask(s)], y[graph.mask(s)]) for s in splits}


class Evaluator:
    """Full-batch scoring of weights on ``split`` (``val`` for selection, ``test`` for reporting).

    Args:
        graph: the :class:`~ladle.data.Graph`, already on ``device``.
        model_config: architecture of every state it will score.
        split: ``train``, ``val`` or ``test`` (default ``val``).
        device: where the forward runs (default the graph's device).
        chunk_size: 0 for one full-batch forward (default); otherwise layer-wise inference over node
            chunks of this size, computing the last layer only for the split's nodes.
    """

    def __init__(self, graph: Graph, model_config: ModelConfig, split: str = "val", device=None, chunk_size: int = 0):
        self.graph, self.split, self.chunk_size = graph, split, chunk_size
        self.device = torch.device(device) if device is not None else graph.data.x.device
        self.model = build_model(model_config, graph.num_features, graph.num_classes).to(self.device).eval()
        self.chunk_bound = not chunk_size or can_chunk(self.model)
        if not self.chunk_bound:
            log.info("%s: chunked inference knows ladle's own layers only; whole-graph passes instead",
                     model_config.name)
            self.chunk_size = 0
        self.x = graph.data.x.to(self.device)
        self.edge_index = graph.data.edge_index.to(self.device)
        # Whole-graph forwards propagate with the graph's cached sparse adjacency where the model takes one.
        self.graph_here = graph.to(self.device)
        self.adj = graph_input(self.model, self.graph_here)
        self.edge_kwargs = edge_features(self.model, self.graph_here)  # a user's model that takes edge_attr
        self._field = None  # the split's receptive field and its target nodes, built by the first loss()
        self.mask = graph.mask(split).to(self.device)
        self.y_all = graph.data.y.to(self.device)
        self.y = self.y_all[self.mask]
        self.forwards = 0

    @torch.no_grad()
    def logits(self, state: State) -> Tensor:
        """[n_split, C] logits of the split's nodes."""
        self.forwards += 1
        state = {k: v.to(self.device) for k, v in state.items()}
        if self.chunk_size:
            self.model.load_state_dict(state)
            return chunked_forward(self.model, self.graph, self.chunk_size, self.mask.nonzero().view(-1))
        return functional_call(self.model, state, (self.x, self.adj), self.edge_kwargs)[self.mask]

    def describe(self) -> dict:
        """How this evaluator scores, for the soups' sidecars: the path, and whether ``chunk_size`` bounds its memory."""
        return {"path": "reference", "chunk": self.chunk_size, "chunk_bound": self.chunk_bound}

    def release(self) -> None:
        """Free what one soup built for itself (the receptive field its fit ran on); the next soup builds its own."""
        self._field = None

    def score(self, state: State) -> float:
        return score_logits(self.graph.metric, self.logits(state), self.y)

    def loss(self, state: State, nodes: Tensor | None = None) -> Tensor:
        """Differentiable loss of ``state`` on the split's nodes, in eval mode (no dropout).

        The forward runs only on the split's receptive field (:mod:`ladle.evaluation.field`, built once), on
        the model's sparse adjacency: the same loss as a whole-graph forward, at the cost of what the split's
        logits read. With ``nodes`` (sorted global ids) it runs on their induced subgraph instead (GCN
        normalised within it), again restricted to the receptive field there of the split's nodes among
        them: the memory bound of the partition learned soup. For soups that *fit* on the split (learned,
        pls); selecting soups use :meth:`score`. A model from Python runs its own whole forward.
        """
        if not hasattr(self.model, "block_forward"):
            return self._whole_loss(state, nodes)
        if nodes is None:
            if self._field is None:
                targets = self.mask.nonzero().view(-1)
                self._field = self._receptive_field(self._field_adjacency(), targets), targets
            (x, blocks), targets = self._field
        else:
            nodes = nodes.to(self.device)
            local = self.mask[nodes].nonzero().view(-1)
            adj = self._subgraph_adjacency(nodes)
            inputs, blocks = receptive_field(adj, local, len(self.model.convs))
            x, blocks, targets = self.x[nodes[inputs]], blocks, nodes[local]
        logits = functional_call(self._on_blocks, {f"model.{k}": v for k, v in state.items()}, (x, blocks))
        return self._criterion(logits, self.y_all[targets])

    def _criterion(self, logits: Tensor, y: Tensor) -> Tensor:
        if self.graph.task == "multilabel":
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
        return torch.nn.functional.cross_entropy(logits, y)

    def _whole_loss(self, state: State, nodes: Tensor | None) -> Tensor:
        if nodes is None:
            logits = functional_call(self.model, state, (self.x, self.adj), self.edge_kwargs)
            mask, y = self.mask, self.y_all
        else:
            nodes = nodes.to(self.device)
            edge_index, _, kept = subgraph(nodes, self.edge_index, relabel_nodes=True, num_nodes=self.graph.num_nodes,
                                           return_edge_mask=True)
            logits = functional_call(self.model, state, (self.x[nodes], edge_index),
                                     edge_features(self.model, self.graph_here, kept))
            mask, y = self.mask[nodes], self.y_all[nodes]
        return self._criterion(logits[mask], y[mask])

    @property
    def _on_blocks(self) -> torch.nn.Module:
        if not hasattr(self, "_blocks_module"):
            self._blocks_module = _OnBlocks(self.model)
        return self._blocks_module

    def _field_adjacency(self) -> Tensor:
        """The adjacency whose rows the receptive field slices: the model's own (attention and MLP: the plain one)."""
        return self.graph_here.adj_t(getattr(self.model, "adjacency", None) or "plain")

    def _receptive_field(self, adj: Tensor, targets: Tensor):
        inputs, blocks = receptive_field(adj, targets, len(self.model.convs))
        return (self.x[inputs], blocks)

    def _subgraph_adjacency(self, nodes: Tensor) -> Tensor:
        """The induced subgraph's adjacency of the model's kind, normalised within the subgraph (GCN)."""
        plain = induced(self.graph_here.adj_t("plain"), nodes)
        kind = getattr(self.model, "adjacency", None) or "plain"
        if kind == "plain":
            plain.ladle_kind = "plain"
            return plain
        return build_adjacency(plain.crow_indices(), plain.col_indices(), nodes.numel(), kind, self.x.dtype)

    def parts(self, count: int, seed: int = 0) -> list[Tensor]:
        """The graph's METIS parts (cached on disk like ClusterGCN's), each a sorted tensor of node ids."""
        return graph_parts(self.graph, count, seed)

    def score_many(self, mixes: Sequence[Mix]) -> list[float]:
        return [self.score(mix_states(mix)) for mix in mixes]

    def ensemble_logits(self, states: Sequence[State]) -> Tensor:
        """Average of the members' probabilities (softmax, or sigmoid for multi-label), as logits."""
        multilabel = self.graph.task == "multilabel"
        return probabilities_as_logits(ensemble_probabilities(list(map(self.logits, states)), multilabel), multilabel)

    def score_ensemble(self, states: Sequence[State]) -> float:
        return score_logits(self.graph.metric, self.ensemble_logits(states), self.y)


class _OnBlocks(torch.nn.Module):
    """The model with :meth:`~ladle.models.base.GNN.block_forward` as its forward, for ``functional_call``."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, blocks: list) -> Tensor:
        return self.model.block_forward(x, blocks)
