"""benchmarks/peer.py without the DGL peer: it says what is missing and exits 0 with peer=absent (CI has no DGL).
With a peer environment it runs both sides; that run is a benchmark, not a test (docs/RESULTS.md holds its table)."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peer.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.mark.benchmark
def test_without_the_peer_it_says_why_and_exits_cleanly(tmp_path):
    done = run("--work", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "no --peer-python" in done.stdout and done.stdout.strip().splitlines()[-1] == "peer=absent"
    done = run("--peer-python", sys.executable, "--peer-repo", str(tmp_path), "--work", str(tmp_path))
    assert done.returncode == 0 and "no --peer-repo" in done.stdout  # no soups.py there
    (tmp_path / "soups.py").write_text("")
    done = run("--peer-python", sys.executable, "--peer-repo", str(tmp_path), "--work", str(tmp_path))
    assert done.returncode == 0 and "cannot import dgl" in done.stdout and done.stdout.endswith("peer=absent\n")
