"""ladle: communication-free parallel GNN training with model soups (Graph Ladling, ICML 2023).

The public API::

    graph = ladle.load_graph("Cora", root="data")
    record = ladle.train_ingredient(spec, graph)
    results = ladle.run(ladle.build_config({"dataset": "Cora"}), "runs/cora")
    ladle.soup("runs/cora", ["gis"])
    model = ladle.load_model("runs/cora/soups/gis.safetensors")
"""
from ladle.api import run, soup, train
from ladle.config import IngredientSpec, ModelConfig, RunConfig, TrainConfig, build_config, load_config
from ladle.data import Graph, load_graph
from ladle.errors import LadleError
from ladle.store import RunDir, load_model
from ladle.train import IngredientRecord, train_ingredient

__version__ = "0.1.0"
__all__ = [
    "Graph", "IngredientRecord", "IngredientSpec", "LadleError", "ModelConfig", "RunConfig", "RunDir",
    "TrainConfig", "build_config", "load_config", "load_graph", "load_model", "run", "soup", "train",
    "train_ingredient",
]
