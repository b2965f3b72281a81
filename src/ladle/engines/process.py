"""The process engine: ingredients on local worker processes, the graph shared, not copied.

The graph's tensors are moved to shared memory once; each worker process (started with
``spawn``, so no thread pool is ever forked) maps them and receives only its ingredient spec.
One process trains one ingredient and stores it before exiting, so a worker that dies
(SIGKILL, out of memory) loses only its own unfinished ingredient, which is retried up to
``engine.retries`` times on a fresh process.
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
from collections import Counter, deque
from collections.abc import Sequence
from multiprocessing.connection import wait

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


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker when the process that started it dies (even by SIGKILL), so no
    orphan keeps training into a run directory that a resumed run is now writing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup still stops workers
        pass


def _worker(spec, graph, store, device, threads, slot, channel, parent: int) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, so they need not see it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before the request was in place
        return
    label = worker_label("process", slot)

    def progress(name, epoch, epochs, best, worker):
        channel.send(("epoch", name, epoch, epochs, best, worker))

    done = train_and_store(spec, graph, store, device=device, threads=threads, worker=label, on_epoch=progress)
    channel.send(("done", done))
    channel.close()


def _start_without_sigint(process) -> None:
    """Start a worker with SIGINT ignored, so a Ctrl-C while it imports cannot print a traceback.

    An ignored disposition survives the spawn's exec and Python keeps it at startup (a blocked
    mask did not: something in the imports can unblock it). A Ctrl-C in this instant is lost here.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def run(specs: Sequence[IngredientSpec], graph: Graph, store: IngredientStore, *, device: str = "cpu",
        engine: EngineConfig = EngineConfig(), on_epoch: OnProgress | None = None,
        on_done=None) -> list[Finished]:
    """Train and store every spec on up to ``engine.workers`` processes at once.

    Each worker reports on its own pipe, whose only write end it holds: one shared queue would
    share a lock, and a worker killed while holding it would hang every other worker.
    """
    ctx = mp.get_context("spawn")
    share(graph)
    pending, attempts = deque(specs), Counter()
    running: dict = {}  # process -> (spec, slot, the read end of its pipe)
    free = list(range(engine.workers))
    finished: dict[str, Finished] = {}

    def drain(readers, timeout):
        _drain(readers, finished, on_epoch, on_done, timeout=timeout)

    try:
        while pending or running:
            while pending and free:
                spec, slot = pending.popleft(), free.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_worker, daemon=True, name=f"ladle-{spec.name}",
                                      args=(spec, graph, store, device, engine.threads, slot, writer, os.getpid()))
                running[process] = (spec, slot, reader)  # first, so a Ctrl-C just after start still stops it
                _start_without_sigint(process)
                writer.close()  # so the worker's death ends its stream, even in the middle of a message
            drain([r for _, _, r in running.values()], 0.2)
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                spec, slot, reader = running.pop(process)
                free.append(slot)
                drain([reader], 0.0)
                reader.close()
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
        for process, (_, _, reader) in running.items():
            if process.pid is not None:  # started
                process.kill()
                process.join()
            reader.close()
    return [finished[s.name] for s in specs if s.name in finished]


def _drain(readers, finished, on_epoch, on_done, *, timeout: float) -> None:
    """Handle every message waiting on the workers' pipes (waiting up to ``timeout`` for the first)."""
    for reader in wait([r for r in readers if not r.closed], timeout):
        while True:
            try:
                if not reader.poll():
                    break
                event = reader.recv()
            except (EOFError, OSError, pickle.UnpicklingError):  # the worker is gone; it is reaped by run
                break
            if event[0] == "epoch":
                if on_epoch is not None:
                    on_epoch(*event[1:])
            elif event[1].name not in finished:
                finished[event[1].name] = event[1]
                if on_done is not None:
                    on_done(event[1])
