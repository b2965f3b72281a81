"""TOML in and out for config files: read with tomllib, written as nested tables (what ``RunConfig.to_dict`` gives)."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

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


def dump_toml(values: dict[str, Any], name: str = "") -> str:
    """TOML of nested tables and arrays of tables (what ``RunConfig.to_dict`` gives), one table after another."""
    scalars = {k: v for k, v in values.items() if not isinstance(v, (dict, list)) or (isinstance(v, list) and not (
        v and all(isinstance(e, dict) for e in v)))}
    lines = [f"[{name}]"] if name and (scalars or all(not isinstance(v, dict) for v in values.values())) else []
    lines += [f"{k} = {_toml_value(v)}" for k, v in scalars.items() if v is not None]
    blocks = ["\n".join(lines)] if lines else []
    for key, value in values.items():
        if isinstance(value, dict):
            blocks.append(dump_toml(value, f"{name}.{key}" if name else key).rstrip("\n"))
        elif key not in scalars:
            for entry in value:
                inline = [f"{k} = {{ {', '.join(f'{a} = {_toml_value(b)}' for a, b in v.items())} }}"
                          if isinstance(v, dict) else f"{k} = {_toml_value(v)}" for k, v in entry.items()]
                blocks.append("\n".join([f"[[{key}]]", *inline]))
    return "\n\n".join(b for b in blocks if b) + "\n"


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
