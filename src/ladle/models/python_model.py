"""A user's own ``torch.nn.Module`` in ladle's model protocol.

Any factory ``(in_channels, out_channels) -> nn.Module`` (a class with those arguments, or a function) whose
``forward(x, edge_index[, edge_weight])`` returns logits can be an ingredient: PyG's ``GCN``/``GraphSAGE``/``GAT``/
``GIN`` models, or one's own. It trains on every sampler (a sampled batch is a PyG subgraph with its seed nodes
first; the samplers' edge weights are passed when ``forward`` takes a third argument). When ``forward`` has a
parameter named ``edge_attr`` (PyG's ``GAT(..., edge_dim=D)``, ``GINEConv`` models, one's own) and the graph has edge
features (``Data.edge_attr``, an npz's ``edge_attr``), they are passed as ``edge_attr=`` [E, D], in every batch (the
sampled edges' rows; FastGCN and LADIES, which draw their own layer edges, refuse) and every whole-graph pass;
an edge's two directions share its features (the mean where the input gave them apart). It shares its initialisation
through the seeds, is checkpointed, souped and ensembled like the built-in models; scoring takes the reference
path (whole-graph forwards), since the fast GIS evaluator and chunked inference know only the built-in layers.

A module *instance* (``model=GraphSAGE(...)``) is taken as the shared initialisation: every ingredient starts from
a copy of its weights (``init = "shared"`` only), on the serial engine, under the name ``python:__instance__:CLASS@SHA``
(the checksum of those weights: a later command must pass the same instance). Before anything trains,
:func:`probe` runs the model once on a slice of the graph and names what does not fit.

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

import copy
import hashlib
import importlib
import inspect
import logging
import re
import threading
from collections.abc import Callable

import torch
from torch_geometric.utils import subgraph

from ladle.errors import LadleError
from ladle.models import MODELS, build_model

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
                             fix="pass a class or function taking (in_channels, out_channels), e.g. lambda i, o: "
                                 "GraphSAGE(i, 64, 2, out_channels=o), or a model instance itself") from None
        if not isinstance(self.module, torch.nn.Module):
            raise LadleError(f"the model factory returned a {type(self.module).__name__}, not a torch.nn.Module",
                             fix="pass a class or function (in_channels, out_channels) -> torch.nn.Module")
        try:
            parameters = inspect.signature(self.module.forward).parameters.values()
        except (TypeError, ValueError):
            parameters = []
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.takes_edge_weight = len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in parameters)
        self.takes_edge_attr = any(p.name == "edge_attr" and p.kind != p.POSITIONAL_ONLY for p in parameters)

    def forward(self, x, edge_index, edge_weight=None, *unused, edge_attr=None):
        extra = {"edge_attr": edge_attr} if edge_attr is not None and self.takes_edge_attr else {}
        if edge_weight is not None and self.takes_edge_weight:
            return self.module(x, edge_index, edge_weight, **extra)
        return self.module(x, edge_index, **extra)


def import_path(factory) -> str | None:
    """``module:qualname`` of a factory another process can import, else None."""
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if not module or module == "__main__" or "<" in name or not name:
        return None
    return f"{module}:{name}"


def register(factory) -> str:
    """Register ``factory`` (an object, or a ``module:name`` import path) and return its model name."""
    if isinstance(factory, str):
        path = factory[len(PREFIX):] if factory.startswith(PREFIX) else factory
        target = _imported(path)
    elif isinstance(factory, torch.nn.Module):  # an instance: its weights are every ingredient's initialisation
        path, target = _instance_name(factory), _copies(factory)
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
    return name.startswith(PREFIX) and not name[len(PREFIX):].startswith(("__local__:", "__instance__:"))


def is_instance(name: str) -> bool:
    return name.startswith(f"{PREFIX}__instance__:")


def _instance_name(module: torch.nn.Module) -> str:
    """``__instance__:CLASS@SHA``: the class, and a checksum of the instance's weights, so that a run resumed or
    souped with another instance (other initial weights) is refused."""
    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        digest.update(key.encode())
        digest.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return f"__instance__:{type(module).__qualname__.replace('<', '').replace('>', '')}@{digest.hexdigest()[:16]}"


def _copies(module: torch.nn.Module):
    """A factory giving a fresh copy of ``module`` whatever the sizes asked: the probe checks they fit the graph."""
    original = copy.deepcopy(module).cpu()

    def factory(in_channels, out_channels):
        return copy.deepcopy(original)

    factory.__qualname__ = type(module).__qualname__
    return factory


def probe(config, graph, nodes: int = 64) -> None:
    """One forward of a user's model on the first ``nodes`` nodes of the graph (their induced subgraph), before any
    run directory exists: a forward that fails, logits of the wrong shape or dtype, or a module whose output no
    trainable weight reaches is named here, with its fix, not as a traceback from inside training."""
    name = config.name[len(PREFIX):]
    with torch.random.fork_rng(devices=[]):  # the run's random streams are untouched
        model = build_model(config, graph.num_features, graph.num_classes, init_seed=0)
        n = min(nodes, graph.num_nodes)
        edge_index, edge_attr = subgraph(torch.arange(n), graph.data.edge_index, graph.data.get("edge_attr"),
                                         relabel_nodes=True, num_nodes=graph.num_nodes)
        model.train()
        try:
            out = model(graph.data.x[:n], edge_index, edge_attr=edge_attr)
        except Exception as err:
            try:
                signature = f"forward{inspect.signature(model.module.forward)}"
            except (TypeError, ValueError):
                signature = "forward"
            raise LadleError(f"the model {name}: {signature} failed on a {n}-node slice of {graph.name}: "
                             f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}",
                             fix="ladle calls forward(x [N, F], edge_index [2, E]) (and edge_weight [E] when forward "
                                 "takes a third argument, edge_attr= [E, D] when it has that parameter and the graph "
                                 "edge features) and expects logits [N, C]") from None
    if not torch.is_tensor(out):
        raise LadleError(f"the model {name}: forward returned a {type(out).__name__}, not a tensor of logits",
                         fix="return the logits [N, C] alone from forward")
    if tuple(out.shape) != (n, graph.num_classes):
        raise LadleError(f"the model {name}: forward gave {list(out.shape)} for {n} nodes; {graph.name} has "
                         f"{graph.num_classes} classes, so the logits must be [{n}, {graph.num_classes}]",
                         fix="give its last layer out_channels outputs (the factory's second argument)")
    if not out.is_floating_point():
        raise LadleError(f"the model {name}: forward gave {out.dtype} logits", fix="return floating-point logits")
    if not any(p.requires_grad for p in model.parameters()) or not out.requires_grad:
        raise LadleError(f"the model {name} does not train: no trainable weight reaches its output",
                         fix="leave requires_grad on the weights it should learn (and do not detach the output)")


_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def split_path(path: str) -> tuple[str, str]:
    """``module:attribute`` checked in shape (absolute dotted names only), or one error naming it."""
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
        raise LadleError(f"the model {name!r} was given from Python as an instance, a lambda, a local class or one "
                         "in __main__", fix="pass the same model again (model=...), or define it in an importable "
                                            "module")
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
