"""``ladle verify RUN_DIR``: check a run without trusting any of its files.

Without the graph: no symbolic link anywhere in the run; the config parses and matches the
identity the run was created with (``run.json``); every checkpoint's sidecar has ladle's shape,
its weights' SHA-256 matches, the file is safetensors (never unpickled) with the listed tensors,
finite, of the shapes its model description builds; every ingredient is the one its file name,
index and seeds say the config asked for, and no two differently-made ingredients hold the same
weights; every soup was made from the ingredients on disk; the timeline log is whole.

With the graph (a ``--root`` or ``--graph`` the user gives, or a synthetic graph, generated
again; never a root or file the run names, nor the run's own ``graph.npz`` unless given as ``--graph``): which
graph was checked and where it came from is said, its fingerprint is the one the run recorded, and every
recorded validation and test score is computed again from the weights and compared.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ladle.api import (
    DEFAULT_ROOT,
    SOUP_TIMING_FIELDS,
    _check_trunk_and_baseline,
    graph_source,
    identity_differences,
    is_a_copy,
    is_parts,
    make_soups,
    run_graph,
)
from ladle.data.datasets import dataset_has
from ladle.errors import LadleError
from ladle.evaluation import Evaluator
from ladle.evaluation.streamed import PartsView, StreamedEvaluator
from ladle.files import read_bytes, read_json, read_jsonl
from ladle.models import check_weights
from ladle.parts.reader import open_parts, parse_parts_spec
from ladle.report import derived_files
from ladle.store import RunDir, check_sidecar, model_from_sidecar, read_weights, spec_differences, timeline_entry

# The run's models that are neither ingredients nor soups, and their folders.
STORED_MODELS = {"trunk": "trunk", "long": "baselines", "long-swa": "baselines", "ddp": "baselines"}


@dataclass
class Check:
    path: str
    ok: bool
    detail: str


def verify_run(path, *, root: str | Path | None = None, graph_file: str | Path | None = None) -> list[Check]:
    run_dir = RunDir(path)
    checks: list[Check] = []
    if not run_dir.path.is_dir() or not os.path.lexists(run_dir.path / "config.toml"):
        raise LadleError(f"{run_dir.path} is not a ladle run (no config.toml)",
                         fix="give the folder that ladle run or ladle train wrote")
    checks += _links(run_dir)
    try:
        listed = run_dir.models()  # exactly what predict and load_model would read, one file per name
    except LadleError as err:
        return checks + [Check(str(run_dir.path), False, f"{err.message} ({err.fix})")]
    try:
        config = run_dir.config()
        checks.append(Check(str(run_dir.path / "config.toml"), True, "valid config"))
    except LadleError as err:
        return checks + [Check(str(run_dir.path / "config.toml"), False, err.message)]
    checks += _manifest(run_dir, config)
    states, sidecars = {}, {}
    for name, folder in [*listed.items(), ("trunk", run_dir.trunk)]:
        sidecar_path = folder / f"{name}.json"
        if folder.is_symlink() or not os.path.lexists(sidecar_path) or sidecar_path.is_symlink():
            continue  # links are reported by _links; weights without a sidecar are unfinished, served by nothing
        check, state, sidecar = _checkpoint(run_dir, sidecar_path)
        checks.append(check)
        if check.ok:
            states[name] = state
            sidecars[name] = sidecar
    ingredient_names = [n for n in sidecars if n.startswith("ingredient-")]
    checks += _ingredients_fit_config(run_dir, config, {n: sidecars[n] for n in ingredient_names})
    checks += _soups_fit_ingredients(run_dir, {n: s for n, s in sidecars.items() if n not in STORED_MODELS},
                                     ingredient_names)
    try:
        _check_trunk_and_baseline(run_dir, config)
    except LadleError as err:
        checks.append(Check(str(run_dir.trunk), False, err.message))
    checks += _timeline(run_dir)
    try:
        graph = run_graph(run_dir, config, root=root, graph_file=graph_file)
    except LadleError as err:
        return checks + [Check(str(run_dir.path), False, f"scores not checked: {err.message}"
                               + (f" ({err.fix})" if err.fix else ""))]
    checks += _root(run_dir, config, root, graph_file)
    source = graph_source(run_dir, config, root=root, graph_file=graph_file)
    checks.append(Check(config.dataset, True, f"graph from {source}: fingerprint {graph.fingerprint[:12]}… matches "
                                              "the run"))
    checks += _scores(config, graph, states, sidecars, ingredient_names)
    checks += _recomputed_soups(run_dir, config, graph, states, sidecars, listed)
    checks += _derived(run_dir)
    return checks


def _part_scores(config, model_config, sidecar: dict, state) -> dict:
    """An ingredient trained from a partition folder recorded its scores on its part's own nodes: recomputed there,
    from that part's files (checked by checksum), as its worker scored them."""
    part = (sidecar.get("partition") or {}).get("part")
    if not config.dataset.lower().startswith("parts:") or not isinstance(part, int):
        raise LadleError(f"{sidecar['name']} says it was scored on its part, but the run was not trained from parts")
    _, mine = open_parts(parse_parts_spec(config.dataset)).load_part(part)
    return {s: Evaluator(mine, model_config, s, chunk_size=config.eval.chunk).score(state) for s in ("val", "test")}


