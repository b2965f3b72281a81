"""Graphs from Python: a PyG Data, a PyG dataset or an OGB-style dataset goes in, the run records it by fingerprint,
and soup/report/predict/verify take it again (graph=, --graph FILE.npz, or the run's own saved copy)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset

import ladle
from ladle.api import run_graph
from ladle.cli import main
from ladle.data.pyg_input import graph_from
from ladle.errors import LadleError
from ladle.store import RunDir

ROOT = Path(__file__).resolve().parents[1]
FAST = {"model": {"name": "gcn", "hidden": 8}, "ingredients": 2, "train": {"epochs": 3},
        "soups": ["uniform", "gis"], "engine": {"name": "serial"}}


def two_rings(n: int = 20, classes: int = 2, splits: int = 1) -> Data:
    """Two 10-node rings, one class each (a graph a GCN separates), features noisy one-hots of the class."""
    gen = torch.Generator().manual_seed(0)
    half = n // 2
    ring = torch.stack([torch.arange(half), (torch.arange(half) + 1) % half])
    edge_index = torch.cat([ring, ring + half], 1)
    y = (torch.arange(n) >= half).long() if classes == 2 else torch.arange(n) % classes
    x = torch.nn.functional.one_hot(y, classes).float() + 0.1 * torch.randn(n, classes, generator=gen)
    role = torch.arange(n) % 4  # 0, 1: train; 2: val; 3: test
    masks = {"train_mask": role <= 1, "val_mask": role == 2, "test_mask": role == 3}
    if splits > 1:  # [N, S] masks, as PyG's WikipediaNetwork gives: split s shifts the roles by s
        masks = {k: torch.stack([torch.roll(m, s) for s in range(splits)], 1) for k, m in masks.items()}
    return Data(x=x, edge_index=edge_index, y=y, **masks)


def test_graph_from_infers_the_task_and_metric():
    binary = graph_from(two_rings())
    assert (binary.task, binary.metric, binary.num_classes) == ("multiclass", "rocauc", 2)
    assert binary.data.edge_index.size(1) == 40  # both directions of 20 ring edges
    three = graph_from(two_rings(classes=3))
    assert (three.metric, three.num_classes) == ("acc", 3)
    assert graph_from(two_rings(), metric="acc").metric == "acc"
    data = two_rings()
    data.y = torch.stack([data.y, 1 - data.y, data.y], 1).float()
    multi = graph_from(data)
    assert (multi.task, multi.metric, multi.num_classes) == ("multilabel", "f1", 3)
    data = two_rings()
    data.y = data.y.view(-1, 1)  # OGB's [N, 1] class ids
    assert graph_from(data).task == "multiclass"


def test_graph_from_takes_split_columns_split_idx_and_datasets():
    data = two_rings(splits=3)
    for s in range(3):
        g = graph_from(data, split=s, name="rings")
        assert torch.equal(g.data.train_mask, data.train_mask[:, s])
        assert g.name == f"rings#{s}"  # which column was used is in the graph's (and the run's) name
    assert graph_from(two_rings(), name="rings").name == "rings"  # one split: nothing to name
    with pytest.raises(LadleError, match="split 3 asked for but train_mask holds 3 splits"):
        graph_from(data, split=3)
    plain = two_rings()
    del plain.train_mask, plain.val_mask, plain.test_mask
    split_idx = {"train": torch.arange(0, 10), "valid": torch.arange(10, 15), "test": torch.arange(15, 20)}
    g = graph_from(plain, split_idx=split_idx)
    assert g.data.train_mask[:10].all() and g.data.val_mask[10:15].all() and not g.data.test_mask[:15].any()
    with pytest.raises(LadleError, match="no train_mask and no split_idx"):
        graph_from(plain)

    class OGBLike:  # the two things ladle asks of OGB's PygNodePropPredDataset
        name, eval_metric = "ogbn-toy", "acc"

        def get_idx_split(self):
            return split_idx

        def __getitem__(self, i):
            return plain

    ogb = graph_from(OGBLike())
    assert (ogb.name, ogb.metric) == ("ogbn-toy", "acc")  # the dataset's own metric wins over the binary default

    class Rings(InMemoryDataset):
        def __init__(self, graphs):
            super().__init__(None)
            self.data, self.slices = self.collate(graphs)

    assert graph_from(Rings([two_rings()])).fingerprint == graph_from(two_rings()).fingerprint
    with pytest.raises(LadleError, match="holds 2 graphs"):
        graph_from(Rings([two_rings(), two_rings()]))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.__delattr__("y"), "has no 'y'"),
    (lambda d: setattr(d, "edge_index", d.edge_index.t()), r"edge_index must be \[2, E\]"),
    (lambda d: setattr(d, "edge_index", d.edge_index + 100), "outside"),
    (lambda d: setattr(d, "val_mask", d.train_mask.clone()), "train and val splits overlap"),
    (lambda d: setattr(d, "y", d.y - 1), "negative class ids"),
    (lambda d: setattr(d, "x", d.x.long()), "float tensor"),
])
def test_a_bad_graph_gets_one_clear_error(change, message):
    data = two_rings()
    change(data)
    with pytest.raises(LadleError, match=message):
        graph_from(data)


def test_a_run_from_a_data_object_is_recorded_and_taken_again(tmp_path):
    data = two_rings()
    out = tmp_path / "run"
    results = ladle.run(FAST, out, graph=data)
    assert results["dataset"]["name"] == "graph" and results["dataset"]["metric"] == "rocauc"
    run = RunDir(out)
    assert run.config().dataset == "python:graph"
    gis = json.loads((out / "soups" / "gis.json").read_text())
    # Alone, the CLI cannot know the graph and says how to give it; given again, it re-soups bit-identically.
    assert main(["soup", str(out), "--method", "gis"]) == 2
    with pytest.raises(LadleError, match="graph given from Python") as err:
        run_graph(run, run.config())
    assert "--graph FILE.npz" in err.value.fix
    before = (out / "soups" / "gis.safetensors").read_bytes()
    ladle.soup(out, ["gis"], graph=data)
    assert (out / "soups" / "gis.safetensors").read_bytes() == before
    assert json.loads((out / "soups" / "gis.json").read_text())["scores"] == gis["scores"]
    # An npz of the same graph serves every command; another graph is refused by fingerprint.
    ladle.save_npz(graph_from(data), tmp_path / "rings.npz")
    for command in (["soup", str(out), "--method", "gis"], ["verify", str(out)], ["report", str(out)],
                    ["predict", str(out), "--model", "gis", "--out", str(tmp_path / "p.csv")]):
        extra = [] if command[0] == "report" else ["--graph", str(tmp_path / "rings.npz")]
        assert main(command + extra + (["--quiet"] if command[0] == "soup" else [])) == 0, command
    assert (out / "soups" / "gis.safetensors").read_bytes() == before
    other = two_rings(classes=2)
    other.x = other.x + 1
    with pytest.raises(LadleError, match="not the one"):
        ladle.soup(out, ["gis"], graph=other)


def test_save_graph_lets_the_cli_reload_the_run_alone(tmp_path):
    out = tmp_path / "run"
    ladle.run(FAST, out, graph=two_rings(classes=3), save_graph=True)
    assert (out / "graph.npz").is_file()
    assert main(["verify", str(out)]) == 2  # the run's own copy is read only when named
    saved = ["--graph", str(out / "graph.npz")]
    assert main(["verify", str(out), *saved]) == 0
    assert main(["predict", str(out), "--model", "uniform", "--out", str(tmp_path / "p.csv"), *saved]) == 0
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 21  # a header and one row per node
    (out / "graph.npz").write_bytes(b"not an npz")  # a damaged copy: one clear error, no traceback
    assert main(["soup", str(out), "--method", "gis", "--quiet", *saved]) == 2


def test_a_graph_made_with_make_graph_is_reloadable(tmp_path):
    data = two_rings()
    graph = ladle.graph_from(data, name="mine")
    out = tmp_path / "run"
    ladle.run(FAST, out, graph=graph)
    assert RunDir(out).config().dataset == "python:mine"
    ladle.soup(out, ["uniform"], graph=graph)  # the make_graph route used to end in "unknown dataset"


def test_a_named_dataset_given_as_a_graph_keeps_its_name(tmp_path):
    spec = "csbm:nodes=200,classes=3,features=8"
    graph = ladle.load_graph(spec)
    out = tmp_path / "run"
    ladle.run({**FAST, "dataset": spec}, out, graph=graph)
    assert RunDir(out).config().dataset == spec
    assert main(["soup", str(out), "--method", "uniform", "--quiet"]) == 0  # regenerated, same fingerprint


def test_the_readme_python_section_runs_as_written(tmp_path, shared):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"From Python.*?```python\n(.*?)```", readme, re.S).group(1)
    code = code.replace("../shared", str(shared))
    script = tmp_path / "snippet.py"
    script.write_text(code + "\nassert logits.shape == (2708, 7)\nprint('ok', results['soups']['gis']['test'])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("ok ")
    assert (tmp_path / "runs" / "cora-py" / "graph.npz").is_file()


def test_multilabel_and_split_idx_graphs_go_through_the_cli_with_their_npz(tmp_path):
    data = two_rings()
    data.y = torch.stack([data.y, 1 - data.y, (torch.arange(20) % 3 == 0).long()], 1).float()
    multi = ladle.graph_from(data)
    plain = two_rings(classes=3)
    del plain.train_mask, plain.val_mask, plain.test_mask
    by_index = ladle.graph_from(plain, split_idx={"train": torch.arange(0, 20, 2), "valid": torch.arange(1, 20, 4),
                                                  "test": torch.arange(3, 20, 4)})
    for graph, metric in ((multi, "f1"), (by_index, "acc")):
        out = tmp_path / metric
        ladle.run(FAST, out, graph=graph, progress=False)
        file = tmp_path / f"{metric}.npz"
        ladle.save_npz(graph, file)
        assert ladle.load_graph(f"npz:{file}").fingerprint == graph.fingerprint
        results = json.loads((out / "results.json").read_text())
        assert results["dataset"]["metric"] == metric
        for command in (["soup", str(out), "--method", "gis", "--quiet"], ["verify", str(out)],
                        ["predict", str(out), "--model", "gis", "--out", str(tmp_path / f"{metric}.csv")]):
            assert main(command + ["--graph", str(file)]) == 0, command
        assert main(["report", str(out)]) == 0


def test_dir_of_ladle_lists_the_public_api_before_it_is_imported():
    import subprocess
    import sys

    code = "import ladle, sys; print(' '.join(dir(ladle))); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    names = set(out[0].split())
    assert {"load_graph", "load_model", "Callback", "TensorBoardLogger", "save_npy", "run", "soup"} <= names
    assert out[1] == "False"  # listing them imports nothing


def test_every_public_name_is_what_it_names_after_every_module_is_imported():
    """A submodule named like a public function would replace it on the package once imported (``ladle.train`` was
    the training module after the first run): each public name stays the object ``__all__`` promises."""
    import subprocess
    import sys

    code = ("import importlib, pkgutil, ladle\n"
            "for m in pkgutil.walk_packages(ladle.__path__, 'ladle.'):\n"
            "    if not m.name.startswith(('ladle.engines.ray', 'ladle.examples')):\n"
            "        importlib.import_module(m.name)\n"
            "import types\n"
            "print(' '.join(n for n in ladle.__all__ if isinstance(getattr(ladle, n), types.ModuleType)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"these public names are modules: {out}"


def test_predictions_run_on_eval_device_and_a_gpu_run_predicts_on_a_cpu_machine(monkeypatch, caplog):
    import torch

    from ladle import prediction

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert prediction._device("cuda:1") == torch.device("cpu") and "predicting on the CPU" in caplog.text
    assert prediction._device("cpu") == torch.device("cpu")
