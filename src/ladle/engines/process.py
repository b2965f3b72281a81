"""The process engine: ingredients on local worker processes, the graph shared, not copied.

The graph's tensors are moved to shared memory once; each worker process maps them and
receives only its ingredient spec. Workers are forked by a ``forkserver`` that has imported torch,
PyG and ladle and done nothing else (no thread pool to inherit): a worker starts in milliseconds
and shares those ~250 MB of imported modules copy-on-write with the server and the other workers,
where a ``spawn`` worker would import its own private copy. One process trains one ingredient
and stores it before exiting, so a worker that dies (SIGKILL, out of memory) loses only its own
unfinished ingredient, which is retried up to ``engine.retries`` times on a fresh process.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import os
import pickle
import signal
import threading
from collections import Counter, deque
from collections.abc import Sequence
from multiprocessing import forkserver
from multiprocessing.connection import wait

import torch.multiprocessing as mp

from ladle.config import EngineConfig, IngredientSpec
from ladle.data.graph import Graph
from ladle.engines.base import Finished, IngredientStore, OnProgress, ShouldStop, train_and_store, worker_label
from ladle.errors import LadleError

log = logging.getLogger(__name__)
USER_ERROR = 3  # a worker's exit status after it reported a LadleError
# What the forkserver imports once, before it forks any worker.
PRELOAD = ["torch", "torch_geometric", "ladle.engines.process", "ladle.trainer"]


def context(device: str = "cpu"):
    """The multiprocessing context workers start from (see the module docstring).

    Workers that train on a GPU are spawned: CUDA cannot start in a forked child once its
    parent has touched the driver, and on a GPU machine importing the preloaded modules may.
    """
    if device.startswith("cuda"):
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


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
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup still stops workers
        pass


def _worker(spec, graph, store, device, threads, slot, channel, parent: int, control=None) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, so they need not see it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the forkserver ignores it (see _signals_ignored)
    _die_with_parent()  # our parent is the forkserver, which exits when the run's process does
    try:
        os.kill(parent, 0)
    except ProcessLookupError:  # the run's process died before the request was in place
        return
    label = worker_label("process", slot)

    def send(message):
        try:
            channel.send(message)
        except (BrokenPipeError, EOFError):  # the run's process is gone: nobody to train for
            os._exit(1)

    def progress(name, epoch, epochs, best, worker, metrics):
        send(("epoch", name, epoch, epochs, best, worker, metrics))

    heard: list = []  # the stop the driver sent, once; or False once its end is closed

    def should_stop():
        if not heard and control is not None and control.poll():
            try:
                heard.append(control.recv())
            except (EOFError, OSError):  # the driver closed its end: no stop will come
                heard.append(False)
        return heard[0] if heard else None

    try:
        done = train_and_store(spec, graph, store, device=device, threads=threads, worker=label, on_epoch=progress,
                               should_stop=should_stop)
    except LadleError as err:  # the user's to fix (a full disk, say): reported as it is, not retried
        send(("error", spec.name, err.message, err.fix))
        channel.close()
        os._exit(USER_ERROR)
    send(("done", done))
    channel.close()


@contextlib.contextmanager
def _signals_ignored():
    """SIGINT and SIGTERM ignored in this process for a moment: while it launches the forkserver.

    The forkserver inherits these dispositions: with SIGINT ignored, a Ctrl-C while it imports
    cannot print a traceback, and the workers it forks keep SIGINT ignored from their first
    instant (it restores its own startup handlers in each child); with SIGTERM ignored, a SIGTERM
    to the process group cannot kill it under a run that is stopping cleanly (it exits when the
    run's process does). Only the launch (a fork and exec) is inside this window, not the
    server's imports, so a signal to this process is lost only in that instant.
    """
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT and SIGTERM held back until the block ends, then raised again: around starting a worker.

    ``process.start()`` waits for the forkserver to fork; a KeyboardInterrupt inside it would leave
    a worker that the parent never learnt the pid of, so could not stop.
    """
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    caught: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda sig, _frame: caught.append(sig)) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


