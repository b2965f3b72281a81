"""Issue 35, classes 3-10: what a sender can plant in a run (or hand over as input), each through the CLI or the
Python API as a sender would build it. Class 1 (imports) is in test_trust_imports.py, class 2 (graph.npz) in
test_trust.py."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import ladle
from ladle.cli import main
from ladle.errors import LadleError
from ladle.verify import verify_run

SMALL = "csbm:nodes=300,classes=3,features=8"
FLAGS = ["--dataset", SMALL, "--ingredients", "3", "--epochs", "4", "--hidden", "8", "--quiet"]


def failed(checks) -> list[str]:
    return [f"{c.path}: {c.detail}" for c in checks if not c.ok]


def say(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    text = " ".join((captured.err + captured.out).split())
    assert "Traceback" not in text and "internal error" not in text, text
    return code, text


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A finished run with the long baseline (and its SWA), uniform, gis and the ensemble."""
    out = tmp_path_factory.mktemp("round3") / "run"
    assert main(["run", *FLAGS, "--soups", "uniform,gis,ensemble", "--baseline", "long", "--out", str(out)]) == 0
    return out


@pytest.fixture
def run(clean, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(clean, copy, symlinks=True)
    return copy


def test_an_untouched_run_verifies_with_every_soup_recomputed(clean):
    checks = verify_run(clean)
    assert not failed(checks)
    recomputed = [c for c in checks if "recomputed from the ingredients" in c.detail]
    assert sorted(os.path.basename(c.path) for c in recomputed) == ["ensemble.json", "gis.json", "uniform.json"]
    assert all("bit for bit" in c.detail for c in recomputed)
    assert {os.path.basename(c.path) for c in checks if c.detail.startswith("derived: equals")} == {
        "results.json", "results.jsonl", "report.md"}


# ---------------------------------------------------------------- 3. one name, one file


@pytest.mark.parametrize("plant", [("soups", "long", "baselines/long"), ("baselines", "ingredient-00",
                                                                         "ingredients/ingredient-00"),
                                   ("soups", "planted", "soups/gis"), ("ingredients", "ingredient-00.bak",
                                                                       "ingredients/ingredient-01")])
def test_two_files_never_answer_to_one_name(run, tmp_path, capsys, plant):
    """A ``soups/long.*`` pair made planted weights answer for the long baseline in predict and load_model
    while verify passed. Now every reader refuses a run with a name in two folders or in the wrong folder."""
    folder, name, source = plant
    for suffix in (".safetensors", ".json"):
        sidecar = run / f"{source}{suffix}"
        target = run / folder / f"{name}{suffix}"
        if suffix == ".json":
            value = json.loads(sidecar.read_text())
            value["name"] = name
            target.write_text(json.dumps(value))
        else:
            shutil.copy(sidecar, target)
    for argv in (["predict", str(run), "--model", "long", "--out", str(tmp_path / "p.csv")], ["verify", str(run)],
                 ["soup", str(run), "--quiet"], ["report", str(run)]):
        code, text = say(argv, capsys)
        assert code == 2 and (name in text) and ("one name, one model" in text), (argv, text)
    with pytest.raises(LadleError, match="one name, one model"):
        ladle.load_model(run, "long")
    assert not (tmp_path / "p.csv").exists()


# ---------------------------------------------------------------- 4. verify recomputes soups


def test_verify_recomputes_every_soup_and_finds_each_forgery(run, tmp_path):
    other = tmp_path / "other"
    assert main(["run", *FLAGS, "--seed", "7", "--soups", "uniform,gis", "--out", str(other)]) == 0

    def forge(name, edit):
        sidecar = run / "soups" / f"{name}.json"
        value = json.loads(sidecar.read_text())
        edit(value)
        sidecar.write_text(json.dumps(value))

    def bad_trace(v):
        v["trace"][1]["alphas"][1] += 0.25

    def bad_coefficients(v):
        v["coefficients"]["ingredient-00"] += 0.1

    def bad_baseline(v):
        v["baseline_scores"]["long"]["test"] = 0.99

    def one_member(v):  # an ensemble reduced to one consistent member
        keep = "ingredient-01"
        v["coefficients"] = {keep: 1.0}
        v["ingredients_sha256"] = {keep: v["ingredients_sha256"][keep]}
        v["scores"] = dict(v["ingredient_scores"][keep], sha256=None)
        del v["scores"]["sha256"]

    forge("gis", bad_trace)
    forge("uniform", bad_coefficients)
    forge("ensemble", one_member)
    wrong = failed(verify_run(run))
    assert any("gis.json" in w and "trace[1].alphas[1]" in w for w in wrong), wrong
    assert any("uniform.json" in w and "coefficients.ingredient-00" in w for w in wrong), wrong
    assert any("ensemble.json" in w and "coefficients" in w for w in wrong), wrong
    # Another run's GIS weights, with their own true scores and the sha of this run's ingredients kept.
    shutil.copy(clean_gis := other / "soups" / "gis.safetensors", run / "soups" / "gis.safetensors")
    forge("gis", lambda v: v.update(sha256=json.loads((other / "soups" / "gis.json").read_text())["sha256"],
                                    scores=json.loads((other / "soups" / "gis.json").read_text())["scores"]))
    assert clean_gis.exists()
    forge("uniform", bad_baseline)
    wrong = failed(verify_run(run))
    assert any("gis.json" in w and "weights:" in w for w in wrong), wrong
    assert any("uniform.json" in w and "baseline_scores.long.test" in w for w in wrong), wrong


def test_an_edited_report_is_found_and_ladle_report_mends_it(run, capsys):
    report = run / "report.md"
    report.write_text(report.read_text().replace("gis", "gis (best!)", 1))
    wrong = failed(verify_run(run))
    assert len(wrong) == 1 and "report.md" in wrong[0] and "ladle report RUN_DIR writes it again" in wrong[0]
    assert say(["report", str(run)], capsys)[0] == 0
    assert not failed(verify_run(run))


# ---------------------------------------------------------------- 5. trackers never write through links


@pytest.mark.parametrize("tracker, plant", [("tensorboard", "logs"), ("tensorboard", "logs/tensorboard"),
                                            ("mlflow", "logs/mlflow/mlflow.db")])
def test_trackers_never_write_through_a_link_in_the_run(run, tmp_path, capsys, tracker, plant):
    pytest.importorskip({"tensorboard": "torch.utils.tensorboard", "mlflow": "mlflow"}[tracker])
    outside = tmp_path / "outside"
    outside.mkdir()
    own_db = outside / "mine.db"
    with sqlite3.connect(own_db) as db:
        db.execute("create table mine (x)")
    link = run / plant
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(own_db if plant.endswith(".db") else outside, link)
    (run / "ingredients" / "ingredient-02.json").unlink()  # something left to train on resume
    before = sorted(p.name for p in outside.iterdir())
    code, text = say(["run", "--resume", str(run), "--quiet", "--log", tracker], capsys)
    assert code == 2 and "symbolic link" in text and str(link) in text
    assert sorted(p.name for p in outside.iterdir()) == before
    with sqlite3.connect(own_db) as db:
        assert [r[0] for r in db.execute("select name from sqlite_master")] == ["mine"]


def test_a_log_dir_outside_the_run_is_the_users_choice(run, tmp_path, capsys):
    pytest.importorskip("torch.utils.tensorboard")
    (run / "ingredients" / "ingredient-02.json").unlink()
    mine = tmp_path / "my-logs"
    assert say(["run", "--resume", str(run), "--quiet", "--log", "tensorboard", "--log-dir", str(mine)], capsys)[0] == 0
    assert list((mine / "tensorboard").iterdir())


# ---------------------------------------------------------------- 6. legitimately identical ingredients


def test_identical_ingredients_without_randomness_pass_verify_soup_and_resume(tmp_path, capsys):
    """``--dropout 0`` on the whole graph: nothing random tells the ingredients apart, so they are equal; verify
    called that "one is a copy" while soup and resume accepted it. One rule now serves all three."""
    out = tmp_path / "run"
    assert main(["run", "--dataset", SMALL, "--dropout", "0", "--ingredients", "2", "--epochs", "3", "--hidden", "8",
                 "--soups", "uniform", "--out", str(out), "--quiet"]) == 0
    a, b = (json.loads((out / "ingredients" / f"ingredient-0{i}.json").read_text())["sha256"] for i in (0, 1))
    assert a == b
    assert not failed(verify_run(out))
    assert say(["soup", str(out), "--quiet"], capsys)[0] == 0
    assert say(["run", "--resume", str(out), "--quiet"], capsys)[0] == 0


# ---------------------------------------------------------------- 7, 8. report reads through the bounded reader


@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "outside", "folder"])
def test_report_reads_weights_through_the_one_bounded_reader(run, tmp_path, capsys, plant):
    weights = run / "ingredients" / "ingredient-01.safetensors"
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(weights, outside)
    weights.unlink()
    if plant == "fifo":
        os.mkfifo(weights)
    elif plant == "dev-zero":
        os.symlink("/dev/zero", weights)
    elif plant == "outside":
        os.symlink(outside, weights)
    else:
        weights.mkdir()
    result = {}
    worker = threading.Thread(target=lambda: result.update(zip(("code", "text"), say(["report", str(run)], capsys))),
                              daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "ladle report hung"
    assert result["code"] == 2 and str(weights) in result["text"]
    assert "recomputed" not in (run / "report.md").read_text() or plant == "folder"


@pytest.mark.parametrize("target", ["config.toml", "ingredients/ingredient-00.json", "soups/gis.json"])
def test_a_folder_where_a_file_belongs_is_named(run, capsys, target):
    path = run / target
    path.unlink()
    path.mkdir()
    for argv in (["report", str(run)], ["verify", str(run)]):
        code, text = say(argv, capsys)
        assert code == 2 and str(path) in text and "a folder where ladle expects a file" in text


# ---------------------------------------------------------------- 9. bad input


def _arrays(n=40):
    rng = np.random.default_rng(0)
    idx = np.arange(n)
    return dict(node_features=rng.normal(size=(n, 4)).astype(np.float32), node_labels=rng.integers(0, 3, n),
                edges=np.stack([idx[:-1], idx[1:]], 1), train_masks=idx < 16, val_masks=(idx >= 16) & (idx < 28),
                test_masks=idx >= 28)


@pytest.mark.parametrize("case, needle", [
    ("no features", "needs at least one feature per node"),
    ("one-class validation", "every validation node has the same label, so ROC-AUC is undefined"),
    ("deep toml", "nested too deeply"),
])
def test_bad_files_get_one_message_and_no_folder(tmp_path, capsys, case, needle):
    arrays = _arrays()
    argv = ["run", "--out", str(tmp_path / "out"), "--quiet", "--epochs", "1"]
    if case == "no features":
        arrays["node_features"] = np.zeros((40, 0), np.float32)
    if case == "one-class validation":
        arrays["node_labels"] = arrays["node_labels"] % 2
        arrays["node_labels"][16:28] = 1
    np.savez(tmp_path / "g.npz", **arrays)
    if case == "deep toml":
        (tmp_path / "c.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
        argv += ["--config", str(tmp_path / "c.toml")]
    else:
        argv += ["--dataset", f"npz:{tmp_path / 'g.npz'}"]
    code, text = say(argv, capsys)
    assert code == 2 and needle in text and "fix:" in text
    assert not (tmp_path / "out").exists()
    if case == "one-class validation":  # accuracy is defined: the fix given works
        assert say(argv + ["--metric", "acc"], capsys)[0] == 0


@pytest.mark.parametrize("case, needle", [("fractional edge ids", "node ids are integers"),
                                          ("NaN features", "NaN or infinite"), ("inf features", "NaN or infinite")])
def test_bad_pyg_data_is_refused_before_any_folder(tmp_path, case, needle):
    from torch_geometric.data import Data

    a = _arrays()
    data = Data(x=torch.from_numpy(a["node_features"]), edge_index=torch.from_numpy(a["edges"].T.copy()),
                y=torch.from_numpy(a["node_labels"]), train_mask=torch.from_numpy(a["train_masks"]),
                val_mask=torch.from_numpy(a["val_masks"]), test_mask=torch.from_numpy(a["test_masks"]))
    if case == "fractional edge ids":
        data.edge_index = data.edge_index.float() + 0.5
    else:
        data.x[3, 1] = float("nan") if case == "NaN features" else float("inf")
    with pytest.raises(LadleError, match=needle):
        ladle.run({"dataset": "mine", "ingredients": 2, "train": {"epochs": 1}}, tmp_path / "out", graph=data,
                  progress=False)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 10. report of a python: model run


def test_report_of_a_python_model_run_accepts_the_flag_it_names(tmp_path):
    module = tmp_path / "mymodels.py"
    module.write_text("import torch\nclass Lin(torch.nn.Module):\n    def __init__(self, i, o):\n"
                      "        super().__init__()\n        self.lin = torch.nn.Linear(i, o)\n"
                      "    def forward(self, x, edge_index):\n        return self.lin(x)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    make = (f"import ladle, mymodels; ladle.run({{'dataset': {SMALL!r}, 'ingredients': 2, 'train': {{'epochs': 2}}, "
            f"'soups': ['uniform']}}, {str(tmp_path / 'run')!r}, model=mymodels.Lin, progress=False)")
    subprocess.run([sys.executable, "-c", make], check=True, env=env, cwd=tmp_path)
    cli = [sys.executable, "-m", "ladle.cli", "report", str(tmp_path / "run")]
    refused = subprocess.run(cli, capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "--allow-import mymodels" in refused.stderr
    done = subprocess.run(cli + ["--allow-import", "mymodels"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
