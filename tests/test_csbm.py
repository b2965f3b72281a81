import pytest
import torch

from ladle.data import load_graph
from ladle.data.csbm import PRESETS, CSBMConfig, generate_csbm, parse_csbm_spec
from ladle.data.graph import canonical_edges
from ladle.errors import LadleError


def test_csbm_is_canonical_exact_and_homophilous():
    config = CSBMConfig(nodes=2000, classes=4, degree=12, homophily=0.8, features=8, seed=3)
    graph = generate_csbm(config)
    ei = graph.data.edge_index
    assert ei.size(1) == 2 * 12000  # exactly round(N * degree / 2) undirected edges
    assert torch.equal(canonical_edges(ei, 2000), ei)  # sorted, symmetric, unique, no self-loops
    same = (graph.data.y[ei[0]] == graph.data.y[ei[1]]).float().mean().item()
    # Intra-class share: homophily plus nothing from inter-class draws (they never hit the own class).
    assert abs(same - 0.8) < 0.02
    assert torch.bincount(graph.data.y).tolist() == [500] * 4
    masks = graph.data.train_mask.long() + graph.data.val_mask.long() + graph.data.test_mask.long()
    assert bool((masks == 1).all())


def test_csbm_is_deterministic_and_seeded():
    a = generate_csbm(CSBMConfig(nodes=500, seed=1))
    b = generate_csbm(CSBMConfig(nodes=500, seed=1))
    c = generate_csbm(CSBMConfig(nodes=500, seed=2))
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_planted_communities_keep_edges_local():
    config = CSBMConfig(nodes=3000, classes=3, degree=10, homophily=1.0, locality=1.0, community=30, seed=0)
    graph = generate_csbm(config)
    ei = graph.data.edge_index
    y = graph.data.y
    # Recover each node's community: its rank inside its class (class order) // 30.
    order = torch.argsort(y, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(3000)
    start = torch.tensor([0, 1000, 2000])
    community = (rank - start[y]) // 30 + 1000 * y
    assert bool((community[ei[0]] == community[ei[1]]).all())


def test_presets_and_spec_parsing():
    assert parse_csbm_spec("csbm-arxiv") == PRESETS["csbm-arxiv"]
    assert PRESETS["csbm-arxiv"].nodes == 169_343 and PRESETS["csbm-products"].nodes == 2_449_029
    config = parse_csbm_spec("csbm:nodes=400,classes=3,signal=0.5")
    assert (config.nodes, config.classes, config.signal) == (400, 3, 0.5)
    graph = load_graph("CSBM:nodes=400,classes=3")
    assert graph.num_nodes == 400 and graph.name == "csbm:nodes=400,classes=3"


@pytest.mark.parametrize("spec, needle", [
    ("csbm:nodez=3", "bad option"), ("csbm:nodes=abc", "not a int"), ("csbm-arxv", "did you mean"),
    ("csbm:homophily=2", "homophily must be in [0, 1]"), ("csbm:classes=1", "classes"),
])
def test_bad_csbm_specs(spec, needle):
    with pytest.raises(LadleError) as err:
        load_graph(spec)
    assert needle in str(err.value)
