"""Soups: one file per method, one signature, and this registry (it imports no torch).

A soup is called as ``soup(ingredients, evaluator, options, seed=...)`` with its validated options object (the
dataclass its entry names, :mod:`ladle.soups.options`; None for its defaults); it sees ingredients and a validation
evaluator, nothing else.
"""
from ladle.registry import Registry

SOUPS = Registry("soup method")
SOUPS.add("uniform", "ladle.soups.uniform:SOUP", None, "the average of all ingredients (Wortsman et al., 2022)")
SOUPS.add("greedy", "ladle.soups.greedy:SOUP", None, "add ingredients best first while val does not drop")
SOUPS.add("gis", "ladle.soups.gis:SOUP", "ladle.soups.options:GISOptions",
          "greedy interpolation over α (Graph Ladling, Jaiswal et al., 2023)", traits=("curves",))
SOUPS.add("ensemble", "ladle.soups.ensemble:SOUP", None, "the K models' averaged probabilities (not a soup)",
          traits=("predictions",))
SOUPS.add("learned", "ladle.soups.learned:SOUP", "ladle.soups.options:LearnedOptions",
          "mixing weights per tensor fitted on val (Wortsman et al., 2022)")
SOUPS.add("pls", "ladle.soups.pls:SOUP", "ladle.soups.options:PLSOptions",
          "learned soup on R of K METIS parts per epoch (Zuber et al., 2025)")

DEFAULT_PREDICTOR = "gis"  # what ``ladle predict`` and ``ladle.predict`` use when no model is named


def get_soup(name: str):
    """The soup object registered under ``name`` (case- and dash-insensitive)."""
    return SOUPS.get(name)


def __getattr__(name):  # the shared types, imported when asked for (they need torch)
    if name in ("Ingredient", "Soup", "SoupResult", "check_compatible"):
        # lazy name: the package's names load on first use (PEP 562)
        from ladle.soups import base

        return getattr(base, name)
    raise AttributeError(name)


__all__ = ["DEFAULT_PREDICTOR", "SOUPS", "get_soup"]
