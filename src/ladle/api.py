"""The pipeline, readable in one sitting: data -> ingredients -> store -> soups -> report.

The CLI is a thin layer over these functions; they log, and report progress through the
callbacks they are given, but never print.
"""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from ladle.callbacks import Callback, Dispatch, ProgressBar
from ladle.config import EngineConfig, RunConfig, build_config
from ladle.data import Graph, load_graph
from ladle.data.datasets import dataset_has, graph_name
from ladle.data.fetch import no_downloads
from ladle.data.graph import check_metric_defined
from ladle.data.npz import load_npz, parse_npz_spec, save_npz
from ladle.data.pyg_input import graph_from
from ladle.ddp import check_plan, train_ddp
from ladle.engine_options import size_bytes
from ladle.engines import ENGINES, get_engine
from ladle.engines.base import Finished, IngredientStore, OnProgress, train_and_store, worker_label
from ladle.errors import LadleError, normalise_name
from ladle.evaluation import Evaluator
from ladle.evaluation.fast import FastEvaluator
from ladle.evaluation.memo import Remembering
from ladle.evaluation.streamed import PartsView, StreamedEvaluator
from ladle.files import check_inside
from ladle.models import check_weights, parameter_bytes
from ladle.models.options import model_config
from ladle.models.python_model import importable, is_instance, probe, register
from ladle.parts.reader import PartSource, open_parts, parse_parts_spec
from ladle.profiling import gib, measure, memory_available, too_big
from ladle.registry import _resolve
from ladle.report import write_report
from ladle.sampling import SAMPLERS
from ladle.sampling.options import PartitionConfig
from ladle.sampling.partition import graph_parts, membership_for, needs_metis, require_metis, thin_parts
from ladle.soups import Ingredient, get_soup
from ladle.store import RunDir, flatten, model_from_sidecar, spec_differences

log = logging.getLogger(__name__)
OnSoup = Callable[[str, str], None]  # (method, "start" | "done")


def dataset_meta(graph: Graph) -> dict:
    return {"name": graph.name, "fingerprint": graph.fingerprint, "task": graph.task, "metric": graph.metric,
            "nodes": graph.num_nodes, "classes": graph.num_classes}


DEFAULT_ROOT = "data"


def train(config: RunConfig | dict, out: str | Path, *, graph=None, on_epoch: OnProgress | None = None,
          resume: bool = False, root: str | Path | None = None, graph_file: str | Path | None = None,
          save_graph: bool = False, callbacks: Sequence[Callback] | Dispatch = (), progress: bool = True,
          model=None) -> tuple[RunDir, Graph, list[Finished]]:
    """Create the run directory (or, with ``resume``, reopen it) and train every missing ingredient.

    With ``trunk.epochs`` > 0 one trunk is trained first, here, and stored; every ingredient then
    starts from it. With ``baseline = "long"`` the equal-compute baseline goes to the engine first
    (it is the longest job). Each model is stored as soon as it is done, by the worker that trained it; resuming
    trains only those with no complete checkpoint, and refuses, before any training, a run whose
    stored ingredients were trained with other settings than its config now says. A new run
    reads its data from ``config.root`` (the user's own setting); a resumed one only from
    ``root`` or ``graph_file`` (see :func:`run_graph`). Returns the summaries of those trained now.

    ``graph`` may be a ladle ``Graph``, a PyG ``Data``, a PyG dataset or an OGB node-property dataset
    (:func:`ladle.data.pyg_input.graph_from`). A graph that is not the one ``config.dataset`` names is recorded
    as ``python:NAME``: later commands take it again by ``graph=`` (Python) or ``--graph FILE.npz`` (checked by
    fingerprint), or, with ``save_graph``, from the copy saved in the run as ``graph.npz``.

    ``callbacks`` (:class:`ladle.Callback`) hear every epoch and every stored model, in this process, whatever
    the engine; ``progress`` adds a progress bar on stderr. ``model`` is your own model: a factory
    ``(in_channels, out_channels) -> torch.nn.Module`` whose ``forward(x, edge_index[, edge_weight])`` gives
    logits (see :mod:`ladle.models.python_model`); it replaces ``config.model``.
    """
    dispatch, owned = _dispatch(callbacks, progress)
    try:
        # A model given here is trusted as that object alone: registering it makes its name buildable, and no
        # other python: name the config or run gives is imported.
        config = _with_model(build_config(config) if isinstance(config, dict) else config, model, resume)
        return _train(config, out, graph, _both(on_epoch, dispatch.progress if dispatch else None), resume,
                      root, graph_file, save_graph, dispatch)
    finally:
        if owned:
            dispatch.close()


