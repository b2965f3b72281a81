"""Partitioned ingredients and mixed recipes."""
import json

import pytest
import torch

from ladle import api
from ladle.cli import main
from ladle.config import build_config, dump_toml, load_config
from ladle.data import load_graph
from ladle.errors import LadleError
from ladle.sampling.partition import membership_for, part_graph

SMALL = "csbm:nodes=600,classes=3,features=8,degree=6"


@pytest.mark.parametrize("halo", [False, True])
def test_part_graphs_cover_the_nodes_and_keep_loss_on_the_core(halo, tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path))
    graph = load_graph(SMALL)
    membership = membership_for(graph, "metis", 3)
    cores = []
    for part in range(3):
        sub = part_graph(graph, membership, part, halo)
        core = sub.data.n_id[membership[sub.data.n_id] == part]
        cores.append(core)
        is_core = membership[sub.data.n_id] == part
        assert torch.equal(sub.data.train_mask, graph.data.train_mask[sub.data.n_id] & is_core)
        assert not bool(sub.data.val_mask.any() or sub.data.test_mask.any())
        if halo:  # every neighbour of the core is present
            src, dst = graph.data.edge_index
            needed = src[torch.isin(dst, core)].unique()
            assert bool(torch.isin(needed, sub.data.n_id).all()) and bool((~is_core).any())
        else:
            assert bool(is_core.all())
        ei = sub.data.edge_index  # only true edges
        true = set(map(tuple, graph.data.edge_index.t().tolist()))
        assert set(map(tuple, sub.data.n_id[ei].t().tolist())) <= true
    assert torch.equal(torch.cat(cores).sort().values, torch.arange(600))


def test_partitioned_run_trains_each_ingredient_on_its_part(tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["run", "--dataset", SMALL, "--ingredients", "4", "--partition", "random", "--parts", "2",
                 "--epochs", "5", "--soups", "uniform,gis", "--out", str(out), "--quiet"]) == 0
    parts = [json.loads((out / "ingredients" / f"ingredient-0{i}.json").read_text())["partition"] for i in range(4)]
    assert [p["part"] for p in parts] == [0, 1, 0, 1] and all(p["method"] == "random" for p in parts)
    assert "random part 1" in (out / "report.md").read_text()


def test_mixed_recipe_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    cfg = tmp_path / "mixed.toml"
    cfg.write_text(f'dataset = "{SMALL}"\nsoups = ["gis", "ensemble"]\n[model]\nname = "sage"\nhidden = 8\n'
                   '[train]\nepochs = 4\n'
                   '[[recipes]]\ncount = 1\nsampler = { name = "cluster", parts = 6, parts_per_batch = 2 }\n'
                   '[[recipes]]\ncount = 1\nsampler = { name = "neighbor", fanouts = [4, 4], batch_size = 64 }\n'
                   '[[recipes]]\ncount = 1\nseed = 9\nsampler = { name = "saint-rw", budget = 40 }\n')
    config = load_config(cfg)
    assert config.ingredients == 3 and [r.sampler.name for r in config.recipes] == ["cluster", "neighbor", "saint-rw"]
    results = api.run(config, tmp_path / "run")
    assert [r["sampler"]["name"] for r in results["ingredients"]] == ["cluster", "neighbor", "saint-rw"]
    assert results["ingredients"][1]["sampler"]["fanouts"] == [4, 4]
    assert results["soups"]["gis"]["val"] >= results["best_ingredient"]["val"]
    saved = (tmp_path / "run" / "config.toml").read_text()
    assert "[[recipes]]" in saved and load_config(tmp_path / "run" / "config.toml") == config


@pytest.mark.parametrize("values, needle", [
    ({"ingredients": 3, "recipes": [{"count": 2}]}, "add up to 2 ingredients"),
    ({"recipes": [{"count": 1, "sampler": {"fanout": [3]}}]}, "did you mean 'fanouts'"),
    ({"recipes": [{"count": 1, "flavour": 1}]}, "unknown keys"),
    ({"recipes": [{"count": 1, "sampler": {"name": "neighbor", "fanouts": [3]}}]}, "recipes[0].sampler.fanouts"),
    ({"sampler": {"name": "neighbour-ish"}}, "unknown sampler"),
    ({"sampler": {"name": "neighbor", "fanouts": [5, 0]}}, "sampler.fanouts[1] must be >= 1"),
    ({"partition": {"method": "spectral"}}, "partition.method must be one of"),
])
def test_bad_recipes_and_partitions(values, needle):
    with pytest.raises(LadleError) as err:
        build_config(values)
    assert needle in str(err.value)


def test_recipe_configs_round_trip(tmp_path):
    config = build_config({"recipes": [{"count": 2, "sampler": {"name": "cluster"}},
                                       {"count": 1, "seed": 3, "sampler": {"name": "saint-node"}}],
                           "partition": {"method": "metis", "halo": True}})
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(config.to_dict()))
    assert load_config(path) == config


def test_more_parts_than_nodes_is_refused():
    graph = load_graph("csbm:nodes=50,classes=2")
    with pytest.raises(LadleError, match="cannot cut 50 nodes into 60 parts"):
        membership_for(graph, "random", 60)
