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


def test_a_row_is_faster_only_when_every_pair_says_so():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import peer
    finally:
        sys.path.remove(str(SCRIPT.parent))
    # Times: the peer's over ladle's, pair by pair (1.5, 2.0, 1.25): a median of 1.5, its range above 1.
    assert peer.paired([3.0, 4.0, 2.5], [2.0, 2.0, 2.0], rate=False) == (1.5, 1.25, 2.0, "ladle faster")
    # One pair the other way round: no verdict, whatever the median says.
    assert peer.paired([3.0, 4.0, 1.0], [2.0, 2.0, 2.0], rate=False)[3] == "no clear difference"
    # Rates: ladle's over the peer's.
    assert peer.paired([10.0, 10.0], [5.0, 8.0], rate=True) == (0.65, 0.5, 0.8, "ladle slower")
