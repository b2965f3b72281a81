"""Each state scored once: every soup ranks the same ingredients, and on a graph read from its parts one score is
a pass over the split's receptive field.

:class:`Remembering` stands in for an evaluator (the soups see the same interface) and remembers the score of
every state it was given whole, ``score(state)`` or a mix of that state alone at coefficient 1, keyed by the state
object (held, so its id is never reused). A mix of one state at 1 is scored exactly as the state (x * 1.0 is x), so
a remembered score is the score the evaluator would give again. Scores it has not seen go to the evaluator's
``score_many`` together, so that an evaluator that scores several states per pass does.
"""
from __future__ import annotations

from collections.abc import Sequence

from ladle.evaluation.evaluator import Mix, State


def _alone(mix: Mix) -> State | None:
    """The state of a mix that is one state at coefficient 1, else None."""
    if len(mix) == 1 and mix[0][0] == 1.0:
        return mix[0][1]
    return None


class Remembering:
    """An evaluator that scores each whole state once (see the module).

    Args:
        evaluator: the evaluator scores come from; every other attribute is its own.
    """

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self._scores: dict[int, tuple[State, float]] = {}

    def __getattr__(self, name):
        return getattr(self.evaluator, name)

    def remember(self, states: Sequence[State]) -> list[float]:
        """The scores of ``states``, computed together where not known."""
        return self.score_many([[(1.0, state)] for state in states])

    def score(self, state: State) -> float:
        return self.remember([state])[0]

    def score_many(self, mixes: Sequence[Mix]) -> list[float]:
        scores: list = [None] * len(mixes)
        ask, where = [], []
        for i, mix in enumerate(mixes):
            state = _alone(mix)
            known = self._scores.get(id(state)) if state is not None else None
            if known is not None and known[0] is state:
                scores[i] = known[1]
            else:
                ask.append(mix)
                where.append(i)
        if ask:
            for i, mix, score in zip(where, ask, self.evaluator.score_many(ask)):
                scores[i] = score
                state = _alone(mix)
                if state is not None:
                    self._scores[id(state)] = (state, score)
        return scores