def _with_model(config: RunConfig, model, resume: bool) -> RunConfig:
    """The config training ``model`` (a user's factory), refused where its engine could not build it."""
    if model is None:
        return config
    name = register(model)
    if resume or config.model.name.startswith("python:"):
        if config.model.name != name:
            raise LadleError(f"the model given ({name}) is not the one the run was trained with ({config.model.name})",
                             fix="pass the same model (the same class or function) as when the run was made")
        return config
    if is_instance(name) and config.init != "shared":
        raise LadleError("a model instance gives one initialisation, and init = independent asks for one per "
                         "ingredient", fix="pass the model's class or a factory (in_channels, out_channels) instead")
    if not importable(name) and not ENGINES.has(config.engine.resolved, "in-process"):
        what = "an instance" if is_instance(name) else "a lambda, a local class or one defined in __main__"
        raise LadleError(f"the model {name[len('python:'):]!r} cannot be imported by the {config.engine.resolved} "
                         f"engine's workers ({what})",
                         fix="define it at module level in an importable module and pass the class, or use engine "
                             "serial")
    return replace(config, model=model_config({"name": name}))


def _train(config, out, graph, on_epoch, resume, root, graph_file, save_graph, dispatch):
    if graph is not None:
        graph = graph_from(graph)
        if not resume and not names_graph(config.dataset, graph):
            config = replace(config, dataset=f"{PYTHON_PREFIX}{graph.name}")
    for method in config.soups:
        get_soup(method)  # an unknown soup name fails now, not after an hour of training
    if needs_metis(config):
        require_metis()  # a missing package fails now too
    if (ddp := config.long_spec("ddp")) is not None:
        check_plan(ddp)
    _check_device(config.device)
    engine = config.engine
    runner = get_engine(engine.resolved)
    if hasattr(runner, "prepare"):
        runner.prepare(config.device)  # local workers get ready while the graph loads
    # The graph first: a dataset that fails to load must not leave an empty run directory behind.
    if config.dataset.lower().startswith("parts:"):  # never whole here: each worker opens its own part
        config, graph, meta = _parts_source(config)
        if resume:
            run_dir = RunDir(out)
            check_ingredients(run_dir, config)
            if _recorded_fingerprint(run_dir) not in (None, meta["fingerprint"]):
                raise LadleError(f"{config.dataset} is not the partition {out} was trained on (its fingerprint "
                                 "differs)", fix="give the partition folder the run was made with")
    elif resume:
        run_dir = RunDir(out)
        graph = run_graph(run_dir, config, graph=graph, root=root, graph_file=graph_file)
        check_ingredients(run_dir, config, graph)
    else:
        graph = with_metric(graph if graph is not None else load_graph(config.dataset, config.root), config.metric)
    if isinstance(graph, Graph):
        _check_fits_graph(config, graph)
        if config.model.name.startswith("python:"):
            probe(config.model, graph)  # a model that cannot train on this graph is refused before the run exists
        if config.partition.method != "none" and not resume:
            if (warning := thin_parts(graph, config.partition.method, config.partition.parts)) is not None:
                log.warning(warning)
        meta = dataset_meta(graph)
    _check_worker_memory(config, graph)
    created = not resume
    if created:
        existed = Path(out).exists()
        run_dir = RunDir(out).create(config, meta)
        if save_graph:
            save_npz(graph, run_dir.path / SAVED_GRAPH, root=run_dir.path)
    with run_dir.writing("train"):
        return _train_in(config, graph, run_dir, meta, runner, on_epoch, created, created and existed, dispatch)


def _train_in(config, graph, run_dir, meta, runner, on_epoch, created, existed, dispatch):
    engine = config.engine
    store = IngredientStore(str(run_dir.path), meta, config.identity_sha256())
    long = config.long_spec()
    specs = [s for s in ([long] if long else []) + config.ingredient_specs() if not run_dir.has(s)]
    session = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # this call: a resumed run's timeline has several

    try:
        def on_done(done):
            run_dir.log_timeline(replace(done, session=session))
            dispatch.finished(done)

        store = _trunk(config, graph, store, run_dir, on_epoch, on_done, dispatch.stop_reason)
        log.info("training %d models of %s on %s with the %s engine", len(specs), config.model.name, graph.name,
                 engine.resolved)
        finished = runner.run(specs, graph, store, device=config.device, engine=engine,
                              on_epoch=on_epoch, on_done=on_done, should_stop=dispatch.stop_reason)
        ddp = config.long_spec("ddp")
        if ddp is not None and not run_dir.has(ddp):  # after the ingredients: its K ranks take every core
            log.info("training the data-parallel baseline on %d ranks", ddp.ranks)
            own = getattr(runner, "TRAIN_DDP", None)  # an engine that starts the ranks its own way (Ray: Ray Train)
            if own is not None:
                finished.append(_resolve(own)(ddp, graph, store, device=config.device, engine=engine,
                                              on_epoch=on_epoch))
            else:
                finished.append(train_ddp(ddp, graph, store, device=config.device, threads=engine.threads,
                                          on_epoch=on_epoch))
            on_done(finished[-1])
            if dispatch.stop_reason(ddp.name):
                log.warning("%s: a callback asked it to stop; a data-parallel model trains on (its ranks would all "
                            "have to agree)", ddp.name)
    except Exception:
        if created and not _stored_any(run_dir, config):  # nothing finished: leave no half-made run behind
            _remove_run(run_dir, keep_folder=existed)
        raise
    return run_dir, graph, finished


