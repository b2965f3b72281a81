"""One exception type for everything a user can fix.

The CLI turns a :class:`LadleError` into one line on stderr and exit status 2; anything
else is a bug in ladle and is reported as such.
"""
from __future__ import annotations

import difflib


class LadleError(Exception):
    """A problem with the user's input: says what is wrong, where, and how to fix it."""

    def __init__(self, message: str, *, fix: str | None = None):
        self.message = message
        self.fix = fix
        super().__init__(message if fix is None else f"{message}\n  fix: {fix}")


def suggest(name: str, choices) -> str:
    """A short hint listing the nearest choices to a misspelt ``name``."""
    choices = sorted(choices)
    near = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    if near:
        return "did you mean " + " or ".join(repr(c) for c in near) + "? choices: " + ", ".join(choices)
    return "choices: " + ", ".join(choices)


def install_hint(extra: str, what: str = "") -> str:
    """The command that installs an optional extra, for a LadleError's fix (the same words everywhere)."""
    return f"pip install 'ladle[{extra}]' (in a clone: pip install -e '.[{extra}]'){what}"


def normalise_name(name: str) -> str:
    """Names are matched case-, dash- and underscore-insensitively (``GraphSAGE`` == ``graph-sage``)."""
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")
