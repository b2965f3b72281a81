"""Samplers: true edges only, fanouts respected, exact induced subgraphs, balanced parts, and GraphSAINT's
estimated probabilities against their exact values (fixed-seed statistical checks)."""
import pytest
import torch
from torch_geometric.utils import subgraph

from ladle.config import SamplerConfig, build_config
from ladle.data import load_graph
from ladle.data.csbm import CSBMConfig, generate_csbm
from ladle.data.graph import make_graph
from ladle.sampling import build_sampler
from ladle.sampling.partition import metis_parts, part_nodes, random_parts
from ladle.sampling.saint import SaintSampler


@pytest.fixture(scope="module")
def graph():
    return generate_csbm(CSBMConfig(nodes=1500, classes=4, degree=12, features=6, seed=5))


def edge_set(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def test_neighbor_batches_are_true_edges_within_fanouts(graph):
    config = SamplerConfig(name="neighbor", fanouts=(5, 3), batch_size=100)
    sampler = build_sampler(graph, config, seed=1)
    true_edges = edge_set(graph.data.edge_index)
    rowptr, _ = graph.csr()
    degree = rowptr[1:] - rowptr[:-1]
    seen_seeds = []
    for batch in sampler.batches(epoch=0):
        n_id, ei = batch.n_id, batch.edge_index
        assert n_id.unique().numel() == n_id.numel()  # every node once
        assert torch.equal(batch.x, graph.data.x[n_id]) and torch.equal(batch.y, graph.data.y[n_id])
        seeds = n_id[: batch.batch_size]
        assert bool(graph.data.train_mask[seeds].all())
        seen_seeds.append(seeds)
        global_edges = torch.stack([n_id[ei[0]], n_id[ei[1]]])
        assert edge_set(global_edges) <= true_edges  # only true edges ...
        assert len(edge_set(ei)) == ei.size(1)  # ... and none twice
        in_degree = torch.bincount(ei[1], minlength=n_id.numel())
        # Hop 1 targets are the seeds (fanout 5); hop 2 targets are the nodes first reached at hop 1 (fanout 3).
        hop1 = torch.arange(batch.batch_size)
        assert torch.equal(in_degree[hop1], torch.minimum(degree[seeds], torch.tensor(5)))
        targets = ei[1].unique()
        later = targets[targets >= batch.batch_size]
        assert bool((in_degree[later] <= 3).all())
        assert torch.equal(in_degree[later], torch.minimum(degree[n_id[later]], torch.tensor(3)))
    assert torch.equal(torch.cat(seen_seeds).sort().values, graph.mask("train").nonzero().view(-1))


def test_neighbor_batches_are_reproducible_from_the_seed(graph):
    config = SamplerConfig(name="neighbor", fanouts=(4, 4), batch_size=128)
    a = list(build_sampler(graph, config, seed=3).batches(2))
    b = list(build_sampler(graph, config, seed=3).batches(2))
    c = list(build_sampler(graph, config, seed=4).batches(2))
    assert all(torch.equal(x.n_id, y.n_id) and torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, b))
    assert not torch.equal(a[0].n_id, c[0].n_id)
    assert not torch.equal(a[0].n_id, list(build_sampler(graph, config, seed=3).batches(3))[0].n_id)


