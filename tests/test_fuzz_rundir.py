"""Adversarial fuzzing of the run-directory readers: random edits of sidecars, config, manifest and log, weights
(the baselines' too), the run's own graph file, stray copies under another name or folder, and random symbolic
links, then ``report``, ``verify`` (also against the run's ``graph.npz``, named), ``predict`` of the baseline and
``soup``. Every outcome is success with correct results or one clean error: exit status 0 or 2, never an internal
error or a traceback, nothing written outside the run."""
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ladle.cli import main

SMALL = "csbm:nodes=120,classes=3,features=4,degree=6"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz-run") / "run"
    assert main(["run", "--dataset", SMALL, "--ingredients", "2", "--epochs", "3", "--hidden", "4", "--baseline",
                 "long", "--soups", "uniform,gis,ensemble", "--granularity", "3", "--out", str(out), "--quiet"]) == 0
    from ladle.data import load_graph
    from ladle.data.npz import save_npz

    save_npz(load_graph(SMALL), out / "graph.npz")  # a graph file in the run, read only when named
    return out


def mutate_json(value, draw):
    """Replace, delete or retype one node of a JSON tree, reached by a random walk."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        if draw(st.integers(0, 3)) == 0:
            del value[key]
        else:
            value[key] = mutate_json(value[key], draw)
        return value
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        value[i] = mutate_json(value[i], draw)
        return value
    return draw(json_values)


def inside(run, path) -> bool:
    """Edits go to real files of the run only (the fuzzer must not itself write through a link it planted)."""
    return not any(p.is_symlink() for p in [path, *path.parents] if p == run or run in p.parents)


def apply_edit(run, outside, draw):
    kind = draw(st.sampled_from(["sidecar", "sidecar", "config", "manifest", "log", "link", "delete", "weights",
                                 "graph", "stray"]))
    if kind in ("sidecar", "manifest"):
        files = sorted(run.glob("*/*.json")) if kind == "sidecar" else [run / "run.json"]
        if not files:
            return
        path = draw(st.sampled_from(files))
        if not inside(run, path) or not path.exists():
            return
        path.write_text(json.dumps(mutate_json(json.loads(path.read_text()), draw)))
    elif kind == "config":
        path = run / "config.toml"
        if not inside(run, path) or not path.exists():
            return
        lines = path.read_text().splitlines()
        i = draw(st.integers(0, len(lines) - 1))
        key = lines[i].split("=")[0].strip()
        choice = draw(st.sampled_from(["value", "delete", "garbage"]))
        if choice == "value" and "=" in lines[i]:
            value = draw(st.sampled_from(["0", "-1", "1e400", '"x"', "[]", "true", "99999999999"]))
            lines[i] = f"{key} = {value}"
        elif choice == "delete":
            del lines[i]
        else:
            lines.insert(i, draw(st.sampled_from(["[[", "x = ", "\ufeffa = 1", "[model]", "soups = 3"])))
        path.write_text("\n".join(lines) + "\n")
    elif kind == "log":
        path = run / "timeline.jsonl"
        if not inside(run, path):
            return
        data = path.read_bytes() if path.exists() else b""
        cut = draw(st.integers(0, len(data)))
        path.write_bytes(data[:cut] + draw(st.sampled_from([b"", b"{", b"[1]\n", b"\xff\xfe\n", b'{"name": 1}\n'])))
    elif kind == "link":
        candidates = [p for p in sorted(run.rglob("*")) if inside(run, p)]
        if not candidates:
            return
        path = draw(st.sampled_from(candidates))
        if path.is_dir():
            shutil.rmtree(path)
            os.symlink(outside, path)
        else:
            path.unlink()
            os.symlink(draw(st.sampled_from([outside / "file.json", outside, "/etc/hostname"])), path)
    elif kind in ("weights", "graph"):
        files = sorted(run.glob("*/*.safetensors")) if kind == "weights" else [run / "graph.npz"]
        path = draw(st.sampled_from(files)) if files else None
        if path is None or not inside(run, path) or not path.is_file():
            return
        data = path.read_bytes()
        choice = draw(st.sampled_from(["truncate", "flip", "folder", "fifo"]))
        if choice == "truncate":
            path.write_bytes(data[:draw(st.integers(0, len(data)))])
        elif choice == "flip":
            i = draw(st.integers(0, len(data) - 1))
            path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
        else:
            path.unlink()
            path.mkdir() if choice == "folder" else os.mkfifo(path)
    elif kind == "stray":  # one pair copied in under a name another folder holds, or one its folder never holds
        pairs = [p for p in sorted(run.glob("*/*.json")) if inside(run, p) and p.with_suffix(".safetensors").is_file()]
        if not pairs:
            return
        source = draw(st.sampled_from(pairs))
        folder = run / draw(st.sampled_from(["soups", "baselines", "ingredients"]))
        name = draw(st.sampled_from(["long", "gis", "ingredient-00", "long-swa", "x"]))
        if not inside(run, folder) or not folder.is_dir():
            return
        for suffix in (".json", ".safetensors"):
            target = folder / f"{name}{suffix}"
            if inside(run, target) and not target.exists():
                shutil.copyfile(source.with_suffix(suffix), target)
    else:
        files = [p for p in sorted(run.rglob("*")) if p.is_file() and inside(run, p)]
        if files:
            draw(st.sampled_from(files)).unlink()


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_edits_of_a_run_end_in_success_or_one_clean_error(clean, tmp_path_factory, capsys, data):
    root = tmp_path_factory.mktemp("fuzz")
    run, outside = root / "run", root / "outside"
    shutil.copytree(clean, run)
    outside.mkdir()
    (outside / "file.json").write_text('{"format": "ladle.soup/1"}')
    before_outside = {p.name: p.read_bytes() for p in outside.iterdir()}
    for _ in range(data.draw(st.integers(1, 3))):
        apply_edit(run, outside, data.draw)
    clean_scores = json.loads((clean / "soups" / "uniform.json").read_text())
    commands = (["report", str(run)], ["verify", str(run)], ["verify", str(run), "--graph", str(run / "graph.npz")],
                ["predict", str(run), "--model", "long", "--out", str(root / "p.csv")],
                ["soup", str(run), "--quiet", "--method", "uniform"])
    for argv in commands:
        capsys.readouterr()
        status = main(argv)
        out = capsys.readouterr()
        text = out.err + out.out
        assert status in (0, 2), f"{argv[0]} exited {status}: {text[-1500:]}"
        assert "internal error" not in text and "Traceback" not in text
        if status == 2 and argv[0] != "verify":
            assert text.count("error:") == 1 and "fix:" in text
        if status == 0 and argv[0] == "soup":  # correct results: the ingredients' weights passed every check
            sidecar = json.loads((run / "soups" / "uniform.json").read_text())
            souped = sidecar["ingredient_scores"]
            assert souped == {n: clean_scores["ingredient_scores"][n] for n in souped}
            if len(souped) == len(clean_scores["ingredient_scores"]):  # (a deleted ingredient is simply not souped)
                assert sidecar["scores"] == clean_scores["scores"]
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before_outside
