"""Registries: each family (soups, samplers, engines, models, datasets) maps names to its members.

An entry names its implementation by import path (loaded when first used, so listing a family or
reading a config imports no torch), its options dataclass (the same, declared beside the code), a
reference and one line of help, and the traits the code outside its family asks about instead of
naming it. Adding a member is its own file plus one ``add`` line in its family's registry; a test or a
user's own code can ``add`` one at run time with the objects themselves.

Traits (what a member needs or produces, declared on its entry):

- sampler ``whole-graph``: each batch is the whole graph (drawn on the model's device; nothing random in it);
- soup ``predictions``: it produces predictions (its members' weights kept), not one set of weights;
- soup ``curves``: its trace holds interpolation curves the report plots.

What a member's *options* need is declared on them (:func:`ladle.options.option`): ``cuts`` (a METIS cut of that
many parts, checked and prepared before work starts) and ``per_layer`` (one value per layer of the model).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ladle.errors import LadleError, normalise_name, suggest


@dataclass
class Entry:
    name: str
    target: Any  # "module:attribute", or the object itself
    options: Any = None  # "module:attribute" of an Options dataclass, the class itself, or None
    help: str = ""
    aliases: tuple[str, ...] = ()
    reference: str = ""  # where the member comes from: a paper, or a dataset's source
    traits: frozenset = frozenset()  # what code outside the family asks about (see the module)

    def load(self) -> Any:
        if isinstance(self.target, str):
            self.target = _resolve(self.target)
        return self.target

    def options_class(self):
        if isinstance(self.options, str):
            self.options = _resolve(self.options)
        return self.options


def _resolve(path: str) -> Any:
    """``module:attribute``, or a whole ``module``."""
    module, _, attribute = path.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


class Registry:
    """Names of one family, case-, dash- and underscore-insensitive, with aliases; an unknown name is answered
    with the nearest choice."""

    def __init__(self, family: str):
        self.family = family
        self.entries: dict[str, Entry] = {}
        self._keys: dict[str, str] = {}

    def add(self, name: str, target: Any, options: Any = None, help: str = "", aliases: tuple[str, ...] = (),
            reference: str = "", traits: tuple[str, ...] = ()) -> Entry:
        entry = Entry(name, target, options, help, tuple(aliases), reference, frozenset(traits))
        self.entries[name] = entry
        for key in (name, *aliases):
            self._keys[normalise_name(key)] = name
        return entry

    def remove(self, name: str) -> None:
        entry = self.entries.pop(name)
        for key in (entry.name, *entry.aliases):
            self._keys.pop(normalise_name(key), None)

    def names(self) -> list[str]:
        return list(self.entries)

    def resolve(self, name: str, where: str | None = None) -> str:
        """The canonical name, or one LadleError naming the family, the given name and the choices."""
        key = normalise_name(str(name))
        if key not in self._keys:
            label = where or self.family
            raise LadleError(f"unknown {label} {name!r}", fix=suggest(str(name), self.names()))
        return self._keys[key]

    def __getitem__(self, name: str) -> Entry:
        return self.entries[self.resolve(name)]

    def __contains__(self, name: str) -> bool:
        return normalise_name(str(name)) in self._keys

    def get(self, name: str) -> Any:
        return self[name].load()

    def options(self, name: str):
        return self[name].options_class()

    def has(self, name: str, trait: str) -> bool:
        """Whether member ``name`` (a known one) declares ``trait``; an unknown name has none."""
        return name in self and trait in self[name].traits

    def with_trait(self, trait: str) -> list[str]:
        return [n for n, e in self.entries.items() if trait in e.traits]
