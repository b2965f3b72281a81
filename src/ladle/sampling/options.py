"""The samplers' options, and the choice of one sampler with its options (imports no torch).

Each sampler's options are a small dataclass here, registered with it in :mod:`ladle.sampling`.
Their names share the ``sampler.`` namespace (``sampler.fanouts``, ``--fanouts``), so a config
file may give them under ``[sampler.neighbor]`` or, as older files do, under ``[sampler]``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ladle.errors import LadleError, suggest
from ladle.options import Options, check_int, described, option
from ladle.sampling import SAMPLERS


@dataclass(frozen=True)
class FullOptions(Options):
    table: ClassVar[str] = "sampler"


@dataclass(frozen=True)
class NeighborOptions(Options):
    table: ClassVar[str] = "sampler"
    fanouts: tuple[int, ...] = option((15, 10), "neighbours sampled per layer, outermost hop first, e.g. 15,10", low=1,
                                      per_layer=True)
    batch_size: int = option(512, "seed (training) nodes per mini-batch", low=1)


@dataclass(frozen=True)
class ClusterOptions(Options):
    table: ClassVar[str] = "sampler"
    parts: int = option(32, "METIS parts of the graph (cluster), or K with --partition", low=1, cuts="metis")
    parts_per_batch: int = option(4, "parts joined into one batch, with all edges among them", low=1)

    def validate(self):
        if self.parts_per_batch > self.parts:
            check_int("sampler.parts_per_batch", self.parts_per_batch, 1, self.parts)


@dataclass(frozen=True)
class SaintOptions(Options):
    table: ClassVar[str] = "sampler"
    budget: int = option(1000, "nodes (saint-node), edges (saint-edge) or walk roots (saint-rw) per subgraph; "
                               "nodes per layer (fastgcn, ladies)", low=1)
    steps: int = option(0, "subgraphs per epoch; 0: about one pass over the nodes", low=0)
    coverage: int = option(20, "pre-sampled subgraphs per node, on average, for the normalisations", low=1,
                           high=10_000)
    walk_length: int = option(2, "random-walk length (saint-rw)", low=1, high=100, only=("saint-rw",))


@dataclass(frozen=True)
class LayerwiseOptions(Options):
    table: ClassVar[str] = "sampler"
    budget: int = option(1000, "nodes sampled per layer", low=1)
    batch_size: int = option(512, "seed (training) nodes per mini-batch", low=1)


class SamplerConfig:
    """One sampler by name, with its options: ``SamplerConfig("neighbor", fanouts=(10, 5))``.

    Reading an option the sampler has goes to its options (``config.fanouts``); giving one it does not
    have is refused, naming the sampler's own.
    """

    __slots__ = ("name", "options")

    def __init__(self, name: str = "full", options: Options | None = None, **values):
        name = SAMPLERS.resolve(name)
        cls = SAMPLERS.options(name)
        if options is None:
            unknown = set(values) - {f for f, *_ in _fields(cls)}
            if unknown:
                key = sorted(unknown)[0]
                if key not in option_names():
                    raise LadleError(f"sampler has unknown key {key!r}", fix=suggest(key, sorted(option_names())))
                own = ", ".join(f for f, *_ in _fields(cls)) or "none"
                raise LadleError(f"sampler.{key} does not apply to the {name} sampler (its options: {own})",
                                 fix=f"drop {key}, or choose a sampler that takes it")
            options = cls(**values)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "options", options)

    def __getattr__(self, key):
        if key in ("name", "options"):
            raise AttributeError(key)
        return getattr(self.options, key)

    def __setattr__(self, key, value):
        raise AttributeError("SamplerConfig is frozen")

    def __eq__(self, other):
        return isinstance(other, SamplerConfig) and (self.name, self.options) == (other.name, other.options)

    def __hash__(self):
        return hash((self.name, self.options))

    def __repr__(self):
        return f"SamplerConfig({self.name!r}, {self.options!r})"

    def __reduce__(self):
        return (SamplerConfig, (self.name, self.options))

    def to_dict(self) -> dict:
        return {"name": self.name, **self.options.to_dict()}

    def table(self) -> dict:
        """The ``[sampler]`` table of a config file: the name, and the options under ``[sampler.NAME]``."""
        options = self.options.to_dict()
        return {"name": self.name, **({self.name: options} if options else {})}


def _fields(cls):
    return described(cls)


def option_names() -> set[str]:
    """Every option some registered sampler has: what an older ``[sampler]`` table may hold."""
    return {f for name in SAMPLERS.names() for f, *_ in _fields(SAMPLERS.options(name))}


def sampler_from_table(table: dict, from_flags: set) -> SamplerConfig:
    """The named sampler with its options: from ``[sampler.NAME]``, or from ``[sampler]`` itself as older files
    write them (every sampler's options there; those of other samplers are left aside). A flag for an option
    the chosen sampler does not have is refused."""
    name = SAMPLERS.resolve(table.pop("name", "full"), "sampler")
    nested = {tuple(k.split(".", 1)): v for k, v in table.items() if "." in k}
    own = {field: v for (owner, field), v in nested.items() if SAMPLERS.resolve(owner, "sampler") == name}
    flat = {k: v for k, v in table.items() if "." not in k}
    unknown = set(flat) - option_names()
    if unknown:
        key = sorted(unknown)[0]
        raise LadleError(f"unknown key 'sampler.{key}'", fix=suggest(f"sampler.{key}", [f"sampler.{k}" for k in
                                                                                     option_names()]))
    fields = {f.name for f in dataclasses.fields(SAMPLERS.options(name))}
    kept = {k: v for k, v in flat.items() if k in fields or k in from_flags}
    return SamplerConfig(name, **{**kept, **own})


@dataclass(frozen=True)
class Recipe:
    """``count`` ingredients trained with one sampler (and, optionally, their own data-seed base)."""

    count: int
    sampler: SamplerConfig
    seed: int | None = None


def recipes_from_table(entries, source: str, most: int) -> tuple[Recipe, ...]:
    """The ``[[recipes]]`` of a config: each a count of ingredients, a sampler with its options, a seed base."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise LadleError(f"{source}: recipes must be an array of tables", fix="write [[recipes]] blocks")
    out = []
    for i, entry in enumerate(entries):
        entry = dict(entry)
        unknown = set(entry) - {"count", "sampler", "seed"}
        if unknown:
            raise LadleError(f"{source}: recipes[{i}] has unknown keys {sorted(unknown)}",
                             fix="a recipe has count, seed and a sampler table")
        sampler = entry.get("sampler", {})
        if not isinstance(sampler, dict):
            raise LadleError(f"{source}: recipes[{i}].sampler must be a table",
                             fix='write it as [recipes.sampler] with name = "neighbor" and its settings')
        count = entry.get("count", 1)
        check_int(f"recipes[{i}].count", count, 1, most)
        seed = entry.get("seed")
        if seed is not None:
            check_int(f"recipes[{i}].seed", seed, 0, 2**63 - 1)
        try:
            out.append(Recipe(count, SamplerConfig(**sampler), seed))
        except LadleError as err:
            raise LadleError(f"{source}: recipes[{i}].{err.message}", fix=err.fix) from None
    return tuple(out)


PARTITION_METHODS = ("none", "metis", "random")


@dataclass(frozen=True)
class PartitionConfig(Options):
    """Partitioned ingredients, Graph Ladling's "divide the giant graph" mode.

    Args:
        method: ``none`` (default), ``metis`` or ``random``: ingredient i trains only on part i mod K.
        parts: K, the number of parts; 0 means one per ingredient, resolved once when the run's config is built
            (default 0).
        halo: also give each part its 1-hop neighbours as message sources, without their labels (default False).
    """

    table: ClassVar[str] = "partition"
    method: str = option("none", "ingredient i trains only on part i of K", choices=PARTITION_METHODS,
                         flag="--partition")
    parts: int = option(0, "K, the number of parts (0: one per ingredient)", low=0, flag="")
    halo: bool = option(False, "with --partition: add each part's 1-hop neighbours as message sources")
