"""Datasets: every loader returns a :class:`Graph`."""
from ladle.data.datasets import DATASETS, load_graph
from ladle.data.graph import Graph, make_graph

__all__ = ["DATASETS", "Graph", "load_graph", "make_graph"]
