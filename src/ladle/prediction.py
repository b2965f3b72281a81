"""Predictions of a stored model (a soup, the ensemble, one ingredient or a baseline) for every node.

What each ``output`` is, one row per node in node order (original ids for a partition folder):

- ``labels``: class ids [N] (multi-label: [N, C] of 0/1);
- ``proba``: [N, C] probabilities: the softmax (a sigmoid per label for multi-label); the ensemble's is its members'
  mean;
- ``logits``: [N, C] the model's raw scores; the ensemble's are its mean probability as logits (log, or log-odds for
  multi-label), which give the same argmax;
- ``embeddings``: [N, H] what the model's last layer reads (after the activation of the layer before), for a
  single model of ladle's own families.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from ladle.api import is_parts, run_graph
from ladle.errors import LadleError
from ladle.evaluation.evaluator import ensemble_probabilities, probabilities_as_logits, whole_graph_logits
from ladle.evaluation.streamed import PartsView, StreamedEvaluator
from ladle.models import graph_input
from ladle.soups import DEFAULT_PREDICTOR, SOUPS
from ladle.store import RunDir, rebuild

log = logging.getLogger(__name__)

OUTPUTS = ("labels", "proba", "logits", "embeddings")


def predict(run_dir: str | Path, name: str = DEFAULT_PREDICTOR, output: str = "proba", *, graph=None,
            root: str | Path | None = None, graph_file: str | Path | None = None) -> torch.Tensor:
    """One row per node of ``output`` (see the module) from the stored model ``name`` of a run.

    The graph is ``graph`` (a ladle Graph or a PyG ``Data``), or read from ``root`` or ``graph_file`` (never from a
    place the run names); it must be the one the run was trained on (checked by fingerprint).
    """
    return _predicted(run_dir, name, output, graph, root, graph_file)[0]


def prediction_rows(run_dir: str | Path, name: str = DEFAULT_PREDICTOR, output: str = "labels", *, graph=None,
                    root: str | Path | None = None, graph_file: str | Path | None = None) -> tuple[list[str], list]:
    """The CSV's header and rows: ``node, split, prediction`` (multi-label: space-separated label ids), or
    ``node, split`` and one column per class or embedding dimension."""
    values, nodes, split, multilabel = _predicted(run_dir, name, output, graph, root, graph_file)
    if output == "labels":
        labels = [" ".join(map(str, row.nonzero().view(-1).tolist())) for row in values] if multilabel else \
            [str(c) for c in values.tolist()]
        return ["node", "split", "prediction"], [(n, s, p) for n, s, p in zip(nodes, split, labels)]
    prefix = "e" if output == "embeddings" else "c"
    header = ["node", "split", *(f"{prefix}{j}" for j in range(values.size(1)))]
    return header, [(n, s, *(f"{v:.7g}" for v in row)) for n, s, row in zip(nodes, split, values.tolist())]


def _predicted(run_dir, name, output, graph, root, graph_file):
    """(values, node ids, split names, multi-label) of ``output``, in node order."""
    if output not in OUTPUTS:
        raise LadleError(f"unknown prediction output {output!r}", fix=f"choose one of {', '.join(OUTPUTS)}")
    run = RunDir(run_dir)
    config = run.config()
    names = run.ingredient_names() if SOUPS.has(name, "predictions") else [name]  # the members' predictions
    if output == "embeddings" and len(names) > 1:
        raise LadleError("the ensemble has no embeddings: its members' hidden spaces are not one space",
                         fix="ask for the embeddings of a soup or one ingredient (--model gis), or proba/logits")
    graph = run_graph(run, config, graph=graph, root=root, graph_file=graph_file)
    models = [_checked_model(run, member, graph) for member in names]
    multilabel = graph.task == "multilabel"
    device = _device(config.eval.device or config.device)
    if is_parts(graph):
        scores, nodes, split = _from_parts(models, graph, config.model, config.eval.chunk, output, device)
    else:
        nodes, split = list(range(graph.num_nodes)), _split_names(graph)
        graph, models = graph.to(device), [m.to(device) for m in models]
        with torch.no_grad():
            scores = _embeddings(models[0], graph) if output == "embeddings" else \
                [whole_graph_logits(m, graph, config.eval.chunk) for m in models]
    return _as_output(scores, output, multilabel), nodes, split, multilabel


def _device(name: str) -> torch.device:
    """Where predictions run: the run's ``eval.device`` (else its device); a GPU run read on a machine without one
    predicts on the CPU, and says so."""
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.warning("the run evaluates on %s, which this machine lacks: predicting on the CPU", name)
        return torch.device("cpu")
    return device


def _as_output(scores, output: str, multilabel: bool) -> torch.Tensor:
    """From one member's logits (a tensor) or the members' logits (a list), or embeddings as they are."""
    if output == "embeddings":
        return scores.cpu()
    if isinstance(scores, list) and len(scores) == 1:
        scores = scores[0]
    if isinstance(scores, list):
        proba = ensemble_probabilities(scores, multilabel)
        logits = probabilities_as_logits(proba, multilabel)
    else:
        logits = scores
        proba = torch.sigmoid(scores) if multilabel else torch.softmax(scores, -1)
    if output == "labels":
        return (proba > 0.5).to(torch.uint8).cpu() if multilabel else proba.argmax(-1).cpu()
    return (proba if output == "proba" else logits).cpu()


def _embeddings(model, graph) -> torch.Tensor:
    """The input of the model's last layer, from one whole-graph forward in eval mode."""
    convs = getattr(model, "convs", None)
    if not isinstance(convs, torch.nn.ModuleList) or not len(convs):
        raise LadleError(f"embeddings need a model of ladle's families (its layers in .convs); "
                         f"{type(model).__name__} has none", fix="ask for --output proba or logits")
    seen = []
    hook = convs[-1].register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    was_training = model.training
    model.eval()
    try:
        model(graph.data.x, graph_input(model, graph))
    finally:
        hook.remove()
        model.train(was_training)
    x = seen[0]
    return x[0] if isinstance(x, tuple) else x


