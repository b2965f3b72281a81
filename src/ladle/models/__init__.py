"""Models: ``build_model(config, in_channels, out_channels)`` on PyG layers."""
from __future__ import annotations

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


__all__ = ["GAT", "GCN", "GIN", "GNN", "GraphSAGE", "MLP", "MODELS", "build_model", "graph_input"]
