"""``train_ingredient(spec, graph)``: the one function every engine runs, unchanged.

It builds the model from the spec's initialisation seed (shared across a run by default),
trains with Adam under the spec's data seed, keeps the best-validation weights, and returns
them with the history. It does no I/O: the caller decides what to store.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ladle.config import IngredientSpec
from ladle.data.graph import Graph
from ladle.evaluation.evaluator import split_scores
from ladle.models import build_model
from ladle.seeding import seed_everything

log = logging.getLogger(__name__)

OnEpoch = Callable[[str, int, int, float], None]  # (name, epoch, epochs, best_val)


@dataclass
class IngredientRecord:
    """A trained ingredient: its best-validation weights (on CPU) and how it got there."""

    spec: IngredientSpec
    state: dict[str, torch.Tensor]
    val: float
    test: float
    train: float
    best_epoch: int
    seconds: float
    history: list[dict] = field(default_factory=list)
    in_channels: int = 0
    out_channels: int = 0

    @property
    def name(self) -> str:
        return self.spec.name


def loss_fn(graph: Graph, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if graph.task == "multilabel":
        return F.binary_cross_entropy_with_logits(logits, y)
    return F.cross_entropy(logits, y)


def train_ingredient(spec: IngredientSpec, graph: Graph, *, device: str | torch.device = "cpu",
                     on_epoch: OnEpoch | None = None) -> IngredientRecord:
    """Train one ingredient full-batch and return its best-validation weights.

    Ties in validation keep the earlier epoch. ``graph`` may already be on ``device``.
    """
    start = time.perf_counter()
    device = torch.device(device)
    model = build_model(spec.model, graph.num_features, graph.num_classes, init_seed=spec.init_seed).to(device)
    graph_on_device = _to_device(graph, device)
    data = graph_on_device.data
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.train.lr, weight_decay=spec.train.weight_decay)
    train_mask = data.train_mask
    y_train = data.y[train_mask]
    seed_everything(spec.data_seed)  # dropout draws from here on are this ingredient's own

    best_val, best_epoch, best_state, history = float("-inf"), 0, None, []
    for epoch in range(1, spec.train.epochs + 1):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        logits = model(data.x, data.edge_index)
        loss = loss_fn(graph, logits[train_mask], y_train)
        loss.backward()
        optimizer.step()
        if epoch % spec.train.eval_every == 0 or epoch == spec.train.epochs:
            scores = split_scores(model, graph_on_device, splits=("train", "val"))
            history.append({"epoch": epoch, "loss": float(loss.detach()), **scores})
            if scores["val"] > best_val:
                best_val, best_epoch = scores["val"], epoch
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        if on_epoch is not None:
            on_epoch(spec.name, epoch, spec.train.epochs, best_val)

    model.load_state_dict(best_state)
    final = split_scores(model, graph_on_device)
    seconds = time.perf_counter() - start
    log.info("%s: best val %.4f at epoch %d (%.1fs)", spec.name, final["val"], best_epoch, seconds)
    return IngredientRecord(spec, best_state, final["val"], final["test"], final["train"], best_epoch, seconds,
                            history, graph.num_features, graph.num_classes)


def _to_device(graph: Graph, device: torch.device) -> Graph:
    if graph.data.x.device == device:
        return graph
    from dataclasses import replace

    return replace(graph, data=graph.data.to(device))
