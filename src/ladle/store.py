"""The run directory: atomic safetensors checkpoints with JSON sidecars, read as untrusted data.

Layout::

    RUN_DIR/config.toml                                  the resolved RunConfig
    RUN_DIR/run.json                                     the run's identity: dataset fingerprint, config hash
    RUN_DIR/ingredients/ingredient-00.safetensors + .json
    RUN_DIR/soups/gis.safetensors + gis.json             (the ensemble has a sidecar only)
    RUN_DIR/timeline.jsonl, results.json, results.jsonl, report.md, plots/*.png

Every file goes through :mod:`ladle.files`: written atomically, never through a symbolic link,
read back bounded in size and checked in shape. Weights are written before their sidecar and the
sidecar carries the weights' SHA-256: a checkpoint exists once its sidecar does, and it is
verified on every read. Nothing is ever unpickled. A run directory may come from someone else:
what it says is checked (checksums, the config each ingredient was trained with, the graph's
fingerprint), and it never chooses a data root, a file outside itself, or code to run.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ladle.config import IngredientSpec, RunConfig, build_config, dump_toml
from ladle.declared import idle
from ladle.errors import LadleError
from ladle.files import RunLock, atomic_write, check_inside, read_bytes, read_json, read_jsonl, sha256, write_json
from ladle.files import append_jsonl as _append_jsonl
from ladle.models import build_model, check_weights
from ladle.models.options import ModelConfig, model_config
from ladle.models.python_model import PythonModel, register
from ladle.soups import SOUPS
from ladle.train_options import EvalConfig, TrainConfig, before_values

INGREDIENT_FORMAT = "ladle.ingredient/1"
SOUP_FORMAT = "ladle.soup/1"
RUN_FORMAT = "ladle.run/1"
MAX_WEIGHTS_BYTES = 64 * 2**30
MAX_CONFIG_BYTES = 2**20
BASELINE_NAMES = ("long", "long-swa", "long-ema", "ddp")  # RunConfig.baseline_specs' roles

__all__ = ["RunDir", "atomic_write", "read_json", "read_weights", "save_weights", "sha256", "write_json"]


def save_weights(path: Path, state: dict[str, torch.Tensor], sidecar: dict, *, root: Path | None = None) -> dict:
    """Write ``path`` (safetensors) then its ``.json`` sidecar, both atomically; return the sidecar."""
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    payload = save_safetensors(tensors, metadata={"format": sidecar["format"]})
    sidecar = {**sidecar, "sha256": sha256(payload),
               "tensors": {k: [str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in tensors.items()}}
    atomic_write(path, payload, root=root)
    write_json(path.with_suffix(".json"), sidecar, root=root)
    return sidecar


def read_weights(path: Path, *, root: Path | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    """Read a checkpoint and its sidecar, verifying the checksum and the tensor list."""
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".safetensors")
    sidecar = read_json(path.with_suffix(".json"), root=root, what="sidecar")
    check_weights_sidecar(sidecar, path.with_suffix(".json"))
    payload = read_bytes(path, root=root, limit=MAX_WEIGHTS_BYTES, what="checkpoint")
    if sha256(payload) != sidecar["sha256"]:
        raise LadleError(f"{path}: checksum mismatch (the file was truncated or changed since it was written)",
                         fix="retrain it or restore the original file")
    try:
        state = load_safetensors(payload)
    except Exception as err:  # safetensors raises several types for a malformed header
        raise LadleError(f"{path} is not a safetensors file ({err}); ladle reads nothing else, and never unpickles",
                         fix="retrain it (delete it and its .json, then ladle run --resume RUN_DIR) or restore it") from None
    listed = sidecar["tensors"]
    if set(listed) != set(state):
        raise LadleError(f"{path}: tensors disagree with the sidecar ({sorted(set(listed) ^ set(state))[:5]})",
                         fix="one of the pair was changed: restore both files, or retrain (ladle run --resume)")
    return state, sidecar


# ---------------------------------------------------------------- sidecars: shapes checked before use


def is_number(value) -> bool:
    """A finite int or float from JSON (not a bool, NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def timeline_entry(entry: dict) -> bool:
    """A timeline record as workers write it (name, worker, start and end times)."""
    return (isinstance(entry.get("name"), str) and isinstance(entry.get("worker"), str)
            and is_number(entry.get("started")) and is_number(entry.get("finished")))


def _require(path: Path, ok: bool, what: str) -> None:
    if not ok:
        raise LadleError(f"{path}: {what}", fix="the sidecar is damaged or was not written by ladle: restore it, "
                                                "or delete the pair and retrain (ladle run --resume RUN_DIR)")


def check_weights_sidecar(sidecar: dict, path: Path) -> None:
    """The fields that describe a checkpoint's weights have the types the readers expect."""
    kind = sidecar.get("format")
    _require(path, kind in (INGREDIENT_FORMAT, SOUP_FORMAT), f"format is {kind!r}, not a ladle sidecar")
    _require(path, isinstance(sidecar.get("sha256"), str) and len(sidecar["sha256"]) == 64, "sha256 is not a hash")
    tensors = sidecar.get("tensors")
    _require(path, isinstance(tensors, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[1], list) and all(isinstance(d, int) for d in v[1])
        for v in tensors.values()), "tensors is not a list of names, types and shapes")
    _require(path, isinstance(sidecar.get("model"), dict), "model is not a table")