def _recomputed_soups(run_dir: RunDir, config, graph, states: dict, sidecars: dict, listed: dict) -> list[Check]:
    """Every stored soup made again from the verified ingredients and the config's recipe (its seed and options,
    never the sidecar's), through the code ``ladle soup`` runs: the same weights bit for bit on the CPU (within
    1e-5 elsewhere), and every recorded field (scores, coefficients, trace, the ingredients' and baselines' scores,
    options) equal; only the timing fields may differ."""
    stored = [n for n, folder in listed.items() if folder == run_dir.soups and n in sidecars]
    if not stored:
        return []
    exact = torch.device(config.eval.device or config.device).type == "cpu"
    try:
        made = {name: (state, sidecar) for name, state, sidecar in make_soups(run_dir, config, graph, stored)}
    except LadleError as err:
        return [Check(str(run_dir.soups), False, f"soups not recomputed: {err.message}")]
    checks = []
    for name in stored:
        state, sidecar = made[name]
        expected = json.loads(json.dumps({k: v for k, v in sidecar.items() if k not in SOUP_TIMING_FIELDS}))
        recorded = {k: sidecars[name].get(k) for k in expected}
        # The graph is the one its fingerprint says; its name depends on how it was given (Data, --graph, a name).
        expected["dataset"] = expected["dataset"]["fingerprint"]
        recorded["dataset"] = (recorded["dataset"] or {}).get("fingerprint")
        wrong = _differences(recorded, expected, 0.0 if exact else 1e-5)
        wrong += _weight_differences(states.get(name), state, exact)
        how = "bit for bit" if exact else "within 1e-5"
        checks.append(Check(str(run_dir.soups / f"{name}.json"), not wrong,
                            f"differs from the soup its ingredients and recipe give: {'; '.join(wrong[:4])}" if wrong
                            else f"recomputed from the ingredients and the config's recipe: equal {how}"))
    return checks


def _differences(recorded, expected, tolerance: float, where: str = "") -> list[str]:
    """The paths at which two JSON values differ (numbers by more than ``tolerance``)."""
    if isinstance(expected, dict) and isinstance(recorded, dict):
        return [d for k in sorted(set(expected) | set(recorded), key=str)
                for d in _differences(recorded.get(k), expected.get(k), tolerance, f"{where}.{k}" if where else str(k))]
    if isinstance(expected, list) and isinstance(recorded, list) and len(expected) == len(recorded):
        return [d for i, (a, b) in enumerate(zip(recorded, expected))
                for d in _differences(a, b, tolerance, f"{where}[{i}]")]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (recorded, expected))
    if numbers and abs(recorded - expected) <= tolerance:
        return []
    return [] if recorded == expected else [f"{where} recorded {str(recorded)[:40]}, recomputed {str(expected)[:40]}"]


def _weight_differences(stored, made, exact: bool) -> list[str]:
    if stored is None or made is None:
        return [] if stored is None and made is None else ["weights: one of the two has none"]
    if set(stored) != set(made):
        return ["weights: other tensors"]
    same = (torch.equal if exact else lambda a, b: torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5))
    wrong = [k for k in sorted(made) if not same(stored[k], made[k].to(stored[k].device))]
    return [f"weights: {', '.join(wrong[:3])} differ"] if wrong else []


def _derived(run_dir: RunDir) -> list[Check]:
    """results.json, results.jsonl and report.md are derived from the run's files: checked against what ``ladle
    report`` gives from them now (absent is fine; plots are derived too and not compared)."""
    try:
        _, files = derived_files(run_dir)
    except LadleError as err:
        return [Check(str(run_dir.path / "results.json"), False, f"cannot derive the report: {err.message}")]
    checks = []
    for name, payload in files.items():
        path = run_dir.path / name
        if not os.path.lexists(path):
            continue
        try:
            same = read_bytes(path, root=run_dir.path, limit=64 * 2**20, what=name) == payload
        except LadleError as err:
            checks.append(Check(str(path), False, err.message))
            continue
        checks.append(Check(str(path), same, "derived: equals what ladle report gives from the verified files" if same
                            else "derived, but differs from what the run's files give (edited, or not rewritten since "
                                 "the last soup): ladle report RUN_DIR writes it again"))
    return checks


