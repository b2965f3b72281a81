"""Datasets: every loader returns a :class:`Graph`."""
from ladle.data.datasets import REGISTRY, load_graph
from ladle.data.graph import Graph, make_graph

__all__ = ["Graph", "REGISTRY", "load_graph", "make_graph"]
