"""Samplers: one protocol, one file each; all vectorised torch, PyG mini-batch conventions."""
from ladle.sampling.base import Sampler, build_sampler

__all__ = ["Sampler", "build_sampler"]
