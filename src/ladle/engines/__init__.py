"""Engines: each maps the same plain ``train_and_store`` (around ``train_ingredient``) over the specs.

Their registry and the ``[engine]`` table are :mod:`ladle.engine_options` (which imports no torch); this package
holds the engines themselves.
"""
from ladle.engine_options import ENGINES


def get_engine(name: str):
    """The engine module registered under ``name``; Ray is imported only when asked for."""
    return ENGINES.get(name)


__all__ = ["ENGINES", "get_engine"]
