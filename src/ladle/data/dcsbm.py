"""Synthetic graphs that look like real ones: a degree-corrected contextual SBM.

Karrer & Newman, *Stochastic blockmodels and community structure in networks* (Phys. Rev. E, 2011), with node
features as in Deshpande et al.'s contextual SBM (NeurIPS 2018). Unlike :mod:`ladle.data.csbm` (equal degrees,
balanced classes), each node has a degree propensity θ drawn from a power law (exponent ``exponent``, mean 1, capped
at ``max_degree / degree``), so degrees are heavy-tailed as in citation and co-purchase graphs; class sizes fall as
``(k + 1) ** -imbalance``; an edge stays in its source's class with probability ``homophily`` and, inside the class,
in the source's planted community of ``community`` nodes with probability ``locality`` (partitioners then find
real cuts). Both ends are drawn in proportion to θ (Chung-Lu within blocks), so the expected degree of node i is
about ``degree`` · θ_i. Each node's features are its class mean (length ``signal``) plus unit Gaussian noise in
``features`` dimensions: the per-node signal-to-noise ratio is ``signal² / features`` per dimension, stated, not tuned
per node.

Edges are drawn in chunks of :data:`CHUNK` draws, chunk j from its own generator (seed, j): the same graph whether
the chunks are drawn at once or one after another (a writer can stream them), vectorised throughout.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ladle.data.csbm import check_options, parse_spec, spec_name
from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError
from ladle.seeding import derive_seed

CHUNK = 1 << 20  # edge draws per chunk (each from its own generator)


@dataclass(frozen=True)
class DCSBMConfig:
    """Args:
        nodes: number of nodes N (default 3000).
        classes: number of classes C (default 5).
        degree: 2 x (edge draws) / N (default 10); a pair drawn twice is one edge and a self-loop none, so the graph's
            mean degree is lower, the more so the heavier the tail (``benchmarks/calibrate.py`` states it).
        exponent: power-law exponent γ of the degree propensities, P(θ) ∝ θ^-γ (default 2.5; real graphs 2-3).
        max_degree: cap on a node's expected degree (default 1000).
        imbalance: class sizes ∝ (k + 1)^-imbalance (default 1.0; 0: balanced).
        homophily: probability an edge stays inside its source's class (default 0.7).
        locality: share of the intra-class edges that stay inside the source's planted community (default 0.8).
        community: nodes per planted community (default 50).
        features: feature dimension F (default 32).
        signal: length of each class mean against unit noise per dimension (default 1.0).
        train, val: fractions of nodes in the training and validation splits; the rest is test.
        seed: generator seed (default 0).
    """

    nodes: int = 3000
    classes: int = 5
    degree: float = 10.0
    exponent: float = 2.5
    max_degree: float = 1000.0
    imbalance: float = 1.0
    homophily: float = 0.7
    locality: float = 0.8
    community: int = 50
    features: int = 32
    signal: float = 1.0
    train: float = 0.3
    val: float = 0.2
    seed: int = 0

    def __post_init__(self):
        check_options(self, "dcsbm")
        if self.exponent <= 2.0 or self.max_degree < self.degree or self.imbalance < 0:
            raise LadleError(f"dcsbm needs exponent > 2 (a finite mean degree), max_degree >= degree and imbalance "
                             f">= 0, got {self.exponent}, {self.max_degree}, {self.imbalance}",
                             fix="see ladle datasets: dcsbm:exponent=2.5,max_degree=1000,imbalance=1")


# Sized like ogbn-arxiv and ogbn-products; calibrated with benchmarks/calibrate.py (see benchmarks/RESULTS.md).
PRESETS = {
    "dcsbm": DCSBMConfig(),
    "dcsbm-arxiv": DCSBMConfig(nodes=169_343, classes=40, degree=13.774, exponent=2.4, max_degree=13_000,
                               features=128, signal=1.0, community=100, train=0.54, val=0.18),
    "dcsbm-products": DCSBMConfig(nodes=2_449_029, classes=47, degree=50.55, exponent=2.4, max_degree=17_000,
                                  features=100, signal=0.77, community=400, train=0.08, val=0.02),
}


def parse_dcsbm_spec(spec: str) -> DCSBMConfig:
    """``dcsbm``, ``dcsbm-arxiv``, ``dcsbm-products``, each optionally ``:key=value,...``."""
    return parse_spec(spec, PRESETS, "dcsbm")


def dcsbm_name(config: DCSBMConfig) -> str:
    return spec_name(config, PRESETS, "dcsbm")


class Blocks:
    """The nodes in class order, communities as consecutive blocks of it, and θ's running sum in that order: a draw
    in proportion to θ inside any class or community is one uniform number and one binary search."""

    def __init__(self, config: DCSBMConfig, gen: torch.Generator):
        n, c = config.nodes, config.classes
        share = (torch.arange(1, c + 1, dtype=torch.float64) ** -config.imbalance)
        self.y = torch.multinomial(share / share.sum(), n, replacement=True, generator=gen)
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        theta = (1 - u) ** (-1 / (config.exponent - 1))  # Pareto, minimum 1, P(θ) ∝ θ^-γ
        theta = theta.clamp_max(config.max_degree / config.degree * theta.mean())
        self.theta = theta / theta.mean()
        self.order = torch.argsort(self.y, stable=True)
        size = torch.bincount(self.y, minlength=c)
        self.start = torch.cumsum(size, 0) - size
        self.end = self.start + size
        self.position = torch.empty(n, dtype=torch.long)
        self.position[self.order] = torch.arange(n)
        self.cum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(self.theta[self.order], 0)])

    def _node(self, target: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        at = torch.searchsorted(self.cum, target, right=True) - 1
        return self.order[torch.minimum(torch.maximum(at, lo), hi - 1)]

    def pick(self, lo: torch.Tensor, hi: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """A node of class-order positions [lo, hi) for each draw, in proportion to θ."""
        return self._node(self.cum[lo] + u * (self.cum[hi] - self.cum[lo]), lo, hi)

    def pick_outside(self, cls: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """A node of any class but ``cls``, in proportion to θ: the running sum with that class's stretch cut out."""
        lo, hi = self.cum[self.start[cls]], self.cum[self.end[cls]]
        target = u * (self.cum[-1] - (hi - lo))
        target = torch.where(target >= lo, target + (hi - lo), target)
        n = torch.full_like(cls, self.order.numel())
        return self._node(target, torch.zeros_like(cls), n)


