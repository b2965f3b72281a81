"""ladle verify: a clean run passes; each kind of damage is found and named, with exit status 2."""
import json
import shutil

import pytest
import torch
from safetensors.torch import save

from ladle.cli import main


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "run"
    assert main(["run", "--dataset", "csbm:nodes=300,classes=3,features=8", "--ingredients", "2", "--epochs", "5",
                 "--hidden", "8", "--out", str(out), "--quiet"]) == 0
    return out


def damage_truncate(run):
    path = run / "ingredients" / "ingredient-00.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    return "checksum mismatch"


def damage_nan(run):
    import hashlib

    path = run / "ingredients" / "ingredient-01.safetensors"
    sidecar_path = path.with_suffix(".json")
    from safetensors.torch import load

    state = load(path.read_bytes())
    key = next(iter(state))
    state[key] = torch.full_like(state[key], float("nan"))
    payload = save(state)
    path.write_bytes(payload)
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["sha256"] = hashlib.sha256(payload).hexdigest()  # a consistent checksum: only the values are bad
    sidecar_path.write_text(json.dumps(sidecar))
    return "non-finite"


def damage_pickle(run):
    import pickle

    path = run / "soups" / "gis.safetensors"
    path.write_bytes(pickle.dumps({"weight": [1.0]}))
    return "gis.safetensors"


def damage_sidecar(run):
    path = run / "ingredients" / "ingredient-00.json"
    path.write_text("{not json")
    return "ingredient-00.json"


@pytest.mark.parametrize("damage", [damage_truncate, damage_nan, damage_pickle, damage_sidecar])
def test_verify_finds_damage(small_run, tmp_path, capsys, damage):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    assert main(["verify", str(run)]) == 0
    capsys.readouterr()
    needle = damage(run)
    assert main(["verify", str(run)]) == 2
    out = capsys.readouterr()
    assert needle in out.err and "FAILED" in out.err and "Traceback" not in out.out + out.err


def test_a_stored_runs_graph_is_read_never_downloaded(planetoid_root, tmp_path, capsys, patch_all):
    """verify/soup/predict of a stored run read its dataset from the root given: a wrong root is an error naming it,
    and nothing is fetched into it (a download, or even a folder made, would be ladle deciding where data goes)."""
    import ladle.data.fetch as fetch

    run = tmp_path / "run"
    assert main(["run", "--dataset", "Cora", "--root", str(planetoid_root), "--epochs", "1", "--ingredients", "2",
                 "--soups", "uniform", "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    patch_all(fetch, "download_raw", lambda *a, **k: pytest.fail("a stored run's data was downloaded"))
    wrong = tmp_path / "nowhere"
    for command in (["verify", str(run)], ["soup", str(run)], ["predict", str(run), "--out", str(tmp_path / "p.csv")]):
        assert main([*command, "--root", str(wrong)]) != 0
        err = " ".join(capsys.readouterr().err.split())
        assert "never downloaded" in err and f"pass --root {planetoid_root}" in err
        assert not wrong.exists()
