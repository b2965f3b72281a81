"""The serial engine: ingredients one after another in this process (the reference engine)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ladle.config import IngredientSpec
from ladle.data.graph import Graph
from ladle.train import IngredientRecord, OnEpoch, train_ingredient


def run(specs: Sequence[IngredientSpec], graph: Graph, *, device: str = "cpu",
        on_record: Callable[[IngredientRecord], None] | None = None,
        on_epoch: OnEpoch | None = None) -> list[IngredientRecord]:
    """Train every spec; ``on_record`` is called as each finishes, so it can be stored at once."""
    records = []
    for spec in specs:
        record = train_ingredient(spec, graph, device=device, on_epoch=on_epoch)
        if on_record is not None:
            on_record(record)
        records.append(record)
    return records
