"""ladle's example configs, one per soup method and a mixed recipe, shipped with the package.

``ladle run --config example:gis`` runs one; ``ladle examples gis > my.toml`` copies one to edit.
"""
from __future__ import annotations

from pathlib import Path

from ladle.errors import LadleError, suggest

FOLDER = Path(__file__).resolve().parent


def examples() -> dict[str, str]:
    """Each example's name and its first comment line."""
    out = {}
    for path in sorted(FOLDER.glob("*.toml")):
        first = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
        out[path.stem] = first
    return out


def example_path(name: str) -> Path:
    if name not in examples():
        raise LadleError(f"unknown example {name!r}", fix=suggest(name, list(examples())))
    return FOLDER / f"{name}.toml"
