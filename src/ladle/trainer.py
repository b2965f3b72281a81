"""``train_ingredient(spec, graph)``: the one function every engine runs, unchanged.

It builds the model from the spec's initialisation seed (shared across a run by default),
trains with Adam under the spec's data seed, keeps the best-validation weights, and returns
them with the history. It does no I/O: the caller decides what to store.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ladle.config import IngredientSpec
from ladle.data.graph import Graph
from ladle.errors import LadleError
from ladle.evaluation.evaluator import split_scores
from ladle.models import build_model
from ladle.sampling import SAMPLERS, build_sampler
from ladle.sampling.partition import membership_for, part_graph
from ladle.seeding import seed_everything

log = logging.getLogger(__name__)

OnEpoch = Callable[[str, int, int, float, dict], None]  # (name, epoch, epochs, best_val, metrics)


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
    device: str = "cpu"
    peak_device_mb: float | None = None  # the CUDA allocator's peak while training (None on the CPU)
    epochs_trained: int = 0  # fewer than the spec's epochs when early stopping ended training
    trunk_sha256: str | None = None  # the stored trunk this model started from
    average_of: str | None = None  # the model whose weights, averaged over its epochs, these are
    companion: IngredientRecord | None = None  # the tracked average of this model's weights (spec.track_average)
    part_graph: dict | None = None  # a partitioned ingredient's part: see :func:`part_summary`
    scored_on: str = "graph"  # "part": trained from a partition folder, validated and scored on its own nodes
    worker_memory: dict | None = None  # the worker's peaks while it trained this model (engines.base.worker_memory)
    communication: dict | None = None  # a data-parallel model's ranks and bytes all-reduced (ladle.ddp)
    stopped: dict | None = None  # a callback's stop (ladle.StopIngredient): reason, asked_at_epoch, by, epoch

    @property
    def name(self) -> str:
        return self.spec.name


def loss_fn(graph: Graph, logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean loss, or with per-node ``weight`` (GraphSAINT's λ) the weighted sum."""
    if graph.task == "multilabel":
        per_node = F.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(-1)
    else:
        per_node = F.cross_entropy(logits, y, reduction="none")
    return per_node.mean() if weight is None else (per_node * weight).sum()


def batch_loss(graph: Graph, model: torch.nn.Module, batch, edge_attr: bool = False) -> torch.Tensor | None:
    """Loss of one mini-batch: on its seed nodes (``batch_size``) or its masked nodes; None if it has none.
    ``edge_attr``: the model takes the batch's edge features (a user's model, see :func:`edge_features`)."""
    edges = batch.get("adj_t")  # a full batch's sparse adjacency, where the model takes one
    logits = model(batch.x, batch.edge_index if edges is None else edges, batch.get("edge_weight"), batch.get("layer_ptr"),
                   batch.get("self_weight"), batch.get("num_sampled_nodes"), batch.get("num_sampled_edges"),
                   **({"edge_attr": batch.edge_attr} if edge_attr else {}))
    if batch.get("batch_size") is not None:
        return loss_fn(graph, logits[: batch.batch_size], batch.y[: batch.batch_size])
    mask = batch.loss_mask
    if not bool(mask.any()):
        return None
    weight = batch.get("loss_weight")
    return loss_fn(graph, logits[mask], batch.y[mask], None if weight is None else weight[mask])


