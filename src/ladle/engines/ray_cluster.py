"""The Ray engine: one Ray task per ingredient, on a local Ray or any Ray cluster.

The graph goes into the object store once, as numpy arrays (``ray.put``), which every worker on
a node maps zero-copy; a task receives only its spec and that reference. Each task reserves
``cpus_per_ingredient`` CPUs and ``gpus_per_ingredient`` GPUs (Ray then sets
``CUDA_VISIBLE_DEVICES``), trains with ``engine.threads`` torch threads and returns its summary and
its model (weights and record: a few MB, never the graph), which the driver stores at once. The run
directory is the driver's alone: no node needs to reach it, so a cluster needs no shared filesystem
(a partition's parts go to the nodes that hold them: ``--part-placement``). A task whose worker dies is retried by
Ray, and one the cluster failed otherwise (its node's raylet, an actor) by ladle, up to ``engine.retries``
times. Ray is an optional extra: ``pip install -e .[ray]``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch_geometric.data import Data

from ladle.config import EngineConfig, IngredientSpec
from ladle.data.graph import Graph
from ladle.engines.base import Finished, IngredientStore, OnProgress, ShouldStop, train_and_store
from ladle.errors import LadleError, install_hint
from ladle.parts.reader import open_parts

log = logging.getLogger(__name__)


def graph_payload(graph: Graph) -> dict:
    """The graph as plain numpy arrays plus metadata: what Ray stores once and maps zero-copy."""
    rowptr, col = graph.csr()
    arrays = {k: v.numpy() for k, v in graph.data.to_dict().items() if torch.is_tensor(v)}
    return {"arrays": arrays, "rowptr": rowptr.numpy(), "meta": {
        "name": graph.name, "num_classes": graph.num_classes, "task": graph.task, "metric": graph.metric,
        "fingerprint": graph.fingerprint}}


def graph_from_payload(payload: dict) -> Graph:
    with warnings.catch_warnings():  # the object store's arrays are read-only; training never writes the graph
        warnings.simplefilter("ignore", UserWarning)
        tensors = {k: torch.from_numpy(v) for k, v in payload["arrays"].items()}
        rowptr = torch.from_numpy(payload["rowptr"])
    data = Data(**tensors)
    return Graph(data=data, **payload["meta"], _csr=(rowptr, tensors["edge_index"][1]))


def _use_token_if_available() -> None:
    """Switch this driver to token authentication when ``RAY_AUTH_MODE`` is unset and a token exists.

    Ray reads the mode once, when it is imported; its own helper (private, hence guarded) also
    refreshes that cached config. Older Rays have no token authentication and no helper.
    """
    try:
        # optional: the ray extra
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    if maybe_enable_token_auth_if_token_available(warn_if_disabled=False):
        log.info("a Ray auth token is available: connecting with RAY_AUTH_MODE=token")


def _connect(address: str) -> bool:
    """Connect to the cluster (``address``, else ``RAY_ADDRESS``, else a local Ray); True if this call started Ray.

    ``ray start`` enables token authentication by default since Ray 2.59, but a driver that
    connects to it stays in the ``disabled`` mode unless ``RAY_AUTH_MODE=token`` is set, and
    fails to authenticate. When the variable is unset and a token is at hand, ladle sets it for
    this process, as Ray's own helper does: a token-mode client also talks to clusters without
    authentication.
    """
    # optional: the ray extra
    import ray

    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or None
    if target:
        _use_token_if_available()
    try:
        if target:
            ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING, configure_logging=False)
        else:
            start_local()
    except ConnectionError as exc:
        cause = exc.__cause__ or exc.__context__
        if "InvalidAuthToken" in f"{exc} {cause}":
            raise LadleError(f"the Ray cluster at {target!r} refused this driver's authentication token",
                             fix="set RAY_AUTH_MODE=token and give the cluster's token through RAY_AUTH_TOKEN, "
                                 "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (ray get-auth-token)") from None
        raise LadleError(f"cannot reach the Ray cluster at {target!r}: {exc}",
                         fix="start it with ray start --head, or check --address / RAY_ADDRESS") from None
    return True


# A local Ray that ladle starts serves one run of a few long tasks. Two of Ray's defaults cost it time on a
# small machine: raylet prestarts workers for queued tasks, and kills workers idle for a second once there are
# more than CPUs (the progress queue's actor counts). Each such worker imports Python, Ray and then torch,
# on the cores the training tasks use. A cluster started by ``ray start`` keeps its own settings
# (``RAY_enable_worker_prestart=0`` and ``RAY_idle_worker_killing_time_threshold_ms`` there do the same).
LOCAL_SYSTEM_CONFIG = {"enable_worker_prestart": False, "idle_worker_killing_time_threshold_ms": 3_600_000}


def start_local(num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Start a local Ray for this process (no dashboard, ``LOCAL_SYSTEM_CONFIG``); all CPUs and GPUs by default.

    Always a new one: a cluster that ``ray start`` left running on this machine is joined only when asked
    (``--address auto``), never by chance (Ray's own default would join it, and refuse ladle's settings)."""
    # optional: the ray extra
    import ray

    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, logging_level=logging.WARNING,
             configure_logging=False, _system_config=dict(LOCAL_SYSTEM_CONFIG))  # Ray adds keys to it


