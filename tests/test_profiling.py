"""The peak memory a soup's sidecar records: the kernel's own peak, which a sampling thread would miss while one C
call holds the interpreter, kept right when measured blocks nest (they share the kernel's one counter)."""
import time

import pytest
import torch

import ladle.profiling
from ladle.profiling import _kernel_peak, measure, peak_resident

kernel_only = pytest.mark.skipif(_kernel_peak(reset=True) is None, reason="the kernel's peak RSS is not readable here")

MB = 2**20


def spike(mb: int) -> None:
    """Touch ``mb`` MB in one C call and free it at once (torch's large blocks go back to the system)."""
    torch.ones(mb * MB // 4, dtype=torch.float32)


@kernel_only
def test_a_brief_spike_inside_one_c_call_is_counted():
    with measure(interval=60.0) as usage:  # a sampling thread would not have woken once
        spike(256)
    assert 240 <= usage.peak_mb < 256 + 64


@kernel_only
def test_nested_blocks_each_keep_their_own_peak():
    with measure() as outer:
        spike(384)  # before the inner block resets the kernel's counter
        with measure() as inner:
            spike(128)
        with peak_resident() as watch:
            pass
    assert 112 <= inner.peak_mb < 128 + 64
    assert outer.peak_mb >= 368  # the inner reset did not lose the outer's larger, earlier peak
    assert watch is not None and watch[0] > 0


@kernel_only
def test_blocks_that_end_with_the_same_peak_each_close_their_own():
    """An inner block's peak above everything before it is folded into the outer block, so both hold one value
    when the inner closes: closing must find the inner's own entry, not the first equal one (the soups stage of a
    payoff run crashed on exit so)."""
    with peak_resident() as outer:
        with peak_resident() as inner:
            spike(256)
        assert outer[0] == inner[0]
        with peak_resident() as later:
            spike(512)  # the outer block must still be open to receive this
    assert later[0] > inner[0] > 0 and outer[0] >= later[0]
    assert not ladle.profiling._open_watches


def test_without_the_kernels_peak_a_thread_samples_it(monkeypatch):
    monkeypatch.setattr(ladle.profiling, "_kernel_peak", lambda reset=False: None)
    with peak_resident() as watch:
        pass
    assert watch is None
    with measure(interval=0.001) as usage:
        held = torch.ones(192 * MB // 4)
        seen = usage.samples
        while usage.samples < seen + 2:  # the sampling thread has read the resident size while it is held
            time.sleep(0.001)
        del held
    assert 176 <= usage.peak_mb < 192 + 64


@kernel_only
def test_the_benchmarks_stage_monitor_keeps_its_peak_across_a_soups_own_measure():
    """benchmarks/scaling.py's MemoryMonitor (each payoff stage's peak) and a soup's measure() inside it share the
    kernel's one counter: the soup's reset must not lose the stage's earlier, larger peak."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from scaling import MemoryMonitor
    finally:
        sys.path.pop(0)
    floor = ladle.profiling.psutil.Process().memory_info().rss / MB
    with MemoryMonitor() as stage:
        spike(384)
        with measure() as soup:
            spike(64)
    assert stage.peak >= floor + 368
    assert soup.peak_mb < 384
    with MemoryMonitor(enabled=False) as off:
        spike(64)
    assert off.peak == 0.0
