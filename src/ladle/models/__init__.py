"""Models: one small subclass of the ``GNN`` template per architecture, on PyG layers.

The registry (this module imports no torch until a model is built): each architecture's class and
its options dataclass (:mod:`ladle.models.options`).
"""
from __future__ import annotations

import functools
import math

from ladle.errors import LadleError
from ladle.registry import Registry
from ladle.seeding import seed_everything

MODELS = Registry("model")
MODELS.add("gcn", "ladle.models.gcn:GCN", "ladle.models.options:ModelConfig", "Kipf & Welling, ICLR 2017")
MODELS.add("sage", "ladle.models.sage:GraphSAGE", "ladle.models.options:ModelConfig", "Hamilton et al., NeurIPS 2017",
           aliases=("graphsage",))
MODELS.add("gat", "ladle.models.gat:GAT", "ladle.models.options:GATConfig", "Veličković et al., ICLR 2018")
MODELS.add("gin", "ladle.models.gin:GIN", "ladle.models.options:ModelConfig", "Xu et al., ICLR 2019")
MODELS.add("mlp", "ladle.models.mlp:MLP", "ladle.models.options:ModelConfig", "the graph-free baseline")


def build_model(config, in_channels: int, out_channels: int, *, init_seed: int | None = None):
    """Build the model ``config`` names; with ``init_seed`` its initial weights are reproducible."""
    if config.name not in MODELS and config.name.startswith("python:"):
        # start-up: `ladle --help` loads this module, and no torch (a worker's spec came from the driver, which allowed it)
        from ladle.models.python_model import register

        register(config.name)
    if init_seed is not None:
        seed_everything(init_seed)
    return MODELS.get(config.name)(in_channels, out_channels, config)


@functools.lru_cache(maxsize=16)
def expected_shapes(config, in_channels: int, out_channels: int) -> dict[str, tuple]:
    """The tensor shapes of the architecture, from a model built on the meta device (no memory, no init)."""
    # start-up: `ladle --help` loads this module, and no torch
    import torch

    with torch.device("meta"):
        model = MODELS.get(config.name)(in_channels, out_channels, config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def parameter_bytes(config, in_channels: int, out_channels: int) -> int:
    """Bytes the model's float32 tensors take, computed without allocating them."""
    return 4 * sum(math.prod(shape) for shape in expected_shapes(config, in_channels, out_channels).values())


def check_weights(source: str, state: dict, config, in_channels: int, out_channels: int) -> None:
    """Refuse weights that do not fit the architecture described (checked on the meta device: nothing is built at
    the described size) or that hold NaN or infinite values: one message naming ``source``, what differs, the fix."""
    # start-up: `ladle --help` loads this module, and no torch
    import torch

    expected = expected_shapes(config, in_channels, out_channels)
    got = {k: tuple(v.shape) for k, v in state.items()}
    fix = "delete it and its .json, then ladle run --resume RUN_DIR to retrain it, or restore both files"
    if got != expected:
        problems = [f"missing {k}" for k in sorted(expected.keys() - got.keys())]
        problems += [f"extra {k}" for k in sorted(got.keys() - expected.keys())]
        problems += [f"{k} is {got[k]}, not {expected[k]}" for k in sorted(got.keys() & expected.keys())
                     if got[k] != expected[k]]
        raise LadleError(f"{source}: its tensors do not fit the {config.name} model its sidecar describes "
                         f"({'; '.join(problems[:4])})", fix=fix)
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise LadleError(f"{source} holds non-finite (NaN or infinite) weights ({', '.join(bad[:3])})", fix=fix)


def graph_input(model, graph):
    """What a whole-graph pass of ``model`` over ``graph`` takes as its second argument: the cached
    sparse adjacency the model asks for (``GNN.adjacency``), else the edge list."""
    kind = getattr(model, "adjacency", None)
    return graph.adj_t(kind) if kind is not None else graph.data.edge_index


def edge_features(model, graph, edge_ids=None) -> dict:
    """The keyword arguments a whole-graph pass of ``model`` adds: ``edge_attr`` (of ``edge_ids``, default every
    edge) where the model takes it and the graph has edge features; else none."""
    edge_attr = graph.data.get("edge_attr")
    if edge_attr is None or not getattr(model, "takes_edge_attr", False):
        return {}
    return {"edge_attr": edge_attr if edge_ids is None else edge_attr[edge_ids]}


def __getattr__(name):  # the classes themselves, imported when asked for (they need torch)
    lazy = {"GNN": "ladle.models.base:GNN", "GCN": "ladle.models.gcn:GCN", "GraphSAGE": "ladle.models.sage:GraphSAGE",
            "GAT": "ladle.models.gat:GAT", "GIN": "ladle.models.gin:GIN", "MLP": "ladle.models.mlp:MLP"}
    if name in lazy:
        # lazy name: the package's names load on first use (PEP 562)
        from ladle.registry import _resolve

        return _resolve(lazy[name])
    raise AttributeError(name)


__all__ = ["MODELS", "build_model", "check_weights", "edge_features", "expected_shapes", "graph_input",
           "parameter_bytes"]
