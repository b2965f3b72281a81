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
    from ladle.api import run_graph

    run = RunDir(run_dir)
    config = run.config()
    graph = run_graph(run, config, root=root, graph_file=graph_file)
    names = run.ingredient_names() if name == "ensemble" else [name]
    multilabel = graph.task == "multilabel"
    logits = []
    with torch.no_grad():
        for member in names:
            model = load_model(run.path, member)
            if (model.in_channels, model.out_channels) != (graph.num_features, graph.num_classes):
                raise LadleError(f"{run.weights_path(member)}: its sidecar describes {model.in_channels} features and "
                                 f"{model.out_channels} classes, the graph has {graph.num_features} and "
                                 f"{graph.num_classes}", fix="restore the sidecar ladle wrote")
            logits.append(whole_graph_logits(model, graph, config.eval.chunk))
    mean = ensemble_probabilities(logits, multilabel)
    split = _split_names(graph)
    if multilabel:
        labels = [" ".join(map(str, row.nonzero().view(-1).tolist())) for row in mean > 0.5]
    else:
        labels = [str(c) for c in mean.argmax(-1).tolist()]
    return [(i, split[i], labels[i]) for i in range(graph.num_nodes)]


def _split_names(graph) -> list[str]:
    names = ["none"] * graph.num_nodes
    for split in ("train", "val", "test"):
        for i in graph.mask(split).nonzero().view(-1).tolist():
            names[i] = split
    return names