def test_sampling_is_uniform_over_neighbours():
    # A star: node 0 with 20 neighbours, fanout 5: each neighbour is drawn with probability 1/4.
    leaves = torch.arange(1, 21)
    edge_index = torch.stack([torch.zeros(20, dtype=torch.long), leaves])
    mask = torch.zeros(21, dtype=torch.bool)
    mask[0] = True
    g = make_graph(torch.zeros(21, 1), edge_index, torch.zeros(21), mask, ~mask, ~mask, name="star", num_classes=2)
    sampler = build_sampler(g, SamplerConfig(name="neighbor", fanouts=(5,), batch_size=1), seed=0)
    counts = torch.zeros(21)
    trials = 2000
    for epoch in range(trials):
        batch = next(iter(sampler.batches(epoch)))
        counts[batch.n_id[1:]] += 1
    share = counts[1:] / trials
    assert (share - 0.25).abs().max() < 4 * (0.25 * 0.75 / trials) ** 0.5
    # Without replacement, every pair of leaves is drawn together with probability (5·4)/(20·19).
    pairs = torch.zeros(21, 21)
    for epoch in range(trials):
        drawn = next(iter(sampler.batches(epoch))).n_id[1:]
        assert drawn.numel() == 5
        pairs[drawn[:, None], drawn[None, :]] += 1
    upper = torch.triu(torch.ones(20, 20, dtype=torch.bool), 1)
    pair_share = pairs[1:, 1:][upper] / trials
    p = 20 / 380
    assert (pair_share - p).abs().max() < 5 * (p * (1 - p) / trials) ** 0.5


@pytest.mark.parametrize("fanouts", [(4, 3), (40, 2), (2, 2, 2)])
def test_neighbour_relabelling_matches_a_plain_reference(graph, fanouts):
    """The batch's local ids (one scatter-min into the [N] buffer per hop) against a dict, on the same draws:
    seeds first, then each hop's new nodes in order of first appearance; the buffer is left clean."""
    from ladle.sampling import neighbor

    sampler = build_sampler(graph, SamplerConfig(name="neighbor", fanouts=fanouts, batch_size=64), seed=3)
    rowptr, col = graph.csr()
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(1))[:64]
    for batch_seed in range(3):
        n_id, edge_index = sampler.sample_topology(seeds, torch.Generator().manual_seed(batch_seed))
        gen = torch.Generator().manual_seed(batch_seed)
        local = {int(v): i for i, v in enumerate(seeds)}
        frontier, edges = seeds, []
        for fanout in fanouts:
            owner, picked = neighbor.sample_neighbours(rowptr, col, frontier, fanout, gen)
            fresh = [v for v in dict.fromkeys(picked.tolist()) if v not in local]
            local.update({v: len(local) + i for i, v in enumerate(fresh)})
            edges += [(local[int(v)], local[int(frontier[o])]) for o, v in zip(owner.tolist(), picked.tolist())]
            frontier = torch.tensor(fresh, dtype=torch.long)
        assert n_id.tolist() == list(local)
        assert edge_index.t().tolist() == [list(e) for e in edges]
        assert bool((sampler.local == torch.iinfo(torch.long).max).all())


def test_metis_parts_cover_every_node_once_and_are_balanced(graph, tmp_path):
    membership = metis_parts(graph, 8, cache_dir=tmp_path)
    assert membership.shape == (1500,) and set(membership.tolist()) == set(range(8))
    sizes = torch.bincount(membership, minlength=8).float()
    assert (sizes.max() / sizes.mean()) <= 1.05 and (sizes.min() / sizes.mean()) >= 0.95
    cached = list((tmp_path / "partitions").glob("*.npy"))
    assert len(cached) == 1 and graph.fingerprint[:24] in cached[0].name
    assert torch.equal(metis_parts(graph, 8, cache_dir=tmp_path), membership)  # read back from the cache
    nodes = torch.cat(part_nodes(membership, 8))
    assert torch.equal(nodes.sort().values, torch.arange(1500))
    # METIS keeps the planted communities together: far fewer cut edges than a random partition.
    ei = graph.data.edge_index
    cut = (membership[ei[0]] != membership[ei[1]]).float().mean()
    rand = random_parts(graph, 8, seed=0)
    assert cut < 0.5 * (rand[ei[0]] != rand[ei[1]]).float().mean()


