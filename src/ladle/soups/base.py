"""The Soup protocol, the registry, and the checks every soup relies on.

A soup receives ingredients and an evaluator bound to the *validation* split, nothing else:
it cannot see test labels, so it cannot select on them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor

from ladle.errors import LadleError
from ladle.models.options import ModelConfig

State = dict[str, Tensor]


@dataclass
class Ingredient:
    """One trained model as soups see it: a name, its weights, its architecture, where it came from."""

    name: str
    state: State
    model: ModelConfig
    source: str = ""


@dataclass
class SoupResult:
    """What a soup returns.

    Attributes:
        name: the method's registry name.
        state: the souped weights, or ``None`` for the ensemble (which is not a soup).
        val: its validation score, as the evaluator measured it.
        coefficients: weight of each ingredient in the soup, by ingredient name.
        trace: the decisions in order (one dict per step), for the report and the plots.
        is_soup: False for references such as the ensemble (K forward passes, K models).
        fitted_on_val: True when the validation set was used to fit weights, not just to select.
    """

    name: str
    state: State | None
    val: float
    coefficients: dict[str, float] = field(default_factory=dict)
    trace: list[dict] = field(default_factory=list)
    is_soup: bool = True
    fitted_on_val: bool = False


class Soup(Protocol):
    name: str
    reference: str

    def __call__(self, ingredients: Sequence[Ingredient], evaluator, options=None, *, seed: int = 0) -> SoupResult:
        """``options``: the soup's validated options object (its registry entry's class; None for its defaults, and
        for a soup that has none); ``seed``: the run's, for a soup that draws anything."""


def no_options(soup, options) -> None:
    """A soup without options was given some: one message, not a silent default."""
    if options is not None:
        raise LadleError(f"the {soup.name} soup takes no options, got {type(options).__name__}",
                         fix=f"call it as {soup.name}(ingredients, evaluator)")


def check_compatible(ingredients: Sequence[Ingredient]) -> None:
    """Refuse ingredients that cannot be averaged key by key, naming the first offender."""
    if not ingredients:
        raise LadleError("no ingredients to soup", fix="train some first: ladle train")
    ref = ingredients[0]
    for other in ingredients[1:]:
        where = f"{other.source or other.name} vs {ref.source or ref.name}"
        if other.model != ref.model:
            raise LadleError(f"{where}: different model configs ({other.model} vs {ref.model})",
                             fix="soup only ingredients of one architecture")
        if other.state.keys() != ref.state.keys():
            diff = sorted(set(other.state) ^ set(ref.state))
            raise LadleError(f"{where}: different tensor names ({', '.join(diff[:5])})",
                             fix="soup only ingredients of one architecture")
        for key, tensor in ref.state.items():
            theirs = other.state[key]
            if theirs.shape != tensor.shape or theirs.dtype != tensor.dtype:
                raise LadleError(f"{where}: tensor {key} is {theirs.dtype}{list(theirs.shape)}, "
                                 f"expected {tensor.dtype}{list(tensor.shape)}",
                                 fix="soup only ingredients of one architecture")


def rank_by_val(ingredients: Sequence[Ingredient], evaluator) -> list[tuple[float, Ingredient]]:
    """Ingredients with their validation scores, best first; ties keep the given order."""
    scores = evaluator.score_many([[(1.0, ing.state)] for ing in ingredients])  # together: one pass where it can
    return sorted(zip(scores, ingredients), key=lambda pair: -pair[0])

