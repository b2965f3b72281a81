"""Greedy soup (Wortsman et al., ICML 2022, Recipe 1).

Ingredients go in decreasing validation score. Each is added to the running uniform average
if the validation score of the average with it is at least the score without it: a tie adds
the ingredient (the score "does not drop"), since more members rarely hurt out of sample.
"""
from ladle.evaluation.evaluator import mix_states
from ladle.soups.base import SoupResult, check_compatible, no_options, rank_by_val


class GreedySoup:
    name = "greedy"
    reference = "https://arxiv.org/abs/2203.05482"

    def __call__(self, ingredients, evaluator, options=None, *, seed: int = 0):
        no_options(self, options)
        check_compatible(ingredients)
        ranked = rank_by_val(ingredients, evaluator)
        best_score, best = ranked[0]
        members = [best]
        trace = [{"ingredient": best.name, "score": best_score, "accepted": True}]
        for _, candidate in ranked[1:]:
            trial = members + [candidate]
            score = evaluator.score_many([[(1.0 / len(trial), m.state) for m in trial]])[0]
            accepted = score >= best_score
            if accepted:
                members, best_score = trial, score
            trace.append({"ingredient": candidate.name, "score": score, "accepted": accepted})
        coefficients = {m.name: 1.0 / len(members) for m in members}
        state = mix_states([(c, m.state) for c, m in zip(coefficients.values(), members)])
        return SoupResult(self.name, state, best_score, coefficients, trace)


SOUP = GreedySoup()
