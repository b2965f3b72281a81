"""The serial engine: ingredients one after another in this process (the reference engine)."""
from __future__ import annotations

from collections.abc import Sequence

from ladle.config import EngineConfig, IngredientSpec
from ladle.data.graph import Graph
from ladle.engines.base import Finished, IngredientStore, OnProgress, ShouldStop, train_and_store, worker_label


def run(specs: Sequence[IngredientSpec], graph: Graph, store: IngredientStore, *, device: str = "cpu",
        engine: EngineConfig = EngineConfig(), on_epoch: OnProgress | None = None,
        on_done=None, should_stop: ShouldStop | None = None) -> list[Finished]:
    """Train and store every spec in order; ``on_done`` sees each summary as it finishes; ``should_stop(name)`` is
    asked after each epoch (a callback's stop takes effect at the epoch it was asked at)."""
    finished = []
    for spec in specs:
        done = train_and_store(spec, graph, store, device=device, threads=engine.threads,
                               worker=worker_label("serial", 0), on_epoch=on_epoch,
                               should_stop=None if should_stop is None else (lambda name=spec.name: should_stop(name)))
        if on_done is not None:
            on_done(done)
        finished.append(done)
    return finished
