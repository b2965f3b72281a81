"""Explicit, recorded seeds.

A run has one pipeline seed. Everything random below it gets its own seed derived from
(pipeline seed, purpose, index) by hashing, so adding an ingredient never shifts the seeds
of the others and initialisation never shares a stream with data order.
"""
from __future__ import annotations

import hashlib
import random


def derive_seed(seed: int, purpose: str, index: int = 0) -> int:
    digest = hashlib.sha256(f"ladle:{seed}:{purpose}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def seed_everything(seed: int) -> None:
    """Seed the global generators torch layers draw from (dropout, parameter init)."""
    # start-up: `ladle --help` loads this module, and no torch
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
