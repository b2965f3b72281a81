"""Soups: one file per method, one signature, a registry by name (case- and dash-insensitive)."""
from ladle.soups import ensemble, gis, greedy, learned, pls, uniform  # noqa: F401  (each registers itself)
from ladle.soups.base import REGISTRY, Ingredient, Soup, SoupResult, check_compatible, get_soup

__all__ = ["REGISTRY", "Ingredient", "Soup", "SoupResult", "check_compatible", "get_soup"]
