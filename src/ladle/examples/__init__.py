"""ladle's example configs: those shipped with the package, and one generated for every soup that has none.

``ladle run --config example:gis`` runs one; ``ladle examples gis > my.toml`` copies one to edit. A soup added to
the registry (at run time, or in a file of its own) has an example without anyone writing one: its name, its help
and reference, and its options table at their defaults (:func:`generated`).
"""
from __future__ import annotations

from pathlib import Path

from ladle.errors import LadleError, suggest
from ladle.soups import SOUPS
from ladle.tomlio import dump_toml, parse_toml

FOLDER = Path(__file__).resolve().parent


def examples() -> dict[str, str]:
    """Each example's name and its description: the opening comment, whole, up to its command line (indented)."""
    texts = {path.stem: path.read_text() for path in sorted(FOLDER.glob("*.toml"))}
    texts.update({name: generated(name) for name in _soups_without_example(texts)})
    out = {}
    for name, text in sorted(texts.items()):
        words = []
        for line in text.splitlines():
            if not line.startswith("#") or line.startswith("#  ") or not line.strip("# "):
                break
            words.append(line.lstrip("# ").strip())
        out[name] = " ".join(words)
    return out


def example_text(name: str) -> str:
    """The TOML of example ``name``: the shipped file, or the one generated for a soup that has none."""
    path = FOLDER / f"{name}.toml"
    if path.is_file():
        return path.read_text()
    if name in _soups_without_example({p.stem: None for p in FOLDER.glob("*.toml")}):
        return generated(name)
    raise LadleError(f"unknown example {name!r}", fix=suggest(name, list(examples())))


def generated(name: str) -> str:
    """A config running soup ``name`` alone on a small synthetic graph, its options at their defaults."""
    entry = SOUPS[name]
    options = entry.options_class()
    values = {"dataset": "csbm", "ingredients": 4, "seed": 0, "soups": {"methods": [entry.name]}}
    if options is not None:
        values["soups"][entry.name] = options().to_dict()
    reference = f" ({entry.reference})" if entry.reference else ""
    return (f"# The {entry.name} soup: {entry.help}{reference}; generated from its registry entry, every option at "
            f"its default.\n#   ladle run --config example:{entry.name}\n" + dump_toml(values))


def _soups_without_example(shipped) -> list[str]:
    covered = set()
    for text in shipped.values():
        covered |= set(_methods(text)) if text is not None else set()
    return [n for n in SOUPS.names() if n not in covered and n not in shipped]


def _methods(text: str) -> list[str]:
    values = parse_toml(text, "example")
    methods = values.get("soups", {})
    return list(methods.get("methods", []) if isinstance(methods, dict) else methods)
