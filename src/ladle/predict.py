"""Predictions of a stored model (a soup, the ensemble, one ingredient or a baseline) for every node."""
from __future__ import annotations

from pathlib import Path

import torch

from ladle.errors import LadleError
from ladle.evaluation.evaluator import ensemble_probabilities, whole_graph_logits
from ladle.models import load_model
from ladle.store import RunDir


def predict(run_dir: str | Path, name: str = "gis", *, root: str | Path | None = None,
            graph_file: str | Path | None = None) -> list[tuple[int, str, str]]:
    """Rows ``(node, split, prediction)``; multi-label predictions are space-separated label ids.

    The graph comes from ``root`` or ``graph_file`` (never a place the run names) and must be the one
    the run was trained on (checked by fingerprint).
    """
    from ladle.api import is_parts, run_graph

    run = RunDir(run_dir)
    config = run.config()
    graph = run_graph(run, config, root=root, graph_file=graph_file)
    names = run.ingredient_names() if name == "ensemble" else [name]
    models = [_checked_model(run, member, graph) for member in names]
    if is_parts(graph):
        return _predict_from_parts(models, graph, config.model, config.eval.chunk)
    with torch.no_grad():
        mean = ensemble_probabilities([whole_graph_logits(m, graph, config.eval.chunk) for m in models],
                                      graph.task == "multilabel")
    split = _split_names(graph)
    labels = _labels(mean, graph.task == "multilabel")
    return [(i, split[i], labels[i]) for i in range(graph.num_nodes)]


def _checked_model(run: RunDir, member: str, graph):
    model = load_model(run.path, member)
    if (model.in_channels, model.out_channels) != (graph.num_features, graph.num_classes):
        raise LadleError(f"{run.weights_path(member)}: its sidecar describes {model.in_channels} features and "
                         f"{model.out_channels} classes, the graph has {graph.num_features} and "
                         f"{graph.num_classes}", fix="restore the sidecar ladle wrote")
    return model


def _labels(mean, multilabel: bool) -> list[str]:
    if multilabel:
        return [" ".join(map(str, row.nonzero().view(-1).tolist())) for row in mean > 0.5]
    return [str(c) for c in mean.argmax(-1).tolist()]


def _predict_from_parts(models, source, model_config, chunk: int) -> list[tuple[int, str, str]]:
    """Every node's prediction, streamed over the parts (:mod:`ladle.evaluation.streamed`), in original ids."""
    import numpy as np

    from ladle.evaluation.streamed import PartsView, StreamedEvaluator

    multilabel = source.task == "multilabel"
    view = PartsView(source)
    try:
        evaluator = StreamedEvaluator(view, model_config, "all", chunk)
        states = [m.state_dict() for m in models]
        # One member's logits, or the members' mean probability as logits: the same argmax, and for multi-label
        # the same side of 1/2.
        scores = evaluator.logits(states[0]) if len(states) == 1 else evaluator.ensemble_logits(states)
        labels = _labels(torch.sigmoid(scores) if multilabel else scores, multilabel)
        ids = np.asarray(view.split_ids("all"))
        original = view.original_ids(ids)
        split = np.full(ids.size, "none", dtype=object)
        for name in ("train", "val", "test"):
            split[np.searchsorted(ids, view.split_ids(name))] = name
    finally:
        view.close()
    order = np.argsort(original)
    return [(int(original[i]), str(split[i]), labels[i]) for i in order]


def _split_names(graph) -> list[str]:
    names = ["none"] * graph.num_nodes
    for split in ("train", "val", "test"):
        for i in graph.mask(split).nonzero().view(-1).tolist():
            names[i] = split
    return names
