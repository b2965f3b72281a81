"""Samplers: one protocol, one file each; all vectorised torch, PyG mini-batch conventions.

The registry (this module imports no torch): each sampler's class and its options dataclass
(:mod:`ladle.sampling.options`). A sampler is built as ``cls(graph, config, seed, ...)`` with ``config`` its validated
options (:class:`~ladle.sampling.options.SamplerConfig`) and, of the context ``num_layers``, ``cache_dir`` and
``adjacency``, the keywords its ``__init__`` declares.
"""
import inspect

from ladle.registry import Registry

SAMPLERS = Registry("sampler")
SAMPLERS.add("full", "ladle.sampling.full:FullBatch", "ladle.sampling.options:FullOptions",
             "the whole graph, one batch per epoch", traits=("whole-graph",))
SAMPLERS.add("neighbor", "ladle.sampling.neighbor:NeighborSampler", "ladle.sampling.options:NeighborOptions",
             "GraphSAGE fanouts, without replacement", aliases=("neighbour", "sage"))
SAMPLERS.add("cluster", "ladle.sampling.cluster:ClusterSampler", "ladle.sampling.options:ClusterOptions",
             "ClusterGCN on a METIS partition", aliases=("clustergcn",))
SAMPLERS.add("saint-node", "ladle.sampling.saint:SaintSampler", "ladle.sampling.options:SaintOptions",
             "GraphSAINT, nodes drawn by degree")
SAMPLERS.add("saint-edge", "ladle.sampling.saint:SaintSampler", "ladle.sampling.options:SaintOptions",
             "GraphSAINT, edges drawn by degree")
SAMPLERS.add("saint-rw", "ladle.sampling.saint:SaintSampler", "ladle.sampling.options:SaintOptions",
             "GraphSAINT, random walks", aliases=("graphsaint",))
SAMPLERS.add("fastgcn", "ladle.sampling.layerwise:LayerwiseSampler", "ladle.sampling.options:LayerwiseOptions",
             "FastGCN, layer-wise importance sampling")
SAMPLERS.add("ladies", "ladle.sampling.layerwise:LayerwiseSampler", "ladle.sampling.options:LayerwiseOptions",
             "LADIES, layer-dependent importance sampling")

DEFAULT_SAMPLER = "full"  # a run's sampler when it names none (and an old sidecar's, which did not record one)


def build_sampler(graph, config, seed: int, *, num_layers: int = 2, cache_dir=None, adjacency: str | None = None):
    """The sampler ``config`` names, over ``graph``; ``num_layers`` is the model's depth (the layer-wise samplers
    need it), ``adjacency`` the sparse adjacency a full batch carries for the model (``GNN.adjacency``)."""
    cls = SAMPLERS.get(config.name)
    context = {"num_layers": num_layers, "cache_dir": cache_dir, "adjacency": adjacency}
    wanted = inspect.signature(cls).parameters  # each sampler declares the context it reads, and gets that alone
    return cls(graph, config, seed, **{k: v for k, v in context.items() if k in wanted})


__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "build_sampler"]
