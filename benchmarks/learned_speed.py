"""One epoch of the learned soup: the validation nodes' receptive field against a whole-graph forward, on csbm-arxiv.

    python benchmarks/learned_speed.py            # GraphSAGE, GCN and GIN, 2 x 128, 4 ingredients, one thread

An epoch is what ``ladle.soups.learned.fit`` repeats: mix the stacked ingredients with the current logits, the loss
on the validation nodes, its backward. Both paths run side by side in one process on the same mixing weights,
alternating, best of ``--repeats``; the first receptive-field epoch (which builds the field) is timed apart. The
last line is key=value pairs: ``NAME_whole_s``, ``NAME_field_s`` per epoch, ``NAME_ratio`` (whole / field) and
``NAME_loss_diff`` (the two losses' difference).
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="csbm-arxiv")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--archs", default="sage,gcn,gin")
    args = parser.parse_args(argv)
    import torch

    from ladle.data import load_graph
    from ladle.evaluation import Evaluator
    from ladle.models import build_model
    from ladle.models.options import ModelConfig
    from ladle.soups import Ingredient
    from ladle.soups.learned import MixingWeights

    torch.set_num_threads(1)
    graph = load_graph(args.dataset, "data")
    figures = {}
    for name in args.archs.split(","):
        config = ModelConfig(name=name, hidden=args.hidden, layers=2, dropout=0.0)
        ingredients = [Ingredient(f"i{k}", dict(build_model(config, graph.num_features, graph.num_classes,
                                                            init_seed=k).state_dict()), config) for k in range(4)]
        evaluator = Evaluator(graph, config)
        weights = MixingWeights(ingredients, "uniform", 0, evaluator.device)
        graph.adj_t(evaluator.model.adjacency or "plain")  # built once per graph in real runs too: not timed

        def epoch(loss, weights=weights):
            began = time.perf_counter()
            value = loss(weights.state())
            value.backward()
            weights.logits.grad = None
            return time.perf_counter() - began, float(value)

        first, _ = epoch(evaluator.loss)
        whole, field = [], []
        for _ in range(args.repeats):
            seconds, whole_loss = epoch(lambda state, ev=evaluator: ev._whole_loss(state, None))
            whole.append(seconds)
            seconds, field_loss = epoch(evaluator.loss)
            field.append(seconds)
        print(f"{name}: whole graph {min(whole):.3f} s, receptive field {min(field):.3f} s per epoch "
              f"(first {first:.3f} s, building the field)", flush=True)
        figures[f"{name}_whole_s"] = round(min(whole), 3)
        figures[f"{name}_field_s"] = round(min(field), 3)
        figures[f"{name}_first_s"] = round(first, 3)
        figures[f"{name}_ratio"] = round(min(whole) / min(field), 2)
        figures[f"{name}_loss_diff"] = abs(whole_loss - field_loss)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
