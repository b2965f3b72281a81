"""Wall time and peak memory of a block of work, for the report."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import psutil
import torch


def memory_available() -> int:
    """Bytes of memory this machine can still give (what a size check before an allocation compares with)."""
    return int(psutil.virtual_memory().available)


def too_big(nbytes: float) -> bool:
    """Whether an allocation of ``nbytes`` cannot fit in the memory available now (with a margin for the rest)."""
    return nbytes > 0.9 * memory_available()


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


@dataclass
class Usage:
    seconds: float = 0.0
    peak_mb: float = 0.0  # peak resident memory above the level at entry (CPU) or peak allocated (CUDA)
    samples: int = 0  # where the kernel keeps no peak: the resident sizes read so far by the sampling thread


# The kernel keeps one peak-RSS counter per process (VmHWM), reset by writing 5 to clear_refs. Blocks that watch it
# nest (a soup inside a benchmark's stage), so before anyone resets it the peak so far is folded into every open block.
_watch_lock = threading.Lock()
_open_watches: list[list[int]] = []


def _kernel_peak(reset: bool = False) -> int | None:
    """This process's peak resident bytes since the last reset, as the kernel recorded them; None where it cannot
    tell (no /proc, or clear_refs not writable)."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024
    except (OSError, StopIteration, ValueError):
        return None


@contextmanager
def peak_resident():
    """Watch this process's peak resident memory over the block, as the kernel records it.

    Yields a one-element list holding the peak in bytes (filled in when the block ends), or None where the kernel
    cannot tell. Unlike a sampling thread it sees the peak of a C call that holds the interpreter (METIS, a sort).
    """
    cell = [0]
    with _watch_lock:
        now = _kernel_peak()
        if now is None or _kernel_peak(reset=True) is None:
            cell = None
        else:
            for other in _open_watches:
                other[0] = max(other[0], now)
            _open_watches.append(cell)
    try:
        yield cell
    finally:
        if cell is not None:
            with _watch_lock:
                now = _kernel_peak() or 0
                for watch in _open_watches:
                    watch[0] = max(watch[0], now)
                # By identity: two open blocks often hold the same peak, and list.remove would take the other's.
                del _open_watches[next(i for i, watch in enumerate(_open_watches) if watch is cell)]


@contextmanager
def measure(device: str | torch.device = "cpu", interval: float = 0.005):
    """Time the block and record its peak memory: on CUDA the peak allocated; on the CPU the peak resident memory
    above the level at entry, from the kernel's own peak, or where it has none, sampled every ``interval`` s."""
    usage = Usage()
    device = torch.device(device)
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = [baseline]
    stop = threading.Event()

    def sample():
        while not stop.wait(interval):
            peak[0] = max(peak[0], process.memory_info().rss)
            usage.samples += 1

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    kernel, sampler = None, None
    start = time.perf_counter()
    try:
        with peak_resident() if device.type != "cuda" else nullcontext() as kernel:
            if device.type != "cuda" and kernel is None:  # the kernel cannot tell here: sample instead
                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
            yield usage
    finally:
        if device.type == "cuda":  # kernels run asynchronously: the block ends when the device is done
            torch.cuda.synchronize(device)
        usage.seconds = time.perf_counter() - start
        if sampler:
            stop.set()
            sampler.join()
        if device.type == "cuda":
            usage.peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
        else:
            peak[0] = max(peak[0], process.memory_info().rss, kernel[0] if kernel else 0)
            usage.peak_mb = (peak[0] - baseline) / 2**20