def _check_worker_memory(config: RunConfig, graph) -> None:
    """``--worker-memory SIZE``: refuse before training a plan whose worker would hold more graph than SIZE (from a
    partition, the largest part it trains on; in memory, the whole graph each worker maps)."""
    if not config.engine.worker_memory:
        return
    limit = size_bytes(config.engine.worker_memory)
    if isinstance(graph, Graph):
        need = sum(t.numel() * t.element_size() for t in (graph.data.x, graph.data.edge_index, *graph.csr()))
        if need > limit:
            raise LadleError(f"engine.worker_memory = {config.engine.worker_memory}: every worker maps the whole graph "
                             f"({gib(need)})", fix="cut it on disk (ladle partition --parts K) and train from the "
                                                   "parts (--dataset parts:PDIR), or allow more memory")
        return
    sizes = {p: graph.part_bytes(p) for p in {s.part for s in config.ingredient_specs()}}
    part, need = max(sizes.items(), key=lambda item: item[1])
    if need > limit:
        raise LadleError(f"engine.worker_memory = {config.engine.worker_memory}: part {part} of {graph.folder} holds "
                         f"{gib(need)}, more than a worker may", fix="cut the graph into more parts (ladle partition "
                                                                     "--parts), or allow more memory")


def _parts_source(config: RunConfig):
    """A ``parts:PDIR`` run's config with the folder's partition, the partition (its manifest checked, nothing
    mapped) and the dataset entry its sidecars record. The config may restate the partition, never change it."""
    source = open_parts(parse_parts_spec(config.dataset))
    m = source.manifest
    given = config.partition
    if given.method != "none" and (given.method, given.parts, given.halo) != (m["part_method"], m["num_parts"],
                                                                              bool(m["halo_hops"])):
        raise LadleError(f"partition = {given.method}, {given.parts} parts, halo {given.halo}, but {source.folder} "
                         f"holds {m['part_method']}, {m['num_parts']} parts, halo {bool(m['halo_hops'])}",
                         fix="leave out --partition/--parts/--halo with parts:PDIR (the folder decides), or cut the "
                             "graph again with ladle partition")
    config = replace(config, partition=PartitionConfig(method=m["part_method"], parts=m["num_parts"],
                                                       halo=bool(m["halo_hops"])))
    if config.trunk.epochs or config.baseline != "none":
        raise LadleError("a shared trunk and the long and ddp baselines train on the whole graph, which a parts: run "
                         "never loads", fix="train them from the source graph (--dataset npy:DIR with --partition), or "
                                      "leave out --trunk-epochs and --baseline")
    if config.metric not in ("auto", m["metric"]):
        raise LadleError(f"metric = {config.metric}, but {source.folder} was cut for {m['metric']}",
                         fix="leave out --metric with parts:PDIR")
    for p in sorted({s.part for s in config.ingredient_specs()}):  # from the manifest: no part's file is opened here
        if not m[f"part-{p}"]["split_sizes"]["train"]:
            raise LadleError(f"{source.folder}: part {p} holds no training node, so its ingredient would learn "
                             "nothing", fix="cut the graph into fewer parts (ladle partition --parts)")
    meta = {"name": source.name, "fingerprint": source.fingerprint, "task": m["task"], "metric": m["metric"],
            "nodes": m["num_nodes"], "classes": m["num_classes"]}
    return config, source, meta


def _dispatch(callbacks, progress: bool) -> tuple[Dispatch, bool]:
    """The callbacks of one call, and whether this call owns them (and closes them when it ends)."""
    if isinstance(callbacks, Dispatch):
        return callbacks, False
    if isinstance(callbacks, Callback):
        callbacks = [callbacks]
    return Dispatch([*callbacks, *([ProgressBar()] if progress else [])]), True


def _both(first, second):
    if first is None or second is None:
        return first or second

    def both(*event):
        first(*event)
        second(*event)

    return both


def _trunk(config: RunConfig, graph: Graph, store: IngredientStore, run_dir: RunDir, on_epoch,
           on_done, should_stop) -> IngredientStore:
    """Train and store the run's trunk unless it is stored; the store then carries its checksum to the workers."""
    spec = config.trunk_spec()
    if spec is None:
        return store
    if not run_dir.has(spec):
        done = train_and_store(spec, graph, store, device=config.device, threads=config.engine.threads,
                               worker=worker_label("driver", 0), on_epoch=on_epoch,
                               should_stop=lambda: should_stop(spec.name))
        on_done(done)
    _, sidecar = run_dir.load_checkpoint(spec)
    return replace(store, trunk_sha256=sidecar["sha256"])


def _stored_any(run_dir: RunDir, config: RunConfig) -> bool:
    specs = [s for s in [config.trunk_spec(), *config.baseline_specs()] if s is not None] + config.ingredient_specs()
    return any(run_dir.has(s) for s in specs)


def _remove_run(run_dir: RunDir, *, keep_folder: bool) -> None:
    for child in run_dir.path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    if not keep_folder:
        run_dir.path.rmdir()


