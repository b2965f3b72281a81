"""Engines: each maps the same plain ``train_and_store`` (around ``train_ingredient``) over the specs.

The registry (this module imports no torch): an engine is a module with ``run(specs, graph, store, *,
device, engine, on_epoch, on_done)`` and, optionally, ``prepare(device)``. Its settings are the run's
``[engine]`` table (:class:`ladle.config.EngineConfig`).
"""
from ladle.registry import Registry

ENGINES = Registry("engine")
ENGINES.add("serial", "ladle.engines.serial", None, "one ingredient after another in this process")
ENGINES.add("process", "ladle.engines.process", None, "local worker processes, the graph in shared memory")
ENGINES.add("ray", "ladle.engines.ray_cluster", None, "one Ray task per ingredient, on a local Ray or a cluster")


def get_engine(name: str):
    """The engine module registered under ``name``; Ray is imported only when asked for."""
    return ENGINES.get(name)


__all__ = ["ENGINES", "get_engine"]
