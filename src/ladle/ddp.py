"""Data-parallel training with communication: the baseline a communication-free soup answers to.

One model trained on K processes at once with ``torch.distributed`` (gloo on CPU, nccl on GPU) and
:class:`~torch.nn.parallel.DistributedDataParallel` (Li et al., VLDB 2020, *PyTorch Distributed*): every step the
K ranks take the K consecutive shares of one global batch of K x ``batch_size`` seed nodes (the next K·B nodes of
the epoch's permutation, drawn as the single-model trainer draws it), each samples its own share's neighbourhoods,
and DDP all-reduces (averages) their gradients before every rank takes the same Adam step, so the K replicas stay
equal. With K = 1 it is the single-model trainer, bit for bit; with K > 1 one step equals one step of a single
process on the union of the K shares (the gradient of the mean loss over K equal shares is the mean of theirs).

Its budget is the long model's (:meth:`~ladle.config.RunConfig.ddp_spec`): K times an ingredient's epochs and
patience, so it processes as many seed nodes as the K ingredients together, on K workers, and finishes in about an
ingredient's wall-clock time plus its communication. The learning rate is the single model's, not scaled with K
(Adam; recorded as ``lr_rule``). Every rank validates the same weights (the replicas are equal), so every rank
takes the same early-stopping decision without a message; rank 0's weights are stored. The bytes all-reduced are
counted by a DDP communication hook around PyTorch's own all-reduce (measured, not modelled): the gradients each
rank contributes per step, and their total.

On the process (and serial) engine the ranks are local processes that meet through torch's FileStore; on the ray
engine Ray Train starts them, on any nodes, and sets up their process group
(:func:`train_ddp_on_ray`). Only seed-node samplers shard this way (neighbour, FastGCN, LADIES); a
subgraph sampler's batch cannot be split into K shares of one step, and is refused before training.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
import threading
import time
from multiprocessing.connection import wait

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from ladle.engines.base import Finished, device_for, worker_memory
from ladle.engines.process import _die_with_parent, context, prepare, share
from ladle.engines.ray_cluster import HEAD, Carried, _connect, _events, graph_from_payload, graph_payload
from ladle.errors import LadleError, install_hint
from ladle.sampling import SAMPLERS
from ladle.sampling.base import seed_batches
from ladle.seeding import derive_seed
from ladle.trainer import train_ingredient

log = logging.getLogger(__name__)
LR_RULE = "not scaled with K (Adam, the single model's learning rate)"


def check_plan(spec) -> None:
    """Refuse, before any training, a data-parallel baseline this run cannot train."""
    if not callable(getattr(SAMPLERS.get(spec.sampler.name), "sample", None)):  # sample(seeds, gen) over train_nodes
        raise LadleError(f"--baseline ddp shares each step's seed nodes among the ranks; the {spec.sampler.name} "
                         "sampler draws subgraphs, not seed nodes",
                         fix="use --sampler neighbor (or fastgcn, ladies) with --baseline ddp")


class Shard:
    """What makes :func:`ladle.trainer.train_ingredient` one rank of K: its share of every step's seed nodes, the
    model wrapped in DDP with the all-reduce counted, and a dropout stream of its own.

    Args:
        rank: this process's rank, 0 to ``world - 1``.
        world: K, the number of ranks.
    """

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.bytes = 0  # gradient bytes this rank handed to all-reduce
        self.steps = 0

    def batches(self, sampler, epoch: int):
        """This rank's share of each global batch of the epoch, in order (the single model's batches when K = 1)."""
        for seeds, gen in seed_batches(sampler.train_nodes, sampler.seed, epoch, sampler.config.batch_size,
                                       self.rank, self.world):
            self.steps += 1
            yield sampler.sample(seeds, gen)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        device = next(model.parameters()).device
        ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)

        def counted(state, bucket):
            buffer = bucket.buffer()
            self.bytes += buffer.numel() * buffer.element_size()
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, counted)
        return ddp

    def dropout_seed(self, seed: int) -> int:
        return seed if not self.rank else derive_seed(seed, "ddp-dropout", self.rank)

    def summary(self, epochs: int) -> dict:
        return {"ranks": self.world, "backend": torch.distributed.get_backend(), "lr_rule": LR_RULE,
                "steps": self.steps, "allreduce_bytes": self.bytes,
                "allreduce_bytes_per_step": self.bytes // max(self.steps, 1),
                "allreduce_bytes_per_epoch": self.bytes // max(epochs, 1)}


def _rank(rank, spec, graph, store, device, threads, rendezvous, channel) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the ranks
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    torch.set_num_threads(threads)
    here = device_for(device, rank)
    # nccl wants a GPU per rank; ranks sharing one GPU (or the CPU) all-reduce through gloo
    backend = "nccl" if here.startswith("cuda") and torch.cuda.device_count() >= spec.ranks else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(here))
    torch.distributed.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank,
                                         world_size=spec.ranks)
    try:
        shard, started = Shard(rank, spec.ranks), time.time()

        def progress(name, epoch, epochs, best, metrics):
            channel.send(("epoch", name, epoch, epochs, best, "ddp", metrics))

        try:
            start_state = store.start_state(spec)
            with worker_memory() as usage:
                record = train_ingredient(spec, graph, device=here, start_state=start_state, shard=shard,
                                          on_epoch=progress if rank == 0 else None)
            if rank == 0:  # stored here, as every engine's worker stores its model: only a summary travels
                record.communication, record.worker_memory = shard.summary(record.epochs_trained), usage
                if start_state is not None:
                    record.trunk_sha256 = store.trunk_sha256
                store.save(record)
                channel.send(("done", Finished(record.name, record.val, record.test, record.seconds,
                                               f"ddp ({spec.ranks} ranks, pid {os.getpid()})",
                                               socket.gethostname(), started, time.time())))
        except LadleError as err:
            channel.send(("error", err.message, err.fix))
    finally:
        channel.close()
        torch.distributed.destroy_process_group()


def train_ddp(spec, graph, store, *, device: str = "cpu", threads: int = 1, on_epoch=None):
    """Train ``spec`` (role ``ddp``) on ``spec.ranks`` local processes; rank 0 stores the model. Returns its
    :class:`~ladle.engines.base.Finished` summary. A rank that fails stops them all (the others would wait for
    its gradients): the error is raised here, and the ingredients already stored are kept."""
    share(graph)
    ctx = context(device)
    if ctx.get_start_method() == "forkserver":
        prepare()
    ranks: dict = {}  # the read end of each rank's pipe -> its process
    with tempfile.TemporaryDirectory(prefix="ladle-ddp-") as folder:
        rendezvous = os.path.join(folder, "rendezvous")  # torch's FileStore: no port to find, or to race for
        try:
            for rank in range(spec.ranks):
                reader, writer = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_rank, daemon=True, name=f"ladle-ddp-{rank}",
                                      args=(rank, spec, graph, store, device, threads, rendezvous, writer))
                ranks[reader] = process
                process.start()
                writer.close()
            record = _collect(ranks, on_epoch)
        finally:
            for reader, process in ranks.items():
                if process.pid is not None and process.is_alive():
                    process.kill()
                if process.pid is not None:
                    process.join()
                reader.close()
    return record


def _collect(ranks: dict, on_epoch):
    """Rank 0's summary, reading every rank's pipe until each is closed; the first failure raised at once."""
    record, open_readers = None, list(ranks)
    while open_readers:
        for reader in wait(open_readers, 1.0):
            try:
                event = reader.recv()
            except (EOFError, OSError):
                open_readers.remove(reader)
                process = ranks[reader]
                process.join(5)
                if process.exitcode:  # died (killed, out of memory, a bug's traceback above)
                    raise LadleError(f"ddp: {process.name} exited with code {process.exitcode}; the other ranks "
                                     "were stopped", fix="check the log above, then ladle run --resume RUN_DIR "
                                                         "(what is stored is kept)") from None
                continue
            if event[0] == "epoch" and on_epoch is not None:
                on_epoch(*event[1:])
            elif event[0] == "error":
                raise LadleError(f"ddp: {event[1]}", fix=event[2])
            elif event[0] == "done":
                record = event[1]
    if record is None:
        raise LadleError("ddp: rank 0 ended without its model", fix="check the log above, then ladle run --resume")
    return record


def train_ddp_on_ray(spec, graph, store, *, device: str = "cpu", engine=None, on_epoch=None):
    """The data-parallel baseline (:mod:`ladle.ddp`) on Ray: Ray Train's ``TorchTrainer`` starts ``spec.ranks``
    workers and their process group (its own rendezvous; gloo, or nccl where each rank has a GPU), each runs
    :func:`_ray_rank`; the graph goes through the object store once, as for the ingredients, and rank 0 sends its
    model back (a few MB) for the driver to store. Returns its :class:`Finished` summary."""
    try:
        # optional: the ray extra
        import ray
        from ray.train import RunConfig as TrainRun
        from ray.train import ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer
        from ray.util.queue import Empty, Queue
    except ImportError:
        raise LadleError("--baseline ddp on the ray engine needs Ray Train", fix=install_hint("ray")) from None

    started = _connect(engine.address)
    try:
        events = Queue(actor_options={"num_cpus": 0, "resources": {HEAD: 0.001}})
        gpus = engine.gpus_per_ingredient
        loop = {"spec": spec, "graph": ray.put(graph_payload(graph)), "carried": Carried.of(store, [spec]),
                "device": device, "threads": engine.threads, "events": events}
        resources = {"CPU": engine.cpus_per_ingredient, **({"GPU": gpus} if gpus else {})}
        outcome: dict = {}
        with tempfile.TemporaryDirectory(prefix="ladle-ddp-") as storage:  # Ray Train's own state; no checkpoints
            trainer = TorchTrainer(
                _ray_rank, train_loop_config=loop,
                torch_config=TorchConfig(backend="nccl" if gpus and device.startswith("cuda") else "gloo"),
                scaling_config=ScalingConfig(num_workers=spec.ranks, use_gpu=bool(gpus), resources_per_worker=resources),
                run_config=TrainRun(storage_path=storage, name="ladle-ddp"))

            def fit():
                try:
                    outcome["result"] = trainer.fit()
                except Exception as exc:  # Ray Train raises the ranks' failure here; said below, in the driver
                    outcome["error"] = exc

            thread = threading.Thread(target=fit, name="ladle-ddp-fit", daemon=True)
            thread.start()
            done, said = None, None
            while thread.is_alive() or done is None:
                thread.join(0.5)
                for event in _events(events, Empty):
                    if event[0] == "epoch" and on_epoch is not None:
                        on_epoch(*event[1:])
                    elif event[0] == "error":
                        said = said or event[1:]
                    elif event[0] == "done":
                        done = event[1:]
                if not thread.is_alive() and done is None:
                    break
        if said is not None:
            raise LadleError(f"ddp: {said[0]}", fix=said[1])
        if done is None:
            error = outcome.get("error") or getattr(outcome.get("result"), "error", None)
            raise LadleError(f"ddp on Ray ended without its model: {str(error).strip().splitlines()[-1] if error else ''}",
                             fix="see the Ray logs, then ladle run --resume RUN_DIR (what is stored is kept)")
        finished, records = done
        for record in records:
            store.save(record)
        return finished
    finally:
        if started:
            ray.shutdown()


def _ray_rank(loop: dict) -> None:
    """One rank of the data-parallel model on a Ray Train worker, whose process group Ray Train has set up."""
    # optional: the ray extra
    import ray
    import ray.train
    import ray.train.torch

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    spec, events, carried = loop["spec"], loop["events"], loop["carried"]
    torch.set_num_threads(loop["threads"])
    graph = graph_from_payload(ray.get(loop["graph"]))
    here = str(ray.train.torch.get_device()) if loop["device"].startswith("cuda") else "cpu"
    shard, started = Shard(rank, world), time.time()

    def progress(name, epoch, epochs, best, metrics):
        try:
            events.put_nowait(("epoch", name, epoch, epochs, best, "ddp", metrics))
        except ray.exceptions.RayError:  # best effort, as for the ingredients
            pass

    try:
        start_state = carried.start_state(spec)
        with worker_memory() as usage:
            record = train_ingredient(spec, graph, device=here, start_state=start_state, shard=shard,
                                      on_epoch=progress if rank == 0 else None)
    except LadleError as err:
        events.put(("error", err.message, err.fix))
        raise
    if rank == 0:
        record.communication, record.worker_memory = shard.summary(record.epochs_trained), usage
        if start_state is not None:
            record.trunk_sha256 = carried.trunk_sha256
        label = f"ddp ({world} ranks on Ray, pid {os.getpid()})"
        events.put(("done", Finished(record.name, record.val, record.test, record.seconds, label,
                                     socket.gethostname(), started, time.time()), [record]))
