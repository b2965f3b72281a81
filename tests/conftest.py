import shutil
import signal
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
