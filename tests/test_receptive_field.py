"""The learned soups' loss on the validation nodes' receptive field: exact blocks on a hand-built graph, and the
loss and its gradient equal to the whole-graph forward's (the reference) for every architecture, 1-3 layers,
with norms and residuals, on the whole graph and on a partition's induced subgraph."""
import itertools

import pytest
import torch

from ladle.data.graph import make_graph
from ladle.evaluation import Evaluator
from ladle.evaluation.field import induced, receptive_field
from ladle.models import build_model
from ladle.models.options import ModelConfig


def path_graph(n=6):
    """0 - 1 - 2 - ... - n-1, features one-hot, validation node 0 only."""
    src = torch.arange(n - 1)
    mask = lambda *ids: torch.isin(torch.arange(n), torch.tensor(ids))  # noqa: E731
    return make_graph(torch.eye(n), torch.stack([src, src + 1]), torch.arange(n) % 2, mask(1, 2), mask(0), mask(3),
                      name="path", num_classes=2)


def test_blocks_of_a_path_hold_exactly_each_hop():
    graph = path_graph()
    inputs, blocks = receptive_field(graph.adj_t("plain"), torch.tensor([0]), 3)
    # Layer 3 reads node 0's in-neighbour 1; layer 2 reads 0, 1 and 2; layer 1 also 3. Targets come first.
    assert inputs.tolist() == [0, 1, 2, 3]
    assert [(b.n_out, b.n_in) for b in blocks] == [(3, 4), (2, 3), (1, 2)]
    assert blocks[2].adj.to_dense().tolist() == [[0.0, 1.0]]
    assert blocks[1].adj.to_dense().tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    assert blocks[0].edge_index.tolist() == [[1, 0, 2, 1, 3], [0, 1, 1, 2, 2]]


def test_blocks_keep_the_whole_graphs_normalisation():
    graph = path_graph()
    adj = graph.adj_t("gcn")
    _, blocks = receptive_field(adj, torch.tensor([0]), 1)
    dense = adj.to_dense()
    assert torch.equal(blocks[0].adj.to_dense(), dense[0, [0, 1]].view(1, 2))  # node 1's degree is 3 with its loop
    assert blocks[0].adj.ladle_kind == "gcn"


def test_induced_keeps_the_entries_between_the_nodes():
    graph = path_graph()
    sub = induced(graph.adj_t("plain"), torch.tensor([1, 2, 4, 5]))
    assert sub.to_dense().tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]


def test_the_features_aggregate_is_computed_once_and_never_for_a_gradient():
    graph = path_graph()
    inputs, blocks = receptive_field(graph.adj_t("plain"), torch.tensor([0, 3]), 1)
    x = graph.data.x[inputs]
    first = blocks[0].aggregate(x, "mean")
    assert blocks[0].aggregate(x, "mean") is first
    assert blocks[0].aggregate(x) is not first  # another reduction
    h = x.clone().requires_grad_()
    assert blocks[0].aggregate(h).requires_grad and blocks[0]._memo[0][0] is x


@pytest.fixture(scope="module")
def graph():
    from ladle.data import load_graph

    return load_graph("csbm:nodes=600,classes=3,features=6")


CASES = [(arch, layers, norm, residual) for arch, layers, norm, residual in
         itertools.product(["gcn", "sage", "gin", "gat", "mlp"], [1, 2, 3], ["none", "batch", "layer"], [False, True])
         if not (residual and layers == 1)]


@pytest.mark.parametrize("arch,layers,norm,residual", CASES)
def test_loss_and_gradient_equal_the_whole_graph_forward(graph, arch, layers, norm, residual):
    config = ModelConfig(name=arch, hidden=8, layers=layers, norm=norm, residual=residual, heads=2)
    state = dict(build_model(config, graph.num_features, graph.num_classes, init_seed=layers).state_dict())
    state = {k: (torch.rand_like(v) + 0.5 if "running" in k else v) for k, v in state.items()}  # non-trivial norms
    evaluator = Evaluator(graph, config)
    nodes = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:250].sort().values
    for part in (None, nodes):
        learnable = [k for k, v in state.items() if v.is_floating_point() and "running" not in k]
        leaves = {k: v.clone().requires_grad_() if k in learnable else v for k, v in state.items()}
        reference = {k: v.clone().requires_grad_() if k in learnable else v for k, v in state.items()}
        fast, slow = evaluator.loss(leaves, part), evaluator._whole_loss(reference, part)
        fast.backward()
        slow.backward()
        assert torch.allclose(fast, slow, atol=1e-6), (part is None, float(fast), float(slow))
        for key, leaf in leaves.items():
            if key in learnable:
                assert torch.allclose(leaf.grad, reference[key].grad, atol=1e-5), key


def test_the_field_is_built_once_and_covers_the_validation_nodes_only(graph):
    config = ModelConfig(name="sage", hidden=8, layers=2)
    evaluator = Evaluator(graph, config)
    state = dict(build_model(config, graph.num_features, graph.num_classes, init_seed=0).state_dict())
    evaluator.loss(state)
    (x, blocks), targets = evaluator._field
    evaluator.loss(state)
    assert evaluator._field[0][0] is x
    assert torch.equal(targets, graph.mask("val").nonzero().view(-1))
    assert blocks[-1].n_out == int(graph.mask("val").sum())
    assert blocks[0].n_in <= graph.num_nodes and blocks[0].n_in == x.size(0)


def test_release_frees_the_field_and_the_next_loss_builds_it_again(graph):
    config = ModelConfig(name="gcn", hidden=8, layers=2)
    evaluator = Evaluator(graph, config)
    state = dict(build_model(config, graph.num_features, graph.num_classes, init_seed=0).state_dict())
    before = float(evaluator.loss(state))
    evaluator.release()
    assert evaluator._field is None
    assert float(evaluator.loss(state)) == before and evaluator._field is not None