def prepare(device: str = "cpu") -> None:
    """Start the forkserver if it is not running (early, its imports overlap the loading of the graph);
    nothing for GPU workers, which are spawned."""
    if context(device).get_start_method() != "forkserver":
        return
    context()
    with _signals_ignored():
        forkserver.ensure_running()


def run(specs: Sequence[IngredientSpec], graph: Graph, store: IngredientStore, *, device: str = "cpu",
        engine: EngineConfig = EngineConfig(), on_epoch: OnProgress | None = None,
        on_done=None, should_stop: ShouldStop | None = None) -> list[Finished]:
    """Train and store every spec on up to ``engine.workers`` processes at once.

    Each worker reports on its own pipe, whose only write end it holds: one shared queue would
    share a lock, and a worker killed while holding it would hang every other worker. A second pipe,
    the other way, carries a callback's stop to the worker (``should_stop``), which reads it after each epoch.
    """
    ctx = context(device)
    if isinstance(graph, Graph):  # a partition on disk is sent as its path: each worker maps its own part
        share(graph)
    pending, attempts = deque(specs), Counter()
    running: dict = {}  # process -> (spec, slot, the read end of its pipe, the write end of its control pipe)
    told: set = set()  # the processes a stop was sent to
    free = list(range(engine.workers))
    finished: dict[str, Finished] = {}
    reported: dict[str, LadleError] = {}

    def done(summary):
        summary = dataclasses.replace(summary, attempts=attempts[summary.name] + 1)
        if on_done is not None:
            on_done(summary)
        return summary

    def drain(readers, timeout):
        _drain(readers, finished, on_epoch, done, reported, timeout=timeout)

    try:
        while pending or running:
            while pending and free:
                spec, slot = pending.popleft(), free.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                control_in, control = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_worker, daemon=True, name=f"ladle-{spec.name}",
                                      args=(spec, graph, store, device, engine.threads, slot, writer, os.getpid(),
                                            control_in))
                running[process] = (spec, slot, reader, control)  # first, so a Ctrl-C just after start stops it
                if ctx.get_start_method() == "forkserver":
                    prepare()  # the forkserver may have died since (killed with the process group)
                with _signals_deferred():
                    process.start()
                writer.close()  # so the worker's death ends its stream, even in the middle of a message
                control_in.close()
            drain([r for _, _, r, _ in running.values()], 0.2)
            if should_stop is not None:
                _send_stops(running, told, should_stop)
            for process in [p for p in running if not p.is_alive()]:
                process.join()
                spec, slot, reader, control = running.pop(process)
                free.append(slot)
                drain([reader], 0.0)
                reader.close()
                control.close()
                if process.exitcode == 0 and store.is_done(spec):
                    continue
                if spec.name in reported:
                    raise reported[spec.name]
                attempts[spec.name] += 1
                if attempts[spec.name] > engine.retries:
                    raise LadleError(f"{spec.name} failed {attempts[spec.name]} times (last exit code "
                                     f"{process.exitcode}); the finished ingredients are stored",
                                     fix="check the log above, then ladle run --resume RUN_DIR")
                log.warning("%s: worker exited with code %s; retry %d of %d", spec.name, process.exitcode,
                            attempts[spec.name], engine.retries)
                pending.appendleft(spec)
    finally:
        for process, (_, _, reader, control) in running.items():
            if process.pid is not None:  # started
                process.kill()
                process.join()
            reader.close()
            control.close()
    return [finished[s.name] for s in specs if s.name in finished]


def _send_stops(running: dict, told: set, should_stop: ShouldStop) -> None:
    """Send each running worker the stop a callback asked for its model, once per worker process."""
    for process, (spec, _, _, control) in running.items():
        if process in told:
            continue
        stop = should_stop(spec.name)
        if stop:
            told.add(process)
            with contextlib.suppress(BrokenPipeError, OSError):  # it finished meanwhile: nothing to stop
                control.send(stop)


def _drain(readers, finished, on_epoch, on_done, reported, *, timeout: float) -> None:
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
            elif event[0] == "error":
                reported[event[1]] = LadleError(f"{event[1]}: {event[2]}", fix=event[3])
            elif event[1].name not in finished:
                finished[event[1].name] = on_done(event[1])
