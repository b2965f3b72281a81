"""Families own their names and options: a soup or a sampler with an option of its own, registered at run time,
runs through a config file, a derived command-line flag, results.json and its sidecar, touching no other file;
every flag the README names exists, and reading a config imports no torch."""
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from ladle.cli import build_parser, main
from ladle.options import Options, option
from ladle.sampling import SAMPLERS
from ladle.soups import SOUPS

ROOT = Path(__file__).resolve().parents[1]
SMALL = "csbm:nodes=300,classes=3,features=8"


@dataclasses.dataclass(frozen=True)
class ShrinkOptions(Options):
    table: ClassVar[str] = "soups.shrink"
    factor: float = option(0.5, "weight of the best ingredient against the uniform average", low=0.0, high=1.0)


class ShrinkSoup:
    """factor · best + (1 − factor) · uniform, the best chosen on validation."""

    name = "shrink"
    reference = "a toy for the tests"

    def __call__(self, ingredients, evaluator, options: ShrinkOptions | None = None, *, seed: int = 0):
        from ladle.evaluation.evaluator import mix_states
        from ladle.soups.base import SoupResult, rank_by_val

        factor = (options or ShrinkOptions()).factor

        best = rank_by_val(ingredients, evaluator)[0][1]
        coefficients = {i.name: (1 - factor) / len(ingredients) + (factor if i is best else 0.0) for i in ingredients}
        state = mix_states([(coefficients[i.name], i.state) for i in ingredients])
        return SoupResult(self.name, state, evaluator.score(state), coefficients, [{"best": best.name}])


@dataclasses.dataclass(frozen=True)
class EveryOtherOptions(Options):
    table: ClassVar[str] = "sampler"
    stride: int = option(2, "an epoch's loss covers every stride-th training node", low=1, high=100)


class EveryOther:
    """The whole graph each epoch, the loss on every ``stride``-th training node (a different share each epoch)."""

    name = "every-other"

    def __init__(self, graph, config, seed):
        self.graph, self.stride = graph, config.stride

    def batches(self, epoch):
        import torch
        from torch_geometric.data import Data

        data = self.graph.data
        train = data.train_mask.nonzero().view(-1)
        mask = torch.zeros_like(data.train_mask)
        mask[train[epoch % self.stride::self.stride]] = True
        yield Data(x=data.x, y=data.y, edge_index=data.edge_index, loss_mask=mask, num_nodes=self.graph.num_nodes)


@pytest.fixture
def toys():
    SOUPS.add("shrink", ShrinkSoup(), ShrinkOptions, "a toy soup")
    SAMPLERS.add("every-other", EveryOther, EveryOtherOptions, "a toy sampler")
    try:
        yield
    finally:
        SOUPS.remove("shrink")
        SAMPLERS.remove("every-other")


def test_a_toy_soup_and_sampler_run_through_file_flag_results_and_sidecars(toys, tmp_path):
    config = tmp_path / "toy.toml"
    config.write_text(f'dataset = "{SMALL}"\n\n[sampler]\nname = "every-other"\n\n[sampler.every-other]\nstride = 3\n\n'
                      '[soups]\nmethods = ["uniform", "shrink"]\n\n[soups.shrink]\nfactor = 0.25\n')
    from_file = tmp_path / "file"
    assert main(["run", "--config", str(config), "--ingredients", "2", "--epochs", "3", "--out", str(from_file),
                 "--quiet"]) == 0
    from_flags = tmp_path / "flags"
    assert main(["run", "--dataset", SMALL, "--sampler", "every-other", "--stride", "3", "--soups", "uniform,shrink",
                 "--factor", "0.25", "--ingredients", "2", "--epochs", "3", "--out", str(from_flags), "--quiet"]) == 0
    for run in (from_file, from_flags):
        results = json.loads((run / "results.json").read_text())
        assert set(results["soups"]) == {"uniform", "shrink"}
        sidecar = json.loads((run / "soups" / "shrink.json").read_text())
        assert sidecar["options"] == {"factor": 0.25} and sidecar["reference"] == "a toy for the tests"
        assert sorted(sidecar["coefficients"].values()) == pytest.approx([0.375, 0.625])
        ingredient = json.loads((run / "ingredients" / "ingredient-00.json").read_text())
        assert ingredient["sampler"] == {"name": "every-other", "stride": 3}
        assert results["ingredients"][0]["sampler"] == {"name": "every-other", "stride": 3}
        assert "[sampler.every-other]\nstride = 3" in (run / "config.toml").read_text()
    weights = [{p.name: p.read_bytes() for p in (r / "ingredients").glob("*.safetensors")} for r in (from_file, from_flags)]
    assert weights[0] == weights[1]
    assert main(["run", "--dataset", SMALL, "--sampler", "every-other", "--fanouts", "5,5", "--out",
                 str(tmp_path / "x")]) == 2  # an option of another sampler is refused, not ignored
    assert main(["run", "--dataset", SMALL, "--soups", "shrink", "--factor", "2", "--out", str(tmp_path / "y")]) == 2


