"""A user's own ``torch.nn.Module`` in ladle's model protocol.

Any factory ``(in_channels, out_channels) -> nn.Module`` (a class with those arguments, or a function) whose
``forward(x, edge_index[, edge_weight])`` returns logits can be an ingredient: PyG's ``GCN``/``GraphSAGE``/``GAT``/
``GIN`` models, or one's own. It trains on every sampler (a sampled batch is a PyG subgraph with its seed nodes
first; the samplers' edge weights are passed when ``forward`` takes a third argument), shares its initialisation
through the seeds, is checkpointed, souped and ensembled like the built-in models; scoring takes the reference
path (whole-graph forwards), since the fast GIS evaluator and chunked inference know only the built-in layers.

Registered at run time as ``python:MODULE:NAME``: an importable factory also trains in process and Ray workers
(they import it); a lambda, a local class or one defined in ``__main__`` trains on the serial engine only. A
stored run names the import path; a later command imports it only when the user allows it (``model=`` given
again in Python, or ``--allow-import`` on the command line): a run directory never makes ladle import code.
"""
from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable

import torch

from ladle.errors import LadleError

log = logging.getLogger(__name__)
PREFIX = "python:"
_allowed = threading.local()


class PythonModel(torch.nn.Module):
    """Wraps ``factory(in_channels, out_channels)``; its weights are the wrapped module's, under ``module.``."""

    adjacency = None  # whole-graph passes give it the edge list, as PyG models take

    def __init__(self, factory: Callable, in_channels: int, out_channels: int, config=None):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.module = factory(in_channels, out_channels)
        if not isinstance(self.module, torch.nn.Module):
            raise LadleError(f"the model factory returned a {type(self.module).__name__}, not a torch.nn.Module",
                             fix="pass a class or function (in_channels, out_channels) -> torch.nn.Module")
        try:
            parameters = inspect.signature(self.module.forward).parameters.values()
        except (TypeError, ValueError):
            parameters = []
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.takes_edge_weight = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in parameters)

    def forward(self, x, edge_index, edge_weight=None, *unused):
        if edge_weight is not None and self.takes_edge_weight:
            return self.module(x, edge_index, edge_weight)
        return self.module(x, edge_index)


def import_path(factory) -> str | None:
    """``module:qualname`` of a factory another process can import, else None."""
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or "<" in name or not name:
        return None
    return f"{module}:{name}"


def register(factory) -> str:
    """Register ``factory`` (an object, or a ``module:name`` import path) and return its model name."""
    from ladle.models import MODELS

    if isinstance(factory, str):
        path = factory[len(PREFIX):] if factory.startswith(PREFIX) else factory
        target = _imported(path)
    else:
        if not callable(factory):
            raise LadleError(f"model={factory!r} is not callable", fix="pass a class or function (in_channels, "
                                                                       "out_channels) -> torch.nn.Module")
        path, target = import_path(factory), factory
        if path is None:  # named by its qualname only, so the same function given again matches the run
            path = f"__local__:{getattr(factory, '__qualname__', type(factory).__name__)}"
    name = f"{PREFIX}{path}"
    if name in MODELS:
        MODELS.remove(name)
    MODELS.add(name, lambda i, o, config=None, target=target: PythonModel(target, i, o, config),
               "ladle.models.options:ModelConfig", "a model given from Python", reference=path)
    return name


def importable(name: str) -> bool:
    return name.startswith(PREFIX) and not name[len(PREFIX):].startswith("__local__:")


def _imported(path: str):
    import importlib

    module, _, attribute = path.partition(":")
    try:
        target = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise LadleError(f"cannot import the model {path!r}: {err}",
                         fix="install the package that defines it, or pass the model itself (model=...)") from None
    return target


def resolve_unregistered(name: str) -> None:
    """Make a ``python:`` model name buildable here: in a worker (its spec came from the driver, which checked the
    user allowed it) or where the user allowed imports; anywhere else, one error saying how to allow it."""
    if not name.startswith(PREFIX):
        return
    if not importable(name):
        raise LadleError(f"the model {name!r} was given from Python as a lambda, a local class or one in __main__",
                         fix="pass the same model again (model=...), or define it in an importable module")
    if not allowed():
        raise LadleError(f"the model {name[len(PREFIX):]!r} is code named by a config or run directory; ladle imports "
                         "code only when you allow it", fix="pass --allow-import (or model=... in Python) if you "
                                                            "trust that module")
    register(name)


def allowed() -> bool:
    return getattr(_allowed, "value", False)


class allow_import:
    """``with allow_import():`` lets ``python:`` model names be imported in this thread."""

    def __enter__(self):
        self.before = allowed()
        _allowed.value = True

    def __exit__(self, *exc):
        _allowed.value = self.before
