"""Learned and partition learned soups: exact on identical ingredients, they lower the validation loss,
PLS touches only R of K parts per epoch, both are reproducible and marked as fitted on validation."""
import pytest
import torch

from ladle import api
from ladle.config import build_config
from ladle.data import load_graph
from ladle.evaluation import Evaluator
from ladle.soups import Ingredient, get_soup
from ladle.soups.learned import MixingWeights
from ladle.soups.options import LearnedOptions, PLSOptions
from ladle.store import RunDir


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:  # the METIS cache of this module's runs, for this module only
        patch.setenv("LADLE_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield _trained(tmp_path_factory)


def _trained(tmp_path_factory):
    config = build_config({"dataset": "csbm:nodes=800,classes=4,features=8", "ingredients": 3,
                           "init": "independent", "train": {"epochs": 15}, "model": {"hidden": 16},
                           "soups": ["uniform", "learned", "pls"],
                           "learned": {"epochs": 30, "parts": 8, "parts_per_epoch": 2, "t0": 10}})
    out = tmp_path_factory.mktemp("learned") / "run"
    results = api.run(config, out)
    graph = load_graph(config.dataset)
    ingredients, model_config, _ = api.load_ingredients(RunDir(out), graph)
    return config, results, graph, ingredients, model_config, out


def test_identical_ingredients_give_that_ingredient(trained):
    config, _, graph, ingredients, model_config, _ = trained
    copies = [Ingredient(f"copy-{i}", ingredients[0].state, model_config) for i in range(3)]
    val = Evaluator(graph, model_config, "val")
    for name in ("learned", "pls"):
        result = get_soup(name)(copies, val, config.soup_settings(name))
        for key, tensor in ingredients[0].state.items():
            assert torch.allclose(result.state[key], tensor, atol=1e-6), (name, key)


def test_mixing_weights_start_uniform_or_near_the_best(trained):
    _, _, _, ingredients, _, _ = trained
    uniform = MixingWeights(ingredients, "uniform", 0, "cpu").alphas()
    assert torch.allclose(uniform, torch.full_like(uniform, 1 / 3))
    best = MixingWeights(ingredients, "best", 2, "cpu").alphas()
    assert torch.allclose(best[2], torch.full_like(best[2], 0.9))
    mixed = MixingWeights(ingredients, "uniform", 0, "cpu").state()
    key = next(k for k, v in ingredients[0].state.items() if v.is_floating_point())
    assert torch.allclose(mixed[key], sum(i.state[key] for i in ingredients) / 3, atol=1e-6)


def test_fitting_lowers_the_validation_loss(trained):
    config, _, graph, ingredients, model_config, _ = trained
    val = Evaluator(graph, model_config, "val")
    with torch.no_grad():
        start = float(val.loss(MixingWeights(ingredients, "uniform", 0, "cpu").state()))
    result = get_soup("learned")(ingredients, val, config.soup_settings("learned"))
    with torch.no_grad():
        end = float(val.loss(result.state))
    assert end < start
    losses = [step["loss"] for step in result.trace if "loss" in step]
    assert len(losses) == config.soup("learned")["epochs"] and losses[-1] < losses[0]


def test_pls_runs_each_epoch_on_r_of_k_parts(trained):
    config, _, graph, ingredients, model_config, _ = trained
    val = Evaluator(graph, model_config, "val")
    seen = []
    original = val.loss

    def spy(state, nodes=None):
        seen.append(nodes)
        return original(state, nodes)

    val.loss = spy
    a = get_soup("pls")(ingredients, val, config.soup_settings("pls"), seed=3)
    parts = val.parts(8, 3)
    assert len(seen) == config.soup("pls")["epochs"]
    for nodes in seen:
        assert nodes is not None
        members = [i for i, p in enumerate(parts) if bool(torch.isin(p, nodes).all())]
        assert len(members) == 2 and nodes.numel() == sum(parts[i].numel() for i in members)
    val.loss = original
    b = get_soup("pls")(ingredients, val, config.soup_settings("pls"), seed=3)
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_report_marks_fitted_soups_and_records_cost(trained):
    _, results, _, _, _, out = trained
    for name in ("learned", "pls"):
        soup = results["soups"][name]
        assert soup["fitted_on_val"] is True and soup["seconds"] > 0 and soup["peak_memory_mb"] is not None
    assert results["soups"]["uniform"]["fitted_on_val"] is False
    assert "fitted on val" in (out / "report.md").read_text()


def test_bad_learned_options_name_the_field():
    from ladle.errors import LadleError

    with pytest.raises(LadleError, match="soups.pls.parts_per_epoch"):
        PLSOptions(parts=4, parts_per_epoch=5)
    with pytest.raises(LadleError, match="soups.learned.init"):
        build_config({"learned": {"init": "random"}})
    with pytest.raises(LadleError, match="soups.pls.init"):
        build_config({"soups": {"pls": {"init": "random"}}})


def test_batch_norm_statistics_follow_their_layers_mix():
    """Eval-mode batch norm reads its running statistics as constants: the learned soups mix them with the
    logits of the norm's weight, without a gradient (before, fitting failed on them)."""
    from ladle.models import build_model
    from ladle.models.options import ModelConfig

    graph = load_graph("csbm:nodes=400,classes=3,features=6")
    config = ModelConfig(name="sage", hidden=8, layers=2, norm="batch")
    ingredients = []
    for k in range(3):
        state = dict(build_model(config, graph.num_features, graph.num_classes, init_seed=k).state_dict())
        state["norms.0.module.running_mean"] = torch.full((8,), float(k))
        ingredients.append(Ingredient(f"i{k}", state, config))
    val = Evaluator(graph, config, "val")
    for name, options in (("learned", LearnedOptions(epochs=5)), ("pls", PLSOptions(epochs=5, parts=4, parts_per_epoch=2))):
        result = get_soup(name)(ingredients, val, options)
        alphas = result.trace[-1]["per_tensor_alphas"]["norms.0.module.weight"]
        expected = sum(a * k for k, a in enumerate(alphas))
        assert torch.allclose(result.state["norms.0.module.running_mean"], torch.full((8,), expected), atol=1e-5)
        assert alphas != [1 / 3] * 3  # the weight's logits were fitted, and the statistics moved with them


def test_pls_parts_are_cut_before_any_evaluator_exists(trained, tmp_path, monkeypatch):
    """METIS is the largest allocation of a pls soup on a big graph: it runs (and is cached) before the evaluators
    are built, and the soup itself reads the cached parts instead of cutting them again."""
    import shutil

    import pymetis

    _, _, graph, _, _, out = trained
    run = tmp_path / "run"
    shutil.copytree(out, run)
    monkeypatch.setenv("LADLE_CACHE", str(tmp_path / "cache"))  # no cached parts yet
    events = []
    cut = pymetis.part_graph
    monkeypatch.setattr(pymetis, "part_graph", lambda *a, **k: events.append("metis") or cut(*a, **k))
    fast = api.FastEvaluator
    monkeypatch.setattr(api, "FastEvaluator", lambda *a, **k: events.append("evaluator") or fast(*a, **k))
    api.soup(run, ["pls"], graph=graph)
    assert events == ["metis", "evaluator"]
    assert list((tmp_path / "cache" / "partitions").glob("*-metis-8-*.npy"))


def test_the_recorded_coefficients_do_not_depend_on_where_the_alphas_lie_in_memory():
    """verify recomputes every soup bit for bit: the reported mean of each ingredient's mixing weights must not take
    the last bit of a vectorised reduction, which moves with the row's alignment."""
    import math

    from ladle.soups.learned import exact_mean

    values = torch.softmax(torch.randn(3, 37, generator=torch.Generator().manual_seed(0)), 0)[1]
    expected = math.fsum(values.tolist()) / values.numel()
    for offset in range(16):
        buffer = torch.empty(offset + values.numel())
        buffer[offset:] = values
        assert exact_mean(buffer[offset:]) == expected