def run_graph(run_dir: RunDir, config: RunConfig, *, graph: Graph | None = None, root: str | Path | None = None,
              graph_file: str | Path | None = None) -> Graph:
    """The graph of a stored run, loaded only from what the caller names, and checked by fingerprint.

    A run directory may come from anyone, so the data root and the file it records are never
    opened on its word: a named dataset is read from ``root`` (default ``data``, as for a new run),
    an npz graph from ``graph_file``; a synthetic ``csbm`` graph is generated again. The graph
    must have the fingerprint the run recorded.
    """
    expected = _recorded_fingerprint(run_dir)
    if config.dataset.lower().startswith("parts:") and (graph is None or is_parts(graph)):
        return _run_parts(run_dir, config, graph, graph_file, expected)
    if graph is not None:
        graph = graph_from(graph)
    else:
        if graph_file is not None:
            if Path(os.path.abspath(graph_file)).is_relative_to(os.path.abspath(run_dir.path)):
                check_inside(run_dir.path, Path(graph_file))  # a run's own file: never a link, never outside it
                if not Path(graph_file).is_file():
                    raise LadleError(f"{graph_file} is not a regular file", fix="give the graph's .npz file")

            _, split = parse_npz_spec(config.dataset) if config.dataset.lower().startswith("npz:") else (None, 0)
            graph = load_npz(graph_file, split)
        elif config.dataset.startswith(PYTHON_PREFIX):
            saved = run_dir.path / SAVED_GRAPH
            copy = (f"; the run holds the sender's copy: --graph {saved} takes it, and its scores are then "
                    "checked against the sender's own graph") if os.path.lexists(saved) else ""
            raise LadleError(f"{run_dir.path} was trained on a graph given from Python ({config.dataset})",
                             fix="pass the same graph again: graph=... in Python, or --graph FILE.npz (write it with "
                                 f"ladle.save_npz(graph, FILE)){copy}")
        elif config.dataset.lower().startswith("npz:"):
            raise LadleError(f"{run_dir.path} was trained on {config.dataset}; ladle opens no file that a run "
                             "directory names", fix="pass the graph yourself: --graph PATH.npz (checked by its "
                                                    "fingerprint)")
        else:
            given = DEFAULT_ROOT if root is None else str(root)
            try:
                with no_downloads():
                    graph = load_graph(config.dataset, given)
            except LadleError as err:
                if config.root == given or dataset_has(config.dataset, "generated"):
                    raise
                raise LadleError(f"{err.message} (the run says its data was under {config.root!r}; ladle reads "
                                 "only a root you give it)", fix=f"pass --root {config.root} if you trust that "
                                                                 "folder, or your own copy's root") from None
    graph = with_metric(graph, config.metric)
    if expected is not None and graph.fingerprint != expected:
        raise LadleError(f"the graph given ({graph.name}) is not the one {run_dir.path} was trained on "
                         f"(fingerprint {graph.fingerprint[:12]}…, the run recorded {expected[:12]}…)",
                         fix="give the dataset, root or --graph file the run was made with")
    return graph


def is_parts(graph) -> bool:
    """Whether ``graph`` is a partition folder (:class:`~ladle.parts.reader.PartSource`), never put together."""
    return isinstance(graph, PartSource)


def _run_parts(run_dir: RunDir, config: RunConfig, source, folder, expected):
    """A ``parts:`` run's partition: the one given (from the run just trained, or ``--graph PDIR``), never the
    folder the run names, checked by fingerprint; its layers are then streamed over the parts, never put together."""
    if source is None:
        if folder is None:
            raise LadleError(f"{run_dir.path} was trained from {config.dataset}; ladle opens no folder that a run "
                             "directory names", fix="pass the partition folder yourself: --graph PDIR (checked by "
                                                    "its fingerprint)")
        source = open_parts(folder)
    if expected is not None and source.fingerprint != expected:
        raise LadleError(f"the partition given ({source.folder}) is not the one {run_dir.path} was trained from "
                         f"(fingerprint {source.fingerprint[:12]}…, the run recorded {expected[:12]}…)",
                         fix="give the partition folder the run was made with")
    return source


def graph_source(run_dir: RunDir, config: RunConfig, *, graph=None, root=None, graph_file=None) -> str:
    """Where :func:`run_graph` takes a stored run's graph from, in words (verify says it beside every check)."""
    if graph is not None:
        return "the graph given from Python"
    if graph_file is not None:
        inside = Path(os.path.abspath(graph_file)).is_relative_to(os.path.abspath(run_dir.path))
        return f"--graph {graph_file}" + (" (a file inside the run: the sender's own graph, so its scores show only "
                                          "that the run agrees with itself)" if inside else "")
    if dataset_has(config.dataset, "generated"):
        return f"{config.dataset}, generated again from its seed"
    return f"{config.dataset} read from the root {DEFAULT_ROOT if root is None else str(root)!r}"


PYTHON_PREFIX = "python:"  # the dataset of a run whose graph came from Python
SAVED_GRAPH = "graph.npz"  # where save_graph puts it


