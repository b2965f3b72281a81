import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# A shell without job control starts `pytest &` with SIGINT ignored, and the ladle runs the tests start
# inherit that, so the tests that press Ctrl-C would see it ignored. Deliver it as a terminal would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    # Tests never download anything.
    monkeypatch.setenv("LADLE_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "data").is_dir():
        pytest.skip("../shared/data is not beside the project")
    return SHARED


@pytest.fixture(scope="session")
def planetoid_root(shared, tmp_path_factory) -> Path:
    """A writable copy of the Planetoid raw files (../shared is read-only in CI)."""
    root = tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        shutil.copytree(shared / "data" / "planetoid" / name / "raw", root / name / "raw")
    return root


@pytest.fixture(scope="session")
def cornell(shared) -> Path:
    return shared / "data" / "npz" / "cornell.npz"


def in_fresh_process(test_file: str, case: str, flag: str, retries: int = 0) -> None:
    """Run the tests of ``test_file`` matching ``case`` in a fresh Python, with ``flag=1`` in its environment, and
    fail with their output unless exactly one passed. Ray clusters started without authentication need this: Ray
    fixes a process's authentication mode once (other tests' clusters switch this one to token mode)."""
    env = {**os.environ, flag: "1", "RAY_AUTH_MODE": "disabled"}
    for _ in range(retries + 1):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k", case],
                              env=env, capture_output=True, text=True, cwd=os.path.dirname(test_file))
        if done.returncode == 0:
            break
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0 and last.startswith("1 passed"), done.stdout[-6000:] + done.stderr[-2000:]


def wait_until(ready, proc, what: str, timeout: float = 120.0) -> None:
    """Poll ``ready()`` until it holds; fail if ``proc`` (a Popen) ends first or ``timeout`` passes. An event to
    wait for, never a guess at how long something takes."""
    import time

    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, f"the process ended before {what}: {proc.stderr.read().decode()[-2000:]}"
        assert time.time() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.02)


def workers_training(pid: int, count: int, cpu_seconds: float = 0.3):
    """``ready()`` for :func:`wait_until`: ``count`` process-engine workers (the forkserver's children under
    ``pid``) each have used ``cpu_seconds`` of CPU: up, and training."""
    import psutil

    def ready() -> bool:
        try:
            servers = [p for p in psutil.Process(pid).children() if "forkserver" in " ".join(p.cmdline())]
            workers = [w for server in servers for w in server.children()]
            return len(workers) >= count and all(sum(w.cpu_times()[:2]) >= cpu_seconds for w in workers[:count])
        except psutil.Error:  # a process that just ended: not ready yet
            return False

    return ready


@pytest.fixture
def patch_all(monkeypatch):
    """``patch_all(owner, name, value)``: ``monkeypatch.setattr(owner, name, value)`` and the same on every ladle
    module that bound that object with ``from owner import name`` (imports sit at module top, so a patch of the
    owner alone would not reach them). Every ladle module is imported first, so none binds the patched value later
    and keeps it after the test."""
    import importlib
    import pkgutil

    import ladle

    def patch(owner, name, value):
        for info in pkgutil.walk_packages(ladle.__path__, "ladle."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        original = getattr(owner, name)
        monkeypatch.setattr(owner, name, value)
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("ladle") and vars(module).get(name) is original:
                monkeypatch.setattr(module, name, value)

    return patch
