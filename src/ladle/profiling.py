"""Wall time and peak memory of a block of work, for the report."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
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


@contextmanager
def measure(device: str | torch.device = "cpu", interval: float = 0.005):
    """Time the block and sample this process's resident memory every ``interval`` seconds."""
    usage = Usage()
    device = torch.device(device)
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = [baseline]
    stop = threading.Event()

    def sample():
        while not stop.wait(interval):
            peak[0] = max(peak[0], process.memory_info().rss)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        yield usage
    finally:
        if device.type == "cuda":  # kernels run asynchronously: the block ends when the device is done
            torch.cuda.synchronize(device)
        usage.seconds = time.perf_counter() - start
        stop.set()
        sampler.join()
        peak[0] = max(peak[0], process.memory_info().rss)
        if device.type == "cuda":
            usage.peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
        else:
            usage.peak_mb = (peak[0] - baseline) / 2**20
