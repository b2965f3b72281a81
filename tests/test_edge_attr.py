"""Edge features for a user's model: a graph's ``edge_attr`` follows its edges through canonicalisation, every
sampler that keeps the graph's edges, partitions, the npz round trip and the whole-graph passes; a model whose
``forward`` takes ``edge_attr`` gets them, checked against a plain lookup of each edge's features."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import scatter

import ladle
from ladle.config import build_config
from ladle.data.graph import make_graph
from ladle.data.npz import load_npz, save_npz
from ladle.data.pyg_input import graph_from
from ladle.errors import LadleError
from ladle.sampling import build_sampler
from ladle.sampling.options import SamplerConfig
from ladle.sampling.partition import part_graph, random_membership


def code(u, v):
    """An edge's feature that names it, the same both ways: what the lookups below check."""
    return float(min(u, v) * 1000 + max(u, v))


def coded_data(n=120, degree=4, seed=0, classes=3) -> Data:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, n * degree), generator=gen)
    attr = torch.tensor([[code(int(u), int(v)), 1.0] for u, v in edge_index.t()])
    y = torch.randint(0, classes, (n,), generator=gen)
    masks = torch.rand(n, generator=gen)
    return Data(x=torch.randn(n, 6, generator=gen), edge_index=edge_index, edge_attr=attr, y=y,
                train_mask=masks < 0.5, val_mask=(masks >= 0.5) & (masks < 0.75), test_mask=masks >= 0.75)


def check_coded(edge_index_global: torch.Tensor, edge_attr: torch.Tensor):
    expected = torch.tensor([code(int(u), int(v)) for u, v in edge_index_global.t()])
    assert edge_attr.shape == (edge_index_global.size(1), 2)
    assert torch.equal(edge_attr[:, 0], expected) and bool((edge_attr[:, 1] == 1.0).all())


def test_canonical_edges_merge_features_by_their_mean_on_a_hand_built_graph():
    # (0,1) twice and (1,0) once, a self-loop on 2, and (1,2): each undirected edge gets the mean of all its copies.
    edge_index = torch.tensor([[0, 1, 0, 2, 1], [1, 0, 1, 2, 2]])
    edge_attr = torch.tensor([[1.0], [3.0], [2.0], [9.0], [5.0]])
    mask = torch.ones(3, dtype=torch.bool)
    graph = make_graph(torch.ones(3, 1), edge_index, torch.tensor([0, 1, 0]), mask, mask, mask, name="hand",
                       num_classes=2, edge_attr=edge_attr)
    assert graph.data.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]
    assert graph.data.edge_attr.view(-1).tolist() == [2.0, 2.0, 5.0, 5.0]
    plain = make_graph(torch.ones(3, 1), edge_index, torch.tensor([0, 1, 0]), mask, mask, mask, name="hand",
                       num_classes=2)
    assert plain.data.edge_index.equal(graph.data.edge_index) and plain.fingerprint != graph.fingerprint


def test_wrong_edge_features_get_one_message():
    data = coded_data()
    data.edge_attr = data.edge_attr[:-1]
    with pytest.raises(LadleError, match=r"edge_attr has shape \[479, 2\] for 480 edges"):
        graph_from(data)
    data.edge_attr = ["a"] * 480
    with pytest.raises(LadleError, match="edge_attr is list"):
        graph_from(data)


def test_the_npz_round_trip_keeps_the_features_and_the_fingerprint(tmp_path):
    graph = graph_from(coded_data())
    save_npz(graph, tmp_path / "g.npz")
    back = load_npz(tmp_path / "g.npz")
    assert back.fingerprint == graph.fingerprint and back.data.edge_attr.equal(graph.data.edge_attr)


@pytest.mark.parametrize("sampler", [{"name": "neighbor", "fanouts": (3, 2), "batch_size": 16},
                                     {"name": "cluster", "parts": 4, "parts_per_batch": 2},
                                     {"name": "saint-rw", "budget": 10, "walk_length": 2, "steps": 3},
                                     {"name": "full"}])
