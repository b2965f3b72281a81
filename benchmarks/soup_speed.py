"""GIS with the fast soup evaluation engine against the reference path, and the learned soups' cost.

8 ingredients, 3 layers, 128 hidden, granularity 20, for GCN, GraphSAGE and GAT. The ingredients
are trained briefly (full batch, a few epochs, shared initialisation) and cached under --cache:
this measures the soup, not training. For each architecture, the reference GIS (mixed weights,
full forward, per α) and the fast GIS run side by side in one process; their α sequences and
soup weights are compared. Then ``learned`` and ``pls`` (GCN) with their time and peak memory,
each scored by chunked inference (--eval-chunk) so that the peak is the fit's, and the test
accuracy of every soup.

    python benchmarks/soup_speed.py --epochs 2                       # csbm-arxiv: about an hour on 2 cores
    python benchmarks/soup_speed.py --dataset csbm:nodes=20000 --archs gcn,sage   # a quick look

The last line is key=value pairs: ``speedup_gcn=… speedup_sage=… speedup_gat=… identical=true|false``,
with each architecture's reference and fast GIS seconds and the seconds spent training its ingredients
(near 0 when they were cached).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def ingredients_for(arch: str, args, graph):
    from ladle import api
    from ladle.config import build_config
    from ladle.store import RunDir

    out = Path(args.cache) / f"{arch}-{args.ingredients}-{args.epochs}-{args.dataset.replace(':', '_').replace(',', '_')}"
    config = build_config({"dataset": args.dataset, "ingredients": args.ingredients, "model": {"name": arch, "layers": 3,
                           "hidden": 128, "heads": 4}, "train": {"epochs": args.epochs}, "soups": ["gis"],
                           "device": args.device})
    start = time.perf_counter()
    if not (out / "config.toml").exists() or len(RunDir(out).ingredient_names()) < args.ingredients:
        api.train(config, out, graph=graph, resume=(out / "config.toml").exists(), progress=False)
    trained_s = time.perf_counter() - start  # ~0 when cached: the full reproduction counts its training too
    ingredients, model_config, _ = api.load_ingredients(RunDir(out), graph)
    return ingredients, model_config, trained_s


def learned_in_fresh_process(name: str, args) -> tuple:
    """One learned soup in a new process, so its peak memory is its own, not what an earlier one left."""
    from ladle.data import load_graph
    from ladle.evaluation import Evaluator
    from ladle.soups import get_soup

    graph = load_graph(args.dataset)
    ingredients, model_config, _ = ingredients_for("gcn", args, graph)
    graph = graph.to(args.device)
    # Scored by chunked layer-wise inference (``eval.chunk``), as a user bounding memory would run them:
    # with a full forward for scoring, pls's peak would be that forward's, not its fit's.
    evaluator = Evaluator(graph, model_config, chunk_size=args.eval_chunk)
    from ladle.soups import SOUPS

    extra = {"parts": 16, "parts_per_epoch": 4} if name == "pls" else {}
    options = SOUPS.options(name)(epochs=args.learned_epochs, **extra)
    result, seconds, peak = timed(get_soup(name), ingredients, evaluator, options, device=args.device)
    return seconds, peak, result.val, Evaluator(graph, model_config, "test").score(result.state)


def timed(fn, *args, device="cpu", **kwargs):
    from ladle.profiling import measure

    with measure(device) as usage:
        result = fn(*args, **kwargs)
    return result, usage.seconds, usage.peak_mb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--archs", default="gcn,sage,gat")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--granularity", type=int, default=20)
    parser.add_argument("--cache", default="runs/soup_speed")
    parser.add_argument("--ingredients", type=int, default=8)
    parser.add_argument("--no-learned", action="store_true", help="GIS only, without learned and pls")
    parser.add_argument("--eval-chunk", type=int, default=16384,
                        help="node chunk of the learned soups' scoring (0: one full forward)")
    parser.add_argument("--learned-epochs", type=int, default=50, help="epochs of the learned soups' fit")
    parser.add_argument("--device", default="cpu", help="where the ingredients train and the soups run (cpu, cuda)")
    args = parser.parse_args(argv)
    from ladle.data import load_graph
    from ladle.evaluation import Evaluator
    from ladle.evaluation.fast import FastEvaluator
    from ladle.soups import get_soup

    graph = load_graph(args.dataset)
    print(f"{graph.name}: {graph.num_nodes:,} nodes, {args.ingredients} ingredients x 3 layers x 128 hidden, "
          f"granularity {args.granularity}")
    print(f"{'arch':5s} {'soup':10s} {'seconds':>8s} {'peak MB':>8s} {'val':>7s} {'test':>7s}")
    figures, identical = {}, True
    from ladle.soups.options import GISOptions

    gis = get_soup("gis")
    for arch in args.archs.split(","):
        ingredients, model_config, trained_s = ingredients_for(arch, args, graph)
        on_device = graph.to(args.device)
        test = Evaluator(on_device, model_config, "test")
        if on_device.data.x.is_cuda:  # the first sparse and dense products start CUDA's libraries: not the soup's cost
            test.score(ingredients[0].state)
        options = GISOptions(granularity=args.granularity)
        ref, ref_s, ref_mb = timed(gis, ingredients, Evaluator(on_device, model_config), options, device=args.device)
        fast, fast_s, fast_mb = timed(gis, ingredients, FastEvaluator(on_device, model_config), options,
                                      device=args.device)
        same = ([s["alpha"] for s in ref.trace] == [s["alpha"] for s in fast.trace]
                and all(ref.state[k].equal(fast.state[k]) for k in ref.state))
        identical &= same
        for label, result, seconds, peak in (("gis-ref", ref, ref_s, ref_mb), ("gis-fast", fast, fast_s, fast_mb)):
            print(f"{arch:5s} {label:10s} {seconds:8.1f} {peak:8.0f} {result.val:7.4f} {test.score(result.state):7.4f}"
                  + (f"  (same alphas and weights: {str(same).lower()})" if label == "gis-fast" else ""), flush=True)
        figures[f"speedup_{arch}"] = round(ref_s / fast_s, 2)
        figures[f"{arch}_ref_s"], figures[f"{arch}_fast_s"] = round(ref_s, 1), round(fast_s, 2)
        figures[f"{arch}_train_s"] = round(trained_s, 1)
        if arch == "gcn" and not args.no_learned:
            import multiprocessing

            for name in ("learned", "pls"):
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    seconds, peak, val, test_score = pool.apply(learned_in_fresh_process, (name, args))
                print(f"{arch:5s} {name:10s} {seconds:8.1f} {peak:8.0f} {val:7.4f} {test_score:7.4f}  (fitted on val)")
                figures[f"{name}_s"], figures[f"{name}_peak_mb"] = round(seconds, 1), round(peak)
    figures["nodes"], figures["edges"] = graph.num_nodes, graph.data.edge_index.size(1)
    figures["identical"] = str(identical).lower()
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
