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


def test_an_option_that_does_nothing_for_a_member_stays_out_of_the_identity():
    """GCN reads no heads, GraphSAINT's node sampler no walk length: changing them changes no weight, so not the run's
    identity either; for GAT and the random-walk sampler they count. Runs made before keep their (legacy) identity."""
    base, more_heads = build_config({"model": {"name": "gcn"}}), build_config({"model": {"name": "gcn", "heads": 4}})
    assert base.identity_sha256() == more_heads.identity_sha256()
    assert base.identity_sha256(legacy=True) != more_heads.identity_sha256(legacy=True)  # as runs before recorded it
    assert base.is_identity(base.identity_sha256(legacy=True)) and not base.is_identity(more_heads.identity_sha256(
        legacy=True))
    gat, gat4 = build_config({"model": {"name": "gat"}}), build_config({"model": {"name": "gat", "heads": 4}})
    assert gat.identity_sha256() != gat4.identity_sha256()
    node = [build_config({"sampler": {"name": "saint-node", "saint-node": {"walk_length": w}}}) for w in (2, 5)]
    walk = [build_config({"sampler": {"name": "saint-rw", "saint-rw": {"walk_length": w}}}) for w in (2, 5)]
    assert node[0].identity_sha256() == node[1].identity_sha256()
    assert walk[0].identity_sha256() != walk[1].identity_sha256()


def test_a_stored_run_accepts_an_edit_of_an_option_that_does_nothing_for_it(tmp_path):
    from ladle import api
    from ladle.store import RunDir

    run = tmp_path / "run"
    api.train(build_config({"dataset": "csbm:nodes=200,classes=3,features=4", "ingredients": 2,
                            "train": {"epochs": 1}, "soups": ["uniform"]}), run, progress=False)
    text = (run / "config.toml").read_text()
    assert "heads = 8" in text
    (run / "config.toml").write_text(text.replace("heads = 8", "heads = 4"))
    api.check_ingredients(RunDir(run), RunDir(run).config())  # GCN reads no heads: nothing differs
    (run / "config.toml").write_text(text.replace("hidden = 64", "hidden = 32"))
    with pytest.raises(LadleError, match="hidden"):
        api.check_ingredients(RunDir(run), RunDir(run).config())