def train_ingredient(spec: IngredientSpec, graph: Graph, *, device: str | torch.device = "cpu",
                     on_epoch: OnEpoch | None = None, start_state: dict | None = None,
                     after_epoch: Callable[[int, torch.nn.Module], None] | None = None,
                     training_graph: Graph | None = None, shard=None,
                     should_stop: Callable[[], dict | None] | None = None) -> IngredientRecord:
    """Train one ingredient and return its best-validation weights.

    Ties in validation keep the earlier epoch. With ``train.patience`` > 0, training stops after that
    many validations without a better score, but not before ``train.average_start`` when an average is kept
    (``train.average`` or ``spec.track_average``). ``start_state`` (a trunk's weights) replaces the
    initialisation; the data seed still governs everything after. ``graph`` may already be on ``device``.
    ``after_epoch(epoch, model)`` sees the weights after each epoch's steps, before validation (a benchmark's
    own look at them, e.g. averaging them); it must leave the model and the random streams as it found them.
    ``training_graph`` (a part read from a partition folder) is what the sampler draws from; ``graph`` then is that
    part with its own nodes' validation and test masks, which the ingredient is validated and scored on.
    ``shard`` (a :class:`ladle.ddp.Shard`) makes this process one rank of a data-parallel model: its share of each
    step's seed nodes, its gradients all-reduced with the other ranks'.
    With ``spec.track_average`` the record's ``companion`` is the best-validated average of the weights over the
    epochs this model trained (validated at every validation of the model, ties keeping the earlier epoch).
    An average that starts late (``train.average_start`` > 1), kept or tracked, competes only with itself: the raw
    weights validated before its first epoch are kept only when training stops before it.
    ``should_stop()``, asked after each epoch, returns a callback's stop (:class:`ladle.StopIngredient`, delivered by
    the engine) or None; a stop ends training there, as early stopping does, and is recorded in ``stopped``.
    """
    start = time.perf_counter()
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(spec.model, graph.num_features, graph.num_classes, init_seed=spec.init_seed)
    if start_state is not None:
        model.load_state_dict(start_state)
    model = model.to(device)
    graph_on_device = graph.to(device)
    train_graph = _training_graph(spec, graph) if training_graph is None else training_graph
    # Samplers work on the CPU graph; full batches use the graph already on the device (one copy there,
    # and one sparse adjacency, shared with validation, when the ingredient trains on the whole graph).
    if SAMPLERS.has(spec.sampler.name, "whole-graph"):
        train_graph = graph_on_device if train_graph is graph else train_graph.to(device)
    sampler = build_sampler(train_graph, spec.sampler, spec.data_seed, num_layers=spec.model.layers,
                            adjacency=model.adjacency)
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.train.lr, weight_decay=spec.train.weight_decay)
    edge_attr = takes_edge_features(model, train_graph, sampler, spec.name)
    seed_everything(spec.data_seed if shard is None else shard.dropout_seed(spec.data_seed))  # its own dropout
    stepped = model if shard is None else shard.wrap(model)  # DDP shares the module: validation reads ``model``

    averaged = WeightAverage(spec.train.average, spec.train.ema_decay)
    tracked = _Tracked(WeightAverage(spec.track_average, spec.train.ema_decay)) if spec.track_average != "none" \
        else None
    best_val, best_epoch, best_state, history = float("-inf"), 0, None, []
    stale, epoch, stopped = 0, 0, None  # validations since the best one
    arithmetic = _arithmetic(spec, device, model)
    for epoch in range(1, spec.train.epochs + 1):
        model.train()
        losses = []
        if spec.train.lr_schedule != "none":  # set per epoch from its closed form: nothing to restore on resume
            for group in optimizer.param_groups:
                group["lr"] = spec.train.lr_at(epoch)
        for batch in sampler.batches(epoch) if shard is None else shard.batches(sampler, epoch):
            optimizer.zero_grad(set_to_none=True)
            with arithmetic():
                loss = batch_loss(graph, stepped, batch.to(device), edge_attr)
            if loss is None:
                continue
            loss.backward()
            if spec.train.clip_grad:  # after DDP's all-reduce: every rank clips the same summed gradient
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.train.clip_grad)
            optimizer.step()
            losses.append(float(loss.detach()))
        metrics = {"loss": sum(losses) / max(len(losses), 1)}
        if spec.train.lr_schedule != "none":
            metrics["lr"] = spec.train.lr_at(epoch)
        if after_epoch is not None:
            after_epoch(epoch, model)
        if epoch >= spec.train.average_start:  # before it, the average is empty and the model is its own
            averaged.add(model)
            if tracked is not None:
                tracked.average.add(model)
        if epoch % spec.train.eval_every == 0 or epoch == spec.train.epochs:
            if averaged.count and best_epoch < spec.train.average_start:
                # The average's first validation: raw weights kept before it (the model is its own average until
                # then, a fallback for a stop before the start) no longer compete with it.
                best_val = float("-inf")
            with averaged.swapped_in(model):  # with an average, it is what is validated and kept
                scores = split_scores(model, graph_on_device, ("train", "val"), spec.eval.chunk)
                improved = scores["val"] > best_val
                if improved:
                    best_state = _cpu_copy(model)
            metrics.update(scores)
            if tracked is not None:
                metrics[f"val_{spec.track_average}"] = tracked.validate(model, graph_on_device, epoch, spec.eval.chunk)
            history.append({"epoch": epoch, **metrics, "seconds": round(time.perf_counter() - start, 3)})
            if improved:
                best_val, best_epoch, stale = scores["val"], epoch, 0
            else:
                stale += 1
        if on_epoch is not None:
            on_epoch(spec.name, epoch, spec.train.epochs, best_val, metrics)
        # An average that starts late (train.average_start) waits for its epochs: stopping before them would leave
        # an average of nothing, the raw model under the average's name.
        waits = (averaged.kind != "none" or tracked is not None) and epoch < spec.train.average_start
        if spec.train.patience and stale >= spec.train.patience and not waits:
            log.info("%s: early stop at epoch %d (best %d)", spec.name, epoch, best_epoch)
            if on_epoch is not None:
                on_epoch(spec.name, epoch, epoch, best_val, {})  # done: the progress bar ends here
            break
        stop = should_stop() if should_stop is not None else None
        if stop:
            stopped = {**stop, "epoch": epoch}
            log.info("%s: stopped by a callback at epoch %d (best %d): %s", spec.name, epoch, best_epoch,
                     stop.get("reason"))
            if on_epoch is not None:
                on_epoch(spec.name, epoch, epoch, best_val, {})
            break

    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    companion = None
    if tracked is not None:
        model.load_state_dict(tracked.best_state)
        final = split_scores(model, graph_on_device, chunk_size=spec.eval.chunk)
        companion = IngredientRecord(spec.average_spec(), tracked.best_state, final["val"], final["test"],
                                     final["train"], tracked.best_epoch, seconds, tracked.history, graph.num_features,
                                     graph.num_classes, str(device), peak, epoch, average_of=spec.name)
        log.info("%s: best val %.4f at epoch %d", companion.name, final["val"], tracked.best_epoch)
    model.load_state_dict(best_state)
    final = split_scores(model, graph_on_device, chunk_size=spec.eval.chunk)
    log.info("%s: best val %.4f at epoch %d (%.1fs)", spec.name, final["val"], best_epoch, seconds)
    return IngredientRecord(spec, best_state, final["val"], final["test"], final["train"], best_epoch, seconds,
                            history, graph.num_features, graph.num_classes, str(device), peak, epoch,
                            companion=companion, part_graph=None if spec.part is None else part_summary(train_graph),
                            scored_on="graph" if training_graph is None else "part", stopped=stopped)


