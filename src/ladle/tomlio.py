"""TOML in and out for config files: read with tomllib, written with tomli-w."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from ladle.errors import LadleError


def load_toml(path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as some editors write, is not TOML
    except FileNotFoundError:
        raise LadleError(f"config file {path} does not exist", fix="check the path given to --config") from None
    except (OSError, UnicodeDecodeError) as err:
        raise LadleError(f"cannot read config file {path}: {err}", fix="give a readable UTF-8 TOML file") from None
    return parse_toml(text, path)


def parse_toml(text: str, path) -> dict:
    """TOML text as a dict, or one error naming the file (a document nested past the parser's depth included)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise LadleError(f"{path} is not valid TOML: {err}", fix="see ladle examples for the layout") from None
    except RecursionError:
        raise LadleError(f"{path} is nested too deeply to be a ladle config", fix="see ladle examples for the "
                                                                                  "layout") from None


def dump_toml(values: dict[str, Any]) -> str:
    """TOML of nested tables and arrays of tables (what ``RunConfig.to_dict`` gives), written by ``tomli-w`` (keys
    quoted where they must be); None, which TOML cannot hold, is left out as absent."""
    return tomli_w.dumps(_without_none(values))


def _without_none(value):
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value]
    return value