def check_sidecar(sidecar: dict, path: Path) -> None:
    """Every field the readers use has the type they expect, or one LadleError names the file and the field."""
    kind = sidecar.get("format")
    _require(path, kind in (INGREDIENT_FORMAT, SOUP_FORMAT), f"format is {kind!r}, not a ladle sidecar")
    _require(path, isinstance(sidecar.get("name"), str), "name is not a string")
    if kind == INGREDIENT_FORMAT or sidecar.get("is_soup") is not False:
        check_weights_sidecar(sidecar, path)
    scores = sidecar.get("scores")
    _require(path, isinstance(scores, dict) and all(is_number(scores.get(s)) for s in ("val", "test")),
             "scores lack numeric val and test")
    dataset = sidecar.get("dataset")
    _require(path, isinstance(dataset, dict) and isinstance(dataset.get("fingerprint"), str), "dataset has no fingerprint")
    if kind == INGREDIENT_FORMAT:
        _require(path, isinstance(sidecar.get("index"), int) and not isinstance(sidecar["index"], bool),
                 "index is not an integer")
        seeds = sidecar.get("seeds")
        _require(path, isinstance(seeds, dict) and all(isinstance(seeds.get(k), int) for k in ("init", "data")),
                 "seeds lack integer init and data")
        for key in ("train", "sampler"):
            _require(path, isinstance(sidecar.get(key), dict), f"{key} is not a table")
        _require(path, isinstance(sidecar["sampler"].get("name"), str), "sampler has no name")
        part = sidecar.get("partition")
        _require(path, part is None or (isinstance(part, dict) and isinstance(part.get("method"), str)
                                        and isinstance(part.get("part"), int) and isinstance(part.get("halo"), bool)),
                 "partition is neither empty nor a method, part and halo")
        _require(path, is_number(sidecar.get("seconds")) and isinstance(sidecar.get("best_epoch"), int),
                 "seconds or best_epoch is not a number")
        _require(path, isinstance(sidecar.get("history"), list), "history is not a list")
        _require(path, sidecar.get("epochs_trained") is None or isinstance(sidecar["epochs_trained"], int),
                 "epochs_trained is not an integer")
        stopped = sidecar.get("stopped")
        _require(path, stopped is None or (isinstance(stopped, dict) and isinstance(stopped.get("reason"), str)
                                           and isinstance(stopped.get("epoch"), int)),
                 "stopped is neither empty nor a reason and an epoch")
    else:
        coefficients = sidecar.get("coefficients")
        _require(path, isinstance(coefficients, dict) and all(is_number(c) for c in coefficients.values()),
                 "coefficients are not numbers")
        _require(path, isinstance(sidecar.get("is_soup"), bool) and isinstance(sidecar.get("fitted_on_val"), bool),
                 "is_soup or fitted_on_val is not true or false")
        _require(path, is_number(sidecar.get("seconds")), "seconds is not a number")
        _require(path, isinstance(sidecar.get("trace", []), list), "trace is not a list")
        shas = sidecar.get("ingredients_sha256", {})
        _require(path, isinstance(shas, dict) and all(isinstance(v, str) for v in shas.values()),
                 "ingredients_sha256 is not a table of hashes")
        for key in ("ingredient_scores", "baseline_scores"):
            recomputed = sidecar.get(key, {})
            _require(path, isinstance(recomputed, dict) and all(
                isinstance(v, dict) and isinstance(v.get("sha256"), str) and is_number(v.get("val"))
                and is_number(v.get("test")) for v in recomputed.values()), f"{key} is malformed")


