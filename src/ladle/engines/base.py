"""What every engine shares: the store a worker writes to, the summary it sends back, devices and threads.

An engine maps :func:`train_and_store` over ingredient specs. The worker stores its ingredient
itself (atomically, weights before sidecar) and returns only a :class:`Finished` summary, so an
engine never ships tensors back, and a run killed at any point keeps every finished ingredient.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from ladle.config import IngredientSpec
from ladle.data.graph import Graph
from ladle.errors import LadleError
from ladle.profiling import peak_resident
from ladle.store import RunDir
from ladle.trainer import train_ingredient

# (ingredient name, epoch, epochs, best validation score so far, worker label)
OnProgress = Callable[[str, int, int, float, str, dict], None]  # name, epoch, epochs, best val, worker, metrics
# The driver's answer to "has a callback asked model NAME to stop?": the stop (reason, asked_at_epoch, by) or None.
ShouldStop = Callable[[str], "dict | None"]


@dataclass(frozen=True)
class IngredientStore:
    """Where a worker writes its ingredient: a run directory every worker can reach, and the dataset's metadata."""

    run_path: str
    dataset: dict
    identity: str | None = None  # the run config's identity hash, recorded in every sidecar
    trunk_sha256: str | None = None  # the stored trunk ingredients start from (checked when read)

    def save(self, record) -> None:
        RunDir(self.run_path).save_ingredient(record, self.dataset, self.identity)

    def is_done(self, spec: IngredientSpec) -> bool:
        return RunDir(self.run_path).has(spec)

    def start_state(self, spec: IngredientSpec) -> dict | None:
        """The trunk's weights for a model that branches from it, read and checked in the worker."""
        if not spec.trunk_epochs:
            return None
        trunk = replace(spec, role="trunk")
        state, sidecar = RunDir(self.run_path).load_checkpoint(trunk)
        if self.trunk_sha256 is not None and sidecar["sha256"] != self.trunk_sha256:
            raise LadleError(f"{RunDir(self.run_path).checkpoint_path(trunk)} changed while the run trained",
                             fix="restore it, or remove the run's trunk and ingredients and train again")
        return state


@dataclass(frozen=True)
class Finished:
    """A stored ingredient's summary, as a worker reports it: no tensors."""

    name: str
    val: float
    test: float
    seconds: float
    worker: str
    host: str
    started: float
    finished: float
    attempts: int = 1  # more where the engine started it again after its worker died
    session: str = ""  # the driver that stored it (a resumed run has several), set by the driver


def device_for(device: str, index: int) -> str:
    """Ingredient ``index``'s device: with G visible GPUs, bare ``cuda`` becomes ``cuda:(index mod G)``."""
    if device == "cuda" and torch.cuda.is_available() and torch.cuda.device_count() > 1:
        return f"cuda:{index % torch.cuda.device_count()}"
    return device


def train_and_store(spec: IngredientSpec, graph, store: IngredientStore, *, device: str, threads: int,
                    worker: str, on_epoch=None, should_stop: Callable[[], dict | None] | None = None) -> Finished:
    """The unit of work of every engine: train one ingredient with ``threads`` torch threads and store it.
    ``should_stop()`` says whether a callback asked this model to stop (see :func:`ladle.trainer.train_ingredient`).
    ``graph`` is a :class:`Graph`, or a :class:`ladle.parts.reader.PartSource` (a path and a manifest) from
    which the worker reads the part ``spec.part`` alone."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        started = time.time()
        progress = None if on_epoch is None else (lambda n, e, t, b, m: on_epoch(n, e, t, b, worker, m))
        start_state = store.start_state(spec)
        training, part_bytes = None, None
        with worker_memory() as usage:
            if not isinstance(graph, Graph):  # a partition on disk: this worker opens its own part's files, no other
                part_bytes = graph.part_bytes(spec.part)
                training, graph = graph.load_part(spec.part)
            record = train_ingredient(spec, graph, device=device_for(device, spec.index), on_epoch=progress,
                                      start_state=start_state, training_graph=training, should_stop=should_stop)
        record.worker_memory = {**usage, **({"part_bytes": part_bytes} if part_bytes is not None else {})}
        for stored in filter(None, (record.companion, record)):
            if start_state is not None:
                stored.trunk_sha256 = store.trunk_sha256
            # The companion first: the model's own sidecar, written last, is what says this work is done.
            store.save(stored)
        return Finished(record.name, record.val, record.test, record.seconds, worker, socket.gethostname(),
                        started, time.time())
    finally:
        torch.set_num_threads(previous)


@contextmanager
def worker_memory(interval: float = 0.02):
    """This process's memory while the block trains one model: ``peak_rss_bytes``, the kernel's high-water mark of
    resident memory (reset at entry; memory-mapped graph files count once touched) and ``peak_anon_bytes``, the
    sampled peak of anonymous memory (what ``prlimit --data`` caps; mapped files do not count). None where /proc
    cannot tell."""
    found = {"peak_rss_bytes": None, "peak_anon_bytes": None}
    stop, anon = threading.Event(), [_anon_bytes()]

    def sample():
        while not stop.wait(interval):
            anon[0] = max(anon[0] or 0, _anon_bytes() or 0) or None

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with peak_resident() as peak:
            yield found
    finally:
        stop.set()
        sampler.join()
        anon[0] = max(anon[0] or 0, _anon_bytes() or 0) or None
        found.update(peak_rss_bytes=peak[0] if peak else None, peak_anon_bytes=anon[0])


def _anon_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) * 1024
    except (OSError, StopIteration, ValueError):
        return None


def worker_label(kind: str, slot: int | str) -> str:
    return f"{kind}-{slot} (pid {os.getpid()})"
