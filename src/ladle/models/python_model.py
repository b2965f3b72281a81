"""A user's own ``torch.nn.Module`` in ladle's model protocol.

Any factory ``(in_channels, out_channels) -> nn.Module`` (a class with those arguments, or a function) whose
``forward(x, edge_index[, edge_weight])`` returns logits can be an ingredient: PyG's ``GCN``/``GraphSAGE``/``GAT``/
``GIN`` models, or one's own. It trains on every sampler (a sampled batch is a PyG subgraph with its seed nodes
first; the samplers' edge weights are passed when ``forward`` takes a third argument), shares its initialisation
through the seeds, is checkpointed, souped and ensembled like the built-in models; scoring takes the reference
path (whole-graph forwards), since the fast GIS evaluator and chunked inference know only the built-in layers.

Registered at run time as ``python:MODULE:NAME``: an importable factory also trains in process and Ray workers
(they import it); a lambda, a local class or one defined in ``__main__`` trains on the serial engine only. A
stored run names the import path; a later command builds it only from what the user gives or names:

- ``model=TheirClass`` in Python trusts that object alone: the run must name exactly it, and no other name in the
  run is imported;
- ``--allow-import mypkg.models`` (``with ladle.allow_import("mypkg.models"):`` in Python) trusts those modules
  (and their submodules) alone: a name the run gives in any other module is refused, whatever the flag.

What is imported must be a ``torch.nn.Module`` subclass, or a plain Python function defined in a trusted module,
checked before anything is called: a run cannot make ladle call ``os.kill`` or any other callable it picks, and a
relative or malformed module name is refused before any import. A run directory never makes ladle import code.
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
        try:
            self.module = factory(in_channels, out_channels)
        except Exception as err:  # a user's code: its failure is named, not a traceback
            raise LadleError(f"the model factory {getattr(factory, '__qualname__', factory)!r}({in_channels}, "
                             f"{out_channels}) failed: {type(err).__name__}: {err}",
                             fix="pass a class or function (in_channels, out_channels) -> torch.nn.Module") from None
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


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def split_path(path: str) -> tuple[str, str]:
    """``module:attribute`` checked in shape (absolute dotted names only), or one error naming it."""
    import re

    module, sep, attribute = path.partition(":")
    if not (sep and re.fullmatch(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*", module)
            and re.fullmatch(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*", attribute)):
        raise LadleError(f"the model name 'python:{path}' is not python:MODULE:NAME with an absolute module",
                         fix="name the model python:package.module:ClassName (no relative module, no spaces)")
    return module, attribute


def _within(module: str, trusted) -> bool:
    return any(module == t or module.startswith(t + ".") for t in trusted)


def _imported(path: str):
    """The object at ``path``, imported and type-checked before anything calls it."""
    import importlib

    module, attribute = split_path(path)
    try:
        target = importlib.import_module(module)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as err:
        raise LadleError(f"cannot import the model {path!r}: {err}",
                         fix="install the package that defines it, or pass the model itself (model=...)") from None
    if inspect.isclass(target) and issubclass(target, torch.nn.Module):
        return target
    if inspect.isfunction(target) and getattr(target, "__module__", None) == module:
        return target  # a factory function written in the module named, not one it imported (os.kill, eval, ...)
    raise LadleError(f"the model {path!r} is a {type(target).__name__}, not a torch.nn.Module class or a function "
                     f"defined in {module}; ladle calls nothing else a name points to",
                     fix="name a torch.nn.Module subclass (or a factory function of your module) as the model")


def resolve_unregistered(name: str) -> None:
    """Make a ``python:`` model name buildable here where the user trusts its module; anywhere else, one error
    saying how to trust it. (A worker builds what its driver resolved: :func:`ladle.models.build_model`.)"""
    if not name.startswith(PREFIX):
        return
    if not importable(name):
        raise LadleError(f"the model {name!r} was given from Python as a lambda, a local class or one in __main__",
                         fix="pass the same model again (model=...), or define it in an importable module")
    module, _ = split_path(name[len(PREFIX):])
    if not _within(module, trusted_modules()):
        given = trusted_modules()
        raise LadleError(f"the model {name[len(PREFIX):]!r} is code named by a config or run directory; ladle imports "
                         "only modules you name" + (f" (you trust {', '.join(sorted(given))})" if given else ""),
                         fix=f"pass --allow-import {module} (or with ladle.allow_import({module!r}): in Python, or "
                             "model=... with the class itself) if you trust that module")
    register(name)


def trusted_modules() -> frozenset[str]:
    """The modules this thread may import a ``python:`` model from."""
    return getattr(_allowed, "modules", frozenset())


class allow_import:
    """``with allow_import("mypkg.models", ...):`` lets ``python:`` model names in those modules (and their
    submodules) be imported in this thread; a name in any other module is still refused."""

    def __init__(self, *modules: str):
        names = [m.strip() for group in modules for m in ([group] if isinstance(group, str) else group)]
        for m in names:
            try:
                split_path(f"{m}:x")
            except LadleError:
                raise LadleError(f"--allow-import {m!r} is not an absolute module name",
                                 fix="name the module you trust, e.g. --allow-import mypkg.models") from None
        self.modules = frozenset(names)

    def __enter__(self):
        self.before = trusted_modules()
        _allowed.modules = self.before | self.modules
        return self

    def __exit__(self, *exc):
        _allowed.modules = self.before
