"""The data-parallel baseline (``--baseline ddp``): K real processes, gloo, DistributedDataParallel."""
import dataclasses
import json

import pytest
import torch

from ladle import api
from ladle.config import build_config
from ladle.data import load_graph
from ladle.ddp import train_ddp
from ladle.engines.base import IngredientStore
from ladle.errors import LadleError
from ladle.sampling.options import SamplerConfig
from ladle.store import RunDir
from ladle.trainer import train_ingredient

GRAPH = "csbm:nodes=300,classes=3,features=8,degree=4,seed=3"


def _config(**more):
    return build_config({"dataset": GRAPH, "ingredients": 2, "baseline": "ddp", "train": {"epochs": 2},
                         "model": {"name": "sage", "hidden": 8, "dropout": 0.0}, "sampler": {"name": "neighbor"},
                         **more})


def _ddp_weights(spec, graph, tmp_path) -> tuple[dict, dict]:
    run = RunDir(tmp_path / "run").create(_config())
    train_ddp(spec, graph, IngredientStore(str(run.path), {"fingerprint": graph.fingerprint}, None),
              threads=torch.get_num_threads())
    return run.load_checkpoint(spec)


def test_one_rank_is_the_single_model_trainer_bit_for_bit(tmp_path):
    config = _config(**{"train": {"epochs": 3}})
    graph = load_graph(GRAPH)
    spec = dataclasses.replace(config.long_spec("ddp"), ranks=1)
    state, sidecar = _ddp_weights(spec, graph, tmp_path)
    single = train_ingredient(spec, graph)
    assert state.keys() == single.state.keys()
    assert all(torch.equal(state[k], single.state[k]) for k in state)
    assert sidecar["scores"]["val"] == single.val and sidecar["best_epoch"] == single.best_epoch


def test_two_ranks_take_the_step_of_one_process_on_the_union_batch(tmp_path):
    # One epoch, one global step: the two ranks' shares are the two halves of the permutation's first 2B nodes; with
    # every neighbour taken (fanouts above the largest degree) and no dropout, nothing else is random.
    graph = load_graph(GRAPH)
    train_nodes = int(graph.mask("train").sum())
    half = -(-train_nodes // 2)
    config = _config(**{"train": {"epochs": 1}}, **{"sampler": {"name": "neighbor", "fanouts": [300, 300],
                                                                "batch_size": half}})
    spec = config.long_spec("ddp")
    assert spec.ranks == 2 and spec.train.epochs == 2  # K times an ingredient's epochs: 2 epochs of one step
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, epochs=1))
    state, sidecar = _ddp_weights(spec, graph, tmp_path)
    union = dataclasses.replace(spec, ranks=1, sampler=SamplerConfig("neighbor", fanouts=(300, 300), batch_size=2 * half))
    single = train_ingredient(union, graph).state
    start = train_ingredient(dataclasses.replace(union, train=dataclasses.replace(union.train, lr=1e-12)), graph)
    assert all(not torch.allclose(single[k], start.state[k], atol=1e-6) for k in single if k.endswith("weight"))
    for k in single:  # the step happened, and it is the union batch's step
        torch.testing.assert_close(state[k], single[k], atol=1e-6, rtol=0)
    # What DDP all-reduced, measured by its communication hook: every parameter's gradient, once per step.
    params = sum(v.numel() * v.element_size() for k, v in state.items())
    assert sidecar["communication"] == {"ranks": 2, "backend": "gloo", "lr_rule": sidecar["communication"]["lr_rule"],
                                        "steps": 1, "allreduce_bytes": params, "allreduce_bytes_per_step": params,
                                        "allreduce_bytes_per_epoch": params}


