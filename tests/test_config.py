import pytest

from ladle.config import RunConfig, build_config, dump_toml, load_config, load_toml
from ladle.errors import LadleError


def test_defaults_and_model_defaults():
    config = build_config({})
    assert config.dataset == "csbm" and config.model.name == "gcn" and config.ingredients == 8
    assert config.soups == ("uniform", "greedy", "gis", "ensemble") and config.soup("gis")["granularity"] == 20
    gat = build_config({"model": {"name": "GAT"}})
    assert gat.model.dropout == 0.6 and gat.train.lr == 0.005 and gat.model.heads == 8


def test_flags_override_file_and_names_are_normalised():
    config = build_config({"model": {"name": "gcn", "hidden": 32}, "ingredients": 3},
                          {"model.hidden": 16, "model.name": "Graph-SAGE", "ingredients": None})
    assert config.model.hidden == 16 and config.model.name == "sage" and config.ingredients == 3


def test_user_value_beats_model_default():
    assert build_config({"model": {"name": "gat"}, "train": {"lr": 0.02}}).train.lr == 0.02


@pytest.mark.parametrize("values, needle", [
    ({"ingrediants": 3}, "did you mean 'ingredients'"),
    ({"model": {"hiden": 3}}, "did you mean 'model.hidden'"),
    ({"modle": {"hidden": 3}}, "unknown table [modle]"),
    ({"train": {"epochs": 0}}, "train.epochs must be"),
    ({"train": {"epochs": "ten"}}, "train.epochs must be an integer"),
    ({"granularity": 1}, "granularity must be"),
    ({"ingredients": 100000}, "ingredients must be between 1 and 256"),
    ({"model": {"name": "transformer"}}, "unknown model 'transformer'"),
    ({"model": {"norm": "batchnorm"}}, "model.norm must be one of"),
    ({"model": {"name": "gat", "hidden": 60, "heads": 8}}, "not a multiple"),
    ({"train": {"lr": float("nan")}}, "finite"),
    ({"init": "random"}, "init must be one of"),
])
def test_bad_values_name_the_field(values, needle):
    with pytest.raises(LadleError) as err:
        build_config(values)
    assert needle in str(err.value)


def test_toml_round_trip(tmp_path):
    config = build_config({"dataset": 'npz:a "b".npz', "model": {"name": "gat", "residual": True}, "soups": ["gis"]})
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(config.to_dict()))
    assert load_config(path) == config


def test_missing_and_broken_config_files(tmp_path):
    with pytest.raises(LadleError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("dataset = [")
    with pytest.raises(LadleError, match="not valid TOML"):
        load_config(bad)


def test_seeds_are_split_and_shared_init():
    shared = RunConfig(ingredients=3).ingredient_specs()
    assert len({s.init_seed for s in shared}) == 1
    assert len({s.data_seed for s in shared}) == 3
    assert shared[0].init_seed not in {s.data_seed for s in shared}
    independent = RunConfig(ingredients=3, init="independent").ingredient_specs()
    assert len({s.init_seed for s in independent}) == 3
    # Adding ingredients does not move the seeds of the existing ones.
    assert RunConfig(ingredients=5).ingredient_specs()[:3] == shared


@pytest.mark.parametrize("engine, needle", [
    ({"name": "sparkk"}, "engine.name"), ({"workers": 0}, "engine.workers"), ({"threads": 0}, "engine.threads"),
    ({"cpus_per_ingredient": -1}, "engine.cpus_per_ingredient"), ({"address": 5}, "engine.address"),
    ({"cpus_per_ingredient": 0, "gpus_per_ingredient": 0}, "both 0"), ({"wrokers": 2}, "workers"),
])
def test_bad_engine_settings_name_the_field(engine, needle):
    with pytest.raises(LadleError, match=needle):
        build_config({"engine": engine})


def test_engine_resolution_and_round_trip(tmp_path):
    assert build_config({}).engine.resolved == "serial"
    assert build_config({"engine": {"workers": 3}}).engine.resolved == "process"
    config = build_config({"engine": {"name": "ray", "address": "auto", "gpus_per_ingredient": 0.5}})
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(config.to_dict()))
    assert build_config(load_toml(path)) == config