def run(specs: Sequence[IngredientSpec], graph: Graph, store: IngredientStore, *, device: str = "cpu",
        engine: EngineConfig = EngineConfig(), on_epoch: OnProgress | None = None,
        on_done=None, should_stop: ShouldStop | None = None) -> list[Finished]:
    try:
        # optional: the ray extra
        import ray
    except ImportError:
        raise LadleError("the ray engine needs Ray", fix=install_hint("ray")) from None

    started = _connect(engine.address)
    try:
        # Progress only: it must never wait for a free CPU, and it lives on the head node, the one node that cannot
        # leave while the cluster lasts (the driver's own raylet may be any node on its machine, and a worker may go).
        board = ray.remote(Board).options(num_cpus=0, resources={HEAD: 0.001}).remote()
        told: set = set()  # the models whose stop is on the board
        # A graph in memory goes into the object store once; a partition on disk goes as its path and manifest, and
        # each task maps its own part's files (nothing large through the object store).
        graph_ref = ray.put(graph_payload(graph)) if isinstance(graph, Graph) else graph
        placed = engine.part_placement and not isinstance(graph, Graph)
        if placed:
            _check_placement(graph, specs, ray.cluster_resources())
        remote = ray.remote(_task)
        common = dict(num_cpus=engine.cpus_per_ingredient, num_gpus=engine.gpus_per_ingredient,
                      max_retries=engine.retries, retry_exceptions=False)
        # The run directory is the driver's alone: a task gets no path to it, and sends its ingredient back.
        carried = ray.put(Carried.of(store, specs))
        pending, lost = {}, dict.fromkeys((s.name for s in specs), 0)

        def submit(spec):
            task = remote.options(**common, **({"resources": {part_resource(spec.part): PART_SHARE}} if placed else {}))
            pending[task.remote(spec, graph_ref, carried, device, engine.threads, board)] = spec

        for spec in specs:
            submit(spec)
        finished: dict[str, Finished] = {}
        stranded: list = []  # ingredients whose part no node of the cluster holds any more
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            _drain_board(board, on_epoch)
            if should_stop is not None:
                for spec in pending.values():
                    stop = None if spec.name in told else should_stop(spec.name)
                    if stop:
                        told.add(spec.name)
                        board.stop.remote(spec.name, stop)
            for ref in ready:
                spec = pending.pop(ref)
                try:
                    done, records = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, LadleError):  # the user's to fix (a full disk, say): said as it is
                        raise LadleError(f"{spec.name}: {cause.message}", fix=cause.fix) from None
                    said = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
                    said = said.strip().splitlines()[-1]
                    if cluster_failure(exc) and lost[spec.name] < engine.retries:
                        # Ray retries a task whose worker dies, but not one its own node's raylet failed while it
                        # ran, nor one a dying actor failed: the cluster's fault, not the ingredient's, so again.
                        lost[spec.name] += 1
                        log.warning("%s: %s; again (%d of %d)", spec.name, said, lost[spec.name], engine.retries)
                        submit(spec)
                        continue
                    raise LadleError(f"{spec.name} failed on Ray: {said}; the finished ingredients are stored",
                                     fix="see the Ray logs, then ladle run --resume RUN_DIR") from None
                for record in records:  # the companion first: the model's own sidecar says the work is done
                    store.save(record)
                done = dataclasses.replace(done, attempts=lost[spec.name] + 1)
                finished[done.name] = done
                if on_done is not None:
                    on_done(done)
            if placed and not ready:
                # A task whose part's every node left would wait forever (Ray retries it only where the resource
                # is): given up, while the others finish and are stored.
                held = ray.cluster_resources()
                for ref, spec in list(pending.items()):
                    if held.get(part_resource(spec.part), 0) <= 0:
                        ray.cancel(ref, force=True)
                        stranded.append(pending.pop(ref))
        _drain_board(board, on_epoch)
        if stranded:
            parts = sorted({s.part for s in stranded})
            raise LadleError(f"{', '.join(s.name for s in stranded)} could not train: no node of the cluster holds "
                             f"part {', '.join(map(str, parts))} of {graph.folder} any more; the other ingredients "
                             "are stored", fix=f"start a node that holds it ({_advertise(parts[0])}), then ladle run "
                                               "--resume RUN_DIR")
        return [finished[s.name] for s in specs]
    finally:
        if started:
            ray.shutdown()


# The data-parallel baseline on this engine, its ranks started by Ray Train: named, not imported (ladle.ddp builds
# on this module).
TRAIN_DDP = "ladle.ddp:train_ddp_on_ray"


PART_SHARE = 0.001  # of a node's ladle_part_P resource per task: many ingredients of one part may share the node
PARTS_ROOT = "LADLE_PARTS_ROOT"
HEAD = "node:__internal_head__"  # the resource Ray gives the head node alone


