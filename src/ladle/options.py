"""Options: the small frozen dataclasses each family member declares beside its code (mergekit's way).

A field is declared with :func:`option`: its default, a one-line help, and its bounds or choices.
From those alone ladle validates values (one message naming the field and the fix), reads and
writes TOML tables, and derives the command-line flags and their help, so nothing is typed twice.
This module imports no torch: reading a config stays cheap.

    @dataclass(frozen=True)
    class GISOptions(Options):
        table: ClassVar[str] = "soups.gis"
        granularity: int = option(20, "α values tried per step, linspace(0, 1, granularity)", low=2, high=10_000)
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from ladle.errors import LadleError, suggest


def option(default: Any, help: str, *, low: float | None = None, high: float | None = None,
           choices: tuple | None = None, flag: str | None = None, open_low: bool = False, name: str | None = None,
           empty: bool = False, before: Any = MISSING, per_layer: bool = False, cuts: str | None = None,
           unrecorded: Any = MISSING, only: tuple[str, ...] = ()):
    """A dataclass field with its help line and bounds.

    Args:
        default: the default value (a tuple for list-valued options).
        help: one line for ``--help`` and the docs.
        low, high: inclusive bounds of a number (``open_low``: ``low`` itself excluded).
        choices: the allowed values of a string.
        flag: the command-line flag, if not ``--field-name``; ``""`` for no flag.
        name: the name messages use, if not ``TABLE.FIELD`` (the flat names that predate tables).
        empty: whether a string may be empty.
        before: the value every run had before this option existed: at that value the run's identity leaves it
            out and an older sidecar, which does not record it, is read as having it.
        unrecorded: the value of a setting that sidecars written before it was recorded do not hold (they are read
            as having it); unlike ``before``, the run's identity keeps the option at every value.
        only: the members the option does something for (others share the options class): for any other member
            it stays out of the run's identity and of the settings a stored ingredient is compared on.
        per_layer: a list with one value per layer of the model (checked against the model's depth).
        cuts: the option is how many parts the member cuts the graph into, with this method (``"metis"``): the
            run checks the graph has that many nodes, and needs METIS installed, before anything trains.
    """
    meta = {"help": help, "low": low, "high": high, "choices": choices, "flag": flag, "open_low": open_low,
            "name": name, "empty": empty, **({} if before is MISSING else {"before": before}),
            **({"per_layer": True} if per_layer else {}), **({"cuts": cuts} if cuts else {}),
            **({} if unrecorded is MISSING else {"unrecorded": unrecorded}), **({"only": tuple(only)} if only else {})}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Options:
    """Base of every options dataclass: validated on construction from the fields' declarations."""

    table: ClassVar[str] = ""  # where the options live in a config file ("train", "soups.gis", ...)

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value = check_value(self.label(f.name), getattr(self, f.name), hints[f.name], f.metadata)
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Checks across fields (one option bounded by another); the fields' own are done already."""

    @classmethod
    def label(cls, name: str) -> str:
        for f in fields(cls):
            if f.name == name and f.metadata.get("name"):
                return f.metadata["name"]
        return f"{cls.table}.{name}" if cls.table else name

    @classmethod
    def build(cls, values: dict, source: str) -> Options:
        """From a config table, refusing unknown keys with the nearest known one."""
        known = [f.name for f in fields(cls)]
        for key in values:
            if key not in known:
                raise LadleError(f"{source}: unknown key {cls.label(key)!r}", fix=suggest(cls.label(key),
                                                                                         [cls.label(k) for k in known]))
        return cls(**values)

    def to_dict(self) -> dict:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


def described(cls) -> list[tuple[str, Any, dict]]:
    """(name, default, metadata) of each field: what the CLI and the docs are derived from."""
    out = []
    for f in fields(cls):
        default = f.default if f.default is not MISSING else f.default_factory()
        out.append((f.name, default, dict(f.metadata)))
    return out


def fix_for(name: str, what: str) -> str:
    """Where a value comes from: a flag or the config file; said once, for every check."""
    return f"give {name} {what} (its command-line flag, or the config file)"


def check_value(name: str, value, kind, meta) -> Any:
    """``value`` if it fits ``kind`` and the bounds in ``meta``; one LadleError otherwise. Lists become tuples."""
    low, high, choices = meta.get("low"), meta.get("high"), meta.get("choices")
    origin = typing.get_origin(kind)
    if kind is bool:
        if not isinstance(value, bool):
            raise LadleError(f"{name} must be true or false, got {value!r}", fix=fix_for(name, "true or false"))
        return value
    if kind is int:
        check_int(name, value, low, high)
        return value
    if kind is float:
        check_float(name, value, low, high, meta.get("open_low", False))
        return float(value)
    if kind is str:
        if not isinstance(value, str) or not (value or meta.get("empty") or choices is not None):
            raise LadleError(f"{name} must be a non-empty string, got {value!r}", fix=fix_for(name, "a non-empty string"))
        if choices is not None and value not in choices:
            raise LadleError(f"{name} must be one of {', '.join(choices)}, got {value!r}",
                             fix=suggest(str(value), choices))
        return value
    if origin in (typing.Union, types.UnionType):  # an optional value: None, or the one type it may be
        inner = next(a for a in typing.get_args(kind) if a is not type(None))
        return None if value is None else check_value(name, value, inner, meta)
    if origin is tuple and typing.get_args(kind)[0] is str:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise LadleError(f"{name} must be a list of names, got {value!r}", fix=f'for example {name} = ["a", "b"]')
        return tuple(value)
    if origin is tuple and typing.get_args(kind)[0] is int:
        if isinstance(value, (str, int)) or not isinstance(value, (list, tuple)) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise LadleError(f"{name} must be a list of integers, got {value!r}",
                             fix=f"for example {name.split('.')[-1]} = [15, 10]")
        for i, v in enumerate(value):
            check_int(f"{name}[{i}]", v, low, high)
        return tuple(value)
    return value


def check_int(name, value, low, high=None):
    bound = f">= {low}" if high is None else f"between {low} and {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise LadleError(f"{name} must be an integer, got {value!r}", fix=fix_for(name, f"an integer {bound}"))
    if (low is not None and value < low) or (high is not None and value > high):
        raise LadleError(f"{name} must be {bound}, got {value}", fix=fix_for(name, f"a value {bound}"))


def check_float(name, value, low, high, open_low=False):
    interval = f"{'(' if open_low else '['}{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LadleError(f"{name} must be a finite number, got {value!r}", fix=fix_for(name, f"a number in {interval}"))
    if value < low or value > high or (open_low and value == low):
        raise LadleError(f"{name} must be in {interval}, got {value}", fix=fix_for(name, f"a number in {interval}"))


def replace(options: Options, **changes) -> Options:
    return dataclasses.replace(options, **changes)


def idle_for(cls, member: str) -> set[str]:
    """The fields of options class ``cls`` (None: none) that do nothing for ``member`` (declared ``only`` others)."""
    return {f.name for f in fields(cls) if f.metadata.get("only") and member not in f.metadata["only"]} \
        if cls is not None else set()


def marked(cls, key: str) -> list[dataclasses.Field]:
    """The fields of options class ``cls`` (None: none) whose declaration sets ``key`` (``per_layer``, ``cuts``)."""
    return [f for f in fields(cls) if f.metadata.get(key)] if cls is not None else []
