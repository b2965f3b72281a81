"""The pipeline, readable in one sitting: data -> ingredients -> store -> soups -> report.

The CLI is a thin layer over these functions; they log, and report progress through the
callbacks they are given, but never print.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from ladle.config import EngineConfig, RunConfig
from ladle.data import Graph, load_graph
from ladle.engines import get_engine
from ladle.engines.base import Finished, IngredientStore, OnProgress
from ladle.errors import LadleError
from ladle.evaluation import Evaluator
from ladle.evaluation.fast import FastEvaluator
from ladle.profiling import measure
from ladle.report import write_report
from ladle.soups import Ingredient, get_soup
from ladle.store import RunDir, model_from_sidecar

log = logging.getLogger(__name__)
OnSoup = Callable[[str, str], None]  # (method, "start" | "done")


def dataset_meta(graph: Graph) -> dict:
    return {"name": graph.name, "fingerprint": graph.fingerprint, "task": graph.task, "metric": graph.metric,
            "nodes": graph.num_nodes, "classes": graph.num_classes}


def train(config: RunConfig, out: str | Path, *, graph: Graph | None = None, on_epoch: OnProgress | None = None,
          resume: bool = False) -> tuple[RunDir, Graph, list[Finished]]:
    """Create the run directory (or, with ``resume``, reopen it) and train every missing ingredient.

    Each ingredient is stored as soon as it is done, by the worker that trained it; resuming
    trains only those with no complete checkpoint. Returns the summaries of those trained now.
    """
    for method in config.soups:
        get_soup(method)  # an unknown soup name fails now, not after an hour of training
    _check_device(config.device)
    engine = config.engine
    runner = get_engine(engine.resolved)
    if hasattr(runner, "prepare"):
        runner.prepare(config.device)  # local workers get ready while the graph loads
    # The graph first: a dataset that fails to load must not leave an empty run directory behind.
    graph = graph if graph is not None else load_graph(config.dataset, config.root)
    _check_fits_graph(config, graph)
    run_dir = RunDir(out) if resume else RunDir(out).create(config)
    meta = dataset_meta(graph)
    done = set(run_dir.ingredient_names())
    specs = [s for s in config.ingredient_specs() if s.name not in done]
    log.info("training %d of %d ingredients of %s on %s with the %s engine", len(specs), config.ingredients,
             config.model.name, graph.name, engine.resolved)
    store = IngredientStore(str(run_dir.path), meta)
    finished = runner.run(specs, graph, store, device=config.device, engine=engine,
                          on_epoch=on_epoch, on_done=run_dir.log_timeline)
    return run_dir, graph, finished


def resume(out: str | Path, *, engine: EngineConfig | None = None, on_epoch: OnProgress | None = None,
           on_soup: OnSoup | None = None) -> dict:
    """Finish a run that was stopped: train the missing ingredients with the stored config, soup, report."""
    run_dir = RunDir(out)
    config = run_dir.config()
    if engine is not None:  # where to train may change on resume; what to train may not
        config = replace(config, engine=engine)
    _, graph, _ = train(config, out, on_epoch=on_epoch, resume=True)
    soup(run_dir, graph=graph, on_soup=on_soup)
    return write_report(run_dir)


def soup(run_dir: str | Path | RunDir, methods: Sequence[str] | None = None, *, graph: Graph | None = None,
         on_soup: OnSoup | None = None) -> dict[str, dict]:
    """Soup the stored ingredients of a run with each method; store and return their sidecars.

    Selection uses the validation split only; the test score is computed afterwards, for the report.
    """
    run_dir = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    config = run_dir.config()
    methods = list(methods or config.soups)
    soups = [get_soup(m) for m in methods]
    graph = graph if graph is not None else load_graph(config.dataset, config.root)
    ingredients, model_config, fingerprints = load_ingredients(run_dir, graph)
    device = torch.device(config.device)
    graph_dev = graph.to(device)
    # Selection scores many mixes: the fast engine gives the reference's scores at a fraction of the cost.
    val = FastEvaluator(graph_dev, model_config, "val", chunk_size=config.train.eval_chunk)
    test = Evaluator(graph_dev, model_config, "test", chunk_size=config.train.eval_chunk)
    written = {}
    for method in soups:
        if on_soup:
            on_soup(method.name, "start")
        with measure(device) as usage:
            result = method(ingredients, val, granularity=config.granularity, learned=config.learned,
                            seed=config.seed)
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
            "options": {"granularity": config.granularity, **({"learned": config.learned.__dict__}
                                                               if result.fitted_on_val else {})},
            "trace": result.trace,
        }
        written[method.name] = run_dir.save_soup(method.name, result.state, sidecar)
        log.info("%s: val %.4f test %.4f (%.2fs)", method.name, result.val, test_score, usage.seconds)
        if on_soup:
            on_soup(method.name, "done")
    return written


def run(config: RunConfig, out: str | Path, *, on_epoch: OnProgress | None = None,
        on_soup: OnSoup | None = None) -> dict:
    """Train, soup and report; return the results (also written to ``out/results.json``)."""
    run_dir, graph, _ = train(config, out, on_epoch=on_epoch)
    soup(run_dir, graph=graph, on_soup=on_soup)
    return write_report(run_dir)


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
        _check_weights(source, state, model_config, in_channels, out_channels)
        ingredients.append(Ingredient(name, state, model_config, source))
        fingerprints[name] = sidecar["sha256"]
    return ingredients, model_config, fingerprints


def _check_fits_graph(config: RunConfig, graph: Graph) -> None:
    """Settings that only the graph can refute, checked before any work starts."""
    n = graph.num_nodes
    parts = config.partition.parts or config.ingredients  # 0: one part per ingredient
    if config.partition.method != "none" and parts > n:
        raise LadleError(f"partition.parts = {parts}: cannot cut {n} nodes into that many parts",
                         fix=f"use --parts {n} or fewer")
    if "pls" in config.soups and config.learned.parts > n:
        raise LadleError(f"learned.parts = {config.learned.parts}: cannot cut {n} nodes into that many parts",
                         fix=f"set parts = {n} or fewer in the [learned] table")
    for spec in config.ingredient_specs():
        if spec.sampler.name == "cluster" and spec.sampler.parts > n:
            raise LadleError(f"sampler.parts = {spec.sampler.parts} ({spec.name}): cannot cut {n} nodes into that "
                             "many parts", fix=f"use --parts {n} or fewer")


@functools.lru_cache(maxsize=8)
def _expected_shapes(model_config, in_channels: int, out_channels: int) -> dict[str, tuple]:
    """The tensor shapes the architecture has, from a model built on the meta device (no memory, no init)."""
    from ladle.models import build_model

    with torch.device("meta"):
        model = build_model(model_config, in_channels, out_channels)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_weights(source: str, state: dict, model_config, in_channels: int, out_channels: int) -> None:
    """Refuse weights that do not fit the architecture their sidecar names, or that are not finite."""
    expected = _expected_shapes(model_config, in_channels, out_channels)
    got = {k: tuple(v.shape) for k, v in state.items()}
    fix = "delete it and its .json, then ladle run --resume RUN_DIR to retrain it, or restore both files"
    if got != expected:
        problems = [f"missing {k}" for k in sorted(expected.keys() - got.keys())]
        problems += [f"extra {k}" for k in sorted(got.keys() - expected.keys())]
        problems += [f"{k} is {got[k]}, not {expected[k]}" for k in sorted(got.keys() & expected.keys())
                     if got[k] != expected[k]]
        raise LadleError(f"{source}: its tensors do not fit the {model_config.name} model its sidecar describes "
                         f"({'; '.join(problems[:4])})", fix=fix)
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise LadleError(f"{source} holds NaN or infinite weights ({', '.join(bad[:3])})", fix=fix)


def _model_entry(model_config, graph: Graph) -> dict:
    return {**model_config.__dict__, "in_channels": graph.num_features, "out_channels": graph.num_classes}


def _check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise LadleError(f"device {device!r} is not a torch device", fix="use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LadleError(f"device {device!r} asked for but no CUDA GPU is visible", fix="use --device cpu")
