import pytest
import torch

from ladle.config import ModelConfig
from ladle.models import build_model
from ladle.models.base import input_dropout

ARCHS = ["gcn", "sage", "gat", "gin", "mlp"]


def ring(n=8, f=5):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, f, generator=gen)
    src = torch.arange(n)
    edge_index = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([(src + 1) % n, src])], 1)
    return x, edge_index


@pytest.mark.parametrize("name", ARCHS)
@pytest.mark.parametrize("layers, norm, residual", [(1, "none", False), (2, "batch", False), (3, "layer", True)])
def test_shapes_and_options(name, layers, norm, residual):
    config = ModelConfig(name=name, hidden=16, layers=layers, norm=norm, residual=residual, heads=4)
    model = build_model(config, 5, 3, init_seed=1)
    x, ei = ring()
    model.train()
    assert model(x, ei).shape == (8, 3)
    model.eval()
    out = model(x, ei)
    assert out.shape == (8, 3) and torch.isfinite(out).all()
    assert len(model.convs) == layers and len(model.norms) == layers - 1


@pytest.mark.parametrize("name", ARCHS)
def test_init_seed_gives_identical_weights(name):
    config = ModelConfig(name=name, hidden=8, heads=2)
    a, b = (build_model(config, 5, 3, init_seed=7).state_dict() for _ in range(2))
    c = build_model(config, 5, 3, init_seed=8).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


def test_mlp_ignores_edges_and_gnn_does_not():
    x, ei = ring()
    mlp = build_model(ModelConfig(name="mlp"), 5, 3, init_seed=0).eval()
    gcn = build_model(ModelConfig(name="gcn"), 5, 3, init_seed=0).eval()
    empty = torch.empty(2, 0, dtype=torch.long)
    assert torch.equal(mlp(x, ei), mlp(x, empty))
    assert not torch.allclose(gcn(x, ei), gcn(x, empty))


def test_sparse_input_dropout_matches_dropout_statistics():
    torch.manual_seed(0)
    x = torch.zeros(400, 500)
    x[torch.rand(400, 500) < 0.02] = 1.0  # 2% non-zero: the sparse path
    out = input_dropout(x, 0.5, training=True)
    assert bool((out[x == 0] == 0).all())
    kept = out[x == 1]
    assert set(kept.unique().tolist()) <= {0.0, 2.0}
    share = (kept == 0).float().mean().item()
    assert abs(share - 0.5) < 4 * (0.25 / kept.numel()) ** 0.5  # within 4 standard errors
    assert torch.equal(input_dropout(x, 0.5, training=False), x)
    dense = torch.ones(10, 10)
    assert set(input_dropout(dense, 0.5, True).unique().tolist()) <= {0.0, 2.0}


@pytest.mark.parametrize("name", ["sage", "gat", "gin"])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_hop_trimmed_forward_equals_the_full_forward_on_the_seeds(name, layers):
    from ladle.config import SamplerConfig
    from ladle.data import load_graph
    from ladle.sampling import build_sampler

    graph = load_graph("csbm:nodes=400,classes=3,features=6")
    sampler = build_sampler(graph, SamplerConfig(name="neighbor", fanouts=(4,) * layers, batch_size=32), seed=3)
    batch = next(iter(sampler.batches(1)))
    assert len(batch.num_sampled_nodes) == layers + 1 and sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)
    config = ModelConfig(name=name, hidden=16, layers=layers, norm="batch", residual=True, heads=2)
    model = build_model(config, 6, 3, init_seed=2).eval()
    full = model(batch.x, batch.edge_index)[: batch.batch_size]
    trimmed = model(batch.x, batch.edge_index, num_sampled_nodes=batch.num_sampled_nodes,
                    num_sampled_edges=batch.num_sampled_edges)
    assert trimmed.shape == full.shape
    assert torch.allclose(trimmed, full, atol=1e-5)
