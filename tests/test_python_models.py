"""Models from Python: a user's nn.Module factory (their own class, or PyG's GCN/GraphSAGE) trains, is checkpointed,
souped and ensembled; importable ones train on the process engine bit-identically; a stored run names its model's
import path, which ladle imports only when the user allows it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GraphSAGE

import ladle
from ladle.cli import main
from ladle.config import build_config
from ladle.errors import LadleError
from ladle.models.python_model import allow_import

SMALL = "csbm:nodes=300,classes=3,features=8"
CONFIG = {"dataset": SMALL, "ingredients": 3, "train": {"epochs": 4}, "soups": ["uniform", "gis", "learned",
                                                                                  "ensemble"]}


class TwoLayerGCN(torch.nn.Module):
    """A user's own model, at module level (so that process workers can import it), with dropout."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(in_channels, 16), GCNConv(16, out_channels)

    def forward(self, x, edge_index, edge_weight=None):
        h = torch.nn.functional.dropout(self.conv1(x, edge_index, edge_weight).relu(), 0.5, self.training)
        return self.conv2(h, edge_index, edge_weight)


def weights(run):
    return {p.name: p.read_bytes() for p in sorted((run / "ingredients").glob("*.safetensors"))}


def test_a_users_model_trains_soups_and_reloads(tmp_path):
    out = tmp_path / "serial"
    results = ladle.run(CONFIG, out, model=TwoLayerGCN, progress=False)
    assert results["model"] == f"python:{__name__}:TwoLayerGCN"
    assert len(set(weights(out).values())) == 3  # dropout and data seeds told the ingredients apart
    for method in ("uniform", "gis", "learned", "ensemble"):
        assert 0.0 < results["soups"][method]["test"] <= 1.0
    gis = json.loads((out / "soups" / "gis.json").read_text())
    assert gis["evaluation"]["path"] == "reference"  # the fast evaluator knows only ladle's layers
    model = ladle.load_model(out, "gis", model=TwoLayerGCN)
    assert isinstance(model, TwoLayerGCN) and not model.training  # the user's own class, not a wrapper
    graph = ladle.load_graph(SMALL)
    with torch.no_grad():
        logits = model(graph.data.x, graph.data.edge_index)
    mask = graph.data.test_mask
    accuracy = (logits[mask].argmax(-1) == graph.data.y[mask]).float().mean().item()
    assert accuracy == pytest.approx(gis["scores"]["test"])
    # The process engine's workers import the class: the same weights, bit for bit.
    parallel = tmp_path / "process"
    ladle.run({**CONFIG, "engine": {"name": "process", "workers": 2}}, parallel, model=TwoLayerGCN, progress=False)
    assert weights(parallel) == weights(out)


def test_pyg_models_and_lambdas_train_on_serial_with_a_sampler(tmp_path):
    out = tmp_path / "sage"
    config = {**CONFIG, "sampler": {"name": "neighbor", "fanouts": [5, 5], "batch_size": 64}, "eval": {"chunk": 100}}
    results = ladle.run(config, out, model=lambda i, o: GraphSAGE(i, 16, 2, o, dropout=0.5), progress=False)
    assert results["soups"]["gis"]["val"] >= max(r["val"] for r in results["ingredients"])
    with pytest.raises(LadleError, match="cannot be imported by the process engine") as err:
        ladle.run({**CONFIG, "engine": {"name": "process", "workers": 2}}, tmp_path / "no",
                  model=lambda i, o: GraphSAGE(i, 16, 2, o), progress=False)
    assert "engine serial" in err.value.fix and not (tmp_path / "no").exists()
    with pytest.raises(LadleError, match="not a torch.nn.Module"):
        ladle.run(CONFIG, tmp_path / "bad", model=lambda i, o: "a string", progress=False)


def test_a_stored_run_imports_its_model_only_when_allowed(tmp_path):
    out = tmp_path / "run"
    ladle.run(CONFIG, out, model=TwoLayerGCN, progress=False)
    gis = (out / "soups" / "gis.safetensors").read_bytes()
    # A fresh process, as whoever opens the run later: the run names code, which is imported only when allowed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    cli = [sys.executable, "-m", "ladle.cli", "soup", str(out), "--method", "gis", "--quiet"]
    refused = subprocess.run(cli, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "ladle imports only modules you name" in refused.stderr
    assert "Traceback" not in refused.stderr and f"--allow-import {__name__}" in refused.stderr
    alone = subprocess.run(cli + ["--allow-import"], capture_output=True, text=True, env=env)
    assert alone.returncode == 2 and "trusts nothing" in alone.stderr
    other = subprocess.run(cli + ["--allow-import", "json"], capture_output=True, text=True, env=env)
    assert other.returncode == 2 and "you trust json" in other.stderr
    allowed = subprocess.run(cli + ["--allow-import", __name__], capture_output=True, text=True, env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert (out / "soups" / "gis.safetensors").read_bytes() == gis
    ladle.soup(out, ["gis"], model=TwoLayerGCN)  # given again from Python: the user's own code
    assert (out / "soups" / "gis.safetensors").read_bytes() == gis
    with pytest.raises(LadleError, match="not the one the run was trained with"):
        ladle.resume(out, model=lambda i, o: TwoLayerGCN(i, o), progress=False)


def test_a_config_names_a_model_by_import_path_only_with_allow_import(tmp_path):
    values = {"dataset": SMALL, "model": {"name": f"python:{__name__}:TwoLayerGCN"}}
    from ladle.models import MODELS

    name = f"python:{__name__}:TwoLayerGCN"
    if name in MODELS:
        MODELS.remove(name)  # as in a fresh process
    with pytest.raises(LadleError, match="ladle imports only modules you name") as err:
        build_config(values)
    assert f"--allow-import {__name__}" in err.value.fix
    with pytest.raises(LadleError, match="you trust json"), allow_import("json"):
        build_config(values)
    with allow_import(__name__):
        assert build_config(values).model.name == name
    config = tmp_path / "mine.toml"
    config.write_text(f'dataset = "{SMALL}"\ningredients = 2\n\n[model]\nname = "{name}"\n\n[train]\nepochs = 2\n')
    MODELS.remove(name)
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "b"), "--quiet", "--allow-import",
                 __name__]) == 0
    with pytest.raises(LadleError, match="cannot import the model"):
        with allow_import("no_such_module"):
            build_config({"model": {"name": "python:no_such_module:Model"}})