def test_a_run_with_the_ddp_baseline_reports_it_beside_the_long_model(tmp_path):
    config = build_config({"dataset": GRAPH, "ingredients": 2, "baseline": "long+ddp", "train": {"epochs": 2},
                           "model": {"name": "sage", "hidden": 8}, "engine": {"name": "serial"},
                           "sampler": {"name": "neighbor", "batch_size": 64}, "soups": {"methods": ["uniform"]}})
    results = api.run(config, tmp_path / "run", progress=False)
    assert set(results["baselines"]) == {"long", "long-swa", "ddp"}
    ddp = results["baselines"]["ddp"]
    assert ddp["scores"] == "recomputed" and ddp["epochs"] == 4 and ddp["communication"]["ranks"] == 2
    assert ddp["communication"]["allreduce_bytes"] == ddp["communication"]["steps"] * \
        ddp["communication"]["allreduce_bytes_per_step"] > 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "data-parallel, 2 ranks all-reducing, 2x budget (4 epochs)" in report
    timeline = RunDir(tmp_path / "run").timeline()
    assert [t["name"] for t in timeline][-1] == "ddp" and timeline[-1]["worker"].startswith("ddp (2 ranks")
    from ladle.cli import main

    assert main(["verify", str(tmp_path / "run")]) == 0  # its scores recomputed from its weights, like every model's
    assert main(["predict", str(tmp_path / "run"), "--model", "ddp", "--out", str(tmp_path / "ddp.csv")]) == 0


@pytest.mark.parametrize("more, needle", [
    ({"sampler": {"name": "cluster"}}, "the cluster sampler draws subgraphs"),
])
def test_a_ddp_baseline_it_cannot_train_is_refused_before_training(tmp_path, more, needle):
    config = build_config({"dataset": GRAPH, "ingredients": 2, "baseline": "ddp", **more})
    with pytest.raises(LadleError, match=needle):
        api.train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


@pytest.mark.benchmark
def test_the_wall_clock_benchmark_reads_every_row_from_the_run(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import ddp_wallclock

    ddp_wallclock.main(["--dataset", GRAPH, "--epochs", "2", "--batch-size", "64", "--work", str(tmp_path),
                        "--plot", str(tmp_path / "wall.png")])
    lines = capsys.readouterr().out.strip().splitlines()
    fields = dict(pair.split("=", 1) for pair in lines[-1].split())
    rows = {r["row"]: r for r in map(json.loads, lines[:-1])}
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert float(fields["ddp_test"]) == round(results["baselines"]["ddp"]["test"], 4)
    assert float(fields["gis_test"]) == round(results["soups"]["gis"]["test"], 4)
    sidecar = json.loads((tmp_path / "run" / "baselines" / "ddp.json").read_text())
    assert int(fields["ddp_bytes"]) == sidecar["communication"]["allreduce_bytes"] > 0
    assert rows["ddp"]["processes"] == 2 and rows["ddp"]["worker_s"] == 2 * rows["ddp"]["wall_s"]
    assert rows["gis"]["wall_s"] >= max(rows[f"ingredient-0{i}"]["wall_s"] for i in range(2))
    assert (tmp_path / "wall.png").stat().st_size > 10_000


@pytest.mark.benchmark
def test_the_at_scale_table_is_its_stated_formula_of_the_measured_inputs(tmp_path, capsys):
    import math
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import at_scale

    config = {"dataset": GRAPH, "ingredients": 2, "baseline": "ddp", "train": {"epochs": 1},
              "model": {"name": "sage", "hidden": 8}, "sampler": {"name": "neighbor", "batch_size": 64},
              "engine": {"name": "serial"}, "soups": {"methods": ["gis"]}}
    api.run(config, tmp_path / "run", progress=False)
    at_scale.main(["--run", str(tmp_path / "run"), "--steps", "4", "--ks", "8", "--gbits", "10",
                   "--step-seconds", "0.002"])
    fields = dict(pair.split("=", 1) for pair in capsys.readouterr().out.strip().splitlines()[-1].split())
    sidecar = json.loads((tmp_path / "run" / "baselines" / "ddp.json").read_text())
    p = sidecar["communication"]["allreduce_bytes_per_step"]
    assert int(fields["allreduce_bytes_per_step"]) == p and fields["c_stated"] == "True"
    graph = load_graph(GRAPH)
    from ladle.sampling.partition import random_membership

    membership = random_membership(graph.num_nodes, 8, 0)
    rowptr, col = graph.csr()
    cut = sum(int(membership[u] != membership[v]) for u in range(graph.num_nodes)
              for v in col[rowptr[u]:rowptr[u + 1]].tolist()) / col.numel()
    assert float(fields["cut_random_8"]) == round(cut, 4)
    c, s, bw = 0.002, float(fields["sampled_per_batch"]), 10e9 / 8
    expected = (c + s * cut * 128 * 4 / bw + 2 * 7 / 8 * p / bw) / c
    assert math.isclose(float(fields["ddp_over_soup_K8_random_10g"]), round(expected, 3), abs_tol=2e-3)
