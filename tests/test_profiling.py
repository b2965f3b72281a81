"""The peak memory a soup's sidecar records: the kernel's own peak, which a sampling thread would miss while one C
call holds the interpreter, kept right when measured blocks nest (they share the kernel's one counter)."""
import pytest
import torch

from ladle.profiling import _kernel_peak, measure, peak_resident

pytestmark = pytest.mark.skipif(_kernel_peak(reset=True) is None, reason="the kernel's peak RSS is not readable here")

MB = 2**20


def spike(mb: int) -> None:
    """Touch ``mb`` MB in one C call and free it at once (torch's large blocks go back to the system)."""
    torch.ones(mb * MB // 4, dtype=torch.float32)


def test_a_brief_spike_inside_one_c_call_is_counted():
    with measure(interval=60.0) as usage:  # a sampling thread would not have woken once
        spike(256)
    assert 240 <= usage.peak_mb < 256 + 64


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