def model_from_sidecar(sidecar: dict) -> tuple[ModelConfig, int, int]:
    try:
        spec = dict(sidecar["model"])
        in_channels, out_channels = spec.pop("in_channels"), spec.pop("out_channels")
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in (in_channels, out_channels)):
            raise TypeError("in_channels and out_channels must be positive integers")
        return model_config(spec), in_channels, out_channels
    except (KeyError, TypeError, LadleError) as err:
        raise LadleError(f"sidecar {sidecar.get('name')!r} has no usable model description ({err})",
                         fix="restore the .json written beside the weights") from None


# Settings added after runs were first stored: a sidecar without them was made with these values (declared on the
# options, ``before`` or ``unrecorded``; the spec's own trunk_epochs: 0, no trunk, before trunks existed).
LATER_DEFAULTS = {**before_values(TrainConfig, EvalConfig), "trunk_epochs": 0}


def spec_fields(spec: IngredientSpec) -> dict:
    """What an ingredient sidecar records of the spec it was trained from (compared on resume, soup, verify)."""
    return {
        "model": spec.model.to_dict(),
        "train": spec.train.to_dict(),
        "sampler": spec.sampler.to_dict(),
        "partition": None if spec.part is None else {**spec.partition.to_dict(), "part": spec.part},
        "seeds": {"init": spec.init_seed, "data": spec.data_seed},
        "trunk_epochs": spec.trunk_epochs,
        "eval": spec.eval.to_dict(),
    }


def spec_differences(sidecar: dict, spec: IngredientSpec) -> list[str]:
    """``key: recorded X, config Y`` for every setting where a stored ingredient and the run's config disagree."""
    expected = spec_fields(spec)
    recorded = {key: sidecar.get(key) for key in expected}
    if isinstance(recorded["model"], dict):
        recorded["model"] = {k: v for k, v in recorded["model"].items() if k not in ("in_channels", "out_channels")}
    flat_expected, flat_recorded = flatten(expected), flatten(recorded)
    for key in [f"model.{k}" for k in idle("model", spec.model.name)] + [
            f"sampler.{k}" for k in idle("sampler", spec.sampler.name)]:  # options that do nothing for this member
        flat_expected.pop(key, None)
    for key, default in LATER_DEFAULTS.items():
        if flat_recorded.get(key) is None and flat_expected.get(key) == default:
            flat_recorded[key] = default
    # Every setting the config decides is compared; a sidecar of an older ladle may record more (every sampler's
    # options, train.eval_chunk), which the config no longer holds.
    return [f"{key}: trained with {flat_recorded.get(key, 'nothing')!r}, the config now says {flat_expected.get(key)!r}"
            for key in sorted(flat_expected) if flat_expected.get(key) != flat_recorded.get(key)]


def flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): list(value) if isinstance(value, tuple) else value}