def names_graph(dataset: str, graph: Graph) -> bool:
    """Whether ``dataset`` (a config's) is the name ``graph`` was loaded by, so a later command can load it again."""
    if dataset.startswith(PYTHON_PREFIX):
        return dataset == f"{PYTHON_PREFIX}{graph.name}"
    try:
        expected = graph_name(dataset)  # a file's or a generator's name, known from the spec
    except LadleError:
        return False
    if expected is not None:
        return graph.name == expected
    return normalise_name(graph.name) == normalise_name(dataset)


def with_metric(graph: Graph, metric: str) -> Graph:
    """The graph scored by ``metric`` (``auto``: its own), refused where the metric does not fit the task or is
    undefined on its splits."""
    if metric not in ("auto", graph.metric):
        if (metric == "f1") != (graph.task == "multilabel") and metric != "rocauc":
            raise LadleError(f"metric = {metric!r} does not fit {graph.name}, a {graph.task} task",
                             fix="use acc or rocauc for class labels, f1 or rocauc for multi-label tasks")
        graph = replace(graph, metric=metric)
    data = graph.data
    check_metric_defined(graph.name, graph.metric, graph.task, data.y, data.val_mask, data.test_mask)
    return graph


def _recorded_fingerprint(run_dir: RunDir) -> str | None:
    manifest = run_dir.manifest()
    if manifest is not None:
        return manifest["dataset"]["fingerprint"]
    sidecars = run_dir.ingredient_sidecars()
    return sidecars[0]["dataset"]["fingerprint"] if sidecars else None


def check_ingredients(run_dir: RunDir, config: RunConfig, graph: Graph | None = None) -> None:
    """Refuse a run whose stored ingredients do not all come from its config (edited since, or copied in from
    elsewhere), naming each setting that differs; and one whose manifest disagrees with its config."""
    manifest = run_dir.manifest()
    config_path = run_dir.path / "config.toml"
    if manifest is not None and not config.is_identity(manifest["identity_sha256"]):
        _refuse_unresolved_parts(run_dir, manifest.get("identity"))
        problems = identity_differences(manifest.get("identity"), config.identity())
        for sidecar in [] if problems else run_dir.ingredient_sidecars():
            index = sidecar["index"]
            if 0 <= index < config.ingredients:
                problems += spec_differences(sidecar, config.ingredient_specs()[index])
        detail = "; ".join(dict.fromkeys(problems[:6])) if problems else (
            "the settings differ from those it was created with")
        raise LadleError(f"{config_path} was edited after the run was created: {detail}",
                         fix="restore the config.toml the run was made with; to train with other settings, start "
                             "a new run (ladle run --config ... --out NEW_DIR)")
    specs = config.ingredient_specs()
    fingerprint = graph.fingerprint if graph is not None else _recorded_fingerprint(run_dir)
    seen: dict[str, str] = {}
    for sidecar in run_dir.ingredient_sidecars():
        where = run_dir.ingredients / f"{sidecar['name']}.json"
        index = sidecar["index"]
        if not 0 <= index < len(specs) or specs[index].name != sidecar["name"]:
            raise LadleError(f"{where} claims to be ingredient {index}, which this run's config does not have",
                             fix="remove the stray files, or restore the run's config.toml")
        twin = seen.setdefault(sidecar["sha256"], sidecar["name"])
        other = specs[int(twin.rsplit("-", 1)[1])] if twin != sidecar["name"] else None
        if other is not None and is_a_copy(sidecar, specs[index], other):
            raise LadleError(f"{where} holds the same weights as {twin}, though the two were to be trained "
                             "differently: one is a copy", fix="delete the copy and its .json, then ladle run "
                                                               "--resume RUN_DIR retrains it")
        differences = spec_differences(sidecar, specs[index])
        if differences:
            raise LadleError(f"{where} was trained with other settings than {config_path} says: "
                             + "; ".join(differences[:4]),
                             fix="restore the config.toml (or the ingredient) the run was made with; mixing "
                                 "ingredients of two configs is refused")
        if fingerprint is not None and sidecar["dataset"]["fingerprint"] != fingerprint:
            raise LadleError(f"{where} was trained on a different graph (dataset fingerprint differs)",
                             fix="remove it (ladle run --resume retrains it), or use the run it came from")
    _check_trunk_and_baseline(run_dir, config)


def is_a_copy(sidecar: dict, spec, twin) -> bool:
    """Whether a stored ingredient (``sidecar``, meant to be ``spec``) holding the same weights as ``twin``'s must
    be a copy: the two were to be trained differently and something random told them apart. The one rule that
    resume, soup and verify apply."""
    return bool(spec_differences(sidecar, twin)) and not _may_coincide(spec, twin)


def _may_coincide(a, b) -> bool:
    """Whether two ingredients can honestly end with the same weights: nothing random told them apart (the
    whole graph each epoch, one initialisation, one part, no dropout; a user's model may have none)."""
    model = a.model
    no_dropout = model.name.startswith("python:") or (model.dropout == 0 and not model.input_dropout)
    return (a.sampler.name == b.sampler.name and SAMPLERS.has(a.sampler.name, "whole-graph")
            and a.init_seed == b.init_seed and a.part == b.part and a.trunk_epochs == b.trunk_epochs and no_dropout)


