"""Issue 33, item 4: soups, verify and predict on a graph read from its parts, streamed, never put together.

The streamed evaluator is checked against the in-memory one (the reference) for every architecture, on parts cut
with and without a halo: the same logits node by node (after mapping the partition's order back to the graph's), the
same accuracy exactly, ROC-AUC within 1e-6; its blocks never exceed the chunk; and a whole run (soups, verify,
predict) from parts never calls ``PartSource.whole_graph``.
"""
import json

import numpy as np
import pytest
import torch

from ladle.api import with_metric
from ladle.cli import main
from ladle.data import load_graph
from ladle.data.npy import save_npy
from ladle.errors import LadleError
from ladle.evaluation import Evaluator
from ladle.evaluation.evaluator import mix_states, whole_graph_logits
from ladle.evaluation.streamed import PartsView, StreamedEvaluator
from ladle.models import build_model
from ladle.models.options import model_config
from ladle.parts.reader import PartSource, open_parts
from ladle.parts.writer import open_source, write_parts

SMALL = "csbm:nodes=600,classes=3,features=8,seed=1"


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """{halo: (PartSource, the whole graph put together)}, three random parts of a small graph."""
    root = tmp_path_factory.mktemp("streamed")
    save_npy(load_graph(SMALL), root / "g")
    out = {}
    for halo in (0, 1):
        write_parts(open_source(f"npy:{root / 'g'}"), root / f"p{halo}", 3, halo=halo)
        source = open_parts(root / f"p{halo}")
        out[halo] = source, source.whole_graph()
    return out


def _states(config, count=2, features=8, classes=3):
    torch.manual_seed(0)
    return [{k: v.clone() for k, v in build_model(config, features, classes).state_dict().items()} for _ in range(count)]


def _in_graph_order(view, evaluator, logits):
    """The streamed logits (split nodes in partition order) reordered to the split's nodes in original ids."""
    original = view.original_ids(np.asarray(evaluator.levels[-1]))
    return logits[torch.from_numpy(np.argsort(original))]


@pytest.mark.parametrize("halo", [0, 1])
@pytest.mark.parametrize("name,options", [("sage", {}), ("gcn", {}), ("gin", {}), ("gat", {}), ("mlp", {}),
                                          ("sage", {"layers": 3, "norm": "batch", "residual": True}),
                                          ("gcn", {"layers": 1})])
def test_streamed_scores_equal_the_in_memory_evaluator(cut, halo, name, options):
    source, whole = cut[halo]
    config = model_config({"name": name, "hidden": 8, **options})
    states = _states(config)
    if config.norm == "batch":  # running statistics that are not the identity, so the norm does something
        for state in states:
            for key in [k for k in state if k.endswith("running_mean")]:
                state[key] += torch.linspace(-1, 1, state[key].numel())
    view = PartsView(source)
    try:
        for split in ("val", "test"):
            reference = Evaluator(whole, config, split)
            streamed = StreamedEvaluator(view, config, split, chunk_size=37)
            for state in states:
                for _ in range(2):  # the second score reads the first layer's stored aggregation, where there is one
                    got = _in_graph_order(view, streamed, streamed.logits(state).clone())
                    torch.testing.assert_close(got, reference.logits(state), rtol=1e-5, atol=1e-5)
                    assert streamed.score(state) == reference.score(state)
            assert streamed.score_ensemble(states) == reference.score_ensemble(states)
            stored = streamed.describe()["first_layer_stored"]
            assert stored == (name in ("sage", "gcn", "gin")), streamed.describe()
            # Mixes scored several in one pass (two here, five mixes: a pass of one at the end), the first pass,
            # which stores the aggregation, among them; and the ensemble in passes of two.
            fresh = StreamedEvaluator(view, config, split, chunk_size=37)
            fresh.group = 2
            mixes = [[(1 - a, states[0]), (a, states[1])] for a in (0.0, 0.3, 0.5, 0.8, 1.0)]
            assert fresh.score_many(mixes) == [reference.score(mix_states(m)) for m in mixes]
            assert fresh.score_ensemble(states + states[:1]) == reference.score_ensemble(states + states[:1])
            assert fresh.forwards == 5 + 3 and fresh.describe()["first_layer_stored"] == stored
    finally:
        view.close()
    assert not view.dir.exists()


