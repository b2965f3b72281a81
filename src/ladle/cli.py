"""``ladle``: the command line. Thin: arguments and config file -> RunConfig -> ladle.api; prints with rich."""
from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import io
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import typing
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ladle import __version__
from ladle.config import EngineConfig, EvalConfig, RunConfig, TrainConfig, TrunkConfig, build_config, load_toml
from ladle.data import load_graph
from ladle.data.datasets import DATASETS, check_name
from ladle.engines import ENGINES
from ladle.errors import LadleError, normalise_name
from ladle.examples import example_text, examples
from ladle.models import MODELS
from ladle.models.options import ModelConfig
from ladle.sampling import SAMPLERS
from ladle.sampling.options import PartitionConfig
from ladle.soups import DEFAULT_PREDICTOR, SOUPS
from ladle.tomlio import parse_toml

console = Console()
errors = Console(stderr=True)

class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into the same clean stop as Ctrl-C: workers stopped, finished work kept."""


def _terminate(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(name)s: %(message)s")
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        return _dispatch(args)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args) -> int:
    try:
        trusted = getattr(args, "allow_import", None)
        if trusted:
            # start-up: `ladle --help` loads this module, and no torch
            from ladle.models.python_model import allow_import

            if "" in trusted:
                raise LadleError("--allow-import names the modules you trust; given alone it trusts nothing",
                                 fix="--allow-import mypkg.models (the module of the run's python:MODULE:NAME model)")
            with allow_import(*(m for group in trusted for m in group.split(",") if m)):
                return args.handler(args) or 0
        return args.handler(args) or 0
    except LadleError as err:
        errors.print(f"[bold red]error:[/] {escape(err.message)}", highlight=False, soft_wrap=True)
        if err.fix:
            errors.print(f"  [bold]fix:[/] {escape(err.fix)}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt as stop:
        where = getattr(args, "resume", None) or getattr(args, "out", None)
        if where is not None and not (Path(where) / "config.toml").is_file():
            where = None  # stopped before the run existed: there is nothing to resume
        what = "terminated." if isinstance(stop, Terminated) else "interrupted."
        errors.print(escape(what + (f" Finished ingredients are kept in {where}; finish the run with "
                                    f"ladle run --resume {where}" if where else "")), soft_wrap=True)
        return 143 if isinstance(stop, Terminated) else 130
    except Exception as err:  # a bug in ladle: one line, the traceback only when asked for
        if args.debug:
            raise
        errors.print(f"[bold red]internal error:[/] {type(err).__name__}: {escape(str(err))}", highlight=False,
                     soft_wrap=True)
        errors.print("  rerun with --debug for the traceback, and please report it")
        return 1


def _refuse_unknown(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> typing.NoReturn:
    """Unknown flags are refused by the command's own parser (its usage, not ladle's), with the nearest flag."""
    command_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = [flag for action in command_parser._actions for flag in action.option_strings]
    hints = []
    for word in unknown:
        name = word.split("=", 1)[0]
        near = difflib.get_close_matches(name, flags, n=1, cutoff=0.6) if name.startswith("-") else []
        if near:
            hints.append(f"{name}: did you mean {near[0]}?")
    command_parser.error(f"unrecognized arguments: {' '.join(unknown)}" + ("; " + "; ".join(hints) if hints else ""))


class _Parser(argparse.ArgumentParser):
    """argparse, with the nearest choice offered for a misspelt command."""

    def error(self, message: str) -> typing.NoReturn:
        wrong = re.match(r"argument COMMAND: invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            near = difflib.get_close_matches(wrong[1], re.findall(r"'([^']*)'", wrong[2]), n=1, cutoff=0.6)
            if near:
                message += f"; did you mean {near[0]!r}?"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ladle", description="Communication-free parallel GNN training with model soups (Graph Ladling).")
    parser.add_argument("--debug", action="store_true", help="log everything and show tracebacks")
    parser.add_argument("--version", action="version", version=f"ladle {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="train ingredients, soup them, report (the whole pipeline)")
    _add_run_flags(run)
    run.add_argument("--resume", type=Path, metavar="RUN_DIR",
                     help="finish a stopped run: train its missing ingredients with its stored config, then soup "
                          "(the graph from --root or --graph, never from a folder the run names)")
    run.add_argument("--graph", type=Path, metavar="FILE.npz|PDIR",
                     help="with --resume: the .npz graph (or partition folder) the run was trained on (checked by "
                          "fingerprint)")
    run.add_argument("--seeds", type=_int_list, metavar="S,S,...",
                     help="repeat the whole pipeline once per seed, into OUT/seed-S, and summarise each row as "
                          "mean ± std over the seeds (OUT/summary.json, summary.md)")
    run.set_defaults(handler=cmd_run)
    train = sub.add_parser("train", help="train and store ingredients only")
    _add_run_flags(train)
    train.set_defaults(handler=cmd_train)

    soup = sub.add_parser("soup", help="soup the ingredients of a stored run")
    soup.add_argument("run_dir", type=Path)
    _add_graph_flags(soup)
    soup.add_argument("--method", action="append", metavar="NAME",
                      help="soup method, repeatable (default: the run's soups): uniform, greedy, gis, ensemble, "
                           "learned, pls")
    soup.add_argument("--quiet", action="store_true", help="no progress and no table")
    soup.set_defaults(handler=cmd_soup)

    part = sub.add_parser("partition", help="cut a graph into K parts on disk, streaming it (train from them with "
                                            "--dataset parts:PDIR)")
    part.add_argument("--dataset", required=True, help="the graph: npy:DIR[#K] is streamed, never read whole; any "
                                                       "other dataset is loaded in memory first")
    part.add_argument("--root", default="data", help="dataset folder (default data)")
    part.add_argument("--parts", type=int, required=True, metavar="K", help="the number of parts")
    part.add_argument("--method", default="random", choices=("random", "metis"),
                      help="random (default: balanced, seeded, any size) or metis (pymetis; the adjacency must fit "
                           "in memory)")
    part.add_argument("--halo", type=int, default=0, choices=(0, 1),
                      help="how ingredients train on a part: 0 on its own nodes, 1 with their neighbours in other "
                           "parts as message sources (the part then holds their features too)")
    part.add_argument("--seed", type=int, default=0, help="the random partition's seed (default 0, as --partition)")
    part.add_argument("--out", type=Path, required=True, metavar="PDIR", help="a new folder for the parts")
    part.set_defaults(handler=cmd_partition)

    convert = sub.add_parser("convert", help="write a graph as an npy: folder (an ogbn dataset's raw files are "
                                             "streamed in chunks; any other dataset is loaded in memory first)")
    convert.add_argument("--dataset", required=True, help="ogbn-arxiv, ogbn-products, ogbn-papers100M (streamed "
                                                          "from OGB's raw files), or any dataset ladle loads")
    convert.add_argument("--root", default="data", help="dataset folder (default data)")
    convert.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new folder for the .npy files")
    convert.set_defaults(handler=cmd_convert)

    report = sub.add_parser("report", help="rebuild results.json, report.md and plots of a run")
    report.add_argument("run_dir", type=Path)
    report.set_defaults(handler=cmd_report)

    predict = sub.add_parser("predict", help="write one prediction per node with a stored model")
    predict.add_argument("run_dir", type=Path)
    _add_graph_flags(predict)
    predict.add_argument("--model", default=DEFAULT_PREDICTOR,
                         help="a soup (gis, greedy, uniform, ensemble), an ingredient or a baseline (long, long-swa, ddp)")
    predict.add_argument("--output", default="labels", choices=["labels", "proba", "logits", "embeddings"],
                         help="labels: class ids; proba, logits: [N, C] per class (the ensemble's logits: log of its "
                              "mean probability); embeddings: [N, H], what the last layer reads (default labels)")
    predict.add_argument("--out", type=Path, default=Path("predictions.csv"),
                         help="file to write, outside the run directory: CSV (node, split, then the prediction or one "
                              "column per class or dimension), or .npy (one row per node, in node order) "
                              "(default predictions.csv)")
    predict.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    predict.set_defaults(handler=cmd_predict)

    verify = sub.add_parser("verify", help="check a run without trusting its files: checksums, sidecars, config, "
                                           "links, log; with its graph, every recorded score and every soup made "
                                           "again (exit 2 if any fails)")
    verify.add_argument("run_dir", type=Path)
    _add_graph_flags(verify)
    verify.set_defaults(handler=cmd_verify)

    for command in (run, train, soup, report, predict, verify):
        command.add_argument("--allow-import", action="append", nargs="?", const="", metavar="MODULE",
                             help="trust MODULE (comma-separated or repeated; submodules included): a config or run "
                                  "may then name a model in it (model = \"python:MODULE:Cls\"), a torch.nn.Module "
                                  "class or a factory function defined there; names in any other module are refused")

    examples = sub.add_parser("examples", help="list ladle's example configs, or print one (ladle examples gis > "
                                               "my.toml)")
    examples.add_argument("name", nargs="?", help="the example to print")
    examples.set_defaults(handler=cmd_examples)

    datasets = sub.add_parser("datasets", help="list the datasets ladle can load")
    datasets.add_argument("--root", default="data", help="where to look for downloaded files")
    datasets.set_defaults(handler=cmd_datasets)
    return parser


def _add_graph_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", help="your dataset folder (default data); a run never chooses where ladle reads data")
    p.add_argument("--graph", type=Path, metavar="FILE.npz|PDIR",
                   help="for a run trained on an npz graph: that file, given again; from parts: the partition "
                        "folder (checked by fingerprint; never the place the run names)")


def _config_values(text: str) -> dict:
    """A config file's tables, or an example's (``example:NAME``, shipped or generated)."""
    if text.startswith("example:"):
        return parse_toml(example_text(text.split(":", 1)[1]), text)
    return load_toml(Path(text))


def _names(text: str) -> list[str]:
    return [name.strip().lower() for name in text.split(",") if name.strip()]


def _version() -> str:
    return __version__


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE|example:NAME",
                   help="TOML config file (flags override it), or one of ladle's examples (ladle examples)")
    p.add_argument("--out", type=Path, help="run directory to create (default runs/DATASET-MODEL-TIME)")
    p.add_argument("--quiet", action="store_true", help="no progress and no table; print the run directory")
    p.add_argument("--log", type=_names, default=[], metavar="NAMES",
                   help="trackers to log to, comma-separated: tensorboard, mlflow, wandb (offline), each an extra")
    p.add_argument("--log-dir", type=Path, help="where the trackers write (default RUN_DIR/logs, checked for links "
                                                "like every file of a run; a folder outside the run is yours)")
    groups = {}
    for flag in run_flags():
        group = groups.get(flag.group) or groups.setdefault(flag.group, p.add_argument_group(flag.group))
        group.add_argument(flag.flag, dest=flag.dest, **flag.kwargs)


@dataclasses.dataclass(frozen=True)
class Flag:
    flag: str
    dest: str
    key: str  # the dotted config key it sets
    group: str
    kwargs: dict


def run_flags() -> tuple[Flag, ...]:
    """Every flag of ``ladle run`` and ``ladle train``, derived from the options dataclasses of the run and of each
    family (their help, defaults, bounds and choices): a new option gets its flag where it is declared."""
    run_top = {"data": ("dataset", "root"), "training": ("ingredients", "seed", "init", "device", "metric", "baseline")}
    flags: dict[str, Flag] = {}

    def add(cls, name, key, group, default_note=None, choices=None, help_extra=""):
        field = {f.name: f for f in dataclasses.fields(cls)}[name]
        meta = field.metadata
        if meta.get("flag") == "":
            return
        flag = meta.get("flag") or "--" + name.replace("_", "-")
        if flag in flags and flags[flag].key == key:  # one flag, several samplers: its help names them
            return
        if flag in flags:  # a member's option named like another setting: never silently without a flag
            raise LadleError(f"{cls.__name__}.{name} would take the flag {flag}, which sets {flags[flag].key}",
                             fix=f"declare it with option(..., flag=\"--{key.replace('.', '-').replace('_', '-')}\")")
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        kind = typing.get_type_hints(cls)[name]
        note = "" if "default" in meta["help"] and not default_note else f" (default {default_note or _show(default)})"
        kwargs = {"help": f"{meta['help']}{help_extra}{note}"}
        if kind is bool:
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        elif typing.get_origin(kind) is tuple:
            kwargs["type"] = _int_list
        else:
            kwargs["type"] = {int: int, float: float}.get(kind, str)
            if (choices or meta.get("choices")) and name != "name":
                kwargs["choices"] = list(choices or meta["choices"])
        flags[flag] = Flag(flag, flag.removeprefix("--").replace("-", "_"), key, group, kwargs)

    for group, names in run_top.items():
        for name in names:
            add(RunConfig, name, name, group)
    for name in ("name", *[f.name for f in dataclasses.fields(ModelConfig) if f.name != "name"]):
        add(ModelConfig, name, f"model.{name}", "model", help_extra=f": {', '.join(MODELS.names())}" if name == "name"
            else "", default_note="gcn; GAT has defaults of its own" if name == "name" else None)
    for cls in (TrainConfig, TrunkConfig, EvalConfig):
        for f in dataclasses.fields(cls):
            add(cls, f.name, f"{cls.table}.{f.name}", "training")
    flags["--sampler"] = Flag("--sampler", "sampler", "sampler.name", "sampling", {
        "help": f"how each ingredient sees the graph: {', '.join(SAMPLERS.names())} (default full)"})
    owners: dict[str, list[str]] = {}
    for name in SAMPLERS.names():
        for f in dataclasses.fields(SAMPLERS.options(name)):
            owners.setdefault(f.name, []).append(name)
    for name in SAMPLERS.names():
        for f in dataclasses.fields(SAMPLERS.options(name)):
            add(SAMPLERS.options(name), f.name, f"sampler.{f.name}", "sampling",
                help_extra=f"; {', '.join(owners[f.name])}")
    for f in dataclasses.fields(PartitionConfig):
        add(PartitionConfig, f.name, f"partition.{f.name}", "sampling")
    for f in dataclasses.fields(EngineConfig):
        add(EngineConfig, f.name, f"engine.{f.name}", "engine (where ingredients train; never changes their weights)",
            choices=["auto", *ENGINE_NAMES()] if f.name == "name" else None)
    flags["--soups"] = Flag("--soups", "soups", "soups.methods", "soups", {
        "type": _comma_list, "help": f"comma-separated methods, from {', '.join(SOUPS.names())} (default "
                                     f"{','.join(RunConfig.__dataclass_fields__['soups'].default)})"})
    for name in SOUPS.names():
        cls = SOUPS.options(name)
        for f in dataclasses.fields(cls) if cls else ():
            add(cls, f.name, f"soups.{name}.{f.name}", "soups")
    return tuple(flags.values())


def ENGINE_NAMES() -> list[str]:  # noqa: N802
    return ENGINES.names()


def _show(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value in (None, "") else str(value)


def _int_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def config_from_args(args):
    overrides = {flag.key: getattr(args, flag.dest) for flag in run_flags()}
    if args.partition not in (None, "none") and args.parts is not None:
        # With --partition, --parts counts the partition's parts (Graph Ladling's K), not ClusterGCN's.
        overrides["partition.parts"] = overrides.pop("sampler.parts")
    file_values = _config_values(args.config) if args.config else None
    try:
        return build_config(file_values, overrides, source=str(args.config or "flags"))
    except LadleError as err:
        if file_values is None or str(args.config) in err.message:
            raise
        try:  # is the bad value the file's own? then say which file
            build_config(file_values, source=str(args.config))
        except LadleError as own:
            if own.message == err.message:
                raise LadleError(f"{args.config}: {err.message}", fix=err.fix) from None
        raise


def _default_out(config) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in config.dataset.split("/")[-1])[:40]
    return Path("runs") / f"{slug}-{config.model.name}-{time.strftime('%Y%m%d-%H%M%S')}"


# ------------------------------------------------------------------ commands


def cmd_run(args) -> int:
    if args.resume is not None:
        return _resume(args)
    config = config_from_args(args)
    _check_dataset(config)
    args.out = args.out or _default_out(config)
    if args.seeds is not None:
        return _run_seeds(args, config)
    # start-up: torch and the rest load after every check that needs neither
    from ladle import api

    results = api.run(config, args.out, callbacks=_callbacks(args, config), progress=False)
    _finish(args, results)
    return 0


def _run_seeds(args, config) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle import api
    from ladle.files import atomic_write
    from ladle.report import seeds_markdown, summarise_seeds

    if args.seed is not None:
        raise LadleError("--seed and --seeds were both given", fix="give the seeds to repeat over in --seeds alone")
    if not args.seeds or len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        raise LadleError(f"--seeds must list distinct seeds >= 0, got {args.seeds}", fix="for example --seeds 0,1,2")
    by_seed = {}
    for seed in args.seeds:
        out = Path(args.out) / f"seed-{seed}"
        seeded = dataclasses.replace(config, seed=seed)
        by_seed[seed] = api.run(seeded, out, callbacks=_callbacks(args, seeded), progress=False)
        console.print(f"seed {seed}: {out}", markup=False, highlight=False)
    summary = summarise_seeds(by_seed)
    atomic_write(Path(args.out) / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    atomic_write(Path(args.out) / "summary.md", seeds_markdown(summary).encode())
    if args.quiet:
        console.print(str(args.out), markup=False, highlight=False)
        return 0
    table = Table(title=escape(f"{summary['dataset']} · {summary['model']} · {len(args.seeds)} seeds"))
    for column in ("row", f"val {summary['metric']}", f"test {summary['metric']}", "test gain"):
        table.add_column(column, justify="left" if column == "row" else "right")
    for row in summary["rows"]:
        table.add_row(escape(row["label"]), _mean_std(row["val"]), _mean_std(row["test"]),
                      "" if row["gain"] is None else _mean_std(row["gain"], signed=True))
    console.print(table)
    console.print(f"per seed: {args.out}/seed-S; summary: {args.out}/summary.json, summary.md", markup=False)
    return 0


def _mean_std(stat: dict, signed: bool = False) -> str:
    return f"{stat['mean']:{'+' if signed else ''}.2f} ± {stat['std']:.2f}"


def _resume(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle import api
    from ladle.store import RunDir

    given = [flag.flag for flag in run_flags() if not flag.key.startswith("engine.") and flag.key != "root"
             and getattr(args, flag.dest) is not None] + [f"--{f}" for f in ("config", "out") if getattr(args, f)]
    if given:
        raise LadleError(f"--resume uses the run's stored config, but {', '.join(given)} was given",
                         fix="drop those flags (only engine flags such as --workers may change on resume)")
    config = RunDir(args.resume).config()
    engine = {f.key.split(".", 1)[1]: getattr(args, f.dest) for f in run_flags()
              if f.key.startswith("engine.") and getattr(args, f.dest) is not None}
    engine_config = dataclasses.replace(config.engine, **engine) if engine else None
    if engine_config is not None:
        EngineConfig(**engine_config.__dict__)  # validate
    args.out = args.resume
    results = api.resume(args.resume, engine=engine_config, root=args.root, graph_file=args.graph,
                         callbacks=_callbacks(args, config), progress=False)
    _finish(args, results)
    return 0


def _check_dataset(config) -> None:
    """A misspelt dataset is answered before torch is imported (seconds sooner; benchmarks/fail_fast.py)."""
    check_name(config.dataset)


def cmd_train(args) -> int:
    config = config_from_args(args)
    _check_dataset(config)
    # start-up: `ladle --help` loads this module, and no torch
    from ladle import api
    args.out = args.out or _default_out(config)
    run_dir, _, _ = api.train(config, args.out, callbacks=_callbacks(args, config), progress=False)
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.report import write_report

    _finish(args, write_report(run_dir))
    return 0


def cmd_soup(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle import api
    from ladle.report import write_report
    from ladle.store import RunDir

    run_dir = RunDir(args.run_dir)
    api.soup(run_dir, args.method, root=args.root, graph_file=args.graph, callbacks=_callbacks(args), progress=False)
    args.out = args.run_dir
    _finish(args, write_report(run_dir))
    return 0


def cmd_partition(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.parts.writer import open_source, write_parts
    from ladle.profiling import gib

    m = write_parts(open_source(args.dataset, args.root), args.out, args.parts, method=args.method, halo=args.halo,
                    seed=args.seed)
    sizes = [b - a for a, b in m["node_map"]]
    peak = "unknown" if m["peak_memory_bytes"] is None else gib(m["peak_memory_bytes"])
    console.print(f"{args.out}: {m['num_nodes']:,} nodes and {m['num_edges']:,} neighbour entries in {m['num_parts']} "
                  f"parts of {min(sizes):,} to {max(sizes):,} nodes ({m['part_method']}, halo {m['halo_hops']}); "
                  f"{m['partition_seconds']:.1f} s, peak memory {peak}", highlight=False, markup=False)
    console.print(f"train from it: ladle run --dataset parts:{args.out}", highlight=False, markup=False)
    return 0


def cmd_convert(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.ogb import SETS
    if normalise_name(args.dataset) in SETS and normalise_name(args.dataset) != "ogbnproteins":
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.data.ogb_npy import ogb_to_npy

        ogb_to_npy(args.dataset, args.root, args.out)
        how = "streamed from OGB's raw files"
    else:
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.data.npy import save_npy

        save_npy(load_graph(args.dataset, args.root), args.out)
        how = "loaded in memory"
    console.print(f"{args.out}: {args.dataset} as npy: ({how}); cut it with ladle partition --dataset npy:{args.out}",
                  highlight=False, markup=False)
    return 0


def cmd_report(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.report import write_report
    from ladle.store import RunDir

    args.out, args.quiet = args.run_dir, False
    _finish(args, write_report(RunDir(args.run_dir)))
    return 0


def cmd_predict(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.files import atomic_write
    from ladle.prediction import predict, prediction_rows

    out, run = args.out.resolve(), args.run_dir.resolve()
    if out == run or run in out.parents:
        raise LadleError(f"--out {args.out} lies inside the run directory {args.run_dir}",
                         fix="write predictions outside the run, for example --out predictions.csv")
    if os.path.lexists(args.out) and not args.force:
        raise LadleError(f"--out {args.out} already exists", fix="choose another --out, or add --force to overwrite it")
    if os.path.isdir(args.out):
        raise LadleError(f"--out {args.out} is a folder", fix="give a file name, for example --out predictions.csv")
    if args.out.suffix.lower() == ".npy":
        # start-up: `ladle --help` loads this module, and no torch
        import numpy as np

        values = predict(args.run_dir, args.model, args.output, root=args.root, graph_file=args.graph)
        buffer = io.BytesIO()
        np.save(buffer, values.numpy(), allow_pickle=False)
        atomic_write(args.out, buffer.getvalue())
        count = f"{values.size(0)} rows {list(values.shape)}"
    else:
        header, rows = prediction_rows(args.run_dir, args.model, args.output, root=args.root, graph_file=args.graph)
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(rows)
        atomic_write(args.out, buffer.getvalue().encode())
        count = f"{len(rows)} rows"
    console.print(f"wrote {args.output} of {args.model} ({count}) to {args.out}", markup=False, highlight=False)
    return 0


def cmd_verify(args) -> int:
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.verify import verify_run

    checks = verify_run(args.run_dir, root=args.root, graph_file=args.graph)
    run = os.path.abspath(args.run_dir)
    # A file of the run by its name alone (one name, one file: ingredient-03.json can only be in ingredients/), so
    # that it is shown whole; the detail folds instead; anything else by its path, folded rather than cut.
    shown = [os.path.basename(w) if (w := os.path.abspath(c.path)).startswith(run + os.sep) else c.path
             for c in checks]
    table = Table(title=escape(f"verify {args.run_dir}"))
    inside = [path for check, path in zip(checks, shown) if path != check.path]
    table.add_column("file", overflow="fold", min_width=min(max(map(len, inside), default=4), 30))
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check, path in zip(checks, shown):
        table.add_row(escape(path), "[green]ok[/]" if check.ok else "[bold red]FAILED[/]", escape(check.detail))
    console.print(table)
    failed = [c for c in checks if not c.ok]
    if failed:
        for check in failed:
            errors.print(f"[bold red]FAILED[/] {escape(check.path)}: {escape(check.detail)}", highlight=False,
                         soft_wrap=True)
        errors.print(f"[bold red]error:[/] {len(failed)} of {len(checks)} checks failed in {escape(str(args.run_dir))}",
                     soft_wrap=True)
        errors.print("  [bold]fix:[/] see each failed check above: restore the files as ladle wrote them, or retrain "
                     "the failed ingredients (delete their pair, then ladle run --resume) and re-soup (ladle soup)",
                     soft_wrap=True)
        return 2
    console.print(f"all {len(checks)} checks passed")
    return 0


def cmd_examples(args) -> int:
    if args.name:
        print(example_text(args.name), end="")
        return 0
    table = Table(title="example configs: ladle run --config example:NAME, or ladle examples NAME > my.toml")
    for column in ("name", "what it shows"):
        table.add_column(column)
    for name, summary in examples().items():
        table.add_row(name, summary)
    console.print(table)
    return 0


def cmd_datasets(args) -> int:
    table = Table(title="datasets (names are case- and dash-insensitive)")
    for column in ("name", "source", "description"):
        table.add_column(column)
    for entry in DATASETS.entries.values():
        table.add_row(entry.name, entry.reference, entry.help)
    console.print(table)
    return 0


# ------------------------------------------------------------------ output


def _callbacks(args, config=None) -> list:
    """The progress bars (unless --quiet) and the trackers --log names, writing under --log-dir or RUN_DIR/logs."""
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.callbacks import ProgressBar, flat_settings, make_loggers

    callbacks = [] if args.quiet else [ProgressBar(console)]
    names = getattr(args, "log", None)
    if names:
        settings = flat_settings(config.identity()) if config is not None else None
        run, where = Path(args.out), args.log_dir or Path(args.out) / "logs"
        # Inside the run (the default), each tracker's folder is checked for links first; a --log-dir elsewhere
        # is the user's own choice.
        inside = os.path.abspath(where).startswith(os.path.abspath(run) + os.sep)
        callbacks += make_loggers(names, where, settings, run_root=run if inside else None)
    return callbacks


def _finish(args, results: dict) -> None:
    if args.quiet:
        console.print(str(args.out), markup=False, highlight=False)
        return
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.report import closing_notes, gain_text, table_rows

    metric = results["dataset"].get("metric", "score")
    title = f"{results['dataset']['name']} · {results['model']} · {len(results['ingredients'])} ingredients"
    table = Table(title=escape(title))
    for column in ("model", f"val {metric}", f"test {metric}", "test gain", "seconds"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in table_rows(results):
        gain = gain_text(row)
        val = f"{100 * row['val']:.2f}" + (f" ± {100 * row['val_std']:.2f}" if "val_std" in row else "")
        test = f"{100 * row['test']:.2f}" + (f" ± {100 * row['test_std']:.2f}" if "test_std" in row else "")
        secs = "" if row.get("seconds") is None else f"{row['seconds']:.2f}"
        style = "bold" if row["kind"] in ("soup", "reference") else None
        table.add_row(escape(row["label"]), val, test, gain, secs, style=style)
    console.print(table)
    for note in closing_notes(results):
        console.print(note, markup=False, highlight=False)
    console.print(f"run directory: {args.out}  (results.json, report.md, plots/, soups/)", markup=False)


def entry() -> int:
    """The console script: :func:`main`, then an exit that a late Ctrl-C or SIGTERM cannot turn into a traceback
    (the work is finished or already stopped by then; interpreter shutdown joins the workers)."""
    try:
        status = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except KeyboardInterrupt:  # in the instant between main's end and the lines above
        return 130
    return status


if __name__ == "__main__":
    sys.exit(entry())