def _refuse_unresolved_parts(run_dir: RunDir, recorded) -> None:
    """A run made before the number of parts was resolved once: its ingredient i trained on part i of an
    (i+1)-way partition, not of K parts, so its ingredients cannot be kept (config.toml was not edited)."""
    partition = recorded.get("partition") if isinstance(recorded, dict) else None
    if isinstance(partition, dict) and partition.get("method") not in (None, "none") and partition.get("parts") == 0:
        raise LadleError(f"{run_dir.path} was trained by an older ladle whose partitioned ingredients (parts = 0) "
                         "trained on the wrong parts: ingredient i on 1/(i+1) of the graph, not on part i of K",
                         fix="train it again into a new run directory (ladle run --config RUN/config.toml --out NEW)")


def identity_differences(recorded, current: dict) -> list[str]:
    """``key: created with X, now Y`` for each setting of the run's identity that changed."""
    if not isinstance(recorded, dict):
        return []
    old, new = flatten(recorded), flatten(current)
    return [f"{key}: created with {old.get(key, 'nothing')!r}, now {new.get(key, 'nothing')!r}"
            for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]


def _check_trunk_and_baseline(run_dir: RunDir, config: RunConfig) -> None:
    """The trunk and the long baseline are the ones the config asks for, and every model that branched from a
    trunk branched from the one stored."""
    trunk_sha, baselines = None, []
    for spec in [config.trunk_spec(), *config.baseline_specs()]:
        if spec is None or not run_dir.has(spec):
            continue
        _, sidecar = run_dir.load_checkpoint(spec)
        where = run_dir.checkpoint_path(spec).with_suffix(".json")
        differences = spec_differences(sidecar, spec)
        if differences:
            raise LadleError(f"{where} was trained with other settings than the config says: "
                             + "; ".join(differences[:4]), fix="restore the config.toml the run was made with")
        if spec.role == "trunk":
            trunk_sha = sidecar["sha256"]
        else:
            baselines.append(sidecar)
    branched = [s for s in run_dir.ingredient_sidecars() if s.get("trunk_sha256")] + baselines
    for sidecar in branched:
        if sidecar["trunk_sha256"] != trunk_sha:
            what = "is missing" if trunk_sha is None else "is not the one it started from"
            raise LadleError(f"{sidecar['name']} started from a trunk that {what} ({run_dir.trunk / 'trunk.json'})",
                             fix="restore the run's trunk; ladle will not soup models of two different trunks")


def resume(out: str | Path, *, engine: EngineConfig | None = None, on_epoch: OnProgress | None = None,
           on_soup: OnSoup | None = None, root: str | Path | None = None, graph_file: str | Path | None = None,
           graph=None, callbacks: Sequence[Callback] = (), progress: bool = True, model=None) -> dict:
    """Finish a run that was stopped: train the missing ingredients with the stored config, soup, report."""
    run_dir = RunDir(out)
    if model is not None:
        register(model)  # trusted as that object alone: the run must name exactly it
    config = run_dir.config()
    if engine is not None:  # where to train may change on resume; what to train may not
        config = replace(config, engine=engine)
    dispatch, _ = _dispatch(callbacks, progress)
    try:
        with run_dir.writing("run --resume"):
            _, graph, _ = train(config, out, graph=graph, on_epoch=on_epoch, resume=True, root=root,
                                graph_file=graph_file, callbacks=dispatch, model=model)
            soup(run_dir, graph=graph, on_soup=on_soup, callbacks=dispatch, model=model)
            return write_report(run_dir)
    finally:
        dispatch.close()


def soup(run_dir: str | Path | RunDir, methods: Sequence[str] | None = None, *, graph=None,
         on_soup: OnSoup | None = None, root: str | Path | None = None, graph_file: str | Path | None = None,
         callbacks: Sequence[Callback] | Dispatch = (), progress: bool = False, model=None) -> dict[str, dict]:
    """Soup the stored ingredients of a run with each method; store and return their sidecars.

    Selection uses the validation split only; the test score is computed afterwards, for the report.
    Every ingredient's validation and test scores are computed again here from its weights and
    stored with each soup, so the report never rests on scores a sidecar merely claims.
    """
    dispatch, owned = _dispatch(callbacks, progress)
    try:
        if model is None:
            return _soup(run_dir, methods, graph, on_soup, root, graph_file, dispatch)
        register(model)  # the run's config names it; given again, it is the user's own code, and only it
        return _soup(run_dir, methods, graph, on_soup, root, graph_file, dispatch)
    finally:
        if owned:
            dispatch.close()


