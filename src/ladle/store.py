"""The run directory: atomic safetensors checkpoints with JSON sidecars, and ``load_model``.

Layout::

    RUN_DIR/config.toml                                  the resolved RunConfig
    RUN_DIR/ingredients/ingredient-00.safetensors + .json
    RUN_DIR/soups/gis.safetensors + gis.json             (the ensemble has a sidecar only)
    RUN_DIR/results.json, results.jsonl, report.md, plots/*.png

Every file is written to a temporary name in its folder, flushed, fsynced and renamed, so a
reader sees the old file or the new one, never half of one. Weights are written before their
sidecar and the sidecar carries the weights' SHA-256: a checkpoint exists once its sidecar
does, and it is verified on every read. Nothing is ever unpickled.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from ladle.config import ModelConfig, RunConfig, build_config, dump_toml, load_toml
from ladle.errors import LadleError

INGREDIENT_FORMAT = "ladle.ingredient/1"
SOUP_FORMAT = "ladle.soup/1"


def atomic_write(path: Path, payload: bytes) -> None:
    """Write to a temporary file beside ``path``, fsync, rename: ``path`` holds the old bytes or the new, never half.

    A failed write (a full disk, a read-only folder) removes the temporary file and raises one
    LadleError naming the file; whatever was there before is untouched.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise LadleError(f"cannot write {path}: {err.strerror or err}",
                         fix="free some space (or fix the folder's permissions), then ladle run --resume RUN_DIR: "
                             "the files written before are intact") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, value: Any) -> None:
    atomic_write(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise LadleError(f"{path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise LadleError(f"{path} is not valid JSON ({err})", fix="the file is damaged; retrain or restore it") from None


def sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def save_weights(path: Path, state: dict[str, torch.Tensor], sidecar: dict) -> dict:
    """Write ``path`` (safetensors) then its ``.json`` sidecar, both atomically; return the sidecar."""
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}
    payload = save_safetensors(tensors, metadata={"format": sidecar["format"]})
    sidecar = {**sidecar, "sha256": sha256(payload),
               "tensors": {k: [str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in tensors.items()}}
    atomic_write(path, payload)
    write_json(path.with_suffix(".json"), sidecar)
    return sidecar


def read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """Read a checkpoint and its sidecar, verifying the checksum and the tensor list."""
    path = Path(path)
    if path.suffix == ".json":
        path = path.with_suffix(".safetensors")
    sidecar = read_json(path.with_suffix(".json"))
    try:
        payload = path.read_bytes()
    except FileNotFoundError:
        raise LadleError(f"{path} is missing but its sidecar exists", fix="retrain it or restore the file") from None
    if sha256(payload) != sidecar.get("sha256"):
        raise LadleError(f"{path}: checksum mismatch (the file was truncated or changed since it was written)",
                         fix="retrain it or restore the original file")
    try:
        state = load_safetensors(payload)
    except Exception as err:  # safetensors raises several types for a malformed header
        raise LadleError(f"{path} is not a safetensors file ({err}); ladle reads nothing else, and never unpickles",
                         fix="retrain it (delete it and its .json, then ladle run --resume RUN_DIR) or restore it") from None
    listed = sidecar.get("tensors", {})
    if set(listed) != set(state):
        raise LadleError(f"{path}: tensors disagree with the sidecar ({sorted(set(listed) ^ set(state))[:5]})",
                         fix="one of the pair was changed: restore both files, or retrain (ladle run --resume)")
    return state, sidecar


def model_from_sidecar(sidecar: dict) -> tuple[ModelConfig, int, int]:
    try:
        spec = dict(sidecar["model"])
        in_channels, out_channels = spec.pop("in_channels"), spec.pop("out_channels")
        return ModelConfig(**spec), int(in_channels), int(out_channels)
    except (KeyError, TypeError) as err:
        raise LadleError(f"sidecar has no usable model description ({err})",
                         fix="restore the .json written beside the weights") from None


def load_model(path: str | Path, name: str | None = None) -> torch.nn.Module:
    """Rebuild an ingredient or soup as an eval-mode ``torch.nn.Module``.

    ``load_model("RUN/soups/gis.safetensors")`` or ``load_model("RUN", "gis")``; ingredients
    by their name (``ingredient-03``).
    """
    from ladle.models import build_model

    path = Path(path)
    if name is not None:
        path = RunDir(path).weights_path(name)
    state, sidecar = read_weights(path)
    config, in_channels, out_channels = model_from_sidecar(sidecar)
    model = build_model(config, in_channels, out_channels)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise LadleError(f"{path}: weights do not fit the model its sidecar describes ({err})") from None
    return model.eval()


class RunDir:
    """One run's folder."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.ingredients = self.path / "ingredients"
        self.soups = self.path / "soups"
        self.plots = self.path / "plots"

    # ---- creating and opening

    def is_run(self) -> bool:
        return (self.path / "config.toml").is_file()

    def create(self, config: RunConfig) -> RunDir:
        if self.path.exists() and not self.path.is_dir():
            raise LadleError(f"{self.path} exists and is not a folder", fix="choose another --out")
        if self.path.exists() and any(self.path.iterdir()):
            what = "a ladle run" if self.is_run() else "not a ladle run"
            raise LadleError(f"output folder {self.path} already exists and is {what}",
                             fix="choose another --out, or remove the folder")
        self.ingredients.mkdir(parents=True, exist_ok=True)
        self.soups.mkdir(exist_ok=True)
        atomic_write(self.path / "config.toml", dump_toml(config.to_dict()).encode())
        return self

    def config(self) -> RunConfig:
        if not self.is_run():
            raise LadleError(f"{self.path} is not a ladle run (no config.toml)", fix="give the folder ladle run wrote")
        return build_config(load_toml(self.path / "config.toml"), source=str(self.path / "config.toml"))

    # ---- ingredients and soups

    def save_ingredient(self, record, dataset: dict) -> dict:
        spec = record.spec
        sidecar = {
            "format": INGREDIENT_FORMAT,
            "name": record.name,
            "index": spec.index,
            "model": {**spec.model.__dict__, "in_channels": record.in_channels, "out_channels": record.out_channels},
            "train": dict(spec.train.__dict__),
            "sampler": {**spec.sampler.__dict__, "fanouts": list(spec.sampler.fanouts)},
            "partition": None if spec.part is None else {**spec.partition.__dict__, "part": spec.part},
            "seeds": {"init": spec.init_seed, "data": spec.data_seed},
            "dataset": dataset,
            "scores": {"train": record.train, "val": record.val, "test": record.test},
            "best_epoch": record.best_epoch,
            "seconds": record.seconds,
            "device": record.device,
            "peak_device_mb": record.peak_device_mb,
            "history": record.history,
        }
        return save_weights(self.ingredients / f"{record.name}.safetensors", record.state, sidecar)

    def log_timeline(self, done) -> None:
        """Append which worker trained an ingredient, and when (``timeline.jsonl``, one object per line)."""
        with open(self.path / "timeline.jsonl", "a") as f:
            f.write(json.dumps(dataclasses.asdict(done)) + "\n")

    def timeline(self) -> list[dict]:
        path = self.path / "timeline.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def ingredient_names(self) -> list[str]:
        """Names of ingredients whose sidecar exists (a checkpoint is complete once it does)."""
        return sorted(p.stem for p in self.ingredients.glob("ingredient-*.json"))

    def load_ingredient(self, name: str) -> tuple[dict[str, torch.Tensor], dict]:
        return read_weights(self.ingredients / f"{name}.safetensors")

    def ingredient_sidecars(self) -> list[dict]:
        return [read_json(self.ingredients / f"{n}.json") for n in self.ingredient_names()]

    def save_soup(self, name: str, state, sidecar: dict) -> dict:
        sidecar = {"format": SOUP_FORMAT, "name": name, **sidecar}
        if state is None:
            write_json(self.soups / f"{name}.json", sidecar)
            return sidecar
        return save_weights(self.soups / f"{name}.safetensors", state, sidecar)

    def soup_sidecars(self) -> dict[str, dict]:
        return {p.stem: read_json(p) for p in sorted(self.soups.glob("*.json"))}

    def weights_path(self, name: str) -> Path:
        """The weights of a soup or an ingredient of this run, by name: only names the run lists, so no
        name (``../x``, an absolute path) can reach a file outside it."""
        soups = [p.stem for p in sorted(self.soups.glob("*.safetensors"))]
        if name in soups:
            return self.soups / f"{name}.safetensors"
        if name in self.ingredient_names():
            return self.ingredients / f"{name}.safetensors"
        raise LadleError(f"{self.path} has no model named {name!r}",
                         fix="choices: " + ", ".join(soups + self.ingredient_names()))
