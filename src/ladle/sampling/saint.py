"""GraphSAINT: Zeng et al., *GraphSAINT: Graph Sampling Based Inductive Learning Method* (ICLR 2020).

Each step trains on the subgraph induced by a sampled node set:

- ``saint-node``: ``budget`` nodes drawn with replacement, P(v) ∝ ||Ã[:, v]||² with Ã = D⁻¹A;
- ``saint-edge``: ``budget`` edges drawn with replacement, P(u, v) ∝ 1/deg(u) + 1/deg(v), with their ends;
- ``saint-rw``: ``budget`` training roots, each walking ``walk_length`` uniform random steps.

The normalisations are estimated by pre-sampling, as in the paper: with C_v and C_uv the
counts of node v and edge (u, v) over M pre-sampled subgraphs, the loss of node v is weighted
by λ_v = M / (C_v · N_train) (summed, so its expectation is the mean training loss), and the
message u -> v by 1/α_uv = C_v / C_uv. The message weights reach the models that take edge
weights (GCN); the others use the loss normalisation alone.
"""
from __future__ import annotations

import math

import torch

from ladle.data.graph import Graph
from ladle.sampling.base import Categorical, LocalIndex, epoch_generator, induced_subgraph, subgraph_batch
from ladle.sampling.options import SamplerConfig
from ladle.seeding import derive_seed


class SaintSampler:
    def __init__(self, graph: Graph, config: SamplerConfig, seed: int):
        self.graph, self.config, self.seed = graph, config, seed
        self.name = config.name
        self.kind = config.name.removeprefix("saint-")
        rowptr, col = graph.csr()
        self.degree = (rowptr[1:] - rowptr[:-1]).to(torch.float64)
        self.train_nodes = graph.mask("train").nonzero().view(-1).cpu()
        self.index = LocalIndex(graph.num_nodes)
        if self.kind == "node":
            inv = 1.0 / self.degree.clamp_min(1) ** 2  # ||D^-1 A[:, v]||^2 = sum over neighbours u of 1/deg(u)^2
            self.node_weight = torch.zeros(graph.num_nodes, dtype=torch.float64).index_add_(
                0, col, inv[torch.repeat_interleave(torch.arange(graph.num_nodes), rowptr[1:] - rowptr[:-1])])
            self.node_weight = torch.where(self.degree > 0, self.node_weight, torch.zeros_like(self.node_weight))
            self.node_draw = Categorical(self.node_weight)
        elif self.kind == "edge":
            src = torch.repeat_interleave(torch.arange(graph.num_nodes), rowptr[1:] - rowptr[:-1])
            upper = src < col  # one draw per undirected edge
            self.pairs = torch.stack([src[upper], col[upper]])
            inv = 1.0 / self.degree.clamp_min(1)
            self.pair_weight = inv[self.pairs[0]] + inv[self.pairs[1]]
            self.pair_draw = Categorical(self.pair_weight)
        self.node_norm, self.edge_norm, self.steps = self._presample()

    # ---- sampling node sets

    def sample_nodes(self, gen: torch.Generator) -> torch.Tensor:
        budget = self.config.budget
        if self.kind == "node":
            drawn = self.node_draw.sample(budget, gen)
        elif self.kind == "edge":
            pick = self.pair_draw.sample(budget, gen)
            drawn = self.pairs[:, pick].reshape(-1)
        else:
            drawn = self._walks(gen)
        return torch.unique(drawn)

    def _walks(self, gen: torch.Generator) -> torch.Tensor:
        rowptr, col = self.graph.csr()
        roots = self.train_nodes[torch.randint(self.train_nodes.numel(), (self.config.budget,), generator=gen)]
        visited, current = [roots], roots
        for _ in range(self.config.walk_length):
            deg = rowptr[current + 1] - rowptr[current]
            step = (torch.rand(current.numel(), generator=gen, dtype=torch.float64) * deg).long()
            moved = col[(rowptr[current] + step).clamp_max(col.numel() - 1)]
            current = torch.where(deg > 0, moved, current)  # an isolated node stays put
            visited.append(current)
        return torch.cat(visited)

    # ---- normalisation

    def _presample(self):
        n, m = self.graph.num_nodes, self.graph.data.edge_index.size(1)
        node_count = torch.zeros(n, dtype=torch.float64)
        edge_count = torch.zeros(m, dtype=torch.float64)
        gen = torch.Generator().manual_seed(derive_seed(self.seed, "saint-presample"))
        sizes, samples = [], 0
        target = self.config.coverage * n
        while node_count.sum() < target:
            nodes = self.sample_nodes(gen)
            _, edge_ids = induced_subgraph(self.graph, nodes, self.index, with_ids=True)
            node_count[nodes] += 1
            edge_count[edge_ids] += 1
            sizes.append(nodes.numel())
            samples += 1
        self.samples, self.node_count, self.edge_count = samples, node_count, edge_count
        train_total = max(self.train_nodes.numel(), 1)
        node_norm = samples / (node_count.clamp_min(1) * train_total)
        # Edge at CSR position p runs neighbour -> owner; its target is the owner (the CSR row).
        rowptr, _ = self.graph.csr()
        owner = torch.repeat_interleave(torch.arange(n), rowptr[1:] - rowptr[:-1])
        edge_norm = (node_count[owner] / edge_count.clamp_min(1)).clamp(0, 1e4)
        steps = self.config.steps or max(1, math.ceil(n / (sum(sizes) / len(sizes))))
        return node_norm.float(), edge_norm.float(), steps

    def probabilities(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Estimated P(node in subgraph) [N] and P(edge in subgraph) [E] from the pre-sampling."""
        return self.node_count / self.samples, self.edge_count / self.samples

    def __len__(self) -> int:
        return self.steps

    def batches(self, epoch: int):
        gen = epoch_generator(self.seed, epoch)
        for _ in range(self.steps):
            nodes = self.sample_nodes(gen)
            edge_index, edge_ids = induced_subgraph(self.graph, nodes, self.index, with_ids=True)
            yield subgraph_batch(self.graph, nodes, self.index, edge_index=edge_index, edge_ids=edge_ids,
                                 loss_weight=self.node_norm[nodes], edge_weight=self.edge_norm[edge_ids])
