"""The soups' options (imports no torch), each registered with its soup in :mod:`ladle.soups`.

In a config file they live under ``[soups.NAME]``; older files' top-level ``granularity`` and
``[learned]`` table are read into them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ladle.errors import LadleError
from ladle.options import Options, check_int, option
from ladle.soups import SOUPS as registry


@dataclass(frozen=True)
class GISOptions(Options):
    table: ClassVar[str] = "soups.gis"
    granularity: int = option(20, "α values GIS tries per step, linspace(0, 1, granularity)", low=2, high=10_000)


@dataclass(frozen=True)
class LearnedOptions(Options):
    table: ClassVar[str] = "soups.learned"
    epochs: int = option(100, "SGD steps on the mixing weights", low=1, high=1_000_000, flag="")
    lr: float = option(0.5, "SGD learning rate (momentum 0.9)", low=0.0, high=1e6, open_low=True, flag="")
    t0: int = option(25, "period, in epochs, of the cosine annealing with warm restarts", low=1, high=1_000_000,
                     flag="")
    init: str = option("uniform", "uniform (every ingredient 1/K) or best (start from the best by val)",
                       choices=("uniform", "best"), flag="")


@dataclass(frozen=True)
class PLSOptions(LearnedOptions):
    table: ClassVar[str] = "soups.pls"
    parts: int = option(16, "METIS parts K of the graph", low=1, high=1_000_000, flag="", cuts="metis")
    parts_per_epoch: int = option(4, "parts R whose induced subgraph each epoch uses", low=1, high=1_000_000, flag="")

    def validate(self):
        check_int(self.label("parts_per_epoch"), self.parts_per_epoch, 1, self.parts)


DEFAULT_SOUPS = ("uniform", "greedy", "gis", "ensemble")  # what a run makes when it names no soups


LEGACY_TABLE = "learned"  # the top-level table older configs gave the learned soups' options in


def soups_from_tables(table: dict, legacy_learned: dict, flat_list, source: str) -> tuple[tuple, tuple]:
    """The soup methods (``[soups] methods``, or an older top-level ``soups`` list) and each soup's options (its
    ``[soups.NAME]`` table; an older ``[learned]`` table serves learned and pls)."""
    methods = table.pop("methods", flat_list)
    if methods is None:
        methods = DEFAULT_SOUPS
    if isinstance(methods, str) or not isinstance(methods, (list, tuple)):
        raise LadleError(f"{source}: soups.methods must be a list of soup names, not {methods!r}",
                         fix=f"for example methods = [\"uniform\", \"gis\"]; choices: {', '.join(registry.names())}")
    per_soup: dict[str, dict] = {}
    for key, value in table.items():
        owner, _, name = key.partition(".")
        per_soup.setdefault(registry.resolve(owner, "soup method"), {})[name] = value
    options = []
    for name in registry.names():
        cls = registry.options(name)
        if cls is None:
            if per_soup.get(name):
                raise LadleError(f"{source}: the {name} soup takes no options", fix=f"remove [soups.{name}]")
            continue
        legacy = {k: v for k, v in legacy_learned.items() if k in {f.name for f in dataclasses.fields(cls)}}
        options.append((name, cls.build({**legacy, **per_soup.get(name, {})}, source)))
    return tuple(methods), tuple(options)
