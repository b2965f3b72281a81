"""Soups on hand-made state dicts, scored by evaluators whose answers are known exactly."""
import pytest
import torch

from ladle.config import ModelConfig
from ladle.errors import LadleError
from ladle.evaluation import mix_states
from ladle.soups import Ingredient, get_soup
from ladle.soups.gis import choose_alpha
from ladle.soups.options import GISOptions

MODEL = ModelConfig()


class FakeEvaluator:
    """Scores a state by a function of its weights; counts the calls like the real one."""

    def __init__(self, fn):
        self.fn = fn

    def score(self, state):
        return float(self.fn(state))

    def score_many(self, mixes):
        return [self.score(mix_states(m)) for m in mixes]

    def score_ensemble(self, states):
        return max(self.score(s) for s in states)


def ing(name, w, **extra):
    return Ingredient(name, {"w": torch.tensor(w, dtype=torch.float32), **extra}, MODEL, f"{name}.safetensors")


def closeness(target):
    target = torch.tensor(target)
    return FakeEvaluator(lambda s: -float((s["w"] - target).abs().sum()))


def test_uniform_is_the_exact_average():
    result = get_soup("Uniform")([ing("a", [0.0, 4.0]), ing("b", [2.0, 0.0]), ing("c", [1.0, 2.0])],
                                 closeness([0, 0]))
    assert result.state["w"].tolist() == [1.0, 2.0]
    assert result.coefficients == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})


def test_greedy_adds_only_what_does_not_hurt():
    # Target 1: "a" (w=1) is best; averaging with "b" (w=3) gives 2 (worse), with "c" (w=1) stays 1 (a tie: added).
    result = get_soup("greedy")([ing("b", [3.0]), ing("a", [1.0]), ing("c", [1.0])], closeness([1.0]))
    assert [t["ingredient"] for t in result.trace] == ["a", "c", "b"]
    assert [t["accepted"] for t in result.trace] == [True, True, False]
    assert set(result.coefficients) == {"a", "c"} and result.state["w"].tolist() == [1.0]


