"""``ladle verify RUN_DIR``: check every checkpoint and sidecar of a run without trusting any of them.

For each ingredient and soup: the sidecar parses, the weights' SHA-256 matches it, the file is a
safetensors file (never unpickled) whose tensors are the ones the sidecar lists, every value is
finite, the model description rebuilds; across the run: one architecture and one dataset
fingerprint, and every soup's recorded ingredient checksums match the ingredients on disk.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ladle.errors import LadleError
from ladle.store import RunDir, model_from_sidecar, read_json, read_weights


@dataclass
class Check:
    path: str
    ok: bool
    detail: str


def verify_run(path) -> list[Check]:
    run_dir = RunDir(path)
    checks = []
    try:
        run_dir.config()
        checks.append(Check(str(run_dir.path / "config.toml"), True, "valid config"))
    except LadleError as err:
        return [Check(str(run_dir.path / "config.toml"), False, err.message)]
    ingredient_sha, models, fingerprints = {}, set(), set()
    sidecars = sorted(run_dir.ingredients.glob("*.json")) + sorted(run_dir.soups.glob("*.json"))
    for sidecar_path in sidecars:
        weights_path = sidecar_path.with_suffix(".safetensors")
        try:
            if not weights_path.exists() and read_json(sidecar_path).get("is_soup") is False:
                checks.append(Check(str(sidecar_path), True, "ensemble: no weights of its own"))
                continue
            state, sidecar = read_weights(weights_path)
            bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
            if bad:
                raise LadleError(f"{weights_path}: non-finite values in {', '.join(bad[:3])}")
            model, _, _ = model_from_sidecar(sidecar)
            models.add(repr(model))
            fingerprints.add(sidecar.get("dataset", {}).get("fingerprint"))
            if sidecar_path.parent == run_dir.ingredients:
                ingredient_sha[sidecar_path.stem] = sidecar["sha256"]
            checks.append(Check(str(weights_path), True, f"sha256 {sidecar['sha256'][:12]}…, {len(state)} tensors"))
        except LadleError as err:
            checks.append(Check(str(weights_path), False, err.message))
    if len(models) > 1:
        checks.append(Check(str(run_dir.path), False, "checkpoints describe different architectures"))
    if len(fingerprints) > 1:
        checks.append(Check(str(run_dir.path), False, "checkpoints were trained on different graphs"))
    for name, sidecar in run_dir.soup_sidecars().items():
        recorded = sidecar.get("ingredients_sha256", {})
        wrong = [n for n, sha in recorded.items() if ingredient_sha.get(n) != sha]
        if wrong:
            checks.append(Check(str(run_dir.soups / f"{name}.json"), False,
                                f"made from ingredients that differ from those on disk: {', '.join(wrong)}"))
    return checks
