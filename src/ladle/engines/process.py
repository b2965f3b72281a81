"""The process engine: ingredients on local worker processes, the graph shared, not copied.

The graph's tensors are moved to shared memory once; each worker process (started with
``spawn``, so no thread pool is ever forked) maps them and receives only its ingredient spec.
One process trains one ingredient and stores it before exiting, so a worker that dies
(SIGKILL, out of memory) loses only its own unfinished ingredient, which is retried up to
``engine.retries`` times on a fresh process.
"""
from __future__ import annotations

import logging
import queue
import signal
from collections import Counter, deque
from collections.abc import Sequence

import torch.multiprocessing as mp

from ladle.config import EngineConfig, IngredientSpec
from ladle.data.graph import Graph
from ladle.engines.base import Finished, IngredientStore, OnProgress, train_and_store, worker_label
from ladle.errors import LadleError

log = logging.getLogger(__name__)


def share(graph: Graph) -> Graph:
    """Move the graph's tensors (and its CSR, built here once) to shared memory, in place."""
    graph.csr()
    graph.data.apply(lambda t: t.share_memory_())
    for t in graph.csr():
        t.share_memory_()
    return graph


def _worker(spec, graph, store, device, threads, slot, events) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, so they need not see it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    label = worker_label("process", slot)

    def progress(name, epoch, epochs, best, worker):
        events.put(("epoch", name, epoch, epochs, best, worker))

    done = train_and_store(spec, graph, store, device=device, threads=threads, worker=label, on_epoch=progress)
    events.put(("done", done))


def _start_without_sigint(process) -> None:
    """Start a worker with SIGINT blocked, so a Ctrl-C while it imports cannot print a traceback.

    A blocked mask survives the spawn's exec; the worker then ignores SIGINT, which discards a
    pending one. In this process the signal stays pending until unblocked, so none is lost.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run(specs: Sequence[IngredientSpec], graph: Graph, store: IngredientStore, *, device: str = "cpu",
        engine: EngineConfig = EngineConfig(), on_epoch: OnProgress | None = None,
        on_done=None) -> list[Finished]:
    """Train and store every spec on up to ``engine.workers`` processes at once."""
    ctx = mp.get_context("spawn")
    share(graph)
    events = ctx.Queue()
    pending, attempts = deque(specs), Counter()
    running: dict = {}  # process -> (spec, slot)
    free = list(range(engine.workers))
    finished: dict[str, Finished] = {}
    try:
        while pending or running:
            while pending and free:
                spec, slot = pending.popleft(), free.pop(0)
                process = ctx.Process(target=_worker, daemon=True, name=f"ladle-{spec.name}",
                                      args=(spec, graph, store, device, engine.threads, slot, events))
                _start_without_sigint(process)
                running[process] = (spec, slot)
            _drain(events, finished, on_epoch, on_done, timeout=0.2)
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                spec, slot = running.pop(process)
                free.append(slot)
                _drain(events, finished, on_epoch, on_done, timeout=0.0)
                if process.exitcode == 0 and store.is_done(spec):
                    continue
                attempts[spec.name] += 1
                if attempts[spec.name] > engine.retries:
                    raise LadleError(f"{spec.name} failed {attempts[spec.name]} times (last exit code "
                                     f"{process.exitcode}); the finished ingredients are stored",
                                     fix="check the log above, then ladle run --resume RUN_DIR")
                log.warning("%s: worker exited with code %s; retry %d of %d", spec.name, process.exitcode,
                            attempts[spec.name], engine.retries)
                pending.appendleft(spec)
    finally:
        for process in running:
            process.kill()
            process.join()
    _drain(events, finished, on_epoch, on_done, timeout=0.0)
    return [finished[s.name] for s in specs if s.name in finished]


def _drain(events, finished, on_epoch, on_done, *, timeout: float) -> None:
    while True:
        try:
            event = events.get(timeout=timeout) if timeout else events.get_nowait()
        except queue.Empty:
            return
        timeout = 0.0
        if event[0] == "epoch":
            if on_epoch is not None:
                on_epoch(*event[1:])
        elif event[1].name not in finished:
            finished[event[1].name] = event[1]
            if on_done is not None:
                on_done(event[1])