def _soup(run_dir, methods, graph, on_soup, root, graph_file, dispatch):
    run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    config = run_dir.config()
    methods = list(config.soups if methods is None else methods)
    for m in methods:
        get_soup(m)  # a misspelt method is refused before the graph is loaded
    graph = run_graph(run_dir, config, graph=graph, root=root, graph_file=graph_file)
    written = {}
    with run_dir.writing("soup"):
        for name, state, sidecar in make_soups(run_dir, config, graph, methods, on_soup=on_soup):
            written[name] = run_dir.save_soup(name, state, sidecar)
            dispatch.soup(name, sidecar)
            if on_soup:
                on_soup(name, "done")
    return written


# What a soup's sidecar holds that depends on the machine, not on the ingredients and the recipe.
SOUP_TIMING_FIELDS = ("seconds", "peak_memory_mb")


def make_soups(run_dir: RunDir, config: RunConfig, graph: Graph, methods, *, on_soup: OnSoup | None = None):
    """Yield ``(name, state, sidecar)`` for each soup method, from the run's checked ingredients and its config's
    recipe (seed, options): deterministic, so ``verify`` recomputes every stored soup through this same path."""
    soups = [get_soup(m) for m in methods]
    ingredients, model_config, fingerprints = load_ingredients(run_dir, graph)
    check_ingredients(run_dir, config, graph)
    if not soups:  # nothing to score: no evaluator (a parts: run's driver may hold the manifest alone)
        return
    wanted = {m.name for m in soups}
    cuts = [parts for setting, method, parts in config.cuts()
            if method == "metis" and setting.split(".")[:2] in [["soups", n] for n in wanted]]
    if cuts and not is_parts(graph):
        # METIS over a large graph needs more memory than the evaluators built next: cut (and cache on disk) the
        # parts a soup cuts (the partition learned soup's) now, so that peak is not added to theirs.
        for parts in cuts:
            graph_parts(graph, parts, config.seed)
    device = torch.device(config.eval.device or config.device)
    if is_parts(graph):  # layer by layer over the parts, spilled beside the run: never the whole graph
        view = PartsView(graph, scratch=run_dir.path)
        val, test = (StreamedEvaluator(view, model_config, split, config.eval.chunk, device) for split in ("val", "test"))
    else:
        view, graph_dev = None, graph.to(device)
        # Selection scores many mixes: the fast engine gives the reference's scores at a fraction of the cost.
        val = FastEvaluator(graph_dev, model_config, "val", chunk_size=config.eval.chunk)
        test = Evaluator(graph_dev, model_config, "test", chunk_size=config.eval.chunk)
    try:
        yield from _soups_on(run_dir, config, graph, soups, ingredients, model_config, fingerprints, val, test,
                             device, on_soup)
    finally:
        if view is not None:
            view.close()


def _soups_on(run_dir, config, graph, soups, ingredients, model_config, fingerprints, val, test, device, on_soup):
    # Every soup ranks the same ingredients: each is scored once, all together (on parts, several per pass).
    val, test = Remembering(val), Remembering(test)
    states = [i.state for i in ingredients]
    scores = {i.name: {"sha256": fingerprints[i.name], "val": v, "test": t}
              for i, v, t in zip(ingredients, val.remember(states), test.remember(states))} if soups else {}
    evaluation = val.describe()  # after a first score: a streamed evaluator then knows what it keeps
    if config.eval.chunk and not evaluation["chunk_bound"]:
        log.warning("eval.chunk = %d bounds the reference scoring only; the fast evaluator's ingredient bank holds "
                    "the validation nodes' receptive field whole", config.eval.chunk)
    baselines = {}
    for spec in config.baseline_specs() if soups else ():  # scored like the ingredients, from their weights
        if run_dir.has(spec):
            state, sidecar = run_dir.load_checkpoint(spec)
            check_weights(str(run_dir.checkpoint_path(spec)), state, model_config, graph.num_features,
                          graph.num_classes)
            baselines[spec.role] = {"sha256": sidecar["sha256"], "val": val.score(state), "test": test.score(state)}
    for method in soups:
        if on_soup:
            on_soup(method.name, "start")
        with measure(device) as usage:
            result = method(ingredients, val, config.soup_settings(method.name), seed=config.seed)
            val.release()
        if result.state is None:
            test_score = test.score_ensemble([i.state for i in ingredients if i.name in result.coefficients])
        else:
            test_score = test.score(result.state)
        sidecar = {
            "reference": method.reference,
            "model": _model_entry(model_config, graph),
            "dataset": dataset_meta(graph),
            "scores": {"val": result.val, "test": test_score},
            "seconds": usage.seconds,
            "peak_memory_mb": usage.peak_mb,
            "is_soup": result.is_soup,
            "fitted_on_val": result.fitted_on_val,
            "coefficients": result.coefficients,
            "ingredients_sha256": {n: fingerprints[n] for n in result.coefficients},
            "ingredient_scores": scores,
            "baseline_scores": baselines,
            "options": config.soup(method.name),
            "evaluation": evaluation,
            "trace": result.trace,
        }
        log.info("%s: val %.4f test %.4f (%.2fs)", method.name, result.val, test_score, usage.seconds)
        yield method.name, result.state, sidecar


