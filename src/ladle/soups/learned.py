"""Learned soup: Wortsman et al., *Model soups* (ICML 2022), per-layer learned soup; Zuber et al., *Enhanced
Soups for Graph Neural Networks* (2025).

Every floating tensor p of the model gets one mixing logit per ingredient k; the soup's tensor is
Σ_k softmax_k(w[:, p]) · θ_k[p]. The logits are fitted on the validation nodes by SGD (momentum
0.9) with cosine annealing and warm restarts, through ``torch.func.functional_call``: the model
runs in eval mode (no dropout) on mixed weights that stay differentiable in w, and only on what the
validation nodes' logits read (their receptive field, :mod:`ladle.evaluation.field`, on the model's
sparse adjacency), so an epoch costs what validation costs, not a whole-graph pass; the ingredients'
tensors are stacked once, and the first layer's aggregation of the (constant) features is computed once.

Because it fits on the validation split, its validation score is not an unbiased selection
signal: the result says so (``fitted_on_val``) and the report marks it.
"""
from __future__ import annotations

import math

import torch

from ladle.soups.base import SoupResult, check_compatible, rank_by_val
from ladle.soups.options import LearnedOptions

STATISTICS = (".running_mean", ".running_var")  # BatchNorm's buffers: measured, not learned


class MixingWeights:
    """The K × P mixing logits over stacked ingredient tensors, and the mixed state they give.

    A norm's running statistics are not weights one can differentiate through (eval-mode batch norm reads them
    as constants): they get no logits of their own and are mixed with the logits of their layer's ``weight``,
    without a gradient, so each layer's statistics follow the mix of its affine parameters.
    """

    def __init__(self, ingredients, init: str, best_index: int, device):
        first = ingredients[0].state
        floating = [k for k, v in first.items() if v.is_floating_point()]
        self.keys = [k for k in floating if not k.endswith(STATISTICS)]
        # Statistics of a norm without an affine weight are averaged uniformly.
        self.follows = {k: self._sibling(k) for k in floating if k.endswith(STATISTICS)}
        self.fixed = {k: v.to(device) for k, v in first.items() if not v.is_floating_point()}
        self.stacked = {k: torch.stack([ing.state[k] for ing in ingredients]).to(device)
                        for k in self.keys + list(self.follows)}
        logits = torch.zeros(len(ingredients), len(self.keys), device=device)
        if init == "best":  # softmax ≈ 0.9 on the best ingredient for every tensor
            logits[best_index] = torch.log(torch.tensor(9.0 * (len(ingredients) - 1) or 1.0))
        self.logits = logits.requires_grad_()

    def _sibling(self, key: str) -> int:
        """The logit column of the weight of ``key``'s layer; past the last column, the uniform one."""
        weight = key.rsplit(".", 1)[0] + ".weight"
        return self.keys.index(weight) if weight in self.keys else len(self.keys)

    def state(self) -> dict[str, torch.Tensor]:
        alphas = torch.softmax(self.logits, 0)
        mixed = {k: torch.tensordot(alphas[:, i], self.stacked[k], dims=1) for i, k in enumerate(self.keys)}
        detached = torch.cat([alphas.detach(), torch.full_like(alphas[:, :1], 1 / len(alphas))], 1)
        statistics = {k: torch.tensordot(detached[:, i], self.stacked[k], dims=1) for k, i in self.follows.items()}
        return {**mixed, **statistics, **self.fixed}

    def alphas(self) -> torch.Tensor:
        return torch.softmax(self.logits.detach(), 0).cpu()


def fit(ingredients, evaluator, options, batches) -> tuple[MixingWeights, list[dict]]:
    """SGD on the mixing logits; ``batches(epoch)`` gives the node set of each epoch (None: the whole graph)."""
    ranked = rank_by_val(ingredients, evaluator)
    best_index = [ing.name for ing in ingredients].index(ranked[0][1].name)
    weights = MixingWeights(ingredients, options.init, best_index, evaluator.device)
    optimizer = torch.optim.SGD([weights.logits], lr=options.lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=options.t0)
    trace = []
    for epoch in range(options.epochs):
        optimizer.zero_grad(set_to_none=True)
        loss = evaluator.loss(weights.state(), batches(epoch))
        loss.backward()
        optimizer.step()
        schedule.step()
        trace.append({"epoch": epoch + 1, "loss": float(loss.detach()), "lr": optimizer.param_groups[0]["lr"]})
    return weights, trace


def exact_mean(values: torch.Tensor) -> float:
    """The mean of ``values``, summed exactly: a vectorised mean's rounding depends on where the row happens to lie in
    memory, so the same soup made again (``ladle verify``) could record another last bit."""
    return math.fsum(values.tolist()) / values.numel()


def finish(name, ingredients, evaluator, weights, trace) -> SoupResult:
    with torch.no_grad():
        state = {k: v.detach().cpu() for k, v in weights.state().items()}
    alphas = weights.alphas()
    # One number per ingredient for the report: its mixing weight averaged over the tensors.
    coefficients = {ing.name: exact_mean(alphas[i]) for i, ing in enumerate(ingredients)}
    trace.append({"per_tensor_alphas": {k: alphas[:, i].tolist() for i, k in enumerate(weights.keys)}})
    return SoupResult(name, state, evaluator.score(state), coefficients, trace, fitted_on_val=True)


class LearnedSoup:
    name = "learned"
    reference = "https://arxiv.org/abs/2203.05482"

    def __call__(self, ingredients, evaluator, options: LearnedOptions | None = None, *, seed: int = 0):
        check_compatible(ingredients)
        options = options or LearnedOptions()
        weights, trace = fit(ingredients, evaluator, options, lambda epoch: None)
        return finish(self.name, ingredients, evaluator, weights, trace)


SOUP = LearnedSoup()
