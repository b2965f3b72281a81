"""The architectures' options (imports no torch): one dataclass, with GAT's defaults its own.

Every architecture is built from the same fields, so the soups can mix any two models of one kind;
``heads`` is read by GAT alone. An architecture may change its defaults (its dataclass) and the
training defaults it needs (``train_defaults``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ladle.errors import LadleError
from ladle.models import MODELS
from ladle.options import Options, option

NORMS = ("none", "batch", "layer")


@dataclass(frozen=True)
class ModelConfig(Options):
    """An architecture and its hyperparameters: enough to rebuild any checkpoint."""

    table: ClassVar[str] = "model"
    train_defaults: ClassVar[dict] = {}
    name: str = option("gcn", "the architecture", flag="--model")
    hidden: int = option(64, "hidden channels; for GAT the total over heads", low=1, high=2**16)
    layers: int = option(2, "message-passing layers, the last one maps to the classes", low=1, high=16)
    dropout: float = option(0.5, "dropout after each hidden layer", low=0.0, high=0.95)
    input_dropout: float | None = option(None, "dropout on the input features (default: dropout)", low=0.0,
                                         high=0.95, flag="")
    norm: str = option("none", "normalisation after each hidden layer", choices=NORMS)
    residual: bool = option(False, "residual connections where the shapes agree")
    heads: int = option(8, "GAT's attention heads", low=1, high=64, only=("gat",))

    def __post_init__(self):
        if str(self.name).startswith("python:") and self.name not in MODELS:
            # start-up: `ladle --help` loads this module, and no torch (a user's model imports it)
            from ladle.models.python_model import resolve_unregistered

            resolve_unregistered(self.name)
        object.__setattr__(self, "name", MODELS.resolve(self.name, "model"))
        super().__post_init__()

    def validate(self):
        if self.name == "gat" and self.hidden % self.heads:
            raise LadleError(f"model.hidden={self.hidden} is not a multiple of model.heads={self.heads}",
                             fix="GAT splits the hidden channels over its heads; pick hidden = heads * k")


@dataclass(frozen=True)
class GATConfig(ModelConfig):
    # GAT learns slowly at its paper's lr and dropout: at 200 epochs its best validation epoch is still near the end.
    train_defaults: ClassVar[dict] = {"lr": 0.005, "epochs": 500}
    dropout: float = option(0.6, "dropout after each hidden layer and on the attention", low=0.0, high=0.95)


def model_config(values: dict, source: str = "config") -> ModelConfig:
    """The options dataclass of the architecture ``values`` names, built from them (defaults its own)."""
    name = values.get("name", "gcn")
    if str(name).startswith("python:") and name not in MODELS:
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.models.python_model import resolve_unregistered

        resolve_unregistered(name)
    name = MODELS.resolve(name, "model")
    return MODELS.options(name).build({**values, "name": name}, source)