def takes_edge_features(model: torch.nn.Module, graph: Graph, sampler, name: str) -> bool:
    """Whether the batches' edge features go to the model: a user's model whose ``forward`` takes ``edge_attr``, on
    a graph that has them; a sampler that cannot carry them is refused then, not silently left without."""
    if not (getattr(model, "takes_edge_attr", False) and graph.data.get("edge_attr") is not None):
        return False
    if not getattr(sampler, "carries_edge_attr", True):
        raise LadleError(f"{name}: the model takes edge_attr and {graph.name} has edge features, but the "
                         f"{sampler.name} sampler draws its own layer edges, which have none",
                         fix="train with a sampler that keeps the graph's edges: neighbor, cluster, saint-* or full")
    return True


def _arithmetic(spec: IngredientSpec, device: torch.device, model: torch.nn.Module):
    """What the forward and the loss run under: fp32 as they are, or bf16 autocast (the weights, their gradients and
    Adam's state stay fp32)."""
    if spec.train.precision == "fp32":
        return nullcontext
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise LadleError(f"{spec.name}: train.precision bf16 on {device}, which has no bfloat16 arithmetic",
                         fix="train with --precision fp32 on this GPU, or on a GPU with bf16 (Ampere or later)")
    if device.type == "cpu" and SAMPLERS.has(spec.sampler.name, "whole-graph") and model.adjacency is not None:
        log.warning("%s: train.precision bf16 with a full batch: its sparse products run in fp32 on the CPU (no "
                    "bf16 kernel there), so the layers train as fp32", spec.name)
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)


