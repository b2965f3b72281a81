"""Synthetic graphs: a contextual stochastic block model with planted communities.

Deshpande et al., *Contextual Stochastic Block Models* (NeurIPS 2018). Each node gets a class;
each edge joins two nodes of one class with probability ``homophily`` and otherwise a node of
another class; features are a class mean scaled by ``signal`` plus unit Gaussian noise.

A class-level CSBM has no locality beyond its classes, so graph partitioners cut almost half
of its edges, unlike real graphs. ``locality`` plants communities of ``community`` nodes
inside each class: that share of the intra-class edges stays inside the source's community.

Generation is vectorised (one draw per edge, one sort to deduplicate): a million nodes and ten
million edges take seconds on one core.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import torch

from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError, suggest
from ladle.profiling import gib, memory_available, too_big


@dataclass(frozen=True)
class CSBMConfig:
    """Args:
        nodes: number of nodes N (default 3000).
        classes: number of classes C (default 5).
        degree: average degree, i.e. 2E/N before deduplication (default 10).
        homophily: probability an edge stays inside its class (default 0.7).
        features: feature dimension F (default 32).
        signal: length of each class mean; 0 makes features useless (default 1.0).
        locality: share of intra-class edges that stay inside a planted community (default 0.8).
        community: nodes per planted community (default 50).
        train, val: fractions of nodes in the training and validation splits; the rest is test.
        seed: generator seed (default 0).
    """

    nodes: int = 3000
    classes: int = 5
    degree: float = 10.0
    homophily: float = 0.7
    features: int = 32
    signal: float = 1.0
    locality: float = 0.8
    community: int = 50
    train: float = 0.3
    val: float = 0.2
    seed: int = 0

    def __post_init__(self):
        check_options(self, "csbm")


def check_options(config, kind: str) -> None:
    """The options every synthetic family shares (nodes, classes, degree, features, homophily, locality, signal,
    splits, seed), each a finite number in its range, and the graph within the memory free; one message each."""
    fix = f"see ladle datasets: {kind}:nodes=...,classes=...; every option is a finite number"
    for f in fields(config):
        value = getattr(config, f.name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise LadleError(f"{kind} {f.name} must be a finite number, got {value!r}", fix=fix)
    if config.nodes < 2 or config.classes < 2 or config.classes > config.nodes:
        raise LadleError(f"{kind} needs 2 <= classes <= nodes, got nodes={config.nodes} classes={config.classes}",
                         fix=fix)
    if config.features < 1 or config.community < 1 or not 0 < config.degree < config.nodes:
        raise LadleError(f"{kind} needs features >= 1, community >= 1 and 0 < degree < nodes", fix=fix)
    for name in ("homophily", "locality"):
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise LadleError(f"{kind} {name} must be in [0, 1], got {getattr(config, name)}", fix=fix)
    if config.signal < 0 or config.seed < 0:
        raise LadleError(f"{kind} needs signal >= 0 and seed >= 0, got {config.signal} and {config.seed}", fix=fix)
    if not (0 < config.train and 0 < config.val and config.train + config.val < 1):
        raise LadleError(f"{kind} needs train > 0, val > 0 and train + val < 1, got {config.train}, {config.val}",
                         fix=fix)
    # Features, then each drawn edge a few times over (pairs, keys, the sort) before deduplication.
    need = 4 * config.nodes * config.features + 8 * 6 * config.nodes * config.degree
    if too_big(need):
        raise LadleError(f"{kind} with nodes={config.nodes}, features={config.features}, degree={config.degree} "
                         f"needs about {gib(need)}, more than the {gib(memory_available())} of memory free",
                         fix="choose fewer nodes, features or a lower degree")


PRESETS = {
    "csbm": CSBMConfig(),
    # Sized like ogbn-arxiv (169,343 nodes, 1,166,243 undirected edges) and ogbn-products, with the signal
    # calibrated so that a converged neighbour-sampled GraphSAGE lands near the real graphs' published
    # single-model accuracy (benchmarks/RESULTS.md, "Calibrating the synthetic graphs"; benchmarks/calibrate.py).
    "csbm-arxiv": CSBMConfig(nodes=169_343, classes=40, degree=13.774, features=128, signal=0.64,
                             community=100, train=0.54, val=0.18),
    "csbm-products": CSBMConfig(nodes=2_449_029, classes=47, degree=50.55, features=100, signal=0.48,
                                community=400, train=0.08, val=0.02),
}


def parse_csbm_spec(spec: str) -> CSBMConfig:
    """``csbm``, ``csbm-arxiv``, ``csbm-products``, each optionally ``:key=value,...``."""
    return parse_spec(spec, PRESETS, "csbm")


def parse_spec(spec: str, presets: dict, kind: str):
    """``PRESET[:key=value,...]`` of a synthetic family: the preset with those options changed."""
    name, _, body = spec.partition(":")
    name = name.lower()
    if name not in presets:
        raise LadleError(f"unknown {kind} preset {name!r}", fix=suggest(name, presets))
    config = presets[name]
    types = {f.name: f.type for f in fields(config)}
    changes = {}
    for item in filter(None, body.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in types:
            raise LadleError(f"dataset {spec!r}: bad option {item!r}", fix="options are " + ", ".join(types))
        try:
            changes[key] = (int if types[key] == "int" else float)(value)
        except ValueError:
            raise LadleError(f"dataset {spec!r}: {key}={value!r} is not a {types[key]}",
                             fix=f"write {key} as a{'n integer' if types[key] == 'int' else ' number'}") from None
    return replace(config, **changes)


def csbm_name(config: CSBMConfig) -> str:
    return spec_name(config, PRESETS, "csbm")


def spec_name(config, presets: dict, kind: str) -> str:
    """The preset's name, or ``KIND:key=value,...`` for the options that differ from the family's default."""
    for name, preset in presets.items():
        if preset == config:
            return name
    base = presets[kind]
    return f"{kind}:" + ",".join(f"{k}={v}" for k, v in asdict(config).items() if getattr(base, k) != v)


def generate_csbm(config: CSBMConfig) -> Graph:
    gen = torch.Generator().manual_seed(config.seed)
    n, c = config.nodes, config.classes
    y = torch.randperm(n, generator=gen) % c  # balanced classes in random order
    order = torch.argsort(y, stable=True)  # nodes grouped by class
    size = torch.bincount(y, minlength=c)
    start = torch.cumsum(size, 0) - size
    position = torch.empty(n, dtype=torch.long)
    position[order] = torch.arange(n)
    edge_index = _edges_to_target(config, y, order, size, start, position, gen)
    x = _features(config, y, gen)
    train, val, test = _split(config, gen)
    return make_graph(x, edge_index, y, train, val, test, name=csbm_name(config), num_classes=c, canonical=True)


def _edges_to_target(config, y, order, size, start, position, gen) -> torch.Tensor:
    """Draw edges until the deduplicated undirected count reaches round(N * degree / 2).

    Planted communities make duplicates common, so each round draws the deficit scaled by the
    share of draws that survived so far; a last random subset trims the overshoot.
    """
    target = int(round(config.nodes * config.degree / 2))
    pairs = torch.empty(2, 0, dtype=torch.long)
    drawn = 0
    for _ in range(8):
        have = pairs.size(1)
        if have >= target:
            break
        keep = have / drawn if drawn else 1.0
        extra = int((target - have) / max(keep, 0.05) * 1.02) + 1
        new = _sample_edges(config, extra, y, order, size, start, position, gen)
        drawn += extra
        pairs = _upper_unique(torch.cat([pairs, new], 1), config.nodes)
    if pairs.size(1) > target:
        pairs = pairs[:, torch.randperm(pairs.size(1), generator=gen)[:target].sort().values]
    return torch.cat([pairs, pairs.flip(0)], 1)[:, _sort_key(torch.cat([pairs, pairs.flip(0)], 1), config.nodes)]


def _upper_unique(pairs: torch.Tensor, n: int) -> torch.Tensor:
    lo, hi = torch.minimum(pairs[0], pairs[1]), torch.maximum(pairs[0], pairs[1])
    keep = lo != hi
    key = torch.unique(lo[keep] * n + hi[keep])
    return torch.stack([key // n, key % n])


def _sort_key(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    return torch.argsort(edge_index[0] * n + edge_index[1])


def _sample_edges(config, m, y, order, size, start, position, gen) -> torch.Tensor:
    n, c = config.nodes, config.classes
    src = torch.randint(n, (m,), generator=gen)
    u = torch.rand(m, generator=gen)
    intra = u < config.homophily
    in_community = u < config.homophily * config.locality
    # Target class: the source's own, or a uniformly chosen other one.
    shift = torch.randint(1, c, (m,), generator=gen)
    cls = torch.where(intra, y[src], (y[src] + shift) % c)
    lo, span = start[cls], size[cls]
    # Communities are consecutive blocks of `community` nodes in class order.
    offset = position[src] - start[y[src]]
    block = start[y[src]] + offset // config.community * config.community
    block_span = torch.minimum(torch.full_like(block, config.community), start[y[src]] + size[y[src]] - block)
    lo = torch.where(in_community, block, lo)
    span = torch.where(in_community, block_span, span)
    pick = lo + (torch.rand(m, generator=gen) * span).long().clamp_max(span - 1)
    return torch.stack([src, order[pick]])


def _features(config, y, gen) -> torch.Tensor:
    means = torch.randn(config.classes, config.features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True) * config.signal
    x = torch.randn(config.nodes, config.features, generator=gen)
    x += means[y]
    return x


def _split(config, gen):
    n = config.nodes
    perm = torch.randperm(n, generator=gen)
    n_train, n_val = int(config.train * n), int(config.val * n)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True
    return masks
