"""Chunked layer-wise inference equals the full-batch forward on graphs that fit one."""
import pytest
import torch

from ladle.config import ModelConfig
from ladle.data.csbm import CSBMConfig, generate_csbm
from ladle.evaluation import Evaluator, split_scores
from ladle.evaluation.chunked import chunked_forward
from ladle.models import build_model


@pytest.fixture(scope="module")
def graph():
    return generate_csbm(CSBMConfig(nodes=500, classes=4, degree=8, features=6, seed=9))


@pytest.mark.parametrize("name", ["gcn", "sage", "gat", "gin", "mlp"])
@pytest.mark.parametrize("layers, norm, residual", [(1, "none", False), (2, "batch", False), (3, "layer", True)])
@pytest.mark.parametrize("chunk", [1, 37, 10_000])
def test_chunked_equals_full_batch(graph, name, layers, norm, residual, chunk):
    model = build_model(ModelConfig(name=name, hidden=12, heads=4, layers=layers, norm=norm, residual=residual),
                        6, 4, init_seed=1).eval()
    if norm == "batch":  # non-trivial running statistics
        for bn in model.norms:
            bn.module.running_mean.uniform_(-1, 1)
            bn.module.running_var.uniform_(0.5, 2)
    with torch.no_grad():
        full = model(graph.data.x, graph.data.edge_index)
    chunked = chunked_forward(model, graph, chunk)
    assert torch.allclose(chunked, full, atol=1e-5, rtol=1e-5)
    assert torch.equal(chunked.argmax(1), full.argmax(1))
    some = torch.tensor([499, 0, 250])
    assert torch.allclose(chunked_forward(model, graph, chunk, some), full[some], atol=1e-5, rtol=1e-5)


def test_chunked_evaluator_and_split_scores(graph):
    config = ModelConfig(name="sage", hidden=8)
    model = build_model(config, 6, 4, init_seed=0)
    state = model.state_dict()
    assert Evaluator(graph, config, "val", chunk_size=64).score(state) == Evaluator(graph, config, "val").score(state)
    assert split_scores(model, graph, chunk_size=50) == split_scores(model, graph)
    assert model.training  # put back as found


@pytest.mark.parametrize("name", ["sage", "gin", "gcn"])
@pytest.mark.parametrize("layers, norm, residual", [(1, "none", False), (2, "batch", False), (3, "layer", True)])
def test_sparse_row_chunks_equal_the_gathered_chunks(graph, name, layers, norm, residual):
    """SAGE, GIN and GCN chunk by slices of the sparse adjacency's rows; the per-edge gather is the reference."""
    model = build_model(ModelConfig(name=name, hidden=12, layers=layers, norm=norm, residual=residual), 6, 4,
                        init_seed=3).eval()
    sparse = chunked_forward(model, graph, 37)
    model.adjacency = None  # this instance only: chunks gather their sources edge by edge
    gathered = chunked_forward(model, graph, 37)
    assert torch.allclose(sparse, gathered, atol=1e-5, rtol=1e-5)
    some = torch.tensor([499, 0, 250, 251])
    assert torch.allclose(chunked_forward(model, graph, 2, some), gathered[some], atol=1e-5, rtol=1e-5)


def test_rows_of_takes_any_rows_in_order(graph):
    from ladle.evaluation.field import rows_of

    adj = graph.adj_t("gcn")
    dense = adj.to_dense()
    for rows in (torch.arange(10, 50), torch.tensor([7, 3, 3, 499]), torch.tensor([], dtype=torch.long)):
        sub = rows_of(adj, rows)
        assert sub.size() == (rows.numel(), graph.num_nodes) and sub.ladle_kind == "gcn"
        assert torch.equal(sub.to_dense(), dense[rows])
