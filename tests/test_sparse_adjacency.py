"""Whole-graph passes on the graph's cached sparse adjacency: the same function as the edge-list path."""
import pickle

import pytest
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import to_dense_adj

from ladle.config import ModelConfig
from ladle.data import load_graph
from ladle.data.graph import make_graph
from ladle.models import build_model, graph_input
from ladle.sampling.partition import part_graph


@pytest.fixture(scope="module")
def graph():
    return load_graph("csbm:nodes=400,classes=4,features=12,degree=8")


def dense(adj):
    return adj.to_dense()


def test_plain_adjacency_is_the_symmetric_edge_set(graph):
    expected = to_dense_adj(graph.data.edge_index, max_num_nodes=graph.num_nodes)[0]
    assert torch.equal(dense(graph.adj_t("plain")), expected)
    assert graph.adj_t("plain") is graph.adj_t("plain")  # built once


def test_gcn_adjacency_equals_pygs_normalisation_with_self_loops(graph):
    edge_index, weight = gcn_norm(graph.data.edge_index, None, graph.num_nodes, add_self_loops=True)
    expected = torch.zeros(graph.num_nodes, graph.num_nodes)
    expected[edge_index[1], edge_index[0]] = weight  # adj_t: row = target
    adj = graph.adj_t("gcn")
    assert torch.allclose(dense(adj), expected, atol=1e-7)
    crow, col = adj.crow_indices(), adj.col_indices()
    for r in range(0, graph.num_nodes, 37):  # columns sorted in every row, the diagonal included once
        row = col[crow[r]:crow[r + 1]]
        assert torch.equal(row, row.sort().values) and int((row == r).sum()) == 1


def test_hand_built_path_graph_gcn_values():
    """0 - 1 - 2: degrees with self-loops 2, 3, 2."""
    edge_index = torch.tensor([[0, 1], [1, 2]])
    g = make_graph(torch.eye(3), edge_index, torch.tensor([0, 1, 0]), *(torch.ones(3, dtype=torch.bool),) * 3,
                   name="path", num_classes=2)
    s6 = 1 / 6**0.5
    expected = torch.tensor([[1 / 2, s6, 0], [s6, 1 / 3, s6], [0, s6, 1 / 2]])
    assert torch.allclose(dense(g.adj_t("gcn")), expected)
    with pytest.raises(ValueError, match="plain, gcn"):
        g.adj_t("mean")


def test_part_graph_with_unsorted_columns_gets_a_valid_adjacency(graph):
    membership = torch.arange(graph.num_nodes) % 3
    part = part_graph(graph, membership, 1, halo=True)
    rowptr, col = part.csr()
    row = torch.repeat_interleave(torch.arange(part.num_nodes), rowptr[1:] - rowptr[:-1])
    assert bool(((col[1:] <= col[:-1]) & (row[1:] == row[:-1])).any())  # the case the sort is for
    expected = to_dense_adj(part.data.edge_index, max_num_nodes=part.num_nodes)[0]
    assert torch.equal(dense(part.adj_t("plain")), expected)
    edge_index, weight = gcn_norm(part.data.edge_index, None, part.num_nodes, add_self_loops=True)
    gcn = torch.zeros(part.num_nodes, part.num_nodes)
    gcn[edge_index[1], edge_index[0]] = weight
    assert torch.allclose(dense(part.adj_t("gcn")), gcn, atol=1e-7)


@pytest.mark.parametrize("name", ["gcn", "sage", "gin", "gat", "mlp"])
@pytest.mark.parametrize("layers, norm, residual", [(1, "none", False), (2, "batch", False), (3, "layer", True),
                                                    (3, "none", True)])
def test_sparse_forward_and_gradients_equal_the_edge_list_path(graph, name, layers, norm, residual):
    config = ModelConfig(name=name, hidden=16, layers=layers, norm=norm, residual=residual, heads=4)
    model = build_model(config, graph.num_features, graph.num_classes, init_seed=3)
    edges = graph_input(model, graph)
    expected_kind = {"gcn": "gcn", "sage": "plain", "gin": "plain"}.get(name)
    assert (edges.layout == torch.sparse_csr) == (expected_kind is not None)
    if expected_kind:
        assert edges.ladle_kind == expected_kind
    model.eval()
    assert torch.allclose(model(graph.data.x, edges), model(graph.data.x, graph.data.edge_index), atol=1e-5)
    model.train()
    grads = []
    for second in (edges, graph.data.edge_index):
        torch.manual_seed(0)  # the same dropout masks
        model.zero_grad()
        model(graph.data.x, second).square().mean().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_gcn_normalises_a_raw_sparse_adjacency_itself(graph):
    """Only the adjacency ladle normalised skips GCN's normalisation: a raw one given by hand is normalised."""
    model = build_model(ModelConfig(name="gcn", hidden=8), graph.num_features, graph.num_classes, init_seed=0).eval()
    raw = graph.adj_t("plain")
    assert torch.allclose(model(graph.data.x, raw), model(graph.data.x, graph.data.edge_index), atol=1e-5)


def test_graph_to_leaves_the_original_where_it_was_and_pickles_without_the_cache(graph):
    """PyG's Data.to moves tensors in place; Graph.to must not (a CPU sampler reads the original)."""
    g = load_graph("csbm:nodes=200,classes=3,features=4")
    g.adj_t("gcn")
    moved = g.to("meta")
    assert moved.data.x.device.type == "meta" and g.data.x.device.type == "cpu"
    assert g.data.edge_index.device.type == "cpu" and g._adj and not moved._adj
    assert g.to("cpu") is g
    back = pickle.loads(pickle.dumps(g))
    assert back._adj == {} and back.fingerprint == g.fingerprint