class XOnly(torch.nn.Module):  # forward(x): no edges
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x):
        return self.lin(x)


class TwoOutputs(XOnly):  # built for 2 classes whatever it is asked
    def __init__(self, in_channels, out_channels):
        super().__init__(in_channels, 2)

    def forward(self, x, edge_index):
        return self.lin(x)


class Frozen(XOnly):
    def __init__(self, in_channels, out_channels):
        super().__init__(in_channels, out_channels)
        self.lin.requires_grad_(False)

    def forward(self, x, edge_index):
        return self.lin(x)


SERIAL = {**CONFIG, "ingredients": 2, "soups": ["uniform"], "engine": {"name": "serial"}}


def test_a_model_instance_is_every_ingredients_initialisation(tmp_path):
    """``model=GraphSAGE(...)``, the mistake PyG users make first, trains: each ingredient starts from a copy of the
    instance's weights (after one step at a learning rate of 1e-9 they are still the instance's)."""
    instance = GraphSAGE(8, 16, 2, out_channels=3)
    out = tmp_path / "instance"
    results = ladle.run({**SERIAL, "train": {"epochs": 1, "lr": 1e-9}}, out, model=instance, progress=False)
    assert results["model"].startswith("python:__instance__:GraphSAGE@")
    mine = {f"module.{k}": v for k, v in instance.state_dict().items()}
    for name in ("ingredient-00", "ingredient-01"):
        stored = ladle.RunDir(out).load_ingredient(name)[0]
        assert stored.keys() == mine.keys()
        assert all(torch.allclose(stored[k], mine[k], atol=1e-6, rtol=0) for k in mine)
    for stored in (out / "ingredients").glob("ingredient-01.*"):  # a run stopped before its last ingredient
        stored.unlink()
    other = GraphSAGE(8, 16, 2, out_channels=3)  # other weights: another initialisation, refused
    with pytest.raises(LadleError, match="is not the one the run was trained with"):
        ladle.resume(out, model=other, progress=False)
    ladle.resume(out, model=instance, progress=False)  # the same instance again: it finishes the run
    assert ladle.RunDir(out).ingredient_names() == ["ingredient-00", "ingredient-01"]
    with pytest.raises(LadleError, match="init = independent"):
        ladle.run({**SERIAL, "init": "independent"}, tmp_path / "independent", model=instance, progress=False)
    with pytest.raises(LadleError, match=r"process engine's workers \(an instance\)"):
        ladle.run({**SERIAL, "engine": {"name": "process", "workers": 2}}, tmp_path / "process", model=instance,
                  progress=False)


@pytest.mark.parametrize("model, needle, fix", [
    (lambda: GraphSAGE(8, 16, 2, out_channels=3), r"takes 0 positional arguments", "lambda i, o: GraphSAGE"),
    (XOnly, r"forward\(x\) failed on a 64-node slice", "forward(x [N, F], edge_index [2, E])"),
    (TwoOutputs, r"forward gave \[64, 2\] for 64 nodes; .* has 3 classes", "out_channels"),
    (Frozen, "does not train: no trainable weight reaches its output", "requires_grad"),
])
def test_a_model_that_cannot_train_on_the_graph_is_named_before_the_run_exists(tmp_path, model, needle, fix):
    with pytest.raises(LadleError, match=needle) as err:
        ladle.run(SERIAL, tmp_path / "run", model=model, progress=False)
    assert fix in err.value.fix and not (tmp_path / "run").exists()


def test_a_config_value_of_the_wrong_shape_is_answered_as_such():
    assert build_config({"dataset": SMALL, "model": "sage", "sampler": "neighbor"}).model.name == "sage"
    with pytest.raises(LadleError, match=r"config: train is a table of settings, got 5"):
        build_config({"dataset": SMALL, "train": 5})
    with pytest.raises(LadleError, match=r"model is a table of settings, got \['gcn'\]"):
        build_config({"dataset": SMALL, "model": ["gcn"]})