def _checked_model(run: RunDir, member: str, graph):
    model = rebuild(run.path, member)
    if (model.in_channels, model.out_channels) != (graph.num_features, graph.num_classes):
        raise LadleError(f"{run.weights_path(member)}: its sidecar describes {model.in_channels} features and "
                         f"{model.out_channels} classes, the graph has {graph.num_features} and "
                         f"{graph.num_classes}", fix="restore the sidecar ladle wrote")
    return model


def _from_parts(models, source, model_config, chunk: int, output: str, device):
    """Every node's logits streamed over the parts (:mod:`ladle.evaluation.streamed`), ordered by original id."""
    if output == "embeddings":
        raise LadleError("embeddings are not streamed over a partition folder's parts",
                         fix="ask for --output labels, proba or logits")
    view = PartsView(source)
    try:
        evaluator = StreamedEvaluator(view, model_config, "all", chunk, device)
        states = [m.state_dict() for m in models]
        # The ensemble's mean probability comes back as logits: the same probabilities, argmax and side of 1/2.
        scores = evaluator.logits(states[0]) if len(states) == 1 else evaluator.ensemble_logits(states)
        scores = scores.clone() if torch.is_tensor(scores) else torch.as_tensor(np.asarray(scores))  # off the scratch
        ids = np.asarray(view.split_ids("all"))
        original = view.original_ids(ids)
        split = np.full(ids.size, "none", dtype=object)
        for name in ("train", "val", "test"):
            split[np.searchsorted(ids, view.split_ids(name))] = name
    finally:
        view.close()
    order = np.argsort(original)
    return scores[torch.as_tensor(order)], [int(i) for i in original[order]], [str(s) for s in split[order]]


def _split_names(graph) -> list[str]:
    names = ["none"] * graph.num_nodes
    for split in ("train", "val", "test"):
        for i in graph.mask(split).nonzero().view(-1).tolist():
            names[i] = split
    return names
