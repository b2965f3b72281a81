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
        if halo:  # every neighbour of the core is present; no edge joins two halo nodes
            src, dst = graph.data.edge_index
            needed = src[torch.isin(dst, core)].unique()
            assert bool(torch.isin(needed, sub.data.n_id).all()) and bool((~is_core).any())
            assert bool(is_core[sub.data.edge_index].any(0).all())
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


def _trained_parts(out) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "ingredients").glob("ingredient-*.json"))]


def _node_sha(ids: torch.Tensor) -> str:
    import hashlib

    return hashlib.sha256(ids.sort().values.numpy().astype("<i8").tobytes()).hexdigest()


def _expected_random_parts(n: int, parts: int) -> list[torch.Tensor]:
    """The documented random partition, written out: node ``perm[j]`` of a seed-0 permutation goes to part j mod K."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    return [perm[p::parts].sort().values for p in range(parts)]


@pytest.mark.parametrize("method, parts_flag, halo", [
    ("random", None, False), ("random", "2", False), ("random", None, True), ("metis", None, False),
    ("metis", "2", True)])
def test_each_ingredient_trains_on_its_own_part_of_k(method, parts_flag, halo, tmp_path, monkeypatch):
    """The defect of issue 34: without --parts, ingredient i trained on part i of an (i+1)-way partition (the
    whole graph, half, a third, ...). Now K is resolved once and every sidecar names the nodes it learned from."""
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["run", "--dataset", "csbm:nodes=600,classes=3,features=8,seed=1", "--partition", method,
            "--ingredients", "4", "--epochs", "2", "--soups", "uniform", "--out", str(out), "--quiet"]
    argv += ["--parts", parts_flag] if parts_flag else []
    argv += ["--halo"] if halo else []
    assert main(argv) == 0
    k = int(parts_flag or 4)
    graph = load_graph("csbm:nodes=600,classes=3,features=8,seed=1")
    if method == "random":
        expected = _expected_random_parts(600, k)
    else:  # METIS: whatever the cut, the parts are disjoint, cover the graph and are balanced
        membership = membership_for(graph, "metis", k)
        expected = [(membership == p).nonzero().view(-1) for p in range(k)]
        assert sorted(int(e.numel()) for e in expected)[0] >= 0.9 * 600 / k
    assert torch.equal(torch.cat(expected).sort().values, torch.arange(600))
    sidecars = _trained_parts(out)
    assert [s["partition"]["part"] for s in sidecars] == [i % k for i in range(4)]
    assert all(s["partition"]["parts"] == k for s in sidecars)
    src, dst = graph.data.edge_index
    for s in sidecars:
        core = expected[s["partition"]["part"]]
        inside = torch.isin(dst, core)
        halo_nodes = src[inside][~torch.isin(src[inside], core)].unique() if halo else torch.empty(0)
        held = torch.cat([core, halo_nodes])  # the edges touching the core, within the core and its halo
        edges = int((torch.isin(src, held) & torch.isin(dst, held) & (torch.isin(src, core) | inside)).sum())
        assert s["part_graph"] == {"nodes": core.numel(), "halo_nodes": halo_nodes.numel(), "edges": edges,
                                   "nodes_sha256": _node_sha(core)}
    config = load_config(out / "config.toml")
    assert config.partition.parts == k  # config.toml holds the resolved K


def test_partitioned_recipes_take_part_i_mod_k(tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    config = build_config({"dataset": "csbm:nodes=600,classes=3,features=8,seed=1", "soups": ["uniform"],
                           "train": {"epochs": 2}, "partition": {"method": "random", "parts": 3},
                           "recipes": [{"count": 2, "sampler": {"name": "full"}},
                                       {"count": 2, "sampler": {"name": "saint-node", "budget": 60}}]})
    api.train(config, tmp_path / "run")
    expected = _expected_random_parts(600, 3)
    sidecars = _trained_parts(tmp_path / "run")
    assert [(s["sampler"]["name"], s["partition"]["part"]) for s in sidecars] == [
        ("full", 0), ("full", 1), ("saint-node", 2), ("saint-node", 0)]
    assert [s["part_graph"]["nodes_sha256"] for s in sidecars] == [_node_sha(expected[p]) for p in (0, 1, 2, 0)]


def test_a_run_made_with_unresolved_parts_is_refused_with_the_reason(tmp_path, monkeypatch):
    """A run stored by a ladle with the defect (config.toml and run.json say parts = 0) cannot be resumed or
    souped: its ingredients trained on other parts than the config names."""
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["run", "--dataset", SMALL, "--partition", "random", "--ingredients", "2", "--epochs", "2",
                 "--soups", "uniform", "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "run.json").read_text())
    manifest["identity"]["partition"]["parts"] = 0
    manifest["identity_sha256"] = "0" * 64
    (out / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(LadleError, match="trained on the wrong parts"):
        api.soup(out)


def test_a_partition_that_leaves_parts_few_training_nodes_says_so_with_the_numbers(tmp_path, caplog):
    import logging

    from ladle.sampling.partition import FEW_TRAINING_NODES

    dataset = "csbm:nodes=600,classes=3,features=8,seed=1"
    graph = load_graph(dataset)
    counts = torch.bincount(membership_for(graph, "random", 4)[graph.mask("train")], minlength=4)
    assert int(counts.min()) < FEW_TRAINING_NODES <= int(counts.sum())  # the case: thin parts, enough labels in all
    for parts, warned in ((4, True), (1, False)):
        caplog.clear()
        config = build_config({"dataset": dataset, "partition": {"method": "random", "parts": parts},
                               "ingredients": parts, "train": {"epochs": 1}, "soups": ["uniform"]})
        with caplog.at_level(logging.WARNING, logger="ladle"):
            api.train(config, tmp_path / f"run-{parts}", progress=False)
        said = f"they hold {int(counts.min())} to {int(counts.max())} of {int(counts.sum())}"
        assert (said in caplog.text) == warned and ("--parts" in caplog.text) == warned