def test_a_soup_added_at_run_time_has_an_example_that_runs(toys, tmp_path, capsys):
    """Its module and its registry line are all a soup needs: ``ladle examples`` generates its config."""
    assert main(["examples", "shrink"]) == 0
    text = capsys.readouterr().out
    assert "[soups.shrink]" in text and "factor = 0.5" in text and "a toy soup" in text
    assert main(["run", "--config", "example:shrink", "--dataset", SMALL, "--ingredients", "2", "--epochs", "2",
                 "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert "shrink" in json.loads((tmp_path / "run" / "results.json").read_text())["soups"]
    assert main(["examples"]) == 0 and "shrink" in capsys.readouterr().out


def test_every_flag_and_name_the_readme_gives_exists():
    readme = (ROOT / "README.md").read_text()
    parser = build_parser()
    known = {option for action in parser._subparsers._group_actions[0].choices.values()
             for option in action._option_string_actions}
    lines = [line for line in readme.split("## Results")[0].splitlines()
             if "pip " not in line and "ray start" not in line]  # ladle's own flags, not pip's or Ray's
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", "\n".join(lines))) - {"--version", "--help"}
    assert named - known == set(), "README flags that no command has"
    run_help = subprocess.run([sys.executable, "-m", "ladle.cli", "run", "--help"], capture_output=True, text=True).stdout
    for flag in ("--fanouts", "--granularity", "--trunk-epochs", "--eval-chunk", "--patience"):
        assert flag in run_help


def test_reading_a_config_and_the_help_import_no_torch(tmp_path):
    code = ("import sys; from ladle.config import build_config; from ladle.cli import build_parser; "
            "build_config({'model': {'name': 'gat'}, 'sampler': {'name': 'neighbor'}, 'soups': ['gis', 'pls']}); "
            "build_parser(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.strip() == "False", out.stderr
    version = ("import sys; from ladle.cli import main\ntry: main(['--version'])\nexcept SystemExit: pass\n"
               "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", version], capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.split() == ["ladle", "0.1.0", "False"], out.stderr


# Literals in core modules that equal a member's name but are something else, each with why.
NOT_MEMBERS = {("ddp.py", "ray"): "the extra an install hint names"}


def core_member_literals() -> list[tuple[str, int, str]]:
    """Every string literal in a core module (the package's top-level modules and sampling/partition.py) that equals
    the name or alias of a soup, sampler, model or engine: what a core module would branch on, instead of asking the
    registry for a trait."""
    import ast

    from ladle.engines import ENGINES
    from ladle.models import MODELS

    names = {key for registry in (SOUPS, SAMPLERS, MODELS, ENGINES) for entry in registry.entries.values()
             for key in (entry.name, *entry.aliases)}
    src = ROOT / "src" / "ladle"
    found = []
    registries = {"engine_options.py"}  # the engines' registry itself (beside the config, below the engines)
    for path in [*sorted(p for p in src.glob("*.py") if p.name not in registries), src / "sampling" / "partition.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names \
                    and (path.name, node.value) not in NOT_MEMBERS:
                found.append((path.name, node.lineno, node.value))
    return found


def test_no_core_module_names_a_member_and_no_store_import_in_sampling():
    assert core_member_literals() == []
    src = ROOT / "src" / "ladle"
    for path in src.rglob("*.py"):
        text = path.read_text()
        if path.parent.name == "sampling":
            assert "ladle.store" not in text, path
        if path.name == "store.py":
            assert "ladle.sampling" not in text
    assert len((src / "config.py").read_text().splitlines()) < 300


def test_the_guard_finds_a_member_named_in_a_core_module(monkeypatch, tmp_path):
    """The guard above can fail: a core module that branches on a soup's name is found, with its line."""
    fake = tmp_path / "src" / "ladle"
    (fake / "sampling").mkdir(parents=True)
    (fake / "api.py").write_text('def f(method):\n    return method == "pls"\n')
    (fake / "sampling" / "partition.py").write_text("X = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert core_member_literals() == [("api.py", 2, "pls")]


def test_a_dataset_registered_at_run_time_is_named_like_any_other(tmp_path):
    from ladle.data import DATASETS, load_graph

    def ring(spec, root):  # a 12-node ring in 2 alternating classes
        import torch

        from ladle.data import make_graph

        n = 12
        edges = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
        y = torch.arange(n) % 2
        masks = [torch.arange(n) % 3 == k for k in range(3)]
        return make_graph(torch.eye(n), edges, y, *masks, name="ring", num_classes=2)

    DATASETS.add("ring", ring, None, "a toy ring", reference="tests")
    try:
        graph = load_graph("RING")
        assert graph.num_nodes == 12 and graph.data.edge_index.size(1) == 24
        assert main(["run", "--dataset", "ring", "--ingredients", "2", "--epochs", "2", "--soups", "uniform",
                     "--out", str(tmp_path / "ring"), "--quiet"]) == 0
        assert json.loads((tmp_path / "ring" / "results.json").read_text())["dataset"]["name"] == "ring"
    finally:
        DATASETS.remove("ring")
    with pytest.raises(Exception, match="unknown dataset 'ring'"):
        load_graph("ring")


def test_a_member_option_named_like_another_setting_is_refused_not_left_without_a_flag():
    from ladle.cli import run_flags
    from ladle.errors import LadleError

    @dataclasses.dataclass(frozen=True)
    class Clashing(Options):
        table: ClassVar[str] = "soups.clash"
        epochs: int = option(3, "passes over the validation field", low=1)

    SOUPS.add("clash", ShrinkSoup(), Clashing, "a soup whose option is named like train.epochs")
    try:
        with pytest.raises(LadleError, match=r"Clashing.epochs would take the flag --epochs, which sets train.epochs"):
            run_flags()
    finally:
        SOUPS.remove("clash")

    @dataclasses.dataclass(frozen=True)
    class Spelled(Options):
        table: ClassVar[str] = "soups.clash"
        epochs: int = option(3, "passes over the validation field", low=1, flag="--soups-clash-epochs")

    SOUPS.add("clash", ShrinkSoup(), Spelled, "the same option with a flag of its own")
    try:
        assert {f.flag: f.key for f in run_flags()}["--soups-clash-epochs"] == "soups.clash.epochs"
    finally:
        SOUPS.remove("clash")


def test_the_import_graph_has_no_cycle_and_finds_one_where_there_is():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert import_graph.cycles(import_graph.graph(ROOT / "src" / "ladle")) == []
    edges = {"config.py": {"soups/": ["config.py:3"]}, "soups/": {"store.py": ["soups/gis.py:9"]},
             "store.py": {"config.py": ["store.py:1"]}, "errors.py": {}}
    assert import_graph.cycles(edges) == [["config.py", "soups/", "store.py"]]


# Why an import may wait inside a function, and the claim each reason makes (checked below).
LAZY_REASONS = ("optional:", "start-up:", "lazy name:")


def function_imports(src: Path) -> list[tuple[str, str, int, str, list[str], str]]:
    """Every import inside a function of the package: (module, file, line, function, modules imported, the comment
    on its line or above its group of imports)."""
    import ast

    found = []
    for path in sorted(src.rglob("*.py")):
        lines = path.read_text().splitlines()
        rel = path.relative_to(src.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        tree = ast.parse("\n".join(lines))
        nodes, seen = [], set()
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in ast.walk(f):
                    if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno not in seen:
                        seen.add(n.lineno)
                        nodes.append((f, n))
        ends = {n.end_lineno: n.lineno for _, n in nodes}
        for f, n in nodes:
            first = n.lineno
            while first - 1 in ends:  # the group of imports it belongs to
                first = ends[first - 1]
            own = lines[n.lineno - 1].partition("#")[2].strip()
            above = lines[first - 2].strip() if first >= 2 else ""
            comment = own or (above[1:].strip() if above.startswith("#") else "")
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            else:  # `from ladle import api` imports the module ladle.api
                targets = []
                for a in n.names:
                    path_of = src.parent / f"{n.module}.{a.name}".replace(".", "/")
                    is_module = path_of.is_dir() or path_of.with_suffix(".py").exists()
                    targets.append(f"{n.module}.{a.name}" if is_module else n.module)
            found.append((module, str(path.relative_to(src.parent)), n.lineno, f.name, targets, comment))
    return found


def optional_modules() -> set[str]:
    """Import names of what the extras install (not the test extra): the modules that may be missing."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=!~ ]", req)[0].lower().split("-")[0] for extra, reqs in extras.items() if extra != "test"
             for req in reqs}
    return names | ({"torch.utils.tensorboard"} if "tensorboard" in names else set())


def unexplained_imports(src: Path, light: set[str]) -> list[str]:
    """The function-level imports whose reason is missing or does not hold: ``optional:`` must import what an extra
    installs, ``start-up:`` must sit in a module ``ladle --help`` loads (or load matplotlib) and import one it does
    not, ``lazy name:`` must be a module's ``__getattr__``."""
    optional, wrong = optional_modules(), []

    def heavy(target):  # what `ladle --help` does not load: the package's other modules, torch and the like
        root = target.split(".")[0]
        return target not in light if root == "ladle" else root not in sys.stdlib_module_names | {"rich"}

    for module, file, line, function, targets, comment in function_imports(src):
        kind = next((r for r in LAZY_REASONS if comment.startswith(r)), None)
        holds = {
            "optional:": all(t.split(".")[0] in optional or t.startswith("torch.utils.tensorboard") for t in targets),
            "start-up:": all(t.startswith("matplotlib") for t in targets)
            or (module in light and all(heavy(t) for t in targets)),
            "lazy name:": function == "__getattr__",
        }.get(kind, False)
        if not holds:
            wrong.append(f"{file}:{line} {function}: {', '.join(targets)} ({comment or 'no reason'})")
    return wrong


def help_modules() -> set[str]:
    code = ("import sys\nfrom ladle.cli import main\ntry: main(['--help'])\nexcept SystemExit: pass\n"
            "print(' '.join(m for m in sys.modules if m.startswith('ladle')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return set(out.stdout.split("\n")[-2].split())


def test_every_import_inside_a_function_says_why_and_the_reason_holds():
    light = help_modules()
    assert {"ladle.cli", "ladle.config", "ladle.soups"} <= light and "ladle.api" not in light
    imports = function_imports(ROOT / "src" / "ladle")
    assert len(imports) > 20  # the optional extras, the CLI's commands, the lazy package names
    assert unexplained_imports(ROOT / "src" / "ladle", light) == []


def test_the_import_reasons_are_checked_not_just_present(tmp_path):
    src = tmp_path / "ladle"
    src.mkdir()
    (src / "api.py").write_text("")
    (src / "cli.py").write_text(
        "def run():\n    # start-up: `ladle --help` loads this module, and no torch\n    from ladle import api\n\n"
        "def grow():\n    # optional: the ray extra\n    import torch\n\n"
        "def fine():\n    # optional: the ray extra\n    import ray\n    from ray.train import torch as t\n\n"
        "def bare():\n    import json\n\n"
        "def cheap():  # start-up: `ladle --help` loads this module, and no torch\n    import json  # start-up: no\n")
    light = {"ladle.cli"}
    assert unexplained_imports(src, light) == ["ladle/cli.py:7 grow: torch (optional: the ray extra)",
                                               "ladle/cli.py:15 bare: json (no reason)",
                                               "ladle/cli.py:18 cheap: json (start-up: no)"]
    assert unexplained_imports(src, set()) == ["ladle/cli.py:3 run: ladle.api (start-up: `ladle --help` loads this "
                                               "module, and no torch)",
                                               "ladle/cli.py:7 grow: torch (optional: the ray extra)",
                                               "ladle/cli.py:15 bare: json (no reason)",
                                               "ladle/cli.py:18 cheap: json (start-up: no)"]
