"""The run: what it trains and how, assembled from the families' registries (imports no torch).

Each family (models, samplers, soups, engines) declares its members' options beside them (``ladle.*.options``);
this module keeps only the run itself: ``RunConfig``, the training, trunk, evaluation and engine settings, recipes,
and TOML in and out. Precedence, lowest first: ladle's defaults, the chosen model's defaults, the config file, the
command-line flags. The resolved result is written as ``config.toml`` beside every run, in the spelling read here.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ladle import declared
from ladle.engine_options import EngineConfig
from ladle.errors import LadleError, suggest
from ladle.models.options import ModelConfig, model_config
from ladle.options import Options, described, option
from ladle.parts import parts_count
from ladle.sampling.options import (
    PartitionConfig,
    Recipe,
    SamplerConfig,
    option_names,
    recipes_from_table,
    sampler_from_table,
)
from ladle.seeding import derive_seed
from ladle.soups import SOUPS
from ladle.soups.options import DEFAULT_SOUPS, LEGACY_TABLE, soups_from_tables
from ladle.tomlio import dump_toml, load_toml  # noqa: F401  (dump_toml: re-exported for config users)
from ladle.train_options import EvalConfig, TrainConfig, TrunkConfig, omitted_at_before

MAX_INGREDIENTS = 256
# Not the run's identity: where it trains, where the data lies (the graph is checked by fingerprint), the soups.
IDENTITY_EXCLUDED = ("root", "engine", "soups")
LEGACY = {"granularity": "soups.gis.granularity", "train.eval_chunk": "eval.chunk"}  # older spellings


@dataclass(frozen=True)
class IngredientSpec:
    """Everything one worker needs to train one model of a run. ``role``: ``ingredient`` (a soup's member), ``trunk``
    (the ingredients' start), ``long`` or ``ddp`` (the equal-compute baselines); ``trunk_epochs`` > 0: from the stored
    trunk. ``track_average`` also keeps its weights' best-validated average over its epochs (:meth:`average_spec`)."""

    index: int
    model: ModelConfig
    train: TrainConfig
    init_seed: int
    data_seed: int
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    part: int | None = None  # which part this ingredient trains on, when partitioned
    role: str = "ingredient"
    trunk_epochs: int = 0
    eval: EvalConfig = field(default_factory=EvalConfig)
    track_average: str = "none"
    ranks: int = 1  # > 1: one model on this many communicating processes (role ddp, ladle.ddp)

    @property
    def name(self) -> str:
        return f"ingredient-{self.index:02d}" if self.role == "ingredient" else self.role

    def average_spec(self) -> IngredientSpec | None:  # role long-swa for the long model's SWA
        return None if self.track_average == "none" else dataclasses.replace(
            self, role=f"{self.role}-{self.track_average}", track_average="none",
            train=dataclasses.replace(self.train, average=self.track_average))


@dataclass(frozen=True)
class RunConfig(Options):
    """A whole run: data, model, ingredients, soups; one field per setting, each family's table its own."""

    dataset: str = option("csbm", "a name from `ladle datasets`, csbm[:k=v,...] or npz:PATH[#K]")
    root: str = option("data", "dataset folder")
    ingredients: int = option(8, "number of ingredients", low=1, high=MAX_INGREDIENTS)
    seed: int = option(0, "pipeline seed; initialisation and data-order seeds derive from it", low=0, high=2**63 - 1)
    init: str = option("shared", "initialisation across ingredients", choices=("shared", "independent"))
    device: str = option("cpu", "torch device: cpu, cuda, cuda:N")
    metric: str = option("auto", "what selects and is reported (auto: the dataset's own; ROC-AUC for a binary npz "
                                 "graph)", choices=("auto", "acc", "rocauc", "f1"))
    baseline: str = option("none", "equal-compute rows: long, one model with K times an ingredient's epochs and "
                                   "patience (and its SWA); ddp, that budget on K ranks that all-reduce gradients "
                                   "every step", choices=("none", "long", "ddp", "long+ddp"))
    soups: tuple[str, ...] = option(DEFAULT_SOUPS, "soup methods, in order", flag="")
    soup_options: tuple = option((), "each soup's options, (name, options) pairs", flag="")
    model: ModelConfig = option(ModelConfig(), "", flag="")
    train: TrainConfig = option(TrainConfig(), "", flag="")
    sampler: SamplerConfig = option(SamplerConfig(), "", flag="")
    partition: PartitionConfig = option(PartitionConfig(), "", flag="")
    engine: EngineConfig = option(EngineConfig(), "", flag="")
    trunk: TrunkConfig = option(TrunkConfig(), "", flag="")
    eval: EvalConfig = option(EvalConfig(), "", flag="")
    recipes: tuple[Recipe, ...] = option((), "", flag="")

    def validate(self):
        object.__setattr__(self, "soups", tuple(SOUPS.resolve(s) for s in self.soups))
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise LadleError(f"device must be cpu, cuda or cuda:N, got {self.device!r}",
                             fix="give device cpu or cuda (its command-line flag, or the config file)")
        for where, sampler in [("sampler", self.sampler)] + [(f"recipes[{i}].sampler", r.sampler)
                                                            for i, r in enumerate(self.recipes)]:
            for f in declared.per_layer(sampler.name):  # declared on the sampler's options: one value per layer
                given = getattr(sampler, f.name)
                if len(given) != self.model.layers:
                    raise LadleError(f"{where}.{f.name} has {len(given)} entries for a {self.model.layers}-layer "
                                     "model", fix=f"give one per layer, for example --{f.name.replace('_', '-')} "
                                                  f"{','.join(map(str, given[:1] * self.model.layers))}")
        if self.partition.method != "none" and not self.partition.parts:  # K resolved once: specs, sidecars, TOML
            object.__setattr__(self, "partition", replace(self.partition, parts=self.ingredients))
        if self.recipes and sum(r.count for r in self.recipes) != self.ingredients:
            raise LadleError(f"the recipes add up to {sum(r.count for r in self.recipes)} ingredients but "
                             f"ingredients = {self.ingredients}", fix="make the counts add up to ingredients")

    def soup_settings(self, name: str):
        """The validated options object soup ``name`` is called with (its defaults where the config gives none;
        None for a soup that takes none)."""
        given, cls = dict(self.soup_options).get(name), SOUPS.options(name)
        return (given or cls()) if cls is not None else None

    def soup(self, name: str) -> dict:
        """:meth:`soup_settings` as a table (what config files and sidecars hold)."""
        settings = self.soup_settings(name)
        return settings.to_dict() if settings is not None else {}

    def cuts(self) -> list[tuple[str, str, int]]:
        """Every cut of the graph the run asks for, as ``(setting, method, parts)`` (:func:`ladle.declared.cuts`)."""
        return declared.cuts(self)

    def _spec(self, index: int, sampler: SamplerConfig, data_seed: int, **more) -> IngredientSpec:
        return IngredientSpec(index=index, model=self.model, train=more.pop("train", self.train),
                              init_seed=more.pop("init_seed", derive_seed(self.seed, "init")), data_seed=data_seed,
                              sampler=sampler, partition=self.partition, eval=self.eval, **more)

    def ingredient_specs(self) -> list[IngredientSpec]:
        recipes = self.recipes or (Recipe(self.ingredients, self.sampler),)
        per_ingredient = [r for r in recipes for _ in range(r.count)]
        shared = derive_seed(self.seed, "init")
        return [self._spec(i, r.sampler, derive_seed(self.seed if r.seed is None else r.seed, "data", i),
                           init_seed=shared if self.init == "shared" else derive_seed(self.seed, "init", i),
                           part=None if self.partition.method == "none" else i % self.partition.parts,
                           trunk_epochs=self.trunk.epochs)
                for i, r in enumerate(per_ingredient)]

    def trunk_spec(self) -> IngredientSpec | None:
        """The shared trunk: the run's sampler on the whole graph, validated once, at its last epoch (its own
        weights after ``trunk.epochs`` epochs, never an average: the branching point), with a data seed of its own."""
        if not self.trunk.epochs:
            return None
        train = dataclasses.replace(self.train, epochs=self.trunk.epochs, eval_every=self.trunk.epochs, patience=0,
                                    average="none", average_start=1, lr_schedule="none")  # a constant rate to branch
        return self._spec(0, self.sampler, derive_seed(self.seed, "trunk"), train=train, role="trunk")

    def long_spec(self, role: str = "long") -> IngredientSpec | None:
        """The equal-compute baseline: K times an ingredient's epochs and patience, from the trunk if there is one;
        ``role`` ddp: that budget on K ranks that all-reduce gradients (:mod:`ladle.ddp`)."""
        if role not in self.baseline.split("+"):
            return None
        k, track = self.ingredients, "swa" if self.train.average == "none" and role == "long" else "none"
        return self._spec(0, self.sampler, derive_seed(self.seed, role), train=self.train.scaled(k), role=role,
                          trunk_epochs=self.trunk.epochs, track_average=track, ranks=k if role == "ddp" else 1)

    def baseline_specs(self) -> list[IngredientSpec]:
        """The long model, its weights' SWA unless it is averaged already (free: no more steps), the DDP model."""
        long = self.long_spec()
        return [s for s in (long, long and long.average_spec(), self.long_spec("ddp")) if s]

    def identity(self, legacy: bool = False) -> dict[str, Any]:
        """What decides the ingredients' weights, recorded in the run and every sidecar; a resume may not change it.
        An option that does nothing for the run's model or sampler (``only``) is left out; the ``legacy`` identity,
        which runs made before that hold and which is accepted beside it, keeps it."""
        out = {k: v for k, v in self.to_dict().items() if k not in IDENTITY_EXCLUDED}
        out["train"] = omitted_at_before(self.train)  # a run that uses no later option keeps its identity
        if self.train.average == "none":  # does not apply
            del out["train"]["ema_decay"]
        return out if legacy else declared.drop_idle(out)

    def identity_sha256(self, legacy: bool = False) -> str:
        return hashlib.sha256(json.dumps(self.identity(legacy), sort_keys=True).encode()).hexdigest()

    def is_identity(self, recorded: str) -> bool:
        """Whether a run's recorded identity is this config's (or its legacy identity: see :meth:`identity`)."""
        return recorded in (self.identity_sha256(), self.identity_sha256(legacy=True))

    def to_dict(self) -> dict[str, Any]:
        """The config as the TOML ``config.toml`` holds: the chosen sampler's options under ``[sampler.NAME]``,
        each soup's under ``[soups.NAME]``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("soups", "soup_options", "sampler", "recipes")}
        for key, value in list(out.items()):
            if isinstance(value, Options):
                out[key] = {k: v for k, v in value.to_dict().items() if v is not None}
        out["sampler"] = self.sampler.table()
        out["soups"] = {"methods": list(self.soups),
                        **{n: self.soup(n) for n in SOUPS.names() if SOUPS.options(n) is not None}}
        if self.recipes:
            out["recipes"] = [{"count": r.count, **({} if r.seed is None else {"seed": r.seed}),
                               "sampler": r.sampler.to_dict()} for r in self.recipes]
        return out


# ---------------------------------------------------------------- building


TABLES = ("model", "train", "sampler", "partition", "engine", "trunk", "eval", "soups", LEGACY_TABLE)
NAMED = ("model", "sampler", "engine")  # the tables a plain string may stand for: their member's name


def build_config(file_values: dict | None = None, overrides: dict | None = None, *, source: str = "config") -> RunConfig:
    """Merge defaults, the model's defaults, a config file's values and flag overrides into a RunConfig.

    ``overrides`` uses dotted keys (``{"model.hidden": 16, "sampler.fanouts": [10, 5]}``); ``None`` values are
    ignored so argparse defaults can be passed straight through. A file may use the older spellings (top-level
    ``granularity`` and ``soups = [...]``, ``[learned]``, sampler options under ``[sampler]``, ``train.eval_chunk``).
    """
    file_values = dict(file_values or {})
    recipes = recipes_from_table(file_values.pop("recipes", []), source, MAX_INGREDIENTS)
    given = _flatten(file_values, source)
    flags = {LEGACY.get(k, k): v for k, v in (overrides or {}).items() if v is not None}
    values = {**given, **flags}
    top = {k: values.pop(k) for k in list(values) if "." not in k}
    for key in top:
        if key not in {f.name for f in dataclasses.fields(RunConfig)} - {"soup_options"} or key in set(TABLES) - {"soups"}:
            raise LadleError(f"{source}: unknown key {key!r}", fix=suggest(key, _known_keys()))
    tables = {t: {k.split(".", 1)[1]: values.pop(k) for k in list(values) if k.startswith(f"{t}.")} for t in TABLES}
    if values:
        raise LadleError(f"{source}: unknown key {sorted(values)[0]!r}", fix=suggest(sorted(values)[0], _known_keys()))
    model = model_config(tables["model"], source)
    train = TrainConfig.build({**type(model).train_defaults, **tables["train"]}, source)
    sampler = sampler_from_table(tables["sampler"], {k.split(".", 1)[1] for k in flags if k.startswith("sampler.")})
    soups, soup_options = soups_from_tables(tables["soups"], tables[LEGACY_TABLE], top.pop("soups", None), source)
    if "ingredients" not in top and (count := sum(r.count for r in recipes) or parts_count(top.get("dataset"))):
        top["ingredients"] = count  # as many as the recipes name, or one per part of a parts:PDIR graph
    return RunConfig(**top, soups=soups, soup_options=soup_options, model=model, train=train, sampler=sampler,
                     partition=PartitionConfig.build(tables["partition"], source),
                     engine=EngineConfig.build(tables["engine"], source), trunk=TrunkConfig.build(tables["trunk"], source),
                     eval=EvalConfig.build(tables["eval"], source), recipes=recipes)


def _flatten(values: dict, source: str, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            if not prefix and key not in TABLES:
                raise LadleError(f"{source}: unknown table [{key}]", fix=suggest(key, TABLES))
            flat.update(_flatten(value, source, f"{dotted}."))
        elif not prefix and key in TABLES and key != "soups":  # soups = [...] is the older spelling of its methods
            if key not in NAMED or not isinstance(value, str):
                raise LadleError(f"{source}: {key} is a table of settings, got {value!r}",
                                 fix=f"give it as a table: [{key}] with its keys in TOML, {key}={{...}} in Python")
            flat[f"{key}.name"] = value  # "model": "gcn" names the model, as [model] name = "gcn" does
        else:
            flat[LEGACY.get(dotted, dotted)] = value
    return flat


def _known_keys() -> list[str]:
    """Every key a config may hold, for the nearest-name suggestion."""
    keys = [f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("flag") != "" or f.name == "soups"]
    for cls in (ModelConfig, TrainConfig, PartitionConfig, EngineConfig, TrunkConfig, EvalConfig):
        keys += [cls.label(name) for name, *_ in described(cls)]
    keys += [f"sampler.{k}" for k in option_names()] + ["sampler.name", "soups.methods", *LEGACY]
    return keys + [f"soups.{n}.{k}" for n in SOUPS.names() if SOUPS.options(n)
                   for k, *_ in described(SOUPS.options(n))]


def load_config(path: str | Path, overrides: dict | None = None) -> RunConfig:
    return build_config(load_toml(path), overrides, source=str(path))