def test_streamed_rocauc_is_within_1e6_of_the_in_memory_score(tmp_path):
    graph = with_metric(load_graph("csbm:nodes=500,classes=2,features=6,seed=3"), "rocauc")
    save_npy(graph, tmp_path / "g")
    write_parts(open_source(f"npy:{tmp_path / 'g'}"), tmp_path / "p", 4)
    source = open_parts(tmp_path / "p")
    assert source.metric == "rocauc"
    config = model_config({"name": "sage", "hidden": 8})
    view = PartsView(source)
    for state in _states(config, features=6, classes=2):
        for split in ("val", "test"):
            expected = Evaluator(source.whole_graph(), config, split).score(state)
            assert abs(StreamedEvaluator(view, config, split, chunk_size=50).score(state) - expected) < 1e-6
    view.close()


def test_a_block_never_holds_more_targets_than_the_chunk(cut, monkeypatch):
    source, _ = cut[1]
    config = model_config({"name": "gat", "hidden": 8, "layers": 3})
    view = PartsView(source)
    evaluator = StreamedEvaluator(view, config, "val", chunk_size=16)
    sizes = []
    block = StreamedEvaluator._block

    def recorded(self, p, targets):
        sizes.append(targets.numel())
        return block(self, p, targets)

    monkeypatch.setattr(StreamedEvaluator, "_block", recorded)
    evaluator.score(_states(config)[0])
    # every layer runs over the nodes it needs in chunks of at most 16, each within one part
    assert sizes and max(sizes) <= 16 and sum(sizes) == sum(len(level) for level in evaluator.levels[1:])
    assert len(evaluator.levels[1]) > len(evaluator.levels[2]) > len(evaluator.levels[3]) == source.split_size("val")
    view.close()


class Tiny(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index):
        return self.lin(x)


def test_a_model_from_python_is_refused_by_the_streamed_evaluator(cut):
    from ladle.models.python_model import register

    view = PartsView(cut[0][0])
    with pytest.raises(LadleError, match="whole-graph forward"):
        StreamedEvaluator(view, model_config({"name": register(Tiny)}))
    view.close()


@pytest.fixture(scope="module")
def parts_run(cut, tmp_path_factory):
    """A run from parts, souped with every selecting soup and the ensemble, the graph never put together."""
    source, whole = cut[0]
    out = tmp_path_factory.mktemp("run") / "run"
    never = pytest.MonkeyPatch()
    never.setattr(PartSource, "whole_graph", lambda self: pytest.fail("the graph was put together"))
    try:
        assert main(["run", "--dataset", f"parts:{source.folder}", "--epochs", "3", "--soups",
                     "uniform,greedy,gis,ensemble", "--out", str(out), "--quiet"]) == 0
        assert main(["verify", str(out), "--graph", source.folder]) == 0
        assert main(["predict", str(out), "--graph", source.folder, "--model", "ensemble",
                     "--out", str(out.parent / "ensemble.csv")]) == 0
        assert main(["predict", str(out), "--graph", source.folder, "--model", "gis",
                     "--out", str(out.parent / "gis.csv")]) == 0
    finally:
        never.undo()
    return out, source, whole


def test_a_run_from_parts_soups_verifies_and_predicts_without_the_whole_graph(parts_run):
    out, source, whole = parts_run
    results = json.loads((out / "results.json").read_text())
    assert set(results["soups"]) == {"uniform", "greedy", "gis", "ensemble"}
    gis = json.loads((out / "soups" / "gis.json").read_text())
    assert gis["evaluation"]["path"] == "streamed" and gis["evaluation"]["first_layer_stored"]
    # the soups' scores are the in-memory evaluator's, on the graph put together
    from ladle.store import load_model

    model = load_model(out, "gis")
    assert gis["scores"]["test"] == Evaluator(whole, model.config, "test").score(model.state_dict())
    assert not list(out.glob(".ladle-scratch-*"))  # the spilled layers are gone once the soups are made


