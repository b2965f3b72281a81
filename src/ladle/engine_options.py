"""The engines' registry and settings (imports no torch): the run's ``[engine]`` table, shared by every engine.

Beside the config (which reads the table) rather than in :mod:`ladle.engines`, whose modules build on the trainer:
an engine is a module with ``run(specs, graph, store, *, device, engine, on_epoch, on_done, should_stop)`` and,
optionally, ``prepare(device)`` and ``TRAIN_DDP``, the ``module:function`` that trains the data-parallel baseline its
own way (``(spec, graph, store, *, device, engine, on_epoch)``; else local processes). ``should_stop(name)`` is the
driver's: the engine carries its answer to the worker training that model (a callback's
:class:`ladle.StopIngredient`). Trait ``in-process``: it trains in the driver's process (so a model that cannot be
imported trains there).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from ladle.errors import LadleError, suggest
from ladle.options import Options, option
from ladle.registry import Registry

ENGINES = Registry("engine")
ENGINES.add("serial", "ladle.engines.serial", None, "one ingredient after another in this process",
            traits=("in-process",))
ENGINES.add("process", "ladle.engines.process", None, "local worker processes, the graph in shared memory")
ENGINES.add("ray", "ladle.engines.ray_cluster", None, "one Ray task per ingredient, on a local Ray or a cluster")


@dataclass(frozen=True)
class EngineConfig(Options):
    """Where the ingredients train; never changes their weights (bit-identical on CPU)."""

    table: ClassVar[str] = "engine"
    name: str = option("auto", "auto (process when --workers > 1, else serial), serial, process or ray",
                       flag="--engine")
    workers: int = option(1, "local worker processes", low=1, high=4096)
    threads: int = option(1, "torch threads per ingredient (same value, same weights)", low=1, high=4096)
    retries: int = option(2, "retries of a killed ingredient", low=0, high=100)
    address: str = option("", "Ray cluster: auto or HOST:PORT (default RAY_ADDRESS, else a local Ray)", empty=True)
    cpus_per_ingredient: float = option(1.0, "Ray CPUs per ingredient task", low=0.0, high=1e6)
    gpus_per_ingredient: float = option(0.0, "Ray GPUs per ingredient task", low=0.0, high=1e6)
    part_placement: bool = option(False, "ray, from parts: train part P's ingredients on the nodes whose Ray resources "
                                         "name ladle_part_P (each node finds the partition under its own "
                                         "$LADLE_PARTS_ROOT, so no folder is shared)")
    worker_memory: str = option("", "refuse, before training, a plan whose worker would hold more graph than SIZE "
                                    "(e.g. 2G, 512M; the largest part of a parts: run)", empty=True)

    def validate(self):
        if self.name != "auto":
            if self.name not in ENGINES:
                raise LadleError(f"engine.name must be one of auto, {', '.join(ENGINES.names())}, got {self.name!r}",
                                 fix=suggest(self.name, ["auto", *ENGINES.names()]))
            object.__setattr__(self, "name", ENGINES.resolve(self.name))
        if self.worker_memory:
            size_bytes(self.worker_memory)  # a size, or one message
        if self.cpus_per_ingredient == 0 and self.gpus_per_ingredient == 0:
            raise LadleError("engine.cpus_per_ingredient and gpus_per_ingredient are both 0",
                             fix="reserve at least one CPU or GPU per ingredient")

    @property
    def resolved(self) -> str:
        if self.name != "auto":
            return self.name
        return "process" if self.workers > 1 else "serial"


def size_bytes(text: str) -> int:
    """``2G``, ``512M``, ``1.5GiB``, ``1000000`` -> bytes (K, M, G, T are powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.I)
    if not match:
        raise LadleError(f"engine.worker_memory = {text!r} is not a size", fix="write it like 2G, 512M or 3GiB")
    return int(float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " "))
