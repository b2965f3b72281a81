"""Ensemble: the average of the ingredients' predicted probabilities.

Not a soup: it keeps K models and costs K forward passes. It is the reference the soups try to
match at the cost of one model.
"""
from ladle.soups.base import SoupResult, check_compatible, no_options


class Ensemble:
    name = "ensemble"
    reference = "https://arxiv.org/abs/2203.05482"

    def __call__(self, ingredients, evaluator, options=None, *, seed: int = 0):
        no_options(self, options)
        check_compatible(ingredients)
        val = evaluator.score_ensemble([ing.state for ing in ingredients])
        coefficients = {ing.name: 1.0 / len(ingredients) for ing in ingredients}
        return SoupResult(self.name, None, val, coefficients, [{"members": list(coefficients)}], is_soup=False)


SOUP = Ensemble()