def _cpu_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


class _Tracked:
    """An average of a model's weights validated beside it, its best kept; the model's own training never sees it."""

    def __init__(self, average: WeightAverage):
        self.average, self.best_val, self.best_epoch, self.best_state, self.history = average, float("-inf"), 0, None, []
        self.best_averaged = False  # whether the kept best is an average (not the raw model, before the start)

    def validate(self, model: torch.nn.Module, graph: Graph, epoch: int, chunk: int) -> float:
        """Validate the average (the raw model while it is empty, before ``train.average_start``: it swaps nothing
        in) and keep the best; once it holds epochs, raw weights kept before stop competing, so the best is an
        average whenever one was taken."""
        if self.average.count and not self.best_averaged:
            self.best_val = float("-inf")
        with self.average.swapped_in(model):
            val = split_scores(model, graph, ("val",), chunk)["val"]
            if val > self.best_val:
                self.best_val, self.best_epoch, self.best_averaged = val, epoch, self.average.count > 0
                self.best_state = _cpu_copy(model)
        self.history.append({"epoch": epoch, "val": val})
        return val


class WeightAverage:
    """A model's weights averaged over its epochs, the same device and dtype as the model's.

    ``swa``: the mean of the weights at the end of every epoch so far (Izmailov et al., UAI 2018, *Averaging
    Weights Leads to Wider Optima and Better Generalization*, with a constant learning rate and one sample per
    epoch); ``ema``: ``decay`` · average + (1 − decay) · weights, each epoch. Integer buffers follow the model;
    a batch norm's running statistics are averaged like the weights (SWA recomputes them; ladle's models default
    to no norm). ``none`` keeps nothing and swaps nothing.
    """

    def __init__(self, kind: str = "none", decay: float = 0.8):
        self.kind, self.decay, self.count, self.state = kind, decay, 0, None

    def add(self, model: torch.nn.Module) -> None:
        if self.kind == "none":
            return
        self.count += 1
        now = model.state_dict()
        if self.state is None:
            self.state = {k: v.detach().clone() for k, v in now.items()}
            return
        keep = (self.count - 1) / self.count if self.kind == "swa" else self.decay
        for k, v in now.items():
            if v.is_floating_point():
                self.state[k].mul_(keep).add_(v.detach(), alpha=1.0 - keep)
            else:
                self.state[k].copy_(v)

    @contextmanager
    def swapped_in(self, model: torch.nn.Module):
        """The average in the model's place for the block; the model's own weights (and Adam's hold on them) after."""
        if self.state is None:
            yield
            return
        own = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.state)
        try:
            yield
        finally:
            model.load_state_dict(own)


def _training_graph(spec: IngredientSpec, graph: Graph) -> Graph:
    """The whole graph, or the part a partitioned ingredient is limited to."""
    if spec.part is None:
        return graph
    parts = spec.partition.parts
    if not 0 <= spec.part < parts:  # RunConfig resolves parts; a spec built by hand must say it too
        raise LadleError(f"{spec.name}: part {spec.part} of a {parts}-part partition",
                         fix="give partition.parts (K >= 1) and a part below it")
    membership = membership_for(graph, spec.partition.method, parts)
    return part_graph(graph, membership, spec.part, spec.partition.halo)


def part_summary(part: Graph) -> dict:
    """What a partitioned ingredient's sidecar says of the part it trained on: its own (core) nodes, the halo
    nodes it also read, its directed edges, and a SHA-256 of the core's original node ids (sorted int64,
    little-endian), so which nodes an ingredient learned from can be checked against a partition afterwards."""
    n_id = part.data.n_id.cpu()
    core = int(part.data.get("num_core_nodes", n_id.numel()))
    ids = np.ascontiguousarray(np.sort(n_id[:core].numpy()).astype("<i8"))
    return {"nodes": core, "halo_nodes": n_id.numel() - core, "edges": int(part.data.edge_index.size(1)),
            "nodes_sha256": hashlib.sha256(ids.tobytes()).hexdigest()}
