"""Files a loader needs: present, downloaded by the dataset's own library, or one clear error."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from ladle.errors import LadleError

log = logging.getLogger(__name__)


_NO_DOWNLOADS = ContextVar("ladle_no_downloads", default=False)


def offline() -> bool:
    return os.environ.get("LADLE_OFFLINE", "").lower() not in ("", "0", "false", "no")


@contextmanager
def no_downloads():
    """Within the block a missing dataset is an error, never a download: a stored run's graph (soup, verify,
    predict, resume) is read from the root the user names, and a wrong root must not fetch anything into it."""
    token = _NO_DOWNLOADS.set(True)
    try:
        yield
    finally:
        _NO_DOWNLOADS.reset(token)


def require_files(name: str, root, folder: Path, expected: list[str], download: Callable[[], None]) -> None:
    """Make sure ``folder`` holds ``expected``; download with the library's own code if not.

    Offline (``LADLE_OFFLINE=1``) or when the download fails, raise an error that names the
    dataset, the root and every expected file.
    """
    if all((folder / f).exists() for f in expected):
        return
    missing = [f for f in expected if not (folder / f).exists()]
    where = f"dataset {name}: {len(missing)} file(s) missing under root {root}: expected in {folder}: " + ", ".join(expected)
    if _NO_DOWNLOADS.get():
        raise LadleError(f"{where} (a stored run's data is read, never downloaded)",
                         fix="give the --root that holds the dataset")
    if offline():
        raise LadleError(where, fix="copy the files there, or unset LADLE_OFFLINE to let ladle download them")
    log.info("downloading %s into %s", name, root)
    try:
        download()
    except LadleError:
        raise
    except Exception as err:  # network errors come in many types; all mean the same to the user
        raise LadleError(f"{where} (download failed: {type(err).__name__}: {err})",
                         fix="connect to the internet or copy the files there by hand") from None
    if not all((folder / f).exists() for f in expected):
        raise LadleError(where, fix="the download did not produce them; copy them there by hand")


def download_raw(fetch: Callable[[Path], object], dataset_dir: Path, raw: str = "raw") -> None:
    """Run a library's downloader (``fetch(folder)``) in a fresh temporary folder and move only its raw files
    into ``dataset_dir/raw``. The library also processes what it fetched and reads that back (PyG's ``.pt``
    files, loaded with pickle as a fallback); in a fresh folder it can only read back what it just wrote,
    never a file already lying in the user's root."""
    with tempfile.TemporaryDirectory() as tmp:
        fetch(Path(tmp))
        found = [p for p in Path(tmp).rglob(raw) if p.is_dir()]
        if not found:
            raise LadleError(f"the download into {tmp} produced no {raw}/ folder", fix="copy the raw files by hand")
        target = Path(dataset_dir) / raw
        target.mkdir(parents=True, exist_ok=True)
        for item in found[0].iterdir():
            if item.is_file() and not item.is_symlink():
                shutil.move(str(item), target / item.name)
