"""Metrics with the names and input shapes of OGB's ``Evaluator``.

``acc``: ``y_true``, ``y_pred`` [N, 1] (or [N]) class ids. ``f1``: micro-F1 over [N, T] 0/1
arrays. ``rocauc``: ``y_true`` [N, T] 0/1 and ``y_pred`` [N, T] scores, averaged over the tasks
that have both a positive and a negative node (OGB's rule); for class ids (a binary task, as
Platonov et al. score tolokers) the score is class 1's log-odds, one-vs-rest for more classes.
"""
from __future__ import annotations

import torch
from torch import Tensor


def accuracy(y_true: Tensor, y_pred: Tensor) -> float:
    y_true, y_pred = y_true.view(-1), y_pred.view(-1)
    return float((y_true == y_pred).sum()) / max(y_true.numel(), 1)


def micro_f1(y_true: Tensor, y_pred: Tensor) -> float:
    y_true, y_pred = y_true.bool(), y_pred.bool()
    tp = int((y_true & y_pred).sum())
    fp = int((~y_true & y_pred).sum())
    fn = int((y_true & ~y_pred).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def rocauc(y_true: Tensor, y_pred: Tensor) -> float:
    """Mean per-task ROC-AUC (Mann-Whitney U with average ranks for ties), vectorised over tasks."""
    y_true, y_pred = y_true.double(), y_pred.double()
    if y_true.dim() == 1:
        y_true, y_pred = y_true.unsqueeze(1), y_pred.unsqueeze(1)
    pos = y_true.sum(0)
    neg = y_true.size(0) - pos
    valid = (pos > 0) & (neg > 0)
    if not bool(valid.any()):
        raise ValueError("no task has both a positive and a negative node: ROC-AUC is undefined")
    ranks = _average_ranks(y_pred)
    auc = ((ranks * y_true).sum(0) - pos * (pos + 1) / 2) / (pos * neg).clamp_min(1)
    return float(auc[valid].mean())


def _average_ranks(scores: Tensor) -> Tensor:
    """1-based ranks down each column, ties sharing their mean rank."""
    n = scores.size(0)
    sorted_scores, order = scores.sort(dim=0, stable=True)
    ranks = torch.empty_like(scores)
    # Tie groups: a new group starts wherever the sorted value changes.
    new_group = torch.ones_like(sorted_scores, dtype=torch.bool)
    new_group[1:] = sorted_scores[1:] != sorted_scores[:-1]
    group = new_group.long().cumsum(0) - 1
    position = torch.arange(1, n + 1, dtype=scores.dtype, device=scores.device).unsqueeze(1).expand_as(scores)
    cols = scores.size(1)
    offset = (torch.arange(cols, device=scores.device) * n).unsqueeze(0)
    flat_group = (group + offset).reshape(-1)
    total = torch.zeros(n * cols, dtype=scores.dtype, device=scores.device).index_add_(0, flat_group, position.reshape(-1))
    count = torch.zeros(n * cols, dtype=scores.dtype, device=scores.device).index_add_(
        0, flat_group, torch.ones_like(position).reshape(-1))
    mean_rank = (total / count.clamp_min(1))[flat_group].view(n, cols)
    ranks.scatter_(0, order, mean_rank)
    return ranks


METRICS = {"acc": accuracy, "f1": micro_f1, "rocauc": rocauc}


def evaluate(metric: str, input_dict: dict) -> dict[str, float]:
    """OGB's ``Evaluator.eval`` contract: ``{"y_true": ..., "y_pred": ...}`` -> ``{metric: value}``.

    Accepts torch tensors or numpy arrays, shaped as OGB documents for the metric.
    """
    y_true, y_pred = (torch.as_tensor(input_dict[k]) for k in ("y_true", "y_pred"))
    return {metric: METRICS[metric](y_true, y_pred)}


def score_logits(metric: str, logits: Tensor, y: Tensor) -> float:
    """Score [N, C] logits against labels with the named metric (argmax, threshold 0, or raw scores)."""
    if metric == "acc":
        return accuracy(y, logits.argmax(dim=-1))
    if metric == "f1":
        return micro_f1(y, logits > 0)
    if metric == "rocauc":
        if y.dim() == 1:  # class ids: a binary task scores the log-odds of class 1, more classes one-vs-rest
            if logits.size(1) == 2:
                return rocauc(y, logits[:, 1] - logits[:, 0])
            return rocauc(torch.nn.functional.one_hot(y, logits.size(1)), logits.softmax(-1))
        return rocauc(y, logits)
    raise KeyError(metric)
