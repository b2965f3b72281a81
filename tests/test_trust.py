"""A run directory from elsewhere is data, never code (the threat model in the README).

One test per class of defect a security review found, through the command line: each asserts the
exit status, one message naming the file or field with a fix and no traceback, that no file
outside the run was touched, and that nothing finished was lost.
"""
import contextlib
import hashlib
import json
import os
import pickle
import shutil
import stat
import subprocess

import numpy as np
import pytest

from ladle.cli import main
from ladle.config import load_config

SMALL = "csbm:nodes=300,classes=3,features=8"
FLAGS = ["--dataset", SMALL, "--ingredients", "3", "--epochs", "5", "--hidden", "8", "--quiet"]


def fails(argv, capsys, *needles, status=2):
    capsys.readouterr()
    assert main(argv) == status
    captured = capsys.readouterr()
    err = " ".join((captured.err + captured.out).split())
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert "Traceback" not in err and ("internal error" not in err or status == 1)
    if status == 2 and "FAILED" not in err:
        assert "fix:" in err and err.count("error:") == 1
    return err


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A finished small run: 3 ingredients, uniform and gis soups."""
    out = tmp_path_factory.mktemp("trust") / "run"
    assert main(["run", *FLAGS, "--soups", "uniform,gis", "--out", str(out)]) == 0
    return out


@pytest.fixture
def run(clean, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "run"
    shutil.copytree(clean, copy, symlinks=True)
    return copy


class Payload:
    """A pickle that leaves a file behind when it is unpickled."""

    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('x')",))


# ---------------------------------------------------------------- 1. a run never chooses what ladle reads


def planetoid_root_with_a_planted_pickle(planetoid_root, tmp_path):
    evil = tmp_path / "evil"
    shutil.copytree(planetoid_root / "Cora", evil / "Cora")
    (evil / "Cora" / "raw" / "ind.cora.x").write_bytes(pickle.dumps(Payload(), protocol=2))
    return evil


@pytest.fixture(scope="module")
def cora_run(planetoid_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("cora") / "run"
    assert main(["run", "--dataset", "Cora", "--root", str(planetoid_root), "--ingredients", "2", "--epochs", "3",
                 "--hidden", "8", "--soups", "uniform", "--out", str(out), "--quiet"]) == 0
    return out


def test_a_run_never_chooses_the_data_root_and_a_planted_pickle_never_runs(cora_run, planetoid_root, tmp_path,
                                                                         capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evil = planetoid_root_with_a_planted_pickle(planetoid_root, tmp_path)
    run = tmp_path / "run"
    shutil.copytree(cora_run, run)
    config = run / "config.toml"
    config.write_text(config.read_text().replace(f'root = "{planetoid_root}"', f'root = "{evil}"'))
    assert f'root = "{evil}"' in config.read_text()
    before = snapshot(run)
    # The run's recorded root is named in the message, never read.
    for command in (["predict", str(run), "--model", "uniform", "--out", "p.csv"], ["soup", str(run), "--quiet"],
                    ["run", "--resume", str(run), "--quiet"]):
        fails(command, capsys, "Cora", "missing under root data", str(evil), "--root")
    # Named by the user, the planted pickle is refused by the restricted unpickler: it builds no callables.
    fails(["predict", str(run), "--root", str(evil), "--model", "uniform", "--out", "p.csv"], capsys, "ind.cora.x",
          "restricted unpickler", "never runs code")
    fails(["verify", str(run)], capsys, "FAILED", "scores not checked", str(evil))
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "p.csv").exists()
    assert snapshot(run) == before
    # With the right root everything works and verify recomputes every score (once the report, which embeds the
    # config whose root was edited, is derived again).
    assert main(["predict", str(run), "--root", str(planetoid_root), "--model", "uniform", "--out", "p.csv"]) == 0
    fails(["verify", str(run), "--root", str(planetoid_root)], capsys, "FAILED", "results.json",
          "ladle report RUN_DIR writes it again")
    assert main(["report", str(run)]) == 0
    assert main(["verify", str(run), "--root", str(planetoid_root)]) == 0


def test_pyg_processed_files_are_never_loaded(tmp_path, monkeypatch):
    """PyG falls back to unrestricted torch.load for processed/*.pt; ladle reads the raw files only."""
    from ladle.data import load_graph
    from test_data_loaders import write_saint_layout

    monkeypatch.chdir(tmp_path)
    write_saint_layout(tmp_path / "Flickr")
    processed = tmp_path / "Flickr" / "processed"
    processed.mkdir()
    for name in ("data.pt", "pre_transform.pt", "pre_filter.pt"):
        (processed / name).write_bytes(pickle.dumps(Payload()))
    assert load_graph("Flickr", tmp_path).num_nodes == 12
    assert not (tmp_path / "PWNED").exists()


def test_a_run_on_an_npz_graph_needs_the_file_given_again(tmp_path, capsys, monkeypatch, cornell):
    monkeypatch.chdir(tmp_path)
    graph = tmp_path / "g.npz"
    shutil.copy(cornell, graph)
    run = tmp_path / "run"
    assert main(["run", "--dataset", f"npz:{graph}#2", "--model", "mlp", "--ingredients", "2", "--epochs", "3",
                 "--soups", "uniform", "--out", str(run), "--quiet"]) == 0
    fails(["soup", str(run), "--quiet"], capsys, f"npz:{graph}#2", "opens no file that a run directory names",
          "--graph")
    assert main(["soup", str(run), "--graph", str(graph), "--quiet"]) == 0
    other = tmp_path / "other.npz"
    arrays = dict(np.load(graph))
    arrays["node_features"] = arrays["node_features"][:, ::-1].copy()
    np.savez(other, **arrays)
    fails(["soup", str(run), "--graph", str(other), "--quiet"], capsys, "is not the one", "fingerprint")


# ---------------------------------------------------------------- 2. resume never mixes two configs


@pytest.mark.parametrize("edit, needle", [
    (("lr = 0.01", "lr = 0.02"), "train.lr"),
    (("epochs = 5", "epochs = 6"), "train.epochs"),
    (("seed = 0", "seed = 1"), "seed: created with 0, now 1"),
    (("hidden = 8", "hidden = 16"), "model.hidden"),
])
def test_resume_refuses_an_edited_config_before_any_training(run, capsys, edit, needle):
    config = run / "config.toml"
    assert edit[0] in config.read_text()
    config.write_text(config.read_text().replace(edit[0], edit[1], 1))
    for name in ("ingredient-02.safetensors", "ingredient-02.json"):
        (run / "ingredients" / name).unlink()
    before = snapshot(run)
    fails(["run", "--resume", str(run), "--quiet"], capsys, "config.toml", "edited", needle, "restore")
    assert snapshot(run) == before  # nothing trained, nothing lost
    fails(["soup", str(run), "--quiet"], capsys, "config.toml", needle)
    fails(["verify", str(run)], capsys, "FAILED", "config.toml", "edited")


# ---------------------------------------------------------------- 3. sidecars are checked, not believed


def test_edited_scores_do_not_move_the_report_and_verify_finds_them(run, capsys):
    sidecar_path = run / "ingredients" / "ingredient-01.json"
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["scores"] = {"train": 1.0, "val": 1.0, "test": 1.0}
    sidecar_path.write_text(json.dumps(sidecar))
    clean = json.loads((run / "results.json").read_text())
    assert main(["report", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["best_ingredient"] == clean["best_ingredient"]  # scores recomputed by the soup step
    assert {r["name"]: r["scores"] for r in results["ingredients"]} == {f"ingredient-0{i}": "recomputed"
                                                                         for i in range(3)}
    assert [s["gain_test"] for s in results["soups"].values()] == [s["gain_test"] for s in clean["soups"].values()]
    fails(["verify", str(run)], capsys, "FAILED", "ingredient-01", "val recorded 1.0000")


def test_an_ingredient_without_a_soup_yet_is_marked_recorded(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *FLAGS, "--out", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert {r["scores"] for r in results["ingredients"]} == {"recorded"}
    assert "not computed again" in (run / "report.md").read_text()


def test_a_copied_ingredient_is_found_before_any_soup(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *FLAGS, "--out", str(run)]) == 0
    ingredients = run / "ingredients"
    for suffix in (".safetensors", ".json"):
        shutil.copy(ingredients / f"ingredient-00{suffix}", ingredients / f"ingredient-01{suffix}")
    fails(["soup", str(run), "--quiet"], capsys, "ingredient-01.json", "renamed or copied")
    fails(["verify", str(run)], capsys, "FAILED", "ingredient-01.json", "renamed or copied")
    # Edited to pass as ingredient-01, the copy still has ingredient-00's seeds and weights.
    sidecar = json.loads((ingredients / "ingredient-01.json").read_text())
    sidecar.update(name="ingredient-01", index=1)
    (ingredients / "ingredient-01.json").write_text(json.dumps(sidecar))
    fails(["soup", str(run), "--quiet"], capsys, "ingredient-01.json", "seeds.data")
    fails(["verify", str(run)], capsys, "FAILED", "ingredient-01.json", "seeds.data")


def test_two_ingredients_swapped_consistently_are_found(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *FLAGS, "--out", str(run)]) == 0
    ingredients = run / "ingredients"
    for suffix in (".safetensors", ".json"):
        os.rename(ingredients / f"ingredient-00{suffix}", ingredients / f"tmp{suffix}")
        os.rename(ingredients / f"ingredient-01{suffix}", ingredients / f"ingredient-00{suffix}")
        os.rename(ingredients / f"tmp{suffix}", ingredients / f"ingredient-01{suffix}")
    fails(["soup", str(run), "--quiet"], capsys, "renamed or copied")
    for i, other in ((0, 1), (1, 0)):  # and with names and indices edited to match the files
        path = ingredients / f"ingredient-0{i}.json"
        sidecar = json.loads(path.read_text())
        assert sidecar["index"] == other
        sidecar.update(name=f"ingredient-0{i}", index=i)
        path.write_text(json.dumps(sidecar))
    fails(["soup", str(run), "--quiet"], capsys, "seeds.data")
    fails(["verify", str(run)], capsys, "FAILED", "seeds.data")


# ---------------------------------------------------------------- 4. writes: atomic, never through a link


def test_a_torn_timeline_line_is_tolerated_and_reported(run, capsys):
    log = run / "timeline.jsonl"
    with open(log, "a") as f:
        f.write('{"name": "ingredient-0')  # what a full disk left mid-append
    assert main(["report", str(run)]) == 0
    assert main(["soup", str(run), "--quiet"]) == 0
    fails(["verify", str(run)], capsys, "FAILED", "timeline.jsonl", "torn")
    (run / "ingredients" / "ingredient-02.json").unlink()
    assert main(["run", "--resume", str(run), "--quiet"]) == 0  # rewrites the log whole, without the torn line
    assert log.read_text().endswith("}\n") and len(log.read_text().splitlines()) == 4
    assert main(["verify", str(run)]) == 0


@pytest.mark.parametrize("link", ["timeline.jsonl", "soups", "report.md", "ingredients"])
def test_links_inside_a_run_are_never_followed(run, tmp_path, capsys, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "timeline.jsonl").write_text("mine\n")
    (outside / "report.md").write_text("mine\n")
    (run / "ingredients" / "ingredient-02.json").unlink()
    target = run / link
    if target.is_dir():
        shutil.copytree(target, outside / link)
        shutil.rmtree(target)
        os.symlink(outside / link, target)
    else:
        os.symlink(outside / link, target.with_name(target.name + ".link"))
        target.unlink()
        os.rename(target.with_name(target.name + ".link"), target)
    before = snapshot(outside)
    for command in (["run", "--resume", str(run), "--quiet"], ["soup", str(run), "--quiet"], ["report", str(run)]):
        fails(command, capsys, str(target), "symbolic link")
    fails(["verify", str(run)], capsys, "FAILED", str(target), "symbolic link")
    assert snapshot(outside) == before


def test_a_full_disk_while_logging_loses_nothing(run, capsys, monkeypatch):
    """ENOSPC from the write itself (the fuller OS-level test is benchmarks/soak.py --disk-full)."""
    import ladle.files as files

    (run / "ingredients" / "ingredient-02.json").unlink()
    (run / "ingredients" / "ingredient-02.safetensors").unlink()
    log_before = (run / "timeline.jsonl").read_bytes()
    real_write = os.write

    def write(fd, payload):  # the log's append (one write at its end) finds the disk full
        if os.readlink(f"/proc/self/fd/{fd}").endswith("timeline.jsonl"):
            raise OSError(28, "No space left on device")
        return real_write(fd, payload)

    monkeypatch.setattr(files.os, "write", write)
    fails(["run", "--resume", str(run), "--quiet"], capsys, "timeline.jsonl", "No space left", "--resume")
    monkeypatch.undo()
    assert (run / "timeline.jsonl").read_bytes() == log_before  # the old log, whole
    assert (run / "ingredients" / "ingredient-02.json").exists()  # the ingredient finished before the log failed
    assert not [p for p in run.rglob(".*tmp-*")]
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    assert main(["verify", str(run)]) == 0


# ---------------------------------------------------------------- 5. sizes checked before allocating


def npz_with_a_lying_header(path):
    arrays = {"node_features": np.ones((6, 2), np.float32), "node_labels": np.array([0, 1, 0, 1, 2, 2]),
              "edges": np.array([[0, 1], [1, 2]]), "train_masks": np.array([[1, 1, 0, 0, 0, 0]], bool),
              "val_masks": np.array([[0, 0, 1, 1, 0, 0]], bool), "test_masks": np.array([[0, 0, 0, 0, 1, 1]], bool)}
    np.savez(path, **arrays)
    import zipfile

    with zipfile.ZipFile(path) as src:
        members = {i.filename: src.read(i) for i in src.infolist()}
    feats = members["node_features.npy"]
    members["node_features.npy"] = feats.replace(b"(6, 2)", b"(10000000, 100000)", 1)
    with zipfile.ZipFile(path, "w") as dst:
        for name, payload in members.items():
            dst.writestr(name, payload)
    return path


def test_memory_bombs_are_refused_before_allocation(run, tmp_path, capsys, monkeypatch, patch_all):
    out = str(tmp_path / "new")
    bomb = npz_with_a_lying_header(tmp_path / "bomb.npz")
    fails(["run", "--dataset", f"npz:{bomb}", "--out", out], capsys, "bomb.npz", "node_features", "claims shape")
    labels = tmp_path / "labels.npz"
    np.savez(labels, node_features=np.ones((6, 2), np.float32), node_labels=np.array([0, 1, 0, 1, 2, 10**12]),
             edges=np.array([[0, 1]]), train_masks=np.array([1, 1, 0, 0, 0, 0], bool),
             val_masks=np.array([0, 0, 1, 1, 0, 0], bool), test_masks=np.array([0, 0, 0, 0, 1, 1], bool))
    fails(["run", "--dataset", f"npz:{labels}", "--out", out], capsys, "labels.npz", "node_labels",
          "class id 1000000000000")
    fails(["run", "--dataset", SMALL, "--hidden", "10000000000", "--out", out], capsys, "model.hidden", "between 1")
    fails(["run", "--dataset", "csbm:nodes=2000000000", "--out", out], capsys, "csbm", "nodes=2000000000",
          "memory free")
    # Under the memory free now, an honest but large graph and a wide model are refused too.
    import ladle.profiling

    np.savez_compressed(tmp_path / "zeros.npz", node_features=np.zeros((2_000_000, 2), np.float32),
                        node_labels=np.arange(2_000_000) % 2, edges=np.array([[0, 1]]),
                        train_masks=np.arange(2_000_000) < 10, val_masks=(np.arange(2_000_000) >= 10)
                        & (np.arange(2_000_000) < 20), test_masks=np.arange(2_000_000) >= 20)
    assert (tmp_path / "zeros.npz").stat().st_size < 2**20
    patch_all(ladle.profiling, "memory_available", lambda: 8 * 2**20)
    fails(["run", "--dataset", f"npz:{tmp_path / 'zeros.npz'}", "--out", out], capsys, "zeros.npz",
          "decompresses to", "memory free")
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    patch_all(ladle.profiling, "memory_available", lambda: 2**20)
    fails(["run", "--dataset", SMALL, "--hidden", "16384", "--out", out], capsys, "model.hidden = 16384",
          "memory free")
    monkeypatch.undo()
    # A soup sidecar describing a 20000 x 40000 layer: the meta-device check refuses it, nothing is built.
    sidecar_path = run / "soups" / "gis.json"
    sidecar = json.loads(sidecar_path.read_text())
    sidecar["model"].update(hidden=40000, in_channels=20000)
    sidecar_path.write_text(json.dumps(sidecar))
    fails(["predict", str(run), "--out", str(tmp_path / "p.csv")], capsys, "gis.safetensors",
          "do not fit the gcn model its sidecar describes")
    assert not (tmp_path / "new").exists()


# ---------------------------------------------------------------- 6. output paths never destroy work


def test_predict_never_overwrites_the_run_or_an_existing_file(run, tmp_path, capsys):
    before = snapshot(run)
    fails(["predict", str(run), "--out", str(run / "config.toml")], capsys, "inside the run directory")
    fails(["predict", str(run), "--out", str(run / "soups" / "new.csv")], capsys, "inside the run directory")
    mine = tmp_path / "mine.csv"
    mine.write_text("keep me")
    fails(["predict", str(run), "--out", str(mine)], capsys, "mine.csv", "already exists", "--force")
    assert mine.read_text() == "keep me"
    assert main(["predict", str(run), "--out", str(mine), "--force"]) == 0
    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        fails(["predict", str(run), "--out", str(locked / "p.csv")], capsys, "cannot write", "p.csv")
        assert list(locked.iterdir()) == []
    assert snapshot(run) == before


@contextlib.contextmanager
def read_only(folder):
    """A folder no write can enter, even as root: permissions, else the immutable flag, else a read-only mount."""
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)
    undo = [lambda: os.chmod(folder, stat.S_IRWXU)]
    try:
        if os.access(folder, os.W_OK):  # root ignores permissions
            if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
                undo.append(lambda: subprocess.run(["chattr", "-i", str(folder)], capture_output=True))
            elif subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                                capture_output=True).returncode == 0:
                undo.append(lambda: subprocess.run(["umount", str(folder)], capture_output=True))
            else:
                pytest.skip("no way to make a read-only folder here")
        yield folder
    finally:
        for step in reversed(undo):
            step()


def test_a_run_that_fails_before_its_first_ingredient_leaves_no_folder(tmp_path, capsys, monkeypatch):
    import ladle.engines.base as base

    def broken(*args, **kwargs):
        raise RuntimeError("the first ingredient failed")

    monkeypatch.setattr(base, "train_ingredient", broken)
    out = tmp_path / "r"
    fails(["run", *FLAGS, "--out", str(out)], capsys, "internal error", "RuntimeError", status=1)
    assert not out.exists()
    monkeypatch.undo()
    assert main(["run", *FLAGS, "--out", str(out)]) == 0  # the same --out is free


# ---------------------------------------------------------------- 7. no silent wrong results


def test_an_empty_soups_list_means_no_soups_and_survives_a_reread(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'dataset = "{SMALL}"\nsoups = []\n')
    run = tmp_path / "r"
    assert main(["run", "--config", str(config), "--ingredients", "2", "--epochs", "3", "--out", str(run),
                 "--quiet"]) == 0
    assert "[soups]\nmethods = []" in (run / "config.toml").read_text()
    assert list((run / "soups").iterdir()) == []
    assert json.loads((run / "results.json").read_text())["soups"] == {}


def test_graphs_and_settings_that_would_train_nothing_are_refused(tmp_path, capsys):
    out = str(tmp_path / "r")
    one = tmp_path / "one.npz"
    np.savez(one, node_features=np.ones((6, 2), np.float32), node_labels=np.zeros(6, np.int64),
             edges=np.array([[0, 1]]), train_masks=np.array([1, 1, 0, 0, 0, 0], bool),
             val_masks=np.array([0, 0, 1, 1, 0, 0], bool), test_masks=np.array([0, 0, 0, 0, 1, 1], bool))
    fails(["run", "--dataset", f"npz:{one}", "--out", out], capsys, "one.npz", "1 class", "at least two")
    fails(["run", "--dataset", "csbm:nodes=300,classes=3,features=8,train=0.01", "--partition", "random",
           "--parts", "8", "--ingredients", "8", "--out", out], capsys, "partition.parts = 8", "no training node")
    fails(["run", "--dataset", "csbm:signal=nan", "--out", out], capsys, "csbm signal", "finite")
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- 8. a message, never an internal error


def test_odd_inputs_get_a_message(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "r")
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    fails(["run", "--dataset", f"npz:{folder}", "--out", out], capsys, "folder.npz", "is a folder")
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    fails(["run", "--dataset", f"npz:{fifo}", "--out", out], capsys, "fifo.npz", "not a regular file")
    fails(["run", "--dataset", SMALL, "--device", "meta", "--out", out], capsys, "device", "cpu, cuda")
    verify_folder = tmp_path / "not-a-run"
    verify_folder.mkdir()
    err = fails(["verify", str(verify_folder)], capsys, "not a ladle run")
    assert "retrain" not in err
    assert not (tmp_path / "r").exists()


def test_npz_names_with_a_hash_and_configs_with_a_byte_order_mark_work(tmp_path, cornell):
    odd = tmp_path / "my#graph.npz"
    shutil.copy(cornell, odd)
    config = tmp_path / "bom.toml"
    config.write_bytes("\ufeff".encode() + f'dataset = "npz:{odd}#1"\nsoups = ["uniform"]\n'.encode())
    run = tmp_path / "r"
    assert main(["run", "--config", str(config), "--model", "mlp", "--ingredients", "2", "--epochs", "2",
                 "--out", str(run), "--quiet"]) == 0
    assert json.loads((run / "results.json").read_text())["dataset"]["name"] == "npz:my#graph.npz#1"


@pytest.mark.parametrize("content", ["[]", '"a string"', '{"format": "ladle.ingredient/1", "name": 3}',
                                     "[" * 5000 + "]" * 5000, '{"a": ' * 100 + "1" + "}" * 100])
@pytest.mark.parametrize("command", ["verify", "soup", "report"])
def test_sidecars_of_the_wrong_shape_are_named(run, capsys, content, command):
    path = run / "ingredients" / "ingredient-01.json"
    path.write_text(content)
    argv = [command, str(run)] + (["--quiet"] if command == "soup" else [])
    err = fails(argv, capsys, "ingredient-01.json")
    assert "restore" in err


def test_hash_of_recorded_identity_is_in_every_sidecar(run):
    manifest = json.loads((run / "run.json").read_text())
    for path in (run / "ingredients").glob("*.json"):
        assert json.loads(path.read_text())["run_identity_sha256"] == manifest["identity_sha256"]
    # The hash is of the recorded settings, sorted JSON (anyone can recompute it), and they are config.toml's.
    recorded = json.dumps(manifest["identity"], sort_keys=True).encode()
    assert hashlib.sha256(recorded).hexdigest() == manifest["identity_sha256"]
    assert manifest["identity"] == load_config(run / "config.toml").identity()


def test_a_planted_graph_npz_never_decides_what_is_verified(cora_run, planetoid_root, tmp_path, capsys):
    """Issue 35, class 2: a Cora run holding a planted ``graph.npz`` (test labels = the soup's own predictions,
    its fingerprint written into run.json and the sidecars) passed ``verify --root REAL_CORA`` with test accuracy
    1.0, and ``verify --root /nonexistent`` too. The run's own copy is now read only when named by --graph."""
    import torch

    import ladle
    from ladle.data.npz import save_npz

    run = tmp_path / "run"
    shutil.copytree(cora_run, run)
    graph = ladle.load_graph("Cora", str(planetoid_root))
    model = ladle.load_model(run, "uniform")
    with torch.no_grad():
        graph.data.y = model(graph.data.x, graph.data.edge_index).argmax(-1)
    planted = ladle.graph_from(graph.data, name="Cora")
    save_npz(planted, run / "graph.npz")
    real = json.loads((run / "run.json").read_text())["dataset"]["fingerprint"]
    for path in [run / "run.json", *run.glob("*/*.json")]:
        path.write_text(path.read_text().replace(real, planted.fingerprint))
    err = fails(["verify", str(run), "--root", str(planetoid_root)], capsys, "FAILED", "scores not checked")
    assert "is not the one" in err  # the real Cora, whose fingerprint is not the planted one
    fails(["verify", str(run), "--root", str(tmp_path / "nonexistent")], capsys, "FAILED", "scores not checked")
    # Named explicitly, the copy is used, and verify says whose graph it checked (here the recorded scores were
    # left as they were, so the planted labels show).
    from ladle.verify import verify_run

    details = [c.detail for c in verify_run(run, graph_file=run / "graph.npz")]
    assert any("a file inside the run: the sender's own graph" in d for d in details)
    # Untouched, the run's checks name the root they read Cora from.
    checks = verify_run(cora_run, root=planetoid_root)
    assert all(c.ok for c in checks)
    assert any(f"Cora read from the root {str(planetoid_root)!r}" in c.detail for c in checks)
