"""Uniform soup: the plain average of every ingredient (Wortsman et al., ICML 2022)."""
from ladle.evaluation.evaluator import mix_states
from ladle.soups.base import SoupResult, check_compatible, no_options


class UniformSoup:
    name = "uniform"
    reference = "https://arxiv.org/abs/2203.05482"

    def __call__(self, ingredients, evaluator, options=None, *, seed: int = 0):
        no_options(self, options)
        check_compatible(ingredients)
        coefficients = {ing.name: 1.0 / len(ingredients) for ing in ingredients}
        state = mix_states([(c, ing.state) for c, ing in zip(coefficients.values(), ingredients)])
        return SoupResult(self.name, state, evaluator.score(state), coefficients,
                          [{"members": list(coefficients)}])


SOUP = UniformSoup()