def part_resource(part: int) -> str:
    return f"ladle_part_{part}"


def _advertise(part: int) -> str:
    return f"{PARTS_ROOT}=DIR ray start ... --resources '{{\"{part_resource(part)}\": 1}}', DIR holding the folder"


def _check_placement(source, specs, resources: dict) -> None:
    """Every part an ingredient trains on is advertised by some node: else the task would wait forever."""
    missing = sorted({s.part for s in specs if resources.get(part_resource(s.part), 0) <= 0})
    if missing:
        raise LadleError(f"--part-placement: no node of the Ray cluster advertises part "
                         f"{', '.join(map(str, missing[:8]))} of {source.folder}",
                         fix=f"on each node that holds part P: {_advertise(missing[0])} named "
                             f"{Path(source.folder).name}")


def node_source(source):
    """The partition as this node holds it: under ``$LADLE_PARTS_ROOT`` (a node's own copy, no shared folder) when
    set, else where the driver has it; the same partition (fingerprint) or refused."""
    root = os.environ.get(PARTS_ROOT)
    if not root:
        return source
    here = open_parts(Path(root) / Path(source.folder).name)
    if here.fingerprint != source.fingerprint:
        raise LadleError(f"{here.folder} on this node is another partition than the run's {source.folder}",
                         fix=f"copy the run's partition folder to {root} on every node")
    return here


@dataclass
class Carried:
    """A task's store: what it trains is kept here and returned with its summary (a model's weights, a few MB,
    never the graph), and a trunk it starts from came with the task, read and checked by the driver. So no node
    but the driver's needs the run directory: a cluster without a shared filesystem works."""

    trunk_sha256: str | None = None
    trunk_state: dict | None = None
    records: list = field(default_factory=list)

    @classmethod
    def of(cls, store: IngredientStore, specs: Sequence[IngredientSpec]) -> Carried:
        branched = [s for s in specs if s.trunk_epochs]
        return cls(store.trunk_sha256, store.start_state(branched[0]) if branched else None)

    def save(self, record) -> None:
        self.records.append(record)

    def start_state(self, spec: IngredientSpec) -> dict | None:
        return self.trunk_state if spec.trunk_epochs else None


def _task(spec, payload, carried, device, threads, board) -> tuple[Finished, list]:
    # optional: the ray extra
    import ray

    graph = graph_from_payload(payload) if isinstance(payload, dict) else node_source(payload)
    node = ray.get_runtime_context().get_node_id()[:8]
    label = f"ray-{node} (pid {os.getpid()})"

    lost, heard = [], []

    def progress(name, epoch, epochs, best, worker, metrics):
        if lost:
            return
        try:  # one call each epoch: the event goes in, a stop asked for this model comes back
            stop = ray.get(board.put.remote((name, epoch, epochs, best, worker, metrics)), timeout=60)
        except ray.exceptions.RayError:  # best effort: a board that does not answer never stops the training
            lost.append(True)
            return
        if stop and not heard:
            heard.append(stop)

    store = Carried(carried.trunk_sha256, carried.trunk_state)
    done = train_and_store(spec, graph, store, device=device, threads=threads, worker=label, on_epoch=progress,
                           should_stop=lambda: heard[0] if heard else None)
    return done, store.records


def cluster_failure(exc) -> bool:
    """Did Ray's cluster fail the task (a raylet, node, worker or actor lost), rather than its own code?"""
    # optional: the ray extra
    from ray import exceptions as rx

    lost = (rx.LocalRayletDiedError, rx.WorkerCrashedError, rx.NodeDiedError, rx.ActorDiedError,
            rx.ActorUnavailableError, rx.RaySystemError, rx.ObjectLostError, rx.OwnerDiedError)
    return isinstance(exc, lost) or isinstance(getattr(exc, "cause", None), lost)


class Board:
    """The run's one small actor, on the head node: the tasks' progress events in, the driver's stops out.

    A task's :meth:`put` of its epoch returns the stop a callback asked for its model (or None): one call per epoch
    carries both ways."""

    def __init__(self):
        self.events, self.stops = [], {}

    def put(self, event: tuple):
        self.events.append(event)
        return self.stops.get(event[0])

    def take(self) -> list:
        events, self.events = self.events, []
        return events

    def stop(self, name: str, stop: dict) -> None:
        self.stops[name] = stop


def _drain_board(board, on_epoch) -> None:
    """Hand the events the board holds to ``on_epoch``; best effort: while a node leaves, it may not answer."""
    # optional: the ray extra
    import ray

    try:
        events = ray.get(board.take.remote(), timeout=30)
    except (ray.exceptions.RayError, TimeoutError):
        return
    for event in events:
        if on_epoch is not None:
            on_epoch(*event)


def _events(events, empty) -> list:
    """What the queue holds now; progress is best effort: while a node leaves, the queue may not answer."""
    # optional: the ray extra
    from ray.exceptions import RayError

    out = []
    while True:
        try:
            out.append(events.get_nowait())
        except (empty, RayError):
            return out
