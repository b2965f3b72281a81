"""ladle beside the DGL-based peer, Enhanced Soups (Zuber et al., 2025), on the same graphs, alternating run by run.

Both systems get the same npz graph (ladle writes it: Cora, and csbm-arxiv as a stand-in for ogbn-arxiv; csbm-products
for the sampler rows only), the same
GraphSAGE (2 layers, hidden 128, mean aggregation, no dropout), the same fanouts (one per layer, as the peer's
trainer takes a single number), batch size, learning rate and thread count. Each measure runs in a fresh process
per system, in ``--pairs`` pairs (default 5) whose order alternates (peer first, then ladle first, ...), so that a
machine whose load drifts slows both sides of a pair alike. Each row reports the median of the pairs' ratios and
their range; a row counts as "ladle faster" only when its whole range lies above 1 ("slower" below 1, else "no
clear difference").

Rows (times in seconds, lower is better, except the two sampler rates):
  gis: GIS over 4 ingredients, granularity 20, setup included (ladle: its fast evaluator's bank and plan);
  learned_epoch: one epoch of the learned soup, from two runs of different length (setup cancels out);
  train: the training loop, 4 ingredients x ``--epochs`` epochs of neighbour-sampled mini-batches, one at a time;
  train_eval: the same plus each ingredient's evaluation (peer: one full-graph validation and test; ladle:
      ``train_ingredient`` validating at the last epoch and scoring every split);
  sample_edges: neighbour sampling alone, sampled edges per second (DGL's C++ sampler against ladle's torch);
  sample_seeds: sampling with the feature gather, seed nodes per second.

The peer runs from its own environment (DGL has no build for ladle's torch), made once:

    python3.11 -m venv ../peer
    ../peer/bin/pip install torch==2.2.1 dgl==2.1.0 torchdata==0.7.1 pyyaml pydantic ogb "numpy<2"
    git clone <the Enhanced Soups repository> ../enhanced-soups       # used as it is, never modified

    python benchmarks/peer.py --peer-python ../peer/bin/python --peer-repo ../enhanced-soups --root ../shared/data/planetoid

The peer-side glue (graph from npz, the peer's trainer, soups and evaluation called on CPU) lives in this file; the
peer's code is imported from ``--peer-repo`` unmodified. Without the peer the script says so and exits 0. The last
line is key=value pairs: for each graph and row, the median ``peer/ladle`` time ratio (above 1: ladle is faster;
for the samplers the ``ladle/peer`` rate ratio) and its paired range (``_low``, ``_high``), then
``rows_ladle_faster`` (range above 1), ``rows_ladle_slower`` (range below 1) and ``rows``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = ["gis", "learned_epoch", "train", "train_eval", "sample_edges", "sample_seeds"]
RATES = {"sample_edges", "sample_seeds"}  # higher is better
LABELS = {"gis": "GIS, 4 ingredients, granularity 20 (s)", "learned_epoch": "learned soup, per epoch (s)",
          "train": "training loop, 4 ingredients (s)", "train_eval": "training + each ingredient's evaluation (s)",
          "sample_edges": "neighbour sampling only (sampled edges/s)",
          "sample_seeds": "sampling + feature gather (seed nodes/s)"}


# ---------------------------------------------------------------- the peer's side (runs in the peer's environment)

def peer_side(args) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, args.peer_repo)
    import dgl  # noqa: F401
    import soups  # the peer's own modules, unmodified
    import tools
    from ingredient_trainer import train_full_set_minibatched

    raw = np.load(args.npz, allow_pickle=False)
    edges = torch.from_numpy(raw["edges"]).long()
    graph = dgl.graph((edges[:, 0], edges[:, 1]), num_nodes=raw["node_features"].shape[0])
    graph.ndata["feat"] = torch.from_numpy(raw["node_features"]).float()
    graph.ndata["label"] = torch.from_numpy(raw["node_labels"]).long()
    for split in ("train", "val", "test"):
        graph.ndata[f"{split}_mask"] = torch.from_numpy(raw[f"{split}_masks"][0]).bool()
    train_nids = graph.ndata["train_mask"].nonzero().view(-1)
    fanout = args.fanout

    def model(seed):
        torch.manual_seed(seed)
        return tools.create_proper_model(graph, "graphsage", 2, args.hidden, 0.0, aggregator_type="mean",
                                         execute_silently=True)

    out = {}
    sampler = dgl.dataloading.NeighborSampler([fanout, fanout])
    seeds = train_nids[torch.randperm(train_nids.numel(), generator=torch.Generator().manual_seed(0))]
    batches = list(seeds.split(args.batch_size))[: args.sample_batches]
    sampler.sample(graph, batches[-1])  # untimed: DGL builds the graph's sparse formats on its first call
    start, edges_sampled = time.perf_counter(), 0
    for batch in batches:
        _, _, blocks = sampler.sample(graph, batch)
        edges_sampled += sum(block.num_edges() for block in blocks)
    out["sample_edges"] = edges_sampled / (time.perf_counter() - start)
    loader = dgl.dataloading.DataLoader(graph, seeds[: args.sample_batches * args.batch_size],
                                        dgl.dataloading.NeighborSampler([fanout, fanout], prefetch_node_feats=["feat"]),
                                        batch_size=args.batch_size, shuffle=False, num_workers=0)
    start, count = time.perf_counter(), 0
    for _, output_nodes, blocks in loader:
        blocks[0].srcdata["feat"].sum()
        count += output_nodes.numel()
    out["sample_seeds"] = count / (time.perf_counter() - start)
    if args.sampling_only:
        return out

    work = Path(args.work)
    paths, train_s, eval_s = [], 0.0, 0.0
    for k in range(4):
        m = model(k)
        start = time.perf_counter()
        train_full_set_minibatched(graph, m, args.epochs, args.lr, 0.0, train_nids, args.batch_size, fanout,
                                   print_progress=False)
        train_s += time.perf_counter() - start
        start = time.perf_counter()
        tools.validate(graph, m)
        tools.test(graph, m)
        eval_s += time.perf_counter() - start
        paths.append(str(work / f"peer-{k}.pt"))
        torch.save(m.state_dict(), paths[-1])
    out["train"], out["train_eval"] = train_s, train_s + eval_s

    start = time.perf_counter()
    soups.greedy_interpolated_soup(graph, paths, model(0), 20, show_progress=False)
    out["gis"] = time.perf_counter() - start
    out["learned_epoch"] = per_epoch(lambda epochs: soups.learned_soup(
        graph, paths, model(0), epochs, args.learned_lr, 0.0, init="uniform", CAW_T0=4, progress_bar=False),
        args.learned_epochs)
    return out


def per_epoch(fit, epochs: int) -> float:
    """Seconds per epoch of ``fit(epochs)``: (time of 1 + epochs) - (time of 1), over epochs; setup cancels out."""
    start = time.perf_counter()
    fit(1)
    one = time.perf_counter() - start
    start = time.perf_counter()
    fit(1 + epochs)
    return max(0.0, time.perf_counter() - start - one) / epochs


# ---------------------------------------------------------------- ladle's side

def ladle_side(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from ladle.config import build_config
    from ladle.data import load_graph
    from ladle.evaluation import Evaluator
    from ladle.evaluation.fast import FastEvaluator
    from ladle.models import build_model
    from ladle.sampling import build_sampler
    from ladle.soups import Ingredient, get_soup
    from ladle.soups.options import GISOptions, LearnedOptions
    from ladle.trainer import batch_loss, train_ingredient

    graph = load_graph(f"npz:{args.npz}#0")
    config = build_config({"dataset": f"npz:{args.npz}#0", "ingredients": 4, "seed": 0,
                           "model": {"name": "sage", "layers": 2, "hidden": args.hidden, "dropout": 0.0},
                           "sampler": {"name": "neighbor", "fanouts": [args.fanout, args.fanout],
                                       "batch_size": args.batch_size},
                           "train": {"epochs": args.epochs, "eval_every": args.epochs, "lr": args.lr}})
    specs = config.ingredient_specs()
    out = {}
    sampler = build_sampler(graph, specs[0].sampler, 0, num_layers=2)
    seeds = sampler.train_nodes[torch.randperm(sampler.train_nodes.numel(), generator=torch.Generator().manual_seed(0))]
    batches = list(seeds.split(args.batch_size))[: args.sample_batches]
    gen = torch.Generator().manual_seed(0)
    sampler.sample_topology(batches[-1], gen)  # untimed, as the peer's first call: the graph's CSR is built here
    start, edges_sampled = time.perf_counter(), 0
    for batch in batches:
        edges_sampled += sampler.sample_topology(batch, gen)[1].size(1)
    out["sample_edges"] = edges_sampled / (time.perf_counter() - start)
    start, count = time.perf_counter(), 0
    for batch in batches:
        data = sampler.sample(batch, gen)
        data.x.sum()
        count += data.batch_size
    out["sample_seeds"] = count / (time.perf_counter() - start)
    if args.sampling_only:
        return out

    train_s = 0.0  # the loop of train_ingredient alone: sampled batches, forward, loss, backward, Adam
    for spec in specs:
        model = build_model(spec.model, graph.num_features, graph.num_classes, init_seed=spec.init_seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=spec.train.lr)
        loop_sampler = build_sampler(graph, spec.sampler, spec.data_seed, num_layers=2, adjacency=model.adjacency)
        start = time.perf_counter()
        for epoch in range(1, spec.train.epochs + 1):
            model.train()
            for batch in loop_sampler.batches(epoch):
                optimizer.zero_grad(set_to_none=True)
                batch_loss(graph, model, batch).backward()
                optimizer.step()
        train_s += time.perf_counter() - start
    out["train"] = train_s
    start = time.perf_counter()
    records = [train_ingredient(spec, graph) for spec in specs]
    out["train_eval"] = time.perf_counter() - start
    ingredients = [Ingredient(r.name, r.state, config.model) for r in records]

    start = time.perf_counter()
    get_soup("gis")(ingredients, FastEvaluator(graph, config.model, "val"), GISOptions(granularity=20))
    out["gis"] = time.perf_counter() - start
    out["learned_epoch"] = per_epoch(lambda epochs: get_soup("learned")(
        ingredients, Evaluator(graph, config.model, "val"), LearnedOptions(epochs=epochs, lr=args.learned_lr)),
        args.learned_epochs)
    return out


# ---------------------------------------------------------------- the driver (ladle's environment)

def peer_ready(args) -> str:
    """Empty when the peer can run, else why not."""
    if not args.peer_python or not Path(args.peer_python).exists():
        return "no --peer-python (an interpreter with torch 2.2.1 and dgl 2.1.0)"
    if not args.peer_repo or not (Path(args.peer_repo) / "soups.py").exists():
        return "no --peer-repo (a checkout of the Enhanced Soups repository, with soups.py)"
    probe = subprocess.run([args.peer_python, "-c", "import dgl, torch"], capture_output=True, text=True)
    if probe.returncode:
        return f"{args.peer_python} cannot import dgl and torch: {probe.stderr.strip().splitlines()[-1:]}"
    return ""


def export(name: str, args, work: Path) -> Path:
    """The graph as an npz both systems read."""
    from ladle.data import load_graph
    from ladle.data.npz import save_npz

    path = work / f"{name.replace(':', '_')}.npz"
    if not path.exists():
        save_npz(load_graph(name, args.root), path)
    return path


def one_side(side: str, npz: Path, args, work: Path, sampling_only: bool) -> dict:
    python = args.peer_python if side == "peer" else sys.executable
    command = [python, __file__, "--side", side, "--npz", str(npz), "--work", str(work), "--threads", str(args.threads),
               "--epochs", str(args.epochs), "--fanout", str(args.fanout), "--batch-size", str(args.batch_size),
               "--hidden", str(args.hidden), "--lr", str(args.lr), "--learned-lr", str(args.learned_lr),
               "--learned-epochs", str(args.learned_epochs), "--sample-batches", str(args.sample_batches),
               "--peer-repo", args.peer_repo or ""] + (["--sampling-only"] if sampling_only else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "DGLBACKEND": "pytorch"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"the {side} side failed on {npz.name}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def paired(peer: list[float], ladle: list[float], rate: bool) -> tuple[float, float, float, str]:
    """Pair i's ratio (above 1: ladle is faster) for each i, as (median, lowest, highest, verdict)."""
    import statistics

    ratios = [(ours / theirs) if rate else (theirs / ours) for theirs, ours in zip(peer, ladle, strict=True)]
    low, high = min(ratios), max(ratios)
    verdict = "ladle faster" if low > 1 else "ladle slower" if high < 1 else "no clear difference"
    return statistics.median(ratios), low, high, verdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", default="", help="the peer environment's python")
    parser.add_argument("--peer-repo", default="", help="a checkout of the Enhanced Soups repository")
    parser.add_argument("--root", default="data", help="the Planetoid root (Cora's raw files under it)")
    parser.add_argument("--datasets", default="Cora,csbm-arxiv")
    parser.add_argument("--sampling-datasets", default="csbm-products",
                        help="graphs measured on the two sampler rows only (the peer's soups take hours there)")
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs of runs (one per system) per graph")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per ingredient")
    parser.add_argument("--fanout", type=int, default=10, help="neighbours sampled per node, at both layers")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--learned-lr", type=float, default=0.5)
    parser.add_argument("--learned-epochs", type=int, default=5, help="extra epochs timed for the per-epoch cost")
    parser.add_argument("--sample-batches", type=int, default=80, help="batches timed in each sampler row")
    parser.add_argument("--work", default="runs/peer")
    parser.add_argument("--markdown", default=str(Path(__file__).resolve().parent / "results" / "peer.md"),
                        help="where the table goes with its command and date (docs/RESULTS.md includes it)")
    parser.add_argument("--side", choices=("peer", "ladle"), help=argparse.SUPPRESS)
    parser.add_argument("--npz", help=argparse.SUPPRESS)
    parser.add_argument("--sampling-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps((peer_side if args.side == "peer" else ladle_side)(args)))
        return 0
    reason = peer_ready(args)
    if reason:
        print(f"the peer is absent: {reason}; nothing to compare (see this script's docstring to set it up)")
        print("peer=absent")
        return 0
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    figures, lines = {}, ["| graph | measure (1 thread) | peer (DGL), median | ladle, median | ratio, median "
                          "[paired range] | verdict |", "|---|---|---|---|---|---|"]
    verdicts = []
    graphs = [(n, False) for n in args.datasets.split(",") if n] + [
        (n, True) for n in args.sampling_datasets.split(",") if n]
    for name, sampling_only in graphs:
        npz = export(name, args, work)
        runs: dict[str, list[dict]] = {"peer": [], "ladle": []}
        for pair in range(args.pairs):
            for side in (("peer", "ladle") if pair % 2 == 0 else ("ladle", "peer")):
                measured = one_side(side, npz, args, work, sampling_only)
                print(f"{name} pair {pair} {side}: {json.dumps({k: round(v, 3) for k, v in measured.items()})}",
                      flush=True)
                runs[side].append(measured)
        key = name.lower().replace("-", "_").replace(":", "_")
        import statistics

        for row in [r for r in ROWS if r in runs["peer"][0]]:
            peer, ours = [m[row] for m in runs["peer"]], [m[row] for m in runs["ladle"]]
            median, low, high, verdict = paired(peer, ours, row in RATES)
            figures.update({f"{key}_{row}": round(median, 2), f"{key}_{row}_low": round(low, 2),
                            f"{key}_{row}_high": round(high, 2)})
            verdicts.append(verdict)
            fmt = (lambda v: f"{v / 1e6:.2f} M" if v > 1e6 else f"{v / 1e3:.1f} k") if row in RATES else (
                lambda v: f"{v:.3f}")
            lines.append(f"| {name} | {LABELS[row]} | {fmt(statistics.median(peer))} | {fmt(statistics.median(ours))} "
                         f"| {median:.2f}x [{low:.2f}, {high:.2f}] | {verdict} |")
    print("\n".join(lines))
    figures["rows_ladle_faster"] = verdicts.count("ladle faster")
    figures["rows_ladle_slower"] = verdicts.count("ladle slower")
    figures["rows"] = len(verdicts)
    summary = " ".join(f"{k}={v}" for k, v in figures.items())
    if args.markdown:
        import datetime
        import platform
        import shlex

        import torch

        command = "python benchmarks/peer.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
        made = (f"Ran {datetime.date.today().isoformat()} at commit {commit} on {os.cpu_count()} cores "
                f"({platform.machine()}), "
                f"ladle with torch {torch.__version__}, the peer with its own environment; {args.pairs} pairs of runs, "
                f"the order alternating pair by pair, {args.threads} thread(s), GraphSAGE 2 x {args.hidden}, fanout "
                f"{args.fanout} per layer, batch {args.batch_size}, {args.epochs} epochs per ingredient.")
        text = "\n".join([f"```\n{command}\n```", "", made, "", *lines, "", f"```\n{summary}\n```", ""])
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