def test_cluster_batches_are_exact_induced_subgraphs(graph, tmp_path):
    sampler = build_sampler(graph, SamplerConfig(name="cluster", parts=10, parts_per_batch=3), seed=0,
                            cache_dir=tmp_path)
    covered = []
    for batch in sampler.batches(0):
        reference, _ = subgraph(batch.n_id, graph.data.edge_index, relabel_nodes=True, num_nodes=1500)
        assert edge_set(batch.edge_index) == edge_set(reference)
        assert torch.equal(batch.loss_mask, graph.data.train_mask[batch.n_id])
        covered.append(batch.n_id)
    assert torch.equal(torch.cat(covered).sort().values, torch.arange(1500))  # an epoch visits every part


def exact_node_sampler_probabilities(sampler, budget):
    q = sampler.node_weight / sampler.node_weight.sum()
    p_node = 1 - (1 - q) ** budget
    rowptr, col = sampler.graph.csr()
    owner = torch.repeat_interleave(torch.arange(sampler.graph.num_nodes), rowptr[1:] - rowptr[:-1])
    p_edge = 1 - (1 - q[owner]) ** budget - (1 - q[col]) ** budget + (1 - q[owner] - q[col]) ** budget
    return p_node, p_edge


def exact_edge_sampler_probabilities(sampler, budget):
    n = sampler.graph.num_nodes
    q = sampler.pair_weight / sampler.pair_weight.sum()
    touch = torch.zeros(n, dtype=torch.float64).index_add_(0, sampler.pairs[0], q).index_add_(0, sampler.pairs[1], q)
    p_node = 1 - (1 - touch) ** budget
    rowptr, col = sampler.graph.csr()
    owner = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
    lo, hi = torch.minimum(owner, col), torch.maximum(owner, col)
    pair_q = dict(zip(map(tuple, sampler.pairs.t().tolist()), q.tolist()))
    q_uv = torch.tensor([pair_q[(a, b)] for a, b in zip(lo.tolist(), hi.tolist())], dtype=torch.float64)
    both_out = (1 - touch[owner] - touch[col] + q_uv) ** budget
    p_edge = 1 - (1 - touch[owner]) ** budget - (1 - touch[col]) ** budget + both_out
    return p_node, p_edge


def exact_walk_probabilities(sampler, budget):
    # walk_length 1: a root r uniform over the training nodes, then one uniform neighbour.
    g = sampler.graph
    rowptr, col = g.csr()
    deg = (rowptr[1:] - rowptr[:-1]).double()
    train = g.data.train_mask.double()
    owner = torch.repeat_interleave(torch.arange(g.num_nodes), rowptr[1:] - rowptr[:-1])
    t = train.sum()
    reach = torch.zeros(g.num_nodes, dtype=torch.float64).index_add_(0, col, train[owner] / (t * deg[owner]))
    return 1 - (1 - train / t - reach) ** budget


@pytest.mark.parametrize("kind", ["node", "edge", "rw"])
def test_graphsaint_estimates_match_exact_probabilities(kind):
    g = generate_csbm(CSBMConfig(nodes=120, classes=3, degree=6, features=2, seed=1))
    budget = 15 if kind != "rw" else 10
    config = SamplerConfig(name=f"saint-{kind}", budget=budget, walk_length=1, coverage=1000)
    sampler = SaintSampler(g, config, seed=0)
    est_node, est_edge = sampler.probabilities()
    m = sampler.samples
    if kind == "node":
        p_node, p_edge = exact_node_sampler_probabilities(sampler, budget)
    elif kind == "edge":
        p_node, p_edge = exact_edge_sampler_probabilities(sampler, budget)
    else:
        p_node, p_edge = exact_walk_probabilities(sampler, budget), None
    # Tolerance: 5 binomial standard errors per entry (a fixed seed makes the check repeatable).
    tol_node = 5 * (p_node * (1 - p_node) / m).sqrt() + 1e-9
    assert bool(((est_node - p_node).abs() <= tol_node).all()), (est_node - p_node).abs().max()
    if p_edge is not None:
        tol_edge = 5 * (p_edge * (1 - p_edge) / m).sqrt() + 1e-9
        assert bool(((est_edge - p_edge).abs() <= tol_edge).all())
    # The normalisations follow from the counts.
    assert torch.allclose(sampler.node_norm.double(),
                          m / (sampler.node_count.clamp_min(1) * g.data.train_mask.sum()), rtol=1e-6)