def test_every_edge_keeping_sampler_carries_each_sampled_edges_features(sampler, tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path))
    graph = graph_from(coded_data())
    built = build_sampler(graph, SamplerConfig(**sampler), 3, num_layers=2)
    batches = list(built.batches(1))
    assert batches
    for batch in batches:
        n_id = batch.n_id if batch.get("n_id") is not None else torch.arange(graph.num_nodes)
        check_coded(n_id[batch.edge_index], batch.edge_attr)


def test_a_part_keeps_its_edges_features_with_and_without_a_halo():
    graph = graph_from(coded_data())
    membership = random_membership(graph.num_nodes, 3, seed=1)
    for halo in (False, True):
        part = part_graph(graph, membership, 1, halo)
        check_coded(part.data.n_id[part.data.edge_index], part.data.edge_attr)


class EdgeSum(torch.nn.Module):
    """A user's model that reads edge features: each node's summed incoming edge codes, scaled, beside x."""

    calls: list = []

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels + 1, out_channels)

    def forward(self, x, edge_index, edge_attr=None):
        EdgeSum.calls.append(None if edge_attr is None else (edge_attr.size(0), edge_index.size(1)))
        incoming = torch.zeros(x.size(0), 1) if edge_attr is None else \
            scatter(edge_attr[:, :1] / 1e5, edge_index[1], dim=0, dim_size=x.size(0), reduce="sum")
        return self.lin(torch.cat([x, incoming], dim=1))


def test_a_model_taking_edge_attr_gets_them_in_training_and_in_every_whole_graph_pass(tmp_path):
    EdgeSum.calls.clear()
    data = coded_data()
    config = {"ingredients": 2, "train": {"epochs": 2}, "soups": ["uniform", "gis"],
              "sampler": {"name": "neighbor", "fanouts": [3, 2], "batch_size": 16}}
    results = ladle.run(config, tmp_path / "run", graph=data, model=EdgeSum, progress=False)
    assert EdgeSum.calls and all(c is not None and c[0] == c[1] for c in EdgeSum.calls)
    # The soup's stored score is what the model gives with the graph's edge features, looked up by hand.
    graph = graph_from(data)
    model = ladle.load_model(tmp_path / "run", "gis", model=EdgeSum)
    with torch.no_grad():
        logits = model(graph.data.x, graph.data.edge_index, edge_attr=graph.data.edge_attr)
    mask = graph.data.val_mask
    val = (logits[mask].argmax(-1) == graph.data.y[mask]).float().mean().item()
    assert val == pytest.approx(results["soups"]["gis"]["val"])
    assert torch.equal(ladle.predict(tmp_path / "run", "gis", output="logits", graph=data), logits)
    # Process workers (which import the class) train the same weights: the features reached them too.
    ladle.train({**config, "engine": {"name": "process", "workers": 2}}, tmp_path / "process", graph=data,
                model=EdgeSum, progress=False)
    for name in ("ingredient-00", "ingredient-01"):
        assert (tmp_path / "process" / "ingredients" / f"{name}.safetensors").read_bytes() == \
            (tmp_path / "run" / "ingredients" / f"{name}.safetensors").read_bytes()


def test_a_layerwise_sampler_refuses_a_model_that_takes_edge_features(tmp_path):
    config = {"ingredients": 1, "train": {"epochs": 1}, "soups": ["uniform"],
              "sampler": {"name": "ladies", "batch_size": 16, "budget": 32}}
    with pytest.raises(LadleError, match="the ladies sampler draws its own layer edges"):
        ladle.run(config, tmp_path / "run", graph=coded_data(), model=EdgeSum, progress=False)


def test_the_built_in_models_train_as_before_on_a_graph_with_edge_features(tmp_path):
    """A graph's edge features change its fingerprint only; ladle's own models do not read them."""
    data = coded_data()
    with_attr = ladle.train(build_config({"ingredients": 1, "train": {"epochs": 2}, "dataset": "graph"}),
                            tmp_path / "a", graph=data, progress=False)[0]
    del data.edge_attr
    without = ladle.train(build_config({"ingredients": 1, "train": {"epochs": 2}, "dataset": "graph"}),
                          tmp_path / "b", graph=data, progress=False)[0]
    a = (with_attr.path / "ingredients" / "ingredient-00.safetensors").read_bytes()
    b = (without.path / "ingredients" / "ingredient-00.safetensors").read_bytes()
    assert a == b
