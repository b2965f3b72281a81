"""The fast soup evaluation engine against the reference path: the same logits to rounding, the same
predictions outside rounding ties, and GIS picks the same α at every step (so the same soup weights)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ladle.config import ModelConfig
from ladle.data.graph import make_graph
from ladle.evaluation.evaluator import Evaluator, mix_states
from ladle.evaluation.fast import FastEvaluator
from ladle.models import build_model
from ladle.soups import Ingredient, get_soup
from ladle.soups.options import GISOptions


def random_graph(seed: int, nodes: int, classes: int = 3, features: int = 5):
    gen = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, nodes, (2, nodes * 3), generator=gen)
    x = torch.randn(nodes, features, generator=gen)
    y = torch.randint(0, classes, (nodes,), generator=gen)
    split = torch.rand(nodes, generator=gen)
    return make_graph(x, edges, y, split < 0.4, (split >= 0.4) & (split < 0.7), split >= 0.7, name=f"random-{seed}",
                      num_classes=classes)


def perturb(name, tensor, gen):
    if not tensor.is_floating_point():
        return tensor
    noise = 0.3 * torch.randn(tensor.shape, generator=gen)
    return tensor * noise.exp() if name.endswith("running_var") else tensor + noise  # variances stay positive


def ingredients(config: ModelConfig, graph, count: int, seed: int):
    """A shared initialisation plus per-ingredient perturbations, as trained ingredients would be."""
    base = build_model(config, graph.num_features, graph.num_classes, init_seed=seed).state_dict()
    out = []
    for k in range(count):
        gen = torch.Generator().manual_seed(seed * 100 + k)
        state = {n: perturb(n, t, gen) for n, t in base.items()}
        out.append(Ingredient(f"ingredient-{k:02d}", state, config))
    return out


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(8, 60), layers=st.integers(1, 3),
       arch=st.sampled_from(["gcn", "sage", "gat", "gin"]), norm=st.sampled_from(["none", "batch", "layer"]),
       residual=st.booleans(), tight=st.booleans())
def test_fast_logits_match_the_reference(seed, nodes, layers, arch, norm, residual, tight):
    graph = random_graph(seed, nodes, features=8 if residual else 5)
    config = ModelConfig(name=arch, layers=layers, hidden=8, heads=2, norm=norm, residual=residual)
    states = [i.state for i in ingredients(config, graph, 3, seed)]
    mixes = [[(a, states[0]), (1 - a, states[1])] for a in (0.0, 0.25, 0.7, 1.0)]
    mixes.append([(0.2, states[0]), (0.3, states[1]), (0.5, states[2])])
    # tight: blocks of one mix, so the first-layer parts come from the bank reduced to proportional groups
    reference, fast = Evaluator(graph, config), FastEvaluator(graph, config, memory_floats=1 if tight else 2**27)
    assert fast.fast == bool(graph.mask("val").any())  # an empty split has nothing to speed up
    if not fast.fast:
        assert fast.score_many(mixes) == reference.score_many(mixes)
        return
    expected = torch.stack([reference.logits(mix_states(m)) for m in mixes])
    got = fast.mix_logits(mixes)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)
    # Predictions may differ only where the reference's top two scores are within rounding of each other.
    top2 = expected.topk(min(2, expected.size(-1)), -1).values
    margin = top2[..., 0] - top2[..., -1]
    differ = got.argmax(-1) != expected.argmax(-1)
    assert bool((margin[differ] < 1e-5).all())
    ref_scores, fast_scores = reference.score_many(mixes), fast.score_many(mixes)
    flips = int(differ.sum())  # each flipped prediction moves a score by at most 1 / n_split
    n_split = int(graph.mask("val").sum())
    assert all(abs(a - b) <= flips / n_split + 1e-12 for a, b in zip(ref_scores, fast_scores))


def test_models_outside_the_fast_path_fall_back_to_the_reference():
    graph = random_graph(3, 40)
    config = ModelConfig(name="mlp", layers=2, hidden=8)
    states = [i.state for i in ingredients(config, graph, 2, 3)]
    mixes = [[(a, states[0]), (1 - a, states[1])] for a in (0.0, 0.5, 1.0)]
    fast = FastEvaluator(graph, config)
    assert not fast.fast
    assert fast.score_many(mixes) == Evaluator(graph, config).score_many(mixes)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(1, 3), arch=st.sampled_from(["gcn", "sage", "gat", "gin"]),
       tight=st.booleans())
def test_gis_chooses_the_same_alphas_and_weights(seed, layers, arch, tight):
    graph = random_graph(seed, 80)
    config = ModelConfig(name=arch, layers=layers, hidden=8, heads=2)
    parts = ingredients(config, graph, 4, seed)
    gis = get_soup("gis")
    a = gis(parts, Evaluator(graph, config), GISOptions(granularity=9))
    b = gis(parts, FastEvaluator(graph, config, memory_floats=1 if tight else 2**27), GISOptions(granularity=9))
    assert [s["alpha"] for s in a.trace] == [s["alpha"] for s in b.trace]
    assert a.coefficients == b.coefficients
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_fast_path_batches_mixes_within_its_memory_bound():
    graph = random_graph(1, 50)
    config = ModelConfig(name="gcn", layers=2, hidden=8)
    states = [i.state for i in ingredients(config, graph, 2, 1)]
    mixes = [[(a, states[0]), (1 - a, states[1])] for a in torch.linspace(0, 1, 7).tolist()]
    small = FastEvaluator(graph, config, memory_floats=1)  # one mix per batch
    assert small.score_many(mixes) == FastEvaluator(graph, config).score_many(mixes)
    assert small.score_many(mixes) == Evaluator(graph, config).score_many(mixes)
    assert small.forwards == len(mixes)


def test_a_mix_already_scored_is_not_computed_again():
    graph = random_graph(2, 50)
    config = ModelConfig(name="sage", layers=2, hidden=8)
    states = [i.state for i in ingredients(config, graph, 2, 2)]
    fast = FastEvaluator(graph, config)
    first = fast.score_many([[(0.5, states[0]), (0.5, states[1])], [(1.0, states[0])]])
    again = fast.score_many([[(0.5, states[1]), (0.5, states[0])], [(1.0, states[0]), (0.0, states[1])]])
    assert again == first and fast.forwards == 2


def test_proportional_basis_groups_a_gis_steps_soup_members_into_one_row():
    from ladle.evaluation.fast import proportional_basis

    alphas = torch.linspace(0, 1, 6, dtype=torch.float64)
    soup = torch.tensor([0.3, 0.0, 0.7, 0.0], dtype=torch.float64)  # ingredients 0 and 2 in the soup
    coefficients = alphas[:, None] * soup
    coefficients[:, 3] = 1 - alphas  # the candidate
    weights, members = proportional_basis(coefficients)
    assert weights.shape == (6, 2) and members.shape == (2, 4)
    assert torch.allclose(weights @ members, coefficients, rtol=0, atol=1e-15)
    assert members[:, 1].eq(0).all()  # an ingredient outside every mix gets no row
    general = torch.rand(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weights, members = proportional_basis(general)
    assert members.shape == (3, 3) and torch.allclose(weights @ members, general, rtol=0, atol=1e-15)


def test_mixes_made_from_the_reduced_bank_score_as_the_reference_does():
    graph = random_graph(3, 60)
    config = ModelConfig(name="sage", layers=3, hidden=8)
    states = [i.state for i in ingredients(config, graph, 4, 3)]
    soup = [(0.25, states[0]), (0.5, states[1]), (0.25, states[2])]
    mixes = [[(a * c, s) for c, s in soup] + [(1 - a, states[3])] for a in torch.linspace(0, 0.9, 5).tolist()]
    tight = FastEvaluator(graph, config, memory_floats=1)  # blocks of one mix: the reduced bank is used
    whole = FastEvaluator(graph, config)  # every mix in one block: the bank as it is
    reference = torch.stack([Evaluator(graph, config).logits(mix_states(m)) for m in mixes])
    assert torch.allclose(tight.mix_logits(mixes), reference, atol=1e-5)
    assert torch.allclose(whole.mix_logits(mixes), reference, atol=1e-5)
    assert tight.score_many(mixes) == Evaluator(graph, config).score_many(mixes)


def test_blocks_of_mixes_side_by_side_match_one_mix_at_a_time():
    """Mixes evaluated in even blocks of a few (their channels side by side in every sparse product) give the
    logits of mixes evaluated alone, and of the reference; the buffers kept between calls change nothing."""
    graph = random_graph(4, 70)
    for arch in ("gcn", "sage", "gin"):
        config = ModelConfig(name=arch, layers=3, hidden=8, norm="batch", residual=True)
        states = [i.state for i in ingredients(config, graph, 3, 4)]
        mixes = [[(a, states[0]), (1 - a, states[2])] for a in torch.linspace(0, 1, 7).tolist()]
        blocked, alone = FastEvaluator(graph, config), FastEvaluator(graph, config, memory_floats=1)
        blocked.block_mixes = 3  # 7 mixes: blocks of 3, 3 and 1
        assert blocked._block_size() == 3 and alone._block_size() == 1
        got = blocked.mix_logits(mixes)
        assert torch.allclose(got, alone.mix_logits(mixes), atol=1e-6)
        reference = torch.stack([Evaluator(graph, config).logits(mix_states(m)) for m in mixes])
        assert torch.allclose(got, reference, atol=1e-5, rtol=1e-4)
        assert torch.equal(blocked.mix_logits(mixes), got)  # the second call reuses the first one's buffers
        blocked.release()
        assert torch.allclose(blocked.mix_logits(mixes[::-1]), got.flip(0), atol=1e-6)


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "gin"])
def test_a_state_outside_the_bank_is_scored_exactly_as_banked_without_growing_the_bank(arch):
    """A soup's result or a baseline is scored once: its first-layer parts are not kept (each bank row holds the
    whole receptive field), and its logits are those the banked path gives, to the bit."""
    graph = random_graph(4, 60)
    config = ModelConfig(name=arch, layers=2, hidden=8, heads=2, norm="batch", residual=True)
    states = [i.state for i in ingredients(config, graph, 3, 4)]
    fast = FastEvaluator(graph, config)
    fast.score_many([[(1.0, states[0])], [(1.0, states[1])]])
    bank_rows = len(fast._pinned)
    soup = mix_states([(0.5, states[0]), (0.5, states[2])])
    unbanked = fast._unbanked_logits(soup)
    assert len(fast._pinned) == bank_rows and id(soup) not in fast._slot
    banked = fast.mix_logits([[(1.0, soup)]])[0]
    assert torch.equal(unbanked, banked)
    assert fast.score(soup) == fast.score_many([[(1.0, soup)]])[0]