def test_predictions_from_parts_are_the_in_memory_models_in_original_ids(parts_run):
    from ladle.store import load_model

    out, source, whole = parts_run
    rows = [line.split(",") for line in (out.parent / "gis.csv").read_text().split()[1:]]
    assert [int(r[0]) for r in rows] == list(range(whole.num_nodes))
    expected = whole_graph_logits(load_model(out, "gis"), whole).argmax(-1)
    assert [int(r[2]) for r in rows] == expected.tolist()
    names = np.array(["none"] * whole.num_nodes, dtype=object)
    for split in ("train", "val", "test"):
        names[whole.mask(split).numpy()] = split
    assert [r[1] for r in rows] == names.tolist()
    members = [load_model(out, n) for n in sorted(p.stem for p in (out / "ingredients").glob("*.safetensors"))]
    mean = sum(torch.softmax(whole_graph_logits(m, whole), -1) for m in members)
    ensemble = [int(line.split(",")[2]) for line in (out.parent / "ensemble.csv").read_text().split()[1:]]
    assert ensemble == mean.argmax(-1).tolist()
    import ladle  # the probabilities too, streamed over the parts, in original ids

    proba = ladle.predict(out, "ensemble", "proba", graph_file=source.folder)
    torch.testing.assert_close(proba, mean / len(members), rtol=0, atol=1e-5)
    logits = ladle.predict(out, "gis", "logits", graph_file=source.folder)
    torch.testing.assert_close(logits, whole_graph_logits(load_model(out, "gis"), whole), rtol=0, atol=1e-4)


def test_a_run_from_parts_names_no_folder_ladle_opens(parts_run, capsys):
    out, source, _ = parts_run
    for command in (["soup", str(out)], ["verify", str(out)], ["predict", str(out)]):
        code = main(command)
        text = " ".join(capsys.readouterr().err.split())
        assert code != 0 and "ladle opens no folder that a run directory names" in text and "--graph PDIR" in text
    other = source.folder + "-other"
    write_parts(open_source(SMALL), other, 2)
    assert main(["soup", str(out), "--graph", other]) == 2
    assert "is not the one" in " ".join(capsys.readouterr().err.split())


def test_a_fitted_soup_on_parts_too_big_to_put_together_is_refused_and_names_the_streamed_soups(parts_run, capsys,
                                                                                                patch_all):
    import ladle.profiling

    out, source, _ = parts_run
    patch_all(ladle.profiling, "too_big", lambda need: True)  # as on a graph larger than the machine
    assert main(["soup", str(out), "--graph", source.folder, "--method", "learned", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "fit their weights through the whole graph" in err and "--method uniform, greedy, gis or ensemble" in err
    assert "Traceback" not in err and not (out / "soups" / "learned.json").exists()


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_blocks_past_the_memory_bound_are_kept_in_scratch_files_and_give_the_same_scores(cut, monkeypatch, name):
    import ladle.evaluation.streamed as streamed_module

    source, whole = cut[0]
    config = model_config({"name": name, "hidden": 8, "layers": 3})
    states = _states(config)
    monkeypatch.setattr(streamed_module, "BLOCK_ENTRIES", 150)  # the first blocks in memory, the rest spilled
    view = PartsView(source)
    try:
        evaluator = StreamedEvaluator(view, config, "val", chunk_size=16)
        reference = Evaluator(whole, config, "val")
        first = evaluator.score(states[0])
        spilled = sorted(p.name for p in view.dir.glob("val-block*"))
        assert spilled and evaluator._kept <= 150
        built = []
        block = StreamedEvaluator._block
        monkeypatch.setattr(StreamedEvaluator, "_block", lambda self, p, t: built.append(t.numel()) or block(self, p, t))
        for state in states:
            assert evaluator.score(state) == reference.score(state)
        assert first == reference.score(states[0])
        # later scores build no block past the first layer (GAT rebuilds its first layer's, which it cannot store)
        assert sum(built) == (len(evaluator.levels[1]) * len(states) if name == "gat" else 0)
    finally:
        view.close()
