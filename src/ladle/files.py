"""Every file ladle writes or reads inside a run directory goes through here.

A run directory may come from someone else, so nothing inside it is trusted: no path below the
run's folder may be a symbolic link (a link could send a write, or a read, outside the run), a
file must be a regular file of bounded size, and JSON must be an object of bounded size and depth.
Writes are atomic (a temporary file created exclusively and without following links, flushed,
fsynced, renamed), so a reader sees the old file or the new one, never half of one; a full disk
or a read-only folder ends in one :class:`LadleError` naming the file, with everything written
before intact. Append-only logs are appended to under a lock of the log, and read back tolerating a
torn last line (a crash mid-append). One process writes a run at a time (:class:`RunLock`).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from ladle.errors import LadleError

MAX_JSON_BYTES = 64 * 2**20  # a sidecar with a long trace is a few MB; more is not one ladle wrote
MAX_JSON_DEPTH = 64
WRITE_FIX = ("free some space (or fix the folder's permissions), then ladle run --resume RUN_DIR: the files "
             "written before are intact")


def sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def check_inside(root: Path, path: Path) -> Path:
    """``path`` if it lies below ``root`` with no symbolic link on the way (``root`` itself may be one: the user
    named it); otherwise one LadleError naming the link."""
    root, path = Path(root), Path(path)
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise LadleError(f"{path} lies outside the run directory {root}", fix="give paths inside the run") from None
    if ".." in relative.parts:
        raise LadleError(f"{path} leaves the run directory {root}", fix="give paths inside the run")
    current = root
    for part in relative.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break  # what does not exist yet cannot be a link; it is created below a checked folder
        except OSError as err:
            raise LadleError(f"cannot inspect {current}: {err.strerror or err}", fix="check the run's permissions") from None
        if stat.S_ISLNK(mode):
            raise LadleError(f"{current} is a symbolic link; ladle never follows links inside a run directory",
                             fix="replace the link with the real file or folder (a copy), or restore the run")
    return path


def tracker_folder(root: Path, folder: Path) -> Path:
    """A folder inside a run that a third-party writer (TensorBoard, MLflow's SQLite, W&B) fills with its own I/O,
    which never meets ladle's checks: made here with no link on the way, a real folder, with no link anywhere
    inside it, so what the tracker opens by name stays inside the run."""
    root, folder = Path(root), Path(folder)
    check_inside(root, folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LadleError(f"cannot create {folder}: {err.strerror or err}", fix=WRITE_FIX) from None
    check_inside(root, folder)  # the folders just made, too
    if not folder.is_dir():
        raise LadleError(f"{folder} is not a folder", fix="remove it: the tracker writes a folder there")
    for where, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            if os.path.islink(os.path.join(where, name)):
                raise LadleError(f"{os.path.join(where, name)} is a symbolic link; a tracker would write through it",
                                 fix="remove the link (ladle never writes through links inside a run directory)")
    return folder


def atomic_write(path: Path, payload: bytes, *, root: Path | None = None) -> None:
    """Write ``payload`` to ``path`` atomically; with ``root``, refuse any link between ``root`` and ``path``.

    The temporary file is created exclusively and without following links, so a planted file or
    link of its name cannot redirect the write either.
    """
    path = Path(path)
    if root is not None:
        check_inside(root, path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    created = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if root is not None:
            check_inside(root, path)  # the folders just made, too
        try:
            os.unlink(tmp)  # a leftover of a crashed writer with our pid, or something planted
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        created = True
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        created = False
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        if created:
            _remove_quietly(tmp)
        raise LadleError(f"cannot write {path}: {err.strerror or err}", fix=WRITE_FIX) from None
    except BaseException:
        if created:
            _remove_quietly(tmp)
        raise


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:  # a read-only folder: the temporary file could not be made or cannot be removed; say nothing
        pass


def write_json(path: Path, value: Any, *, root: Path | None = None) -> None:
    atomic_write(path, (json.dumps(value, indent=2) + "\n").encode(), root=root)


def read_bytes(path: Path, *, root: Path | None = None, limit: int | None = None, what: str = "file") -> bytes:
    """A regular file's bytes (no link followed, none below ``root``), at most ``limit`` bytes."""
    path = Path(path)
    if root is not None:
        check_inside(root, path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise LadleError(f"{path} does not exist", fix=f"restore the {what}") from None
    except OSError as err:
        if err.errno == getattr(os, "ELOOP", None):
            raise LadleError(f"{path} is a symbolic link; ladle never follows links inside a run directory",
                             fix="replace the link with the real file") from None
        raise LadleError(f"cannot read {path}: {err.strerror or err}", fix=f"restore the {what}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a folder, a FIFO, a device: checked before Python wraps the descriptor
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise LadleError(f"{path} is {kind} where ladle expects a file", fix=f"restore the {what}")
    with os.fdopen(fd, "rb") as f:
        if limit is not None and info.st_size > limit:
            raise LadleError(f"{path} holds {info.st_size:,} bytes, more than the {limit:,} a {what} may",
                             fix=f"restore the {what} ladle wrote")
        return f.read()


def read_json(path: Path, *, root: Path | None = None, what: str = "file") -> dict:
    """A JSON object from ``path``; any other content (not JSON, another type, too large or too deep) is one
    LadleError naming the file."""
    text = read_bytes(path, root=root, limit=MAX_JSON_BYTES, what=what)
    fix = f"the {what} is damaged: restore it, or delete it and let ladle write it again"
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LadleError(f"{path} is not valid JSON ({err})", fix=fix) from None
    except RecursionError:
        raise LadleError(f"{path} is nested too deeply to be a file ladle wrote", fix=fix) from None
    if not isinstance(value, dict):
        raise LadleError(f"{path} holds a JSON {type(value).__name__}, not an object", fix=fix)
    if _depth(value) > MAX_JSON_DEPTH:
        raise LadleError(f"{path} is nested too deeply to be a file ladle wrote", fix=fix)
    return value


def _depth(value, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def read_jsonl(path: Path, *, root: Path | None = None) -> tuple[list[dict], bool]:
    """The objects of a JSON-lines log and whether its last line was torn (dropped). Absent: ``([], False)``.

    A damaged line before the last is not a torn append: one LadleError naming the file and line.
    """
    path = Path(path)
    if root is not None:
        check_inside(root, path)
    if not os.path.lexists(path):
        return [], False
    text = read_bytes(path, root=root, limit=MAX_JSON_BYTES, what="log")
    lines = text.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    records = []
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        record = _json_line(line)
        if record is None:
            if number == len(complete) and not tail.strip():  # the last line, then an empty tail
                return records, True
            raise LadleError(f"{path}: line {number} is not a JSON object",
                             fix="the log is damaged: delete the line, or the file (it only records timings)")
        records.append(record)
    if tail.strip():  # no newline at the end: an append that did not finish
        record = _json_line(tail)
        if record is None:
            return records, True
        records.append(record)
    return records, False


def _json_line(line: bytes) -> dict | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def append_jsonl(path: Path, record: dict, *, root: Path | None = None) -> None:
    """Append one object to a JSON-lines log: one ``write`` at the end of the file (``O_APPEND``), under an
    exclusive ``flock`` of the log, so that writers in several processes never lose each other's lines. A torn
    last line (a crash mid-append) is cut off first, so it never sits before a complete one."""
    path = Path(path)
    if root is not None:
        check_inside(root, path)
    line = (json.dumps(record) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if root is not None:
            check_inside(root, path)
        fd = _open_in_place(path, os.O_APPEND)
    except OSError as err:
        raise LadleError(f"cannot write {path}: {err.strerror or err}", fix=WRITE_FIX) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            tail = os.pread(fd, min(size, MAX_JSON_BYTES), max(0, size - MAX_JSON_BYTES))
            os.ftruncate(fd, size - len(tail) + tail.rfind(b"\n") + 1)
        os.write(fd, line)
        os.fsync(fd)
    except OSError as err:
        raise LadleError(f"cannot write {path}: {err.strerror or err}", fix=WRITE_FIX) from None
    finally:
        os.close(fd)  # and with it the lock


def _open_in_place(path: Path, flags: int = 0) -> int:
    """A read-write descriptor of the regular file ``path`` (made if absent), never through a link: for the files
    written in place rather than replaced (a log's appends, the run's lock)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | flags, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LadleError(f"{path} is not a regular file", fix="remove it; ladle makes it again")
    return fd


class RunLock:
    """The one writer of a run directory: an exclusive ``flock`` of ``RUN/.ladle-lock``, which holds the writer's
    pid and command while it writes (and nothing after). A second writer (two ``ladle soup`` at once, a ``ladle
    report`` during training) is refused with one message naming the holder; the kernel drops the lock when its
    process ends, however it ends. Re-entrant within a process (``ladle run`` soups and reports under one).

    Args:
        root: the run directory.
        what: the command taking it (shown to a second writer).
    """

    NAME = ".ladle-lock"
    _held: dict[str, list] = {}  # folder -> [fd, depth]

    def __init__(self, root: Path, what: str):
        self.root, self.what = Path(root), what

    def __enter__(self) -> RunLock:
        key = os.path.realpath(self.root)
        held = RunLock._held.get(key)
        if held is not None:
            held[1] += 1
            return self
        path = check_inside(self.root, self.root / self.NAME)
        try:
            fd = _open_in_place(path)
        except OSError as err:
            if err.errno == errno.EROFS:  # a run someone sent, on a read-only disk: nothing here writes it
                return self
            raise LadleError(f"cannot open {path}: {err.strerror or err}", fix=WRITE_FIX) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
                raise LadleError(f"{self.root} is being written by {holder}",
                                 fix="wait for it to finish (two writers of one run would overwrite each "
                                     "other's files), or give another run directory") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"ladle {self.what} (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        RunLock._held[key] = [fd, 1]
        return self

    def __exit__(self, *exc) -> None:
        key = os.path.realpath(self.root)
        held = RunLock._held.get(key)
        if held is None:
            return
        held[1] -= 1
        if not held[1]:
            del RunLock._held[key]
            try:
                os.ftruncate(held[0], 0)  # an idle run's lock file is empty: a refused command leaves every byte as it was
            except OSError:
                pass
            os.close(held[0])  # closing the only descriptor releases the lock