def run(config: RunConfig | dict, out: str | Path, *, graph=None, save_graph: bool = False,
        on_epoch: OnProgress | None = None, on_soup: OnSoup | None = None, callbacks: Sequence[Callback] = (),
        progress: bool = True, model=None) -> dict:
    """Train, soup and report; return the results (also written to ``out/results.json``).

    ``config`` is a RunConfig or the dict :func:`ladle.build_config` takes; ``graph`` and ``save_graph`` as for
    :func:`train`; ``callbacks`` and ``progress`` serve the training and the soups alike.
    """
    dispatch, _ = _dispatch(callbacks, progress)
    try:
        run_dir, graph, _ = train(config, out, graph=graph, save_graph=save_graph, on_epoch=on_epoch,
                                  callbacks=dispatch, model=model)
        with run_dir.writing("run"):
            soup(run_dir, graph=graph, on_soup=on_soup, callbacks=dispatch, model=model)
            return write_report(run_dir)
    finally:
        dispatch.close()


def load_ingredients(run_dir: RunDir, graph: Graph) -> tuple[list[Ingredient], object, dict[str, str]]:
    """Read and verify every stored ingredient; refuse ones trained on another graph."""
    names = run_dir.ingredient_names()
    if not names:
        raise LadleError(f"{run_dir.path} holds no trained ingredients", fix="run ladle train first")
    ingredients, fingerprints, model_config = [], {}, None
    for name in names:
        state, sidecar = run_dir.load_ingredient(name)
        source = str(run_dir.ingredients / f"{name}.safetensors")
        if sidecar.get("dataset", {}).get("fingerprint") != graph.fingerprint:
            raise LadleError(f"{source} was trained on a different graph (dataset fingerprint differs)",
                             fix="soup it with the dataset and root it was trained on")
        model_config, in_channels, out_channels = model_from_sidecar(sidecar)
        if (in_channels, out_channels) != (graph.num_features, graph.num_classes):
            raise LadleError(f"{source}: its sidecar describes {in_channels} input features and {out_channels} "
                             f"classes; the graph has {graph.num_features} and {graph.num_classes}",
                             fix="restore the sidecar ladle wrote, or retrain the ingredient")
        check_weights(source, state, model_config, in_channels, out_channels)
        ingredients.append(Ingredient(name, state, model_config, source))
        fingerprints[name] = sidecar["sha256"]
    return ingredients, model_config, fingerprints


def _check_fits_graph(config: RunConfig, graph: Graph) -> None:
    """Settings that only the graph can refute, checked before any work starts."""
    n = graph.num_nodes
    for setting, _, parts in config.cuts():
        if parts > n:
            table, _, key = setting.rpartition(".")
            raise LadleError(f"{setting} = {parts}: cannot cut {n} nodes into that many parts",
                             fix=f"use --parts {n} or fewer" if table in ("partition", "sampler") else
                             f"set {key} = {n} or fewer in the [{table}] table")
    # Weights, their gradients and Adam's two moments, per worker: refused before anything is allocated.
    need = 4 * parameter_bytes(config.model, graph.num_features, graph.num_classes) * max(config.engine.workers, 1)
    if too_big(need):
        raise LadleError(f"model.hidden = {config.model.hidden}: {config.model.name} on {graph.num_features} features "
                         f"and {graph.num_classes} classes needs {gib(need)} for weights and optimiser state, more "
                         f"than the {gib(memory_available())} of memory free", fix="choose a smaller --hidden")
    if config.partition.method != "none":
        _check_parts_have_training_nodes(config, graph, parts)


def _check_parts_have_training_nodes(config: RunConfig, graph: Graph, parts: int) -> None:
    """A partitioned ingredient learns only from the training nodes of its part: a part without any would train
    nothing and be stored as if it had."""
    membership = membership_for(graph, config.partition.method, parts)
    per_part = torch.bincount(membership[graph.mask("train")], minlength=parts)
    used = sorted({s.part for s in config.ingredient_specs()})
    empty = [p for p in used if int(per_part[p]) == 0]
    if empty:
        raise LadleError(f"partition.parts = {parts}: part{'s' if len(empty) > 1 else ''} "
                         f"{', '.join(map(str, empty[:8]))} of the {config.partition.method} partition hold no "
                         "training node, so their ingredients would learn nothing",
                         fix="use fewer parts (--parts), or --partition random")


def _model_entry(model_config, graph: Graph) -> dict:
    return {**model_config.__dict__, "in_channels": graph.num_features, "out_channels": graph.num_classes}


def _check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise LadleError(f"device {device!r} is not a torch device", fix="use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LadleError(f"device {device!r} asked for but no CUDA GPU is visible", fix="use --device cpu")
    count = torch.cuda.device_count() if dev.type == "cuda" else 0
    if dev.type == "cuda" and dev.index is not None and dev.index >= count:
        gpus = "1 CUDA GPU is" if count == 1 else f"{count} CUDA GPUs are"
        raise LadleError(f"device {device!r} asked for but only {gpus} visible", fix=f"use cuda:0 to cuda:{count - 1}")