def test_saint_batches_are_induced_and_weighted(graph):
    sampler = build_sampler(graph, SamplerConfig(name="saint-rw", budget=50, walk_length=3), seed=2)
    assert len(sampler) >= 1
    for batch in sampler.batches(0):
        reference, _ = subgraph(batch.n_id, graph.data.edge_index, relabel_nodes=True, num_nodes=1500)
        assert edge_set(batch.edge_index) == edge_set(reference)
        assert batch.edge_weight.shape == (batch.edge_index.size(1),) and bool((batch.edge_weight > 0).all())
        assert batch.loss_weight.shape == (batch.num_nodes,)


@pytest.mark.parametrize("sampler", [
    {"name": "neighbor", "fanouts": [5, 5], "batch_size": 64}, {"name": "cluster", "parts": 8},
    {"name": "saint-node", "budget": 200}, {"name": "saint-edge", "budget": 200}, {"name": "saint-rw", "budget": 50},
    {"name": "fastgcn", "budget": 100, "batch_size": 64}, {"name": "ladies", "budget": 100, "batch_size": 64},
])
def test_sampled_training_is_bit_identical_for_one_seed(sampler, tmp_path, monkeypatch):
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path))
    from ladle.trainer import train_ingredient

    g = load_graph("csbm:nodes=600,classes=3,features=8")
    spec = build_config({"dataset": "csbm", "sampler": sampler, "train": {"epochs": 3},
                         "model": {"hidden": 8}}).ingredient_specs()[0]
    a, b = train_ingredient(spec, g), train_ingredient(spec, g)
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert a.history[-1]["loss"] > 0


# ---- FastGCN and LADIES


@pytest.mark.parametrize("name", ["fastgcn", "ladies"])
def test_layerwise_batches_respect_budgets_and_nest(graph, name):
    budget, batch_size, layers = 60, 40, 3
    sampler = build_sampler(graph, SamplerConfig(name=name, budget=budget, batch_size=batch_size), seed=2,
                            num_layers=layers)
    true_edges = edge_set(graph.data.edge_index)
    for batch in sampler.batches(epoch=1):
        n_id, ei = batch.n_id, batch.edge_index
        assert n_id.unique().numel() == n_id.numel()
        assert bool(graph.data.train_mask[n_id[: batch.batch_size]].all())
        assert batch.layer_ptr.numel() == layers + 1 and int(batch.layer_ptr[-1]) == ei.size(1)
        assert edge_set(torch.stack([n_id[ei[0]], n_id[ei[1]]])) <= true_edges
        assert bool((batch.edge_weight > 0).all())
        # Top-down: the last model layer targets only seeds; each layer adds at most `budget` new nodes.
        size = batch.batch_size
        for lo, hi in reversed(list(zip(batch.layer_ptr[:-1].tolist(), batch.layer_ptr[1:].tolist()))):
            src, dst = ei[0, lo:hi], ei[1, lo:hi]
            assert len(edge_set(ei[:, lo:hi])) == hi - lo  # no edge twice within a layer
            assert bool((dst < size).all())  # targets are the layer above (nested sets, seeds first)
            new = src[src >= size].unique()
            assert new.numel() <= budget
            size = max(size, int(src.max()) + 1 if src.numel() else size)
        assert size <= n_id.numel() <= batch.batch_size + layers * budget