class RunDir:
    """One run's folder; every path it reads or writes is checked to stay inside it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.ingredients = self.path / "ingredients"
        self.soups = self.path / "soups"
        self.plots = self.path / "plots"
        self.trunk = self.path / "trunk"  # trunk.safetensors: where every ingredient starts, when trunk.epochs > 0
        # long.safetensors: one model, K times an ingredient's budget; long-swa.safetensors: its weights' average
        self.baselines = self.path / "baselines"

    # ---- creating and opening

    def writing(self, what: str) -> RunLock:
        """The run's write lock for the command ``what`` (see :class:`ladle.files.RunLock`)."""
        return RunLock(self.path, what)

    def is_run(self) -> bool:
        try:
            check_inside(self.path, self.path / "config.toml")
        except LadleError:
            return False
        return (self.path / "config.toml").is_file()

    def create(self, config: RunConfig, dataset: dict | None = None) -> RunDir:
        if self.path.exists() and not self.path.is_dir():
            raise LadleError(f"{self.path} exists and is not a folder", fix="choose another --out")
        if self.path.exists() and any(self.path.iterdir()):
            what = "a ladle run" if self.is_run() else "not a ladle run"
            raise LadleError(f"output folder {self.path} already exists and is {what}",
                             fix="choose another --out, or remove the folder")
        try:
            self.ingredients.mkdir(parents=True, exist_ok=True)
            self.soups.mkdir(exist_ok=True)
        except OSError as err:
            raise LadleError(f"cannot create the run directory {self.path}: {err.strerror or err}",
                             fix="choose an --out in a folder you can write to") from None
        atomic_write(self.path / "config.toml", dump_toml(config.to_dict()).encode(), root=self.path)
        if dataset is not None:
            write_json(self.path / "run.json", {"format": RUN_FORMAT, "dataset": dataset, "root": config.root,
                                                "identity_sha256": config.identity_sha256(),
                                                "identity": config.identity()}, root=self.path)
        return self

    def config(self) -> RunConfig:
        path = self.path / "config.toml"
        if not self.path.is_dir() or not os_lexists(path):
            raise LadleError(f"{self.path} is not a ladle run (no config.toml)",
                             fix="give the folder that ladle run or ladle train wrote")
        text = read_bytes(path, root=self.path, limit=MAX_CONFIG_BYTES, what="config.toml")
        try:
            values = tomllib.loads(text.decode("utf-8-sig"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise LadleError(f"{path} is not valid TOML ({err})", fix="restore the config.toml ladle wrote") from None
        except RecursionError:
            raise LadleError(f"{path} is nested too deeply to be a config ladle wrote",
                             fix="restore the config.toml ladle wrote") from None
        config = build_config(values, source=str(path))
        self.models()  # every reader of a run reads its config: a run where two files answer to one name stops here
        return config

    def manifest(self) -> dict | None:
        """``run.json`` (the dataset and the config's identity hash at creation), or None for older runs."""
        path = self.path / "run.json"
        if not os_lexists(path):
            return None
        manifest = read_json(path, root=self.path, what="run.json")
        dataset = manifest.get("dataset")
        _require(path, manifest.get("format") == RUN_FORMAT and isinstance(dataset, dict)
                 and isinstance(dataset.get("fingerprint"), str) and isinstance(manifest.get("identity_sha256"), str),
                 "not the run manifest ladle writes")
        return manifest

    # ---- ingredients and soups

    def folder_for(self, role: str) -> Path:
        return {"ingredient": self.ingredients, "trunk": self.trunk}.get(role, self.baselines)

    def checkpoint_path(self, spec: IngredientSpec) -> Path:
        return self.folder_for(spec.role) / f"{spec.name}.safetensors"

    def has(self, spec: IngredientSpec) -> bool:
        """Whether a model of this run is stored (its sidecar exists: written last)."""
        path = self.checkpoint_path(spec).with_suffix(".json")
        check_inside(self.path, path)
        return os_lexists(path)

    def load_checkpoint(self, spec: IngredientSpec) -> tuple[dict[str, torch.Tensor], dict]:
        """A stored trunk or baseline (or ingredient) of this run, checksum verified, name checked."""
        path = self.checkpoint_path(spec)
        state, sidecar = read_weights(path, root=self.path)
        _check_name(sidecar, path.with_suffix(".json"), INGREDIENT_FORMAT)
        return state, sidecar

    def save_ingredient(self, record, dataset: dict, identity: str | None = None) -> dict:
        spec = record.spec
        fields = spec_fields(spec)
        sidecar = {
            "format": INGREDIENT_FORMAT,
            "name": record.name,
            "role": spec.role,
            "index": spec.index,
            **fields,
            "model": {**fields["model"], "in_channels": record.in_channels, "out_channels": record.out_channels},
            "dataset": dataset,
            "run_identity_sha256": identity,
            "scores": {"train": record.train, "val": record.val, "test": record.test},
            "best_epoch": record.best_epoch,
            "epochs_trained": record.epochs_trained,
            "trunk_sha256": record.trunk_sha256,
            **({"average_of": record.average_of} if record.average_of else {}),
            "seconds": record.seconds,
            "device": record.device,
            "peak_device_mb": record.peak_device_mb,
            "history": record.history,
            **({"part_graph": record.part_graph} if record.part_graph else {}),
            **({"scored_on": "part"} if record.scored_on == "part" else {}),
            **({"worker_memory": record.worker_memory} if record.worker_memory else {}),
            **({"communication": record.communication} if record.communication else {}),
            **({"stopped": record.stopped} if record.stopped else {}),
        }
        return save_weights(self.checkpoint_path(spec), record.state, sidecar, root=self.path)

    def log_timeline(self, done) -> None:
        """Append which worker trained an ingredient, and when (``timeline.jsonl``, one object per line)."""
        _append_jsonl(self.path / "timeline.jsonl", dataclasses.asdict(done), root=self.path)

    def timeline(self) -> list[dict]:
        records, _ = read_jsonl(self.path / "timeline.jsonl", root=self.path)
        return records

    def timeline_torn(self) -> bool:
        return read_jsonl(self.path / "timeline.jsonl", root=self.path)[1]

    def _names(self, folder: Path, pattern: str) -> list[str]:
        check_inside(self.path, folder)
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob(pattern))  # links too: reading one is refused, never skipped

    def ingredient_names(self) -> list[str]:
        """Names of ingredients whose sidecar exists (a checkpoint is complete once it does)."""
        return self._names(self.ingredients, "ingredient-*.json")

    def load_ingredient(self, name: str) -> tuple[dict[str, torch.Tensor], dict]:
        state, sidecar = read_weights(self.ingredients / f"{name}.safetensors", root=self.path)
        _check_name(sidecar, self.ingredients / f"{name}.json", INGREDIENT_FORMAT)
        return state, sidecar

    def ingredient_sidecars(self) -> list[dict]:
        out = []
        for name in self.ingredient_names():
            path = self.ingredients / f"{name}.json"
            sidecar = read_json(path, root=self.path, what="sidecar")
            check_sidecar(sidecar, path)
            _check_name(sidecar, path, INGREDIENT_FORMAT)
            out.append(sidecar)
        return out

    def save_soup(self, name: str, state, sidecar: dict) -> dict:
        sidecar = {"format": SOUP_FORMAT, "name": name, **sidecar}
        if state is None:
            write_json(self.soups / f"{name}.json", sidecar, root=self.path)
            return sidecar
        return save_weights(self.soups / f"{name}.safetensors", state, sidecar, root=self.path)

    def soup_sidecars(self) -> dict[str, dict]:
        out = {}
        for name in self._names(self.soups, "*.json"):
            path = self.soups / f"{name}.json"
            sidecar = read_json(path, root=self.path, what="sidecar")
            check_sidecar(sidecar, path)
            _check_name(sidecar, path, SOUP_FORMAT)
            out[name] = sidecar
        return out

    def models(self) -> dict[str, Path]:
        """Every model of this run a reader may serve, by name -> its folder: ``ingredient-NN`` in ingredients/,
        the baselines (``long``, ``long-swa``, ``long-ema``) in baselines/, a registered soup method in soups/.
        One name, one file: a name in a folder it does not belong to, or in two folders, is refused (a planted
        ``soups/long.*`` would otherwise answer for the baseline). ``predict``, ``load_model`` and ``verify``
        all read through this listing."""
        belongs = {self.soups: lambda n: n in SOUPS.names(), self.baselines: lambda n: n in BASELINE_NAMES,
                   self.ingredients: lambda n: re.fullmatch(r"ingredient-\d{2,}", n) is not None}
        found: dict[str, Path] = {}
        for folder, ok in belongs.items():
            names = sorted(set(self._names(folder, "*.json")) | set(self._names(folder, "*.safetensors")))
            for name in names:
                if not ok(name):
                    raise LadleError(f"{folder / name}.*: {folder.name}/ holds no model named {name!r}; ladle never "
                                     f"writes one there", fix="remove the stray files: one name, one model")
                if name in found:
                    raise LadleError(f"two files answer to {name!r}: in {found[name].name}/ and in {folder.name}/",
                                     fix="remove the stray pair: one name, one model")
                found[name] = folder
        return found

    def weights_path(self, name: str) -> Path:
        """The weights of a soup, an ingredient or a baseline (``long``, ``long-swa``) of this run, by name:
        only names the run lists, so no name (``../x``, an absolute path) can reach a file outside it."""
        listed = self.models()
        if name in listed:
            return listed[name] / f"{name}.safetensors"
        raise LadleError(f"{self.path} has no model named {name!r}", fix="choices: " + ", ".join(listed))

    def write(self, relative: str, payload: bytes) -> None:
        """Write a file of the run (a report, a plot) atomically, never through a link."""
        atomic_write(self.path / relative, payload, root=self.path)


def _check_name(sidecar: dict, path: Path, kind: str) -> None:
    """A sidecar is the file it names itself, of the kind its folder holds (a renamed copy is not)."""
    if sidecar.get("name") != path.stem or sidecar.get("format") != kind:
        what = {INGREDIENT_FORMAT: "ingredient", SOUP_FORMAT: "soup"}.get(sidecar.get("format"), "a checkpoint")
        raise LadleError(f"{path} describes {what} {sidecar.get('name')!r}, not {path.stem!r}: it was renamed or "
                         "copied from elsewhere",
                         fix="restore the files ladle wrote; a copied ingredient must be retrained (delete it and its "
                             "pair, then ladle run --resume RUN_DIR)")


def os_lexists(path: Path) -> bool:
    return os.path.lexists(path)


def load_model(path, name: str | None = None, *, model=None):
    """Rebuild an ingredient, soup or baseline as an eval-mode ``torch.nn.Module``.

    ``load_model("RUN/soups/gis.safetensors")`` or ``load_model("RUN", "gis")``; ingredients and baselines by
    their name (``ingredient-03``, ``long-swa``). The weights are read checksum-verified (:mod:`ladle.store`) and
    checked against the model their sidecar describes before that model is built. A run of a model given from Python
    needs that model again: ``model=`` (see :mod:`ladle.models.python_model`), and gets it back as its own class
    (a ``GraphSAGE`` for PyG's ``GraphSAGE``) with the stored weights.
    """
    if model is not None:
        register(model)  # trusted as that object alone: a sidecar naming anything else is refused
    rebuilt = rebuild(path, name)
    return rebuilt.module if isinstance(rebuilt, PythonModel) else rebuilt


def rebuild(path, name: str | None = None):
    """:func:`load_model` in ladle's model protocol (a user's module inside its ``PythonModel`` wrapper), for
    ladle's own passes over it."""
    path, root = Path(path), None
    if name is not None:
        run = RunDir(path)
        path, root = run.weights_path(name), run.path
    state, sidecar = read_weights(path, root=root)
    config, in_channels, out_channels = model_from_sidecar(sidecar)
    check_weights(str(path), state, config, in_channels, out_channels)
    model = build_model(config, in_channels, out_channels)
    model.load_state_dict(state, strict=True)
    return model.eval()
