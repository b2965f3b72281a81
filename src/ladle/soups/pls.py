"""Partition learned soup: Zuber et al., *Enhanced Soups for Graph Neural Networks* (2025).

The learned soup of :mod:`ladle.soups.learned`, but each epoch runs on the subgraph induced by
R of the graph's K METIS parts, drawn at random (seeded): memory is bounded by R/K of the graph
instead of all of it, at the cost of the edges between the chosen and the other parts. Within the
subgraph the forward runs on its sparse adjacency (GCN normalised with the subgraph's degrees),
restricted to the receptive field of the validation nodes it holds.
Ranking the ingredients and scoring the soup go through the evaluator, so the whole soup stays
within that bound only when the evaluator scores by chunks (``eval.chunk``); with one
full-batch forward, that forward sets the peak.
"""
from __future__ import annotations

import torch

from ladle.seeding import derive_seed
from ladle.soups.base import check_compatible
from ladle.soups.learned import finish, fit
from ladle.soups.options import PLSOptions


class PartitionLearnedSoup:
    name = "pls"
    reference = "Zuber et al., Enhanced Soups for Graph Neural Networks (2025)"

    def __call__(self, ingredients, evaluator, options: PLSOptions | None = None, *, seed: int = 0):
        check_compatible(ingredients)
        options = options or PLSOptions()
        parts = evaluator.parts(options.parts, seed)
        gen = torch.Generator().manual_seed(derive_seed(seed, "pls"))

        def batches(epoch):
            chosen = torch.randperm(len(parts), generator=gen)[: options.parts_per_epoch]
            return torch.cat([parts[i] for i in chosen.tolist()]).sort().values

        weights, trace = fit(ingredients, evaluator, options, batches)
        return finish(self.name, ingredients, evaluator, weights, trace)


SOUP = PartitionLearnedSoup()