def test_gis_finds_the_known_alpha():
    # soup=a (w=0, best), ingredient b (w=4); target 1 = 0.75*a + 0.25*b, so α = 0.75 is on the grid of 5.
    a, b = ing("a", [0.0]), ing("b", [4.0])
    result = get_soup("GIS")([b, a], closeness([1.0]), GISOptions(granularity=5))
    step = result.trace[1]
    assert step["alphas"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert step["alpha"] == 0.75 and step["score"] == 0.0
    assert result.coefficients == {"a": 0.75, "b": 0.25}
    assert result.state["w"].tolist() == [1.0]


def test_gis_never_drops_below_the_best_ingredient_and_ties_go_to_larger_alpha():
    flat = FakeEvaluator(lambda s: 0.5)
    result = get_soup("gis")([ing("a", [0.0]), ing("b", [9.0]), ing("c", [5.0])], flat, GISOptions(granularity=4))
    assert all(step["alpha"] == 1.0 for step in result.trace[1:])
    assert result.coefficients == {"a": 1.0} and result.state["w"].tolist() == [0.0]
    assert choose_alpha([0.0, 0.5, 1.0], [0.7, 0.7, 0.6]) == 1
    assert choose_alpha([0.0, 0.5, 1.0], [0.9, 0.7, 0.6]) == 0


def test_gis_three_steps_keep_coefficients_over_ingredients():
    # Scores prefer w close to 2.4: ranked a (w=2), c (w=3), b (w=0). Worked by hand, α over {0, 0.5, 1}:
    # with c, α·2 + (1-α)·3 is 3, 2.5 or 2 -> α = 0.5 (2.5); with b, α·2.5 is 0, 1.25 or 2.5 -> α = 1.
    ev = closeness([2.4])
    result = get_soup("gis")([ing("b", [0.0]), ing("a", [2.0]), ing("c", [3.0])], ev, GISOptions(granularity=3))
    assert [step["alpha"] for step in result.trace[1:]] == [0.5, 1.0]
    assert {n: c for n, c in result.coefficients.items() if c} == {"a": 0.5, "c": 0.5}
    assert result.state["w"].tolist() == [2.5]


def test_integer_buffers_stay_integer_and_come_from_the_best():
    a = ing("a", [1.0], num_batches_tracked=torch.tensor(7))
    b = ing("b", [3.0], num_batches_tracked=torch.tensor(9))
    result = get_soup("uniform")([a, b], closeness([1.0]))
    assert result.state["num_batches_tracked"].dtype == torch.int64
    assert int(result.state["num_batches_tracked"]) == 7
    assert result.state["w"].tolist() == [2.0]


def test_ensemble_is_not_a_soup():
    result = get_soup("ensemble")([ing("a", [1.0]), ing("b", [2.0])], closeness([1.0]))
    assert result.state is None and result.is_soup is False and result.val == 0.0


@pytest.mark.parametrize("other, needle", [
    (Ingredient("x", {"w": torch.zeros(2)}, MODEL, "x.safetensors"), "tensor w is torch.float32[2]"),
    (Ingredient("x", {"w": torch.zeros(1, dtype=torch.float64)}, MODEL, "x.safetensors"), "float64"),
    (Ingredient("x", {"v": torch.zeros(1)}, MODEL, "x.safetensors"), "different tensor names"),
    (Ingredient("x", {"w": torch.zeros(1)}, ModelConfig(name="sage"), "x.safetensors"), "different model configs"),
])
@pytest.mark.parametrize("method", ["uniform", "greedy", "gis", "ensemble"])
def test_mixed_ingredients_are_refused_naming_the_file(method, other, needle):
    with pytest.raises(LadleError) as err:
        get_soup(method)([ing("a", [1.0]), other], closeness([1.0]))
    assert needle in str(err.value) and "x.safetensors" in str(err.value)


def test_registry_names_and_misses():
    assert get_soup("G-I-S").name == "gis"
    with pytest.raises(LadleError, match="did you mean 'greedy'"):
        get_soup("greedie")


def test_mix_states_is_exact_for_single_members_and_skips_zeros():
    s = {"w": torch.tensor([0.1, 0.2])}
    assert torch.equal(mix_states([(1.0, s), (0.0, {"w": torch.tensor([9.0, 9.0])})])["w"], s["w"])
    with pytest.raises(ValueError):
        mix_states([(0.0, s)])


class CountingEvaluator(FakeEvaluator):
    """Counts the states it is asked to score, and the calls (passes)."""

    def __init__(self, fn):
        super().__init__(fn)
        self.scored, self.calls = 0, 0

    def score_many(self, mixes):
        self.scored, self.calls = self.scored + len(mixes), self.calls + 1
        return super().score_many(mixes)


def test_every_soup_ranks_the_ingredients_from_one_batch_of_scores():
    from ladle.evaluation.memo import Remembering

    ingredients = [ing(n, [w]) for n, w in (("a", 3.0), ("b", 1.0), ("c", 1.5), ("d", 0.0))]
    plain, counting = closeness([1.0]), CountingEvaluator(closeness([1.0]).fn)
    memo = Remembering(counting)
    assert memo.remember([i.state for i in ingredients]) == [plain.score(i.state) for i in ingredients]
    assert (counting.scored, counting.calls) == (4, 1)  # one batch, as a streamed evaluator scores them in one pass
    for name in ("greedy", "gis"):
        alone, remembered = get_soup(name)(ingredients, plain), get_soup(name)(ingredients, memo)
        assert remembered.coefficients == alone.coefficients and remembered.trace == alone.trace
    # Ranking asked for no ingredient again: greedy tried 3 averages, GIS 3 steps of 20 mixes.
    assert counting.scored == 4 + 3 + 3 * 20
    # A state is known by the object, not by equal values; a mix of a state with another coefficient is new.
    twin = {"w": ingredients[0].state["w"].clone()}
    before = counting.scored
    assert memo.score(twin) == plain.score(twin)
    assert memo.score_many([[(0.5, twin)]]) == [plain.score({"w": twin["w"] * 0.5})]
    assert counting.scored == before + 2
    assert memo.score(twin) == plain.score(twin) and counting.scored == before + 2  # remembered now


def test_a_soup_takes_its_options_object_and_a_misspelt_option_is_not_swallowed():
    ings = [ing("a", [1.0]), ing("b", [2.0])]
    with pytest.raises(TypeError, match="granularty"):
        get_soup("gis")(ings, closeness([1.0]), granularty=5)  # was taken by **_ and ignored: GIS ran with 20
    with pytest.raises(LadleError, match="the uniform soup takes no options"):
        get_soup("uniform")(ings, closeness([1.0]), GISOptions(granularity=5))
    result = get_soup("gis")(ings, closeness([1.0]), GISOptions(granularity=3))
    assert result.trace[1]["alphas"] == [0.0, 0.5, 1.0]