def draw_chunk(config: DCSBMConfig, blocks: Blocks, index: int, draws: int) -> torch.Tensor:
    """Chunk ``index`` of the edge draws, [2, draws], from its own generator: a source in proportion to θ, a target
    in its community, in its class, or in any other class, in proportion to θ."""
    gen = torch.Generator().manual_seed(derive_seed(config.seed, "dcsbm-edges", index))
    n = config.nodes
    everyone = torch.zeros(draws, dtype=torch.long)
    src = blocks.pick(everyone, torch.full((draws,), n), torch.rand(draws, generator=gen, dtype=torch.float64))
    u = torch.rand(draws, generator=gen)
    intra, in_community = u < config.homophily, u < config.homophily * config.locality
    own = blocks.y[src]
    offset = blocks.position[src] - blocks.start[own]
    block = blocks.start[own] + offset // config.community * config.community
    lo = torch.where(in_community, block, blocks.start[own])
    hi = torch.where(in_community, torch.minimum(block + config.community, blocks.end[own]), blocks.end[own])
    v = torch.rand(draws, generator=gen, dtype=torch.float64)
    dst = torch.where(intra, blocks.pick(lo, hi, v), blocks.pick_outside(own, v))  # outside: another class, by θ
    return torch.stack([src, dst])


def chunks(config: DCSBMConfig, blocks: Blocks):
    """The edge draws, chunk by chunk: round(N · degree / 2) draws in all."""
    total = int(round(config.nodes * config.degree / 2))
    for index, begin in enumerate(range(0, total, CHUNK)):
        yield draw_chunk(config, blocks, index, min(CHUNK, total - begin))


def generate_dcsbm(config: DCSBMConfig) -> Graph:
    gen = torch.Generator().manual_seed(config.seed)
    blocks = Blocks(config, gen)
    pairs = torch.cat(list(chunks(config, blocks)), 1)
    lo, hi = torch.minimum(pairs[0], pairs[1]), torch.maximum(pairs[0], pairs[1])
    keep = lo != hi  # a self-loop drawn is dropped; a pair drawn twice is one edge
    key = torch.unique(lo[keep] * config.nodes + hi[keep])
    upper = torch.stack([key // config.nodes, key % config.nodes])
    both = torch.cat([upper, upper.flip(0)], 1)
    edge_index = both[:, torch.argsort(both[0] * config.nodes + both[1])]
    means = torch.randn(config.classes, config.features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True) * config.signal
    x = torch.randn(config.nodes, config.features, generator=gen) + means[blocks.y]
    perm = torch.randperm(config.nodes, generator=gen)
    n_train, n_val = int(config.train * config.nodes), int(config.val * config.nodes)
    masks = [torch.zeros(config.nodes, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True
    return make_graph(x, edge_index, blocks.y, *masks, name=dcsbm_name(config), num_classes=config.classes,
                      canonical=True)
