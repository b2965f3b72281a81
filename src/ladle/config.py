"""Frozen, validated configuration: what a run is, in full, so it can be rerun.

Precedence, lowest first: ladle's defaults, the chosen model's defaults, the config file,
the command-line flags. The resolved result is written as ``config.toml`` beside every run.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ladle.errors import LadleError, normalise_name, suggest
from ladle.seeding import derive_seed

MAX_INGREDIENTS = 256
MAX_SIZE = 2**16  # hidden channels: far beyond any GNN, and a bound before anything is allocated
MODEL_NAMES = ("gcn", "sage", "gat", "gin", "mlp")
MODEL_ALIASES = {"graphsage": "sage", "sage": "sage", "gcn": "gcn", "gat": "gat", "gin": "gin", "mlp": "mlp"}
NORMS = ("none", "batch", "layer")
INIT_MODES = ("shared", "independent")
DEVICE_TYPES = ("cpu", "cuda")
METRIC_CHOICES = ("auto", "acc", "rocauc", "f1")
BASELINES = ("none", "long")
IDENTITY_EXCLUDED = ("root", "engine", "soups", "granularity", "learned")

# Per-architecture defaults: the settings of each model's paper on Planetoid.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "gcn": {"hidden": 64, "dropout": 0.5},
    "sage": {"hidden": 64, "dropout": 0.5},
    "gat": {"hidden": 64, "heads": 8, "dropout": 0.6},
    "gin": {"hidden": 64, "dropout": 0.5},
    "mlp": {"hidden": 64, "dropout": 0.5},
}
# GAT learns slowly at its paper's lr and dropout: at 200 epochs its best validation epoch is still near the end.
TRAIN_DEFAULTS: dict[str, dict[str, Any]] = {"gat": {"lr": 0.005, "epochs": 500}}


def resolve_model_name(name: str) -> str:
    key = normalise_name(str(name))
    if key not in MODEL_ALIASES:
        raise LadleError(f"unknown model {name!r}", fix=suggest(str(name), MODEL_NAMES))
    return MODEL_ALIASES[key]


@dataclass(frozen=True)
class ModelConfig:
    """An architecture and its hyperparameters: enough to rebuild any checkpoint.

    Args:
        name: one of ``gcn``, ``sage``, ``gat``, ``gin``, ``mlp`` (default ``gcn``).
        hidden: hidden channels; for GAT the total over heads (default 64).
        layers: message-passing layers, the last one maps to the classes (default 2).
        dropout: dropout after each hidden layer (default 0.5).
        input_dropout: dropout on the input features; ``None`` means ``dropout``.
        norm: ``none``, ``batch`` or ``layer`` after each hidden layer (default ``none``).
        residual: add a layer's input to its output where the shapes agree (default False).
        heads: attention heads of GAT's hidden layers (default 8).
    """

    name: str = "gcn"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    input_dropout: float | None = None
    norm: str = "none"
    residual: bool = False
    heads: int = 8

    def __post_init__(self):
        object.__setattr__(self, "name", resolve_model_name(self.name))
        _check_int("model.hidden", self.hidden, 1, MAX_SIZE)
        _check_int("model.layers", self.layers, 1, 16)
        _check_prob("model.dropout", self.dropout)
        if self.input_dropout is not None:
            _check_prob("model.input_dropout", self.input_dropout)
        _check_choice("model.norm", self.norm, NORMS)
        _check_bool("model.residual", self.residual)
        _check_int("model.heads", self.heads, 1, 64)
        if self.name == "gat" and self.hidden % self.heads:
            raise LadleError(
                f"model.hidden={self.hidden} is not a multiple of model.heads={self.heads}",
                fix="GAT splits the hidden channels over its heads; pick hidden = heads * k",
            )


@dataclass(frozen=True)
class TrainConfig:
    """How one ingredient is trained (Adam, full batch; keeps the best-validation weights).

    Args:
        epochs: training epochs (default 200; 500 for GAT).
        lr: Adam learning rate (default 0.01; 0.005 for GAT).
        weight_decay: Adam L2 penalty (default 5e-4).
        eval_every: validate every k epochs; the best-validation weights are kept (default 1).
        eval_chunk: nodes per chunk of layer-wise inference for validation and soups, bounding memory
            on graphs too large for one full-batch forward; 0 means one full-batch forward (default 0).
        patience: early stopping: stop after this many validations without a better score, keeping the
            best weights; 0 trains every epoch (default 0).
    """

    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    eval_every: int = 1
    eval_chunk: int = 0
    patience: int = 0

    def __post_init__(self):
        _check_int("train.epochs", self.epochs, 1, 1_000_000)
        _check_float("train.lr", self.lr, 0.0, 10.0, open_low=True)
        _check_float("train.weight_decay", self.weight_decay, 0.0, 1.0)
        _check_int("train.eval_every", self.eval_every, 1, self.epochs)
        _check_int("train.eval_chunk", self.eval_chunk, 0)
        _check_int("train.patience", self.patience, 0, 1_000_000)


@dataclass(frozen=True)
class TrunkConfig:
    """A shared trunk the ingredients branch from (Frankle et al., ICML 2020, *Linear Mode Connectivity and
    the Lottery Ticket Hypothesis*: after a short common trunk, runs that differ only in SGD noise are linearly
    connected, the condition for averaging their weights to help).

    Args:
        epochs: epochs one model trains, with the run's sampler, before every ingredient starts from its
            weights with its own data seed; 0 starts each ingredient from the shared initialisation (default 0).
    """

    epochs: int = 0

    def __post_init__(self):
        _check_int("trunk.epochs", self.epochs, 0, 1_000_000)


SAMPLERS = ("full", "neighbor", "cluster", "saint-node", "saint-edge", "saint-rw", "fastgcn", "ladies")


def resolve_sampler_name(name: str) -> str:
    key = normalise_name(str(name))
    for choice in SAMPLERS:
        if normalise_name(choice) == key:
            return choice
    aliases = {"clustergcn": "cluster", "sage": "neighbor", "neighbour": "neighbor", "saintrw": "saint-rw",
               "graphsaint": "saint-rw"}
    if key in aliases:
        return aliases[key]
    raise LadleError(f"unknown sampler {name!r}", fix=suggest(str(name), SAMPLERS))


@dataclass(frozen=True)
class SamplerConfig:
    """How an ingredient sees the graph during training.

    Args:
        name: ``full`` (default), ``neighbor``, ``cluster``, ``saint-node``, ``saint-edge``, ``saint-rw``,
            ``fastgcn``, ``ladies``.
        fanouts: neighbours sampled per layer, outermost hop first (neighbor; default 15,10).
        batch_size: seed (training) nodes per mini-batch (neighbor, fastgcn, ladies; default 512).
        parts: METIS parts of the graph (cluster; default 32).
        parts_per_batch: parts joined into one batch, with all edges among them (cluster; default 4).
        budget: nodes (saint-node), edges (saint-edge) or walk roots (saint-rw) drawn per subgraph, or nodes
            drawn per layer (fastgcn, ladies) (default 1000).
        walk_length: random-walk length (saint-rw; default 2).
        steps: subgraphs per epoch; 0 means enough to cover the nodes about once (saint; default 0).
        coverage: pre-sampled subgraphs per node, on average, to estimate GraphSAINT's normalisations (default 20).
    """

    name: str = "full"
    fanouts: tuple[int, ...] = (15, 10)
    batch_size: int = 512
    parts: int = 32
    parts_per_batch: int = 4
    budget: int = 1000
    walk_length: int = 2
    steps: int = 0
    coverage: int = 20

    def __post_init__(self):
        object.__setattr__(self, "name", resolve_sampler_name(self.name))
        if isinstance(self.fanouts, (str, int)) or not all(
                isinstance(f, int) and not isinstance(f, bool) for f in self.fanouts):
            raise LadleError(f"sampler.fanouts must be a list of integers, got {self.fanouts!r}",
                             fix="for example fanouts = [15, 10] (or --fanouts 15,10)")
        object.__setattr__(self, "fanouts", tuple(self.fanouts))
        for i, f in enumerate(self.fanouts):
            _check_int(f"sampler.fanouts[{i}]", f, 1)
        _check_int("sampler.batch_size", self.batch_size, 1)
        _check_int("sampler.parts", self.parts, 1)
        _check_int("sampler.parts_per_batch", self.parts_per_batch, 1, self.parts)
        _check_int("sampler.budget", self.budget, 1)
        _check_int("sampler.walk_length", self.walk_length, 1, 100)
        _check_int("sampler.steps", self.steps, 0)
        _check_int("sampler.coverage", self.coverage, 1, 10_000)


PARTITION_METHODS = ("none", "metis", "random")


@dataclass(frozen=True)
class PartitionConfig:
    """Partitioned ingredients, Graph Ladling's "divide the giant graph" mode.

    Args:
        method: ``none`` (default), ``metis`` or ``random``: ingredient i trains only on part i mod K.
        parts: K, the number of parts; 0 means one per ingredient (default 0).
        halo: also give each part its 1-hop neighbours as message sources, without their labels (default False).
    """

    method: str = "none"
    parts: int = 0
    halo: bool = False

    def __post_init__(self):
        _check_choice("partition.method", self.method, PARTITION_METHODS)
        _check_int("partition.parts", self.parts, 0)
        _check_bool("partition.halo", self.halo)


LEARNED_INITS = ("uniform", "best")


@dataclass(frozen=True)
class LearnedSoupConfig:
    """The learned soups (``learned``, ``pls``): mixing weights fitted on the validation nodes.

    Args:
        epochs: SGD steps on the mixing weights (default 100).
        lr: SGD learning rate, momentum 0.9 (default 0.5).
        t0: period, in epochs, of the cosine annealing with warm restarts (default 25).
        init: ``uniform`` (every ingredient 1/K, the default) or ``best`` (start from the best ingredient by val).
        parts: METIS parts K of the graph (pls; default 16).
        parts_per_epoch: parts R whose induced subgraph each epoch uses (pls; default 4).
    """

    epochs: int = 100
    lr: float = 0.5
    t0: int = 25
    init: str = "uniform"
    parts: int = 16
    parts_per_epoch: int = 4

    def __post_init__(self):
        _check_int("learned.epochs", self.epochs, 1, 1_000_000)
        _check_float("learned.lr", self.lr, 0.0, 1e6, open_low=True)
        _check_int("learned.t0", self.t0, 1, 1_000_000)
        _check_choice("learned.init", self.init, LEARNED_INITS)
        _check_int("learned.parts", self.parts, 1, 1_000_000)
        _check_int("learned.parts_per_epoch", self.parts_per_epoch, 1, self.parts)


ENGINE_NAMES = ("auto", "serial", "process", "ray")


@dataclass(frozen=True)
class EngineConfig:
    """Where the ingredients train; never changes their weights (bit-identical on CPU).

    Args:
        name: ``auto`` (default: ``process`` when workers > 1, else ``serial``), ``serial``, ``process`` or ``ray``.
        workers: local worker processes (process; default 1).
        threads: torch threads each ingredient trains with (default 1). Floating-point sums depend on it,
            so the same ``threads`` gives bit-identical weights on every engine and worker count.
        retries: times a killed or failed ingredient is retried before the run stops (default 2).
        address: Ray cluster address, ``auto`` or ``HOST:PORT``; empty means ``RAY_ADDRESS`` or a local
            Ray started for the run (ray; default empty).
        cpus_per_ingredient: Ray CPUs each ingredient task reserves (ray; default 1).
        gpus_per_ingredient: Ray GPUs each ingredient task reserves (ray; default 0).
    """

    name: str = "auto"
    workers: int = 1
    threads: int = 1
    retries: int = 2
    address: str = ""
    cpus_per_ingredient: float = 1.0
    gpus_per_ingredient: float = 0.0

    def __post_init__(self):
        _check_choice("engine.name", self.name, ENGINE_NAMES)
        _check_int("engine.workers", self.workers, 1, 4096)
        _check_int("engine.threads", self.threads, 1, 4096)
        _check_int("engine.retries", self.retries, 0, 100)
        if not isinstance(self.address, str):
            raise LadleError(f"engine.address must be a string, got {self.address!r}", fix='for example address = "auto"')
        for key in ("cpus_per_ingredient", "gpus_per_ingredient"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise LadleError(f"engine.{key} must be a number >= 0, got {value!r}", fix=f"for example {key} = 1")
        if self.cpus_per_ingredient == 0 and self.gpus_per_ingredient == 0:
            raise LadleError("engine.cpus_per_ingredient and gpus_per_ingredient are both 0",
                             fix="reserve at least one CPU or GPU per ingredient")

    @property
    def resolved(self) -> str:
        if self.name != "auto":
            return self.name
        return "process" if self.workers > 1 else "serial"


@dataclass(frozen=True)
class Recipe:
    """``count`` ingredients trained with one sampler (and, optionally, their own data-seed base)."""

    count: int
    sampler: SamplerConfig
    seed: int | None = None


ROLES = ("ingredient", "trunk", "long")


@dataclass(frozen=True)
class IngredientSpec:
    """Everything one worker needs to train one model of a run, and nothing else.

    ``role`` is ``ingredient`` (the soups' members), ``trunk`` (trained once, the ingredients' start) or
    ``long`` (the equal-compute baseline: one model, K times the budget); ``trunk_epochs`` > 0 means this
    model starts from the run's stored trunk.
    """

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

    @property
    def name(self) -> str:
        return f"ingredient-{self.index:02d}" if self.role == "ingredient" else self.role


@dataclass(frozen=True)
class RunConfig:
    """A whole run: data, model, ingredients, soups.

    Args:
        dataset: a name from ``ladle datasets``, ``npz:PATH[#K]`` or ``csbm[:k=v,...]`` (default ``csbm``).
        root: folder holding downloaded datasets (default ``data``).
        ingredients: how many models to train and soup (default 8).
        seed: the pipeline seed; initialisation and data-order seeds derive from it (default 0).
        init: ``shared`` (one initialisation for all ingredients, the default) or ``independent``.
        soups: soup methods to run, in order (default uniform, greedy, gis, ensemble).
        granularity: number of α values GIS tries per step, ``linspace(0, 1, granularity)`` (default 20).
        device: torch device string (default ``cpu``).
        metric: ``auto`` (the dataset's own: OGB's, ROC-AUC for a binary npz graph, else accuracy), or
            ``acc``, ``rocauc`` or ``f1``: what selection, early stopping, soups and the report use.
        baseline: ``none`` (default) or ``long``: also train one model with K times an ingredient's epochs
            and patience (from the trunk, if any), the equal-compute baseline of the report.
    """

    dataset: str = "csbm"
    root: str = "data"
    ingredients: int = 8
    seed: int = 0
    init: str = "shared"
    soups: tuple[str, ...] = ("uniform", "greedy", "gis", "ensemble")
    granularity: int = 20
    device: str = "cpu"
    metric: str = "auto"
    baseline: str = "none"
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    learned: LearnedSoupConfig = field(default_factory=LearnedSoupConfig)
    trunk: TrunkConfig = field(default_factory=TrunkConfig)
    recipes: tuple[Recipe, ...] = ()

    def __post_init__(self):
        _check_str("dataset", self.dataset)
        _check_str("root", self.root)
        _check_int("ingredients", self.ingredients, 1, MAX_INGREDIENTS)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_choice("init", self.init, INIT_MODES)
        if not isinstance(self.soups, (list, tuple)) or not all(isinstance(s, str) for s in self.soups):
            raise LadleError("soups must be a list of method names", fix='for example soups = ["uniform", "gis"]')
        object.__setattr__(self, "soups", tuple(self.soups))
        _check_int("granularity", self.granularity, 2, 10_000)
        _check_str("device", self.device)
        _check_choice("metric", self.metric, METRIC_CHOICES)
        _check_choice("baseline", self.baseline, BASELINES)
        if self.device.split(":")[0] not in DEVICE_TYPES:
            raise LadleError(f"device must be cpu, cuda or cuda:N, got {self.device!r}", fix=_fix("device", "cpu or cuda"))
        for where, sampler in [("sampler", self.sampler)] + [(f"recipes[{i}].sampler", r.sampler)
                                                            for i, r in enumerate(self.recipes)]:
            if sampler.name == "neighbor" and len(sampler.fanouts) != self.model.layers:
                raise LadleError(f"{where}.fanouts has {len(sampler.fanouts)} entries for a {self.model.layers}-layer "
                                 "model", fix="give one fanout per layer, for example --fanouts 15,10 for 2 layers")
        if self.recipes and sum(r.count for r in self.recipes) != self.ingredients:
            raise LadleError(f"the recipes add up to {sum(r.count for r in self.recipes)} ingredients but "
                             f"ingredients = {self.ingredients}", fix="make the counts add up to ingredients")

    def ingredient_specs(self) -> list[IngredientSpec]:
        shared = derive_seed(self.seed, "init")
        recipes = self.recipes or (Recipe(self.ingredients, self.sampler),)
        per_ingredient = [r for r in recipes for _ in range(r.count)]
        parts = self.partition.parts or self.ingredients
        return [
            IngredientSpec(
                index=i,
                model=self.model,
                train=self.train,
                init_seed=shared if self.init == "shared" else derive_seed(self.seed, "init", i),
                data_seed=derive_seed(self.seed if recipe.seed is None else recipe.seed, "data", i),
                sampler=recipe.sampler,
                partition=self.partition,
                part=None if self.partition.method == "none" else i % parts,
                trunk_epochs=self.trunk.epochs,
            )
            for i, recipe in enumerate(per_ingredient)
        ]

    def trunk_spec(self) -> IngredientSpec | None:
        """The shared trunk: the run's sampler on the whole graph, validated once, at its last epoch (so its
        weights are those after ``trunk.epochs`` epochs, the branching point), with a data seed of its own."""
        if not self.trunk.epochs:
            return None
        train = dataclasses.replace(self.train, epochs=self.trunk.epochs, eval_every=self.trunk.epochs, patience=0)
        return IngredientSpec(index=0, model=self.model, train=train, init_seed=derive_seed(self.seed, "init"),
                              data_seed=derive_seed(self.seed, "trunk"), sampler=self.sampler, role="trunk")

    def long_spec(self) -> IngredientSpec | None:
        """The equal-compute baseline: one model on the whole graph with K times an ingredient's epochs and
        patience, from the trunk when there is one, so both sides spend the same epochs."""
        if self.baseline != "long":
            return None
        k = self.ingredients
        train = dataclasses.replace(self.train, epochs=k * self.train.epochs, patience=k * self.train.patience)
        return IngredientSpec(index=0, model=self.model, train=train, init_seed=derive_seed(self.seed, "init"),
                              data_seed=derive_seed(self.seed, "long"), sampler=self.sampler, role="long",
                              trunk_epochs=self.trunk.epochs)

    def identity(self) -> dict[str, Any]:
        """What decides the ingredients' weights: everything but where they train and which data root holds
        the graph (the graph itself is checked by fingerprint), and the soup settings, which a later
        ``ladle soup`` may change. Recorded in the run and every sidecar; a resume may not change it."""
        out = self.to_dict()
        for key in IDENTITY_EXCLUDED:
            out.pop(key, None)
        return out

    def identity_sha256(self) -> str:
        import hashlib
        import json

        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["soups"] = list(self.soups)
        out["sampler"]["fanouts"] = list(self.sampler.fanouts)
        out["recipes"] = [{"count": r.count, **({} if r.seed is None else {"seed": r.seed}),
                           "sampler": {**r.sampler.__dict__, "fanouts": list(r.sampler.fanouts)}}
                          for r in self.recipes]
        if out["model"]["input_dropout"] is None:
            del out["model"]["input_dropout"]
        return out


# ---------------------------------------------------------------- building


def build_config(file_values: dict | None = None, overrides: dict | None = None, *, source: str = "config") -> RunConfig:
    """Merge defaults, model defaults, a config file's values and flag overrides into a RunConfig.

    ``overrides`` uses dotted keys for the nested tables (``{"model.hidden": 16}``); ``None``
    values are ignored so argparse defaults can be passed straight through.
    """
    merged: dict[str, Any] = {}
    file_values = dict(file_values or {})
    recipes = _recipes(file_values.pop("recipes", []), source)
    for key, value in _flatten(file_values, source).items():
        merged[key] = value
    for key, value in (overrides or {}).items():
        if value is not None:
            merged[key] = value
    _reject_unknown(merged, source)
    name = resolve_model_name(merged.get("model.name", "gcn"))
    defaults = {f"model.{k}": v for k, v in MODEL_DEFAULTS[name].items()}
    defaults.update({f"train.{k}": v for k, v in TRAIN_DEFAULTS.get(name, {}).items()})
    values = {**defaults, **merged}
    top = {k: v for k, v in values.items() if "." not in k}
    tables = {t: {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(f"{t}.")} for t in TABLES}
    if recipes and "ingredients" not in top:
        top["ingredients"] = sum(r.count for r in recipes)
    return RunConfig(**top, **{name: TABLES[name](**kw) for name, kw in tables.items()}, recipes=recipes)


def _recipes(entries, source: str) -> tuple[Recipe, ...]:
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
        bad = set(sampler) - {f.name for f in fields(SamplerConfig)}
        if bad:
            key = sorted(bad)[0]
            raise LadleError(f"{source}: recipes[{i}].sampler has unknown key {key!r}",
                             fix=suggest(key, [f.name for f in fields(SamplerConfig)]))
        count = entry.get("count", 1)
        _check_int(f"recipes[{i}].count", count, 1, MAX_INGREDIENTS)
        seed = entry.get("seed")
        if seed is not None:
            _check_int(f"recipes[{i}].seed", seed, 0, 2**63 - 1)
        out.append(Recipe(count, SamplerConfig(**sampler), seed))
    return tuple(out)


def load_toml(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as some editors write, is not TOML
    except FileNotFoundError:
        raise LadleError(f"config file {path} does not exist", fix="check the path given to --config") from None
    except (OSError, UnicodeDecodeError) as err:
        raise LadleError(f"cannot read config file {path}: {err}", fix="give a readable UTF-8 TOML file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LadleError(f"{path} is not valid TOML: {err}", fix="see examples/*.toml for the layout") from None


def load_config(path: str | Path, overrides: dict | None = None) -> RunConfig:
    return build_config(load_toml(path), overrides, source=str(path))


def dump_toml(values: dict[str, Any]) -> str:
    """Write the flat-plus-one-level-of-tables TOML that RunConfig needs."""
    lines, tables, arrays = [], [], []
    for key, value in values.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        elif value is not None and not (value == [] and key == "recipes"):
            lines.append(f"{key} = {_toml_value(value)}")  # an empty soups list stays empty when read back
    for name, table in tables:
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None)
    for name, entries in arrays:
        for entry in entries:
            lines.append(f"\n[[{name}]]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in entry.items() if not isinstance(v, dict))
            lines.extend(f"{k} = {{ {', '.join(f'{a} = {_toml_value(b)}' for a, b in v.items())} }}"
                         for k, v in entry.items() if isinstance(v, dict))
    return "\n".join(lines) + "\n"


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"'}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):  # a TOML basic string: backslash, quote and control characters escaped
        return '"' + "".join(_TOML_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
                             for c in value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


TABLES = {"model": ModelConfig, "train": TrainConfig, "sampler": SamplerConfig, "partition": PartitionConfig,
          "engine": EngineConfig, "learned": LearnedSoupConfig, "trunk": TrunkConfig}


def _known_keys() -> set[str]:
    keys = {f.name for f in fields(RunConfig) if f.name not in TABLES and f.name != "recipes"}
    for table, cls in TABLES.items():
        keys |= {f"{table}.{f.name}" for f in fields(cls)}
    return keys


def _flatten(values: dict, source: str) -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            if key not in TABLES:
                raise LadleError(f"{source}: unknown table [{key}]", fix=suggest(key, TABLES))
            for sub, inner in value.items():
                flat[f"{key}.{sub}"] = inner
        else:
            flat[key] = value
    return flat


def _reject_unknown(values: dict, source: str) -> None:
    known = _known_keys()
    for key in values:
        if key not in known:
            raise LadleError(f"{source}: unknown key {key!r}", fix=suggest(key, known))


# ---------------------------------------------------------------- checks


def _fix(name, what):
    """Where a value comes from: a flag or the config file; say so once, for every check."""
    return f"give {name} {what} (its command-line flag, or the config file)"


def _check_int(name, value, low, high=None):
    bound = f">= {low}" if high is None else f"between {low} and {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise LadleError(f"{name} must be an integer, got {value!r}", fix=_fix(name, f"an integer {bound}"))
    if value < low or (high is not None and value > high):
        raise LadleError(f"{name} must be {bound}, got {value}", fix=_fix(name, f"a value {bound}"))


def _check_float(name, value, low, high, open_low=False):
    interval = f"{'(' if open_low else '['}{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LadleError(f"{name} must be a finite number, got {value!r}", fix=_fix(name, f"a number in {interval}"))
    if value < low or value > high or (open_low and value == low):
        raise LadleError(f"{name} must be in {interval}, got {value}", fix=_fix(name, f"a number in {interval}"))


def _check_prob(name, value):
    _check_float(name, value, 0.0, 0.95)


def _check_bool(name, value):
    if not isinstance(value, bool):
        raise LadleError(f"{name} must be true or false, got {value!r}", fix=_fix(name, "true or false"))


def _check_str(name, value):
    if not isinstance(value, str) or not value:
        raise LadleError(f"{name} must be a non-empty string, got {value!r}", fix=_fix(name, "a non-empty string"))


def _check_choice(name, value, choices):
    if value not in choices:
        raise LadleError(f"{name} must be one of {', '.join(choices)}, got {value!r}", fix=suggest(str(value), choices))
