"""Greedy interpolation soup (Jaiswal et al., *Graph Ladling*, ICML 2023).

Ingredients go in decreasing validation score, the best one seeding the soup. For each next
ingredient, every α in ``linspace(0, 1, granularity)`` is scored as α·soup + (1−α)·ingredient
and the best α kept. Ties go to the larger α (keep more of the soup built so far); α = 1 is
always a candidate, so the soup's validation score never drops below the best ingredient's.

The soup is kept as coefficients over the ingredients, so its weights are always one
``mix_states`` of the original ingredients: the same numbers whichever path scored them.
"""
import torch

from ladle.evaluation.evaluator import mix_states
from ladle.soups.base import SoupResult, check_compatible, rank_by_val
from ladle.soups.options import GISOptions


def choose_alpha(alphas: list[float], scores: list[float]) -> int:
    """Index of the best score, ties to the larger α."""
    best = 0
    for i, score in enumerate(scores):
        if score > scores[best] or (score == scores[best] and alphas[i] > alphas[best]):
            best = i
    return best


class GISSoup:
    name = "gis"
    reference = "https://arxiv.org/abs/2306.10466"

    def __call__(self, ingredients, evaluator, options: GISOptions | None = None, *, seed: int = 0):
        check_compatible(ingredients)
        granularity = (options or GISOptions()).granularity
        alphas = torch.linspace(0, 1, granularity, dtype=torch.float64).tolist()
        ranked = rank_by_val(ingredients, evaluator)
        best_score, first = ranked[0]
        coefficients = {first.name: 1.0}
        states = {ing.name: ing.state for ing in ingredients}
        trace = [{"ingredient": first.name, "alpha": None, "score": best_score}]
        for _, candidate in ranked[1:]:
            mixes = [self._mix(coefficients, candidate.name, a) for a in alphas]
            scores = evaluator.score_many([[(c, states[n]) for n, c in m.items()] for m in mixes])
            pick = choose_alpha(alphas, scores)
            coefficients, best_score = mixes[pick], scores[pick]
            trace.append({"ingredient": candidate.name, "alphas": alphas, "scores": scores,
                          "alpha": alphas[pick], "score": best_score})
        coefficients = {n: c for n, c in coefficients.items() if c != 0}
        state = mix_states([(c, states[n]) for n, c in coefficients.items()])
        return SoupResult(self.name, state, best_score, coefficients, trace)

    @staticmethod
    def _mix(coefficients: dict[str, float], new: str, alpha: float) -> dict[str, float]:
        mix = {name: alpha * c for name, c in coefficients.items()}
        mix[new] = 1.0 - alpha
        return mix


SOUP = GISSoup()
