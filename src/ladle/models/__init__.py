"""Models: ``build_model(config, in_channels, out_channels)`` on PyG layers."""
from __future__ import annotations

import functools
import math

import torch

from ladle.config import ModelConfig
from ladle.models.base import GNN, graph_input
from ladle.models.gat import GAT
from ladle.models.gcn import GCN
from ladle.models.gin import GIN
from ladle.models.mlp import MLP
from ladle.models.sage import GraphSAGE
from ladle.seeding import seed_everything

MODELS: dict[str, type[GNN]] = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT, "gin": GIN, "mlp": MLP}


def build_model(config: ModelConfig, in_channels: int, out_channels: int, *, init_seed: int | None = None) -> GNN:
    """Build the model ``config`` names; with ``init_seed`` its initial weights are reproducible."""
    if init_seed is not None:
        seed_everything(init_seed)
    return MODELS[config.name](in_channels, out_channels, config)


@functools.lru_cache(maxsize=16)
def expected_shapes(config: ModelConfig, in_channels: int, out_channels: int) -> dict[str, tuple]:
    """The tensor shapes of the architecture, from a model built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = MODELS[config.name](in_channels, out_channels, config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def parameter_bytes(config: ModelConfig, in_channels: int, out_channels: int) -> int:
    """Bytes the model's float32 tensors take, computed without allocating them."""
    return 4 * sum(math.prod(shape) for shape in expected_shapes(config, in_channels, out_channels).values())


__all__ = ["GAT", "GCN", "GIN", "GNN", "GraphSAGE", "MLP", "MODELS", "build_model", "expected_shapes", "graph_input",
           "parameter_bytes"]