@pytest.mark.parametrize("name", ["fastgcn", "ladies"])
def test_layerwise_propagation_is_unbiased(graph, name):
    """Averaged over many draws, a sampled layer's Σ w_uv h_u + Â(v,v) h_v equals Â h (fixed seed)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    sampler = build_sampler(graph, SamplerConfig(name=name, budget=150, batch_size=30), seed=0, num_layers=1)
    h = torch.randn(graph.num_nodes, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ei, w = gcn_norm(graph.data.edge_index, num_nodes=graph.num_nodes, add_self_loops=True)
    exact = torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]] * w.double()[:, None])
    seeds = graph.mask("train").nonzero().view(-1)[:30]
    gen = torch.Generator().manual_seed(1)
    draws = []
    for _ in range(3000):
        b = sampler.sample(seeds, gen)
        hb = h[b.n_id]
        out = hb * b.self_weight.double()[:, None]
        out = out.index_add(0, b.edge_index[1], hb[b.edge_index[0]] * b.edge_weight.double()[:, None])
        draws.append(out[: b.batch_size])
    draws = torch.stack(draws)
    error = (draws.mean(0) - exact[seeds]).abs()
    standard_error = draws.std(0) / draws.size(0) ** 0.5
    # Five standard errors (plus float32 weight rounding) for every one of 90 estimates.
    assert bool((error <= 5 * standard_error + 1e-4).all()), float((error / (standard_error + 1e-12)).max())


@pytest.mark.parametrize("arch", ["gcn", "sage", "gin", "gat"])
def test_layerwise_batch_forward_matches_dense_reference(graph, arch):
    """Each model layer uses only its own edges: GCN with the sampled weights plus exact self-loops."""
    from ladle.config import ModelConfig
    from ladle.models import build_model

    sampler = build_sampler(graph, SamplerConfig(name="ladies", budget=50, batch_size=20), seed=4, num_layers=2)
    batch = next(iter(sampler.batches(0)))
    model = build_model(ModelConfig(name=arch, hidden=8, layers=2, dropout=0.0), graph.num_features,
                        graph.num_classes, init_seed=0).eval()
    out = model(batch.x, batch.edge_index, batch.edge_weight, batch.layer_ptr, batch.self_weight)
    # Reference: layer by layer on the layer's own edge list, through the plain forward of a 1-layer view.
    x = batch.x
    for i, conv in enumerate(model.convs):
        lo, hi = batch.layer_ptr[i], batch.layer_ptr[i + 1]
        ei, ew = batch.edge_index[:, lo:hi], batch.edge_weight[lo:hi]
        if arch == "gcn":
            n = x.size(0)
            dense = torch.zeros(n, n)
            dense[ei[1], ei[0]] = ew
            dense += torch.diag(batch.self_weight)
            h = dense @ conv.lin(x) + conv.bias
        else:
            h = conv(x, ei)
        x = model.finish_layer(i, h, x)
    assert torch.allclose(out, x, atol=1e-5)
    seeds = slice(0, batch.batch_size)
    assert out[seeds].shape == (batch.batch_size, graph.num_classes)


def test_categorical_draws_match_their_weights():
    from ladle.sampling.base import Categorical

    weights = torch.tensor([0.0, 1.0, 3.0, 0.0, 6.0])
    draws = Categorical(weights).sample(20000, torch.Generator().manual_seed(0))
    share = torch.bincount(draws, minlength=5) / 20000.0
    assert share[0] == 0 and share[3] == 0  # zero weight is never drawn
    assert (share - weights / 10).abs().max() < 5 * (0.25 / 20000) ** 0.5


@pytest.mark.parametrize("draw", ["floyd", "shuffled"])
def test_offset_draws_are_distinct_and_uniform_subsets(draw):
    """Floyd's algorithm (small fanouts) and the sort of random keys (large ones) against the exact law of a
    uniform k-subset of d offsets: each offset with probability k/d, each pair with k(k-1)/(d(d-1))."""
    from ladle.sampling.neighbor import floyd_offsets, shuffled_offsets

    fn = floyd_offsets if draw == "floyd" else shuffled_offsets
    k, trials = 4, 6000
    for d in (4, 7, 12):
        offsets = fn(torch.full((trials,), d), k, torch.Generator().manual_seed(d))
        assert offsets.shape == (trials, k) and int(offsets.min()) >= 0 and int(offsets.max()) < d
        assert bool((offsets.sort(1).values.diff(1) > 0).all())  # distinct within each row
        share = torch.bincount(offsets.view(-1), minlength=d) / trials
        p = k / d
        assert (share - p).abs().max() <= 4 * (p * (1 - p) / trials) ** 0.5 + 1e-9
        pairs = torch.zeros(d, d)
        for i in range(k):
            for j in range(k):
                if i != j:
                    pairs.index_put_((offsets[:, i], offsets[:, j]), torch.ones(trials), accumulate=True)
        q = k * (k - 1) / (d * (d - 1))
        off_diagonal = pairs[~torch.eye(d, dtype=torch.bool)] / trials
        assert (off_diagonal - q).abs().max() <= 5 * (q * (1 - q) / trials) ** 0.5 + 1e-9


def test_large_fanouts_take_the_shuffle_and_stay_within_neighbours(graph):
    from ladle.sampling import neighbor

    rowptr, col = graph.csr()
    frontier = torch.arange(graph.num_nodes)
    for fanout in (3, neighbor.FLOYD_MAX_FANOUT + 1):
        owner, picked = neighbor.sample_neighbours(rowptr, col, frontier, fanout, torch.Generator().manual_seed(0))
        degree = rowptr[1:] - rowptr[:-1]
        assert torch.equal(torch.bincount(owner, minlength=graph.num_nodes), degree.clamp_max(fanout))
        dense = torch.zeros(graph.num_nodes, graph.num_nodes, dtype=torch.bool)
        dense[graph.data.edge_index[0], graph.data.edge_index[1]] = True
        assert bool(dense[frontier[owner], picked].all())  # every pick is a true neighbour
        pairs = frontier[owner] * graph.num_nodes + picked
        assert pairs.unique().numel() == pairs.numel()  # no neighbour twice


def test_neighbour_batches_list_each_hops_edges_by_target(graph):
    """Sampled layers read their edges as CSR rows without a sort: within a batch, targets never decrease."""
    sampler = build_sampler(graph, SamplerConfig(name="neighbor", fanouts=(4, 3), batch_size=32), seed=1)
    for batch in list(sampler.batches(0))[:5]:
        dst = batch.edge_index[1]
        assert bool((dst[1:] >= dst[:-1]).all())


@pytest.mark.parametrize("name", ["sage", "gin"])
def test_sampled_layers_on_sparse_rows_equal_the_edge_list(graph, name):
    """SAGE and GIN run a sampled batch's layers as sparse products over its rows; the edge list is the reference,
    in the sampler's order and shuffled (a loader that does not group edges by target)."""
    from ladle.models import build_model
    from ladle.models.options import ModelConfig

    model = build_model(ModelConfig(name=name, hidden=8, layers=2, norm="layer", residual=True), graph.num_features,
                        graph.num_classes, init_seed=0).eval()
    batch = next(iter(build_sampler(graph, SamplerConfig(name="neighbor", fanouts=(4, 3), batch_size=32),
                                    seed=2).batches(0)))
    hops = (batch.num_sampled_nodes, batch.num_sampled_edges)
    with torch.no_grad():
        sparse = model(batch.x, batch.edge_index, None, None, None, *hops)
        shuffled = torch.randperm(batch.edge_index.size(1), generator=torch.Generator().manual_seed(0))
        first = batch.num_sampled_edges[0]  # shuffle within each hop: the hops' order is the batch's layout
        order = torch.cat([shuffled[shuffled < first], shuffled[shuffled >= first]])
        unsorted = model(batch.x, batch.edge_index[:, order], None, None, None, *hops)
        model.adjacency = None  # this instance only: per-edge messages
        reference = model(batch.x, batch.edge_index, None, None, None, *hops)
    assert sparse.shape == (batch.num_sampled_nodes[0], graph.num_classes)  # the seeds' logits
    assert torch.allclose(sparse, reference, atol=1e-5) and torch.allclose(unsorted, reference, atol=1e-5)
