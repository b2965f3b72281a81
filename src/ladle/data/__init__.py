"""Datasets: every loader returns a :class:`Graph`. ``Graph`` and ``make_graph`` are imported when first used, so
that checking a dataset's name (``ladle.data.datasets``) imports no torch."""
from ladle.data.datasets import DATASETS, check_name, load_graph

__all__ = ["DATASETS", "Graph", "check_name", "load_graph", "make_graph"]


def __getattr__(name):
    if name in ("Graph", "make_graph"):
        # lazy name: the package's names load on first use (PEP 562)
        from ladle.data import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'ladle.data' has no attribute {name!r}")
