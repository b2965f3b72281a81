"""ClusterGCN: Chiang et al., *Cluster-GCN* (KDD 2019).

The graph is cut into ``parts`` METIS parts once (cached); each batch joins
``parts_per_batch`` random parts and keeps every edge among them, so the edges METIS cut
between the chosen parts come back. The loss covers the training nodes of the batch.
"""
from __future__ import annotations

import torch

from ladle.data.graph import Graph
from ladle.sampling.base import LocalIndex, epoch_generator, subgraph_batch
from ladle.sampling.options import SamplerConfig
from ladle.sampling.partition import metis_parts, part_nodes


class ClusterSampler:
    name = "cluster"

    def __init__(self, graph: Graph, config: SamplerConfig, seed: int, *, cache_dir=None):
        self.graph, self.config, self.seed = graph, config, seed
        # The partition depends on the graph only (seed 0), so every ingredient of a run shares one cache entry.
        self.membership = metis_parts(graph, config.parts, 0, cache_dir)
        self.parts = part_nodes(self.membership, config.parts)
        self.index = LocalIndex(graph.num_nodes)

    def __len__(self) -> int:
        return -(-self.config.parts // self.config.parts_per_batch)

    def batches(self, epoch: int):
        gen = epoch_generator(self.seed, epoch)
        order = torch.randperm(self.config.parts, generator=gen)
        for group in order.split(self.config.parts_per_batch):
            nodes = torch.cat([self.parts[int(p)] for p in group])
            yield subgraph_batch(self.graph, nodes, self.index)
