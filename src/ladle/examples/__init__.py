"""ladle's example configs, one per soup method and a mixed recipe, shipped with the package.

``ladle run --config example:gis`` runs one; ``ladle examples gis > my.toml`` copies one to edit.
"""
from __future__ import annotations

from pathlib import Path

from ladle.errors import LadleError, suggest

FOLDER = Path(__file__).resolve().parent


def examples() -> dict[str, str]:
    """Each example's name and its description: the opening comment, whole, up to its command line (indented)."""
    out = {}
    for path in sorted(FOLDER.glob("*.toml")):
        words = []
        for line in path.read_text().splitlines():
            if not line.startswith("#") or line.startswith("#  ") or not line.strip("# "):
                break
            words.append(line.lstrip("# ").strip())
        out[path.stem] = " ".join(words)
    return out


def example_path(name: str) -> Path:
    if name not in examples():
        raise LadleError(f"unknown example {name!r}", fix=suggest(name, list(examples())))
    return FOLDER / f"{name}.toml"