def _links(run_dir: RunDir) -> list[Check]:
    found = []
    for folder, dirs, files in os.walk(run_dir.path, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                found.append(Check(str(path), False, f"a symbolic link (to {os.readlink(path)}): ladle never follows "
                                                     "links inside a run; replace it with the real file"))
    return found


def _manifest(run_dir: RunDir, config) -> list[Check]:
    path = str(run_dir.path / "run.json")
    try:
        manifest = run_dir.manifest()
    except LadleError as err:
        return [Check(path, False, err.message)]
    if manifest is None:
        return [Check(path, True, "absent (a run made before ladle recorded it): the config cannot be checked "
                                  "against its creation")]
    if not config.is_identity(manifest["identity_sha256"]):
        changed = "; ".join(identity_differences(manifest.get("identity"), config.identity())[:4])
        return [Check(str(run_dir.path / "config.toml"), False, "edited after the run was created (its settings no "
                                                                "longer hash to the identity in run.json)"
                      + (f": {changed}" if changed else ""))]
    return [Check(path, True, "config unchanged since the run was created")]


def _checkpoint(run_dir: RunDir, sidecar_path: Path):
    weights_path = sidecar_path.with_suffix(".safetensors")
    try:
        sidecar = read_json(sidecar_path, root=run_dir.path, what="sidecar")
        check_sidecar(sidecar, sidecar_path)
        if sidecar["name"] != sidecar_path.stem:
            raise LadleError(f"{sidecar_path} describes {sidecar['name']!r}: it was renamed or copied")
        if sidecar.get("is_soup") is False and not os.path.lexists(weights_path):
            return Check(str(sidecar_path), True, "ensemble: no weights of its own"), None, sidecar
        state, sidecar = read_weights(weights_path, root=run_dir.path)
        model, in_channels, out_channels = model_from_sidecar(sidecar)
        check_weights(str(weights_path), state, model, in_channels, out_channels)
        return Check(str(weights_path), True, f"sha256 {sidecar['sha256'][:12]}…, {len(state)} tensors"), state, sidecar
    except LadleError as err:
        return Check(str(weights_path), False, err.message), None, None


def _ingredients_fit_config(run_dir: RunDir, config, sidecars: dict[str, dict]) -> list[Check]:
    checks, specs, seen = [], config.ingredient_specs(), {}
    models = {repr(model_from_sidecar(s)) for s in sidecars.values()}
    if len(models) > 1:
        checks.append(Check(str(run_dir.ingredients), False, "checkpoints describe different architectures"))
    if len({s["dataset"]["fingerprint"] for s in sidecars.values()}) > 1:
        checks.append(Check(str(run_dir.ingredients), False, "checkpoints were trained on different graphs"))
    for name, sidecar in sidecars.items():
        where = str(run_dir.ingredients / f"{name}.json")
        index = sidecar["index"]
        if not 0 <= index < len(specs) or specs[index].name != name:
            checks.append(Check(where, False, f"claims to be ingredient {index}, which the config does not have"))
            continue
        differences = spec_differences(sidecar, specs[index])
        if differences:
            checks.append(Check(where, False, "not trained as the config says: " + "; ".join(differences[:3])))
            continue
        twin = seen.setdefault(sidecar["sha256"], name)
        if twin != name and is_a_copy(sidecar, specs[index], specs[sidecars[twin]["index"]]):
            checks.append(Check(where, False, f"holds the same weights as {twin}, though the two were to be trained "
                                              "differently: one is a copy"))
            continue
        checks.append(Check(where, True, "trained as the config says (settings and seeds)"))
    return checks


def _soups_fit_ingredients(run_dir: RunDir, sidecars: dict[str, dict], ingredient_names: list[str]) -> list[Check]:
    checks = []
    on_disk = {n: sidecars[n]["sha256"] for n in ingredient_names}
    for name, sidecar in sidecars.items():
        if name in on_disk:
            continue
        where = str(run_dir.soups / f"{name}.json")
        made_of = dict(sidecar.get("ingredients_sha256", {}))
        made_of.update({n: e["sha256"] for n, e in sidecar.get("ingredient_scores", {}).items()})
        wrong = [n for n, sha in made_of.items() if on_disk.get(n) != sha]
        if wrong:
            checks.append(Check(where, False, f"made from ingredients that differ from those on disk: "
                                              f"{', '.join(wrong[:5])}"))
    return checks


def _timeline(run_dir: RunDir) -> list[Check]:
    path = str(run_dir.path / "timeline.jsonl")
    try:
        records, torn = read_jsonl(run_dir.path / "timeline.jsonl", root=run_dir.path)
    except LadleError as err:
        return [Check(path, False, err.message)]
    if torn:
        return [Check(path, False, "its last line is torn (a write that did not finish): ladle drops it at its next "
                                   "write; the timeline plot misses one ingredient")]
    bad = [i for i, r in enumerate(records, 1) if not timeline_entry(r)]
    if bad:
        return [Check(path, False, f"line {bad[0]} is not a record ladle writes")]
    return [Check(path, True, f"{len(records)} records")] if records else []


def _root(run_dir: RunDir, config, root, graph_file) -> list[Check]:
    if graph_file is not None or dataset_has(config.dataset, "generated") or dataset_has(config.dataset, "own-path"):
        return []
    given = DEFAULT_ROOT if root is None else str(root)
    if config.root != given:
        return [Check(str(run_dir.path / "config.toml"), True,
                      f"records the data root {config.root!r}; read from {given!r} instead (the graph matches)")]
    return []


def _tolerance(metric: str, count: int) -> float:
    """How far a recomputed score may be from the recorded one: rounding may flip a node or two near a tie
    (another device, thread count or evaluation path); a continuous metric moves a little."""
    return 1e-3 if metric != "acc" else 2.5 / max(count, 1)


def _scores(config, graph, states: dict, sidecars: dict, ingredient_names: list[str]) -> list[Check]:
    if not ingredient_names:
        return []
    model_config, _, _ = model_from_sidecar(sidecars[ingredient_names[0]])
    if is_parts(graph):  # streamed over the parts, as ladle soup scored them
        view = PartsView(graph)
        try:
            evaluators = {s: StreamedEvaluator(view, model_config, s, config.eval.chunk) for s in ("val", "test")}
            return _score_checks(config, graph, states, sidecars, ingredient_names, model_config, evaluators,
                                 {s: graph.split_size(s) for s in ("val", "test")})
        finally:
            view.close()
    evaluators = {s: Evaluator(graph, model_config, s, chunk_size=config.eval.chunk) for s in ("val", "test")}
    return _score_checks(config, graph, states, sidecars, ingredient_names, model_config, evaluators,
                         {s: int(graph.mask(s).sum()) for s in ("val", "test")})


def _score_checks(config, graph, states, sidecars, ingredient_names, model_config, evaluators, counts):
    tolerance = {s: _tolerance(graph.metric, counts[s]) for s in ("val", "test")}
    actual = {n: {s: evaluators[s].score(states[n]) for s in ("val", "test")} for n in ingredient_names}
    checks = []
    for name, sidecar in sidecars.items():
        claims = []
        if name in actual and sidecar.get("scored_on") == "part":  # trained from parts: scored on its own part
            claims.append((name, sidecar["scores"], _part_scores(config, model_config, sidecar, states[name])))
        elif name in actual:
            claims.append((name, sidecar["scores"], actual[name]))
        elif name in STORED_MODELS:
            claims.append((name, sidecar["scores"], {s: evaluators[s].score(states[name]) for s in ("val", "test")}))
        else:
            for member, entry in sidecar.get("ingredient_scores", {}).items():
                if member in actual:
                    claims.append((f"{member} (as {name} recorded it)", entry, actual[member]))
            if states.get(name) is not None:
                claims.append((name, sidecar["scores"], {s: evaluators[s].score(states[name]) for s in ("val", "test")}))
            elif not sidecar["is_soup"]:
                members = [states[m] for m, c in sidecar["coefficients"].items() if c and m in states]
                if members:
                    claims.append((name, sidecar["scores"],
                                   {s: evaluators[s].score_ensemble(members) for s in ("val", "test")}))
        wrong = [f"{who}: {split} recorded {recorded[split]:.4f}, the weights score {got[split]:.4f}"
                 for who, recorded, got in claims for split in ("val", "test")
                 if abs(recorded[split] - got[split]) > tolerance[split]]
        folder = STORED_MODELS.get(name, "ingredients" if name in actual else "soups")
        where = str(Path(folder) / f"{name}.json")
        checks.append(Check(where, not wrong, "; ".join(wrong[:3]) if wrong else "recorded scores match the weights"))
    return checks
