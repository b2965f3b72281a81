"""Sampled ingredients learn on Cora, and their GIS soup is at least as good on validation as the best one."""
import pytest

from ladle import api
from ladle.config import build_config

CASES = {
    "sage-neighbor": ({"name": "sage"}, {"name": "neighbor", "fanouts": [10, 10], "batch_size": 128}, 30),
    "gcn-cluster": ({"name": "gcn"}, {"name": "cluster", "parts": 32, "parts_per_batch": 4}, 60),
    "gcn-saint-rw": ({"name": "gcn"}, {"name": "saint-rw", "budget": 300, "walk_length": 2}, 60),
    "gcn-fastgcn": ({"name": "gcn"}, {"name": "fastgcn", "budget": 512, "batch_size": 256}, 60),
    "gcn-ladies": ({"name": "gcn"}, {"name": "ladies", "budget": 512, "batch_size": 256}, 60),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sampled_ingredients_learn_on_cora(case, planetoid_root, tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))
    model, sampler, epochs = CASES[case]
    config = build_config({"dataset": "Cora", "root": str(planetoid_root), "ingredients": 2, "model": model,
                           "sampler": sampler, "train": {"epochs": epochs}, "soups": ["gis"]})
    results = api.run(config, tmp_path / case)
    ingredients = results["ingredients"]
    assert all(i["sampler"]["name"] == sampler["name"] for i in ingredients)
    assert min(i["test"] for i in ingredients) >= 0.75, ingredients
    assert results["soups"]["gis"]["val"] >= max(i["val"] for i in ingredients)
