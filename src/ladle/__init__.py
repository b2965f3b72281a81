"""ladle: communication-free parallel GNN training with model soups (Graph Ladling, ICML 2023).

The public API::

    graph = ladle.load_graph("Cora", root="data")
    record = ladle.train_ingredient(spec, graph)
    results = ladle.run(ladle.build_config({"dataset": "Cora"}), "runs/cora")
    ladle.soup("runs/cora", ["gis"])
    model = ladle.load_model("runs/cora/soups/gis.safetensors")
    proba = ladle.predict("runs/cora", "gis", "proba", graph=graph)  # [N, C]

Names are imported when first used, so ``import ladle`` (and ``ladle --version``) does not import torch.
"""
__version__ = "0.1.0"

_PUBLIC = {
    "run": "ladle.api", "soup": "ladle.api", "train": "ladle.api", "resume": "ladle.api",
    "IngredientSpec": "ladle.config", "RunConfig": "ladle.config", "TrainConfig": "ladle.config",
    "build_config": "ladle.config", "load_config": "ladle.config", "ModelConfig": "ladle.models.options",
    "Graph": "ladle.data.graph", "load_graph": "ladle.data.datasets", "LadleError": "ladle.errors",
    "RunDir": "ladle.store", "load_model": "ladle.store",
    "IngredientRecord": "ladle.trainer", "train_ingredient": "ladle.trainer",
    "graph_from": "ladle.data.pyg_input", "save_npz": "ladle.data.npz", "save_npy": "ladle.data.npy",
    "Callback": "ladle.callbacks", "ProgressBar": "ladle.callbacks", "TensorBoardLogger": "ladle.callbacks",
    "MLflowLogger": "ladle.callbacks", "WandbLogger": "ladle.callbacks", "StopIngredient": "ladle.callbacks",
    "allow_import": "ladle.models.python_model", "predict": "ladle.prediction",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        # lazy name: the package's names load on first use (PEP 562)
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ladle' has no attribute {name!r}")


def __dir__():
    """The public names too (they are imported when first used), so ``dir(ladle)`` and completion list them."""
    return sorted(set(globals()) | set(_PUBLIC))
