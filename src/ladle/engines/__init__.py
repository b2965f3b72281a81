"""Engines: each maps the same plain ``train_and_store`` (around ``train_ingredient``) over the specs.

The registry (this module imports no torch): an engine is a module with ``run(specs, graph, store, *,
device, engine, on_epoch, on_done, should_stop)`` and, optionally, ``prepare(device)`` and ``train_ddp(spec,
graph, store, *, device, engine, on_epoch)`` (the data-parallel baseline its own way; else local processes).
Its settings are the run's ``[engine]`` table (:class:`ladle.config.EngineConfig`). ``should_stop(name)`` is the
driver's: the engine carries its answer to the worker training that model (a callback's
:class:`ladle.StopIngredient`). Trait ``in-process``: it trains in the driver's process (so a model that cannot be
imported trains there).
"""
from ladle.registry import Registry

ENGINES = Registry("engine")
ENGINES.add("serial", "ladle.engines.serial", None, "one ingredient after another in this process",
            traits=("in-process",))
ENGINES.add("process", "ladle.engines.process", None, "local worker processes, the graph in shared memory")
ENGINES.add("ray", "ladle.engines.ray_cluster", None, "one Ray task per ingredient, on a local Ray or a cluster")


def get_engine(name: str):
    """The engine module registered under ``name``; Ray is imported only when asked for."""
    return ENGINES.get(name)


__all__ = ["ENGINES", "get_engine"]
