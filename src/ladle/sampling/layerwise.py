"""Layer-wise importance sampling for GCNs.

- ``fastgcn``: Chen, Ma & Xiao, *FastGCN: Fast Learning with Graph Convolutional Networks via
  Importance Sampling* (ICLR 2018). Every layer draws ``budget`` nodes i.i.d. from one global
  distribution q(u) ∝ ||Â[:, u]||².
- ``ladies``: Zou et al., *Layer-Dependent Importance Sampling for Training Deep and Large Graph
  Convolutional Networks* (NeurIPS 2019). Layer l draws ``budget`` nodes i.i.d. from
  q(u) ∝ Σ_{v ∈ S_l} Â(v, u)², restricted to the neighbours of the layer above, so no draw is wasted.

Sampling runs top-down from a shuffled batch of training nodes (the seeds, S_L). Layer l's
input set is S_{l-1} = S_l ∪ (drawn nodes): as in LADIES's reference code, the nodes of the
layer above are kept so that each keeps its own representation (the self-loop term, computed
exactly). A drawn neighbour u of target v carries the unbiased importance weight
Â(v, u) · c_u / (budget · q(u)), with c_u the times u was drawn, so in expectation a sampled
layer computes the full ``Â h`` (tested). Â = D̃^-1/2 (A + I) D̃^-1/2, GCN's propagation.

The sets are nested (S_0 ⊇ … ⊇ S_L), so one batch holds all layers on one node set: ``n_id``
is S_0 with the seeds first (``batch_size`` of them), ``edge_index`` and ``edge_weight`` hold
every layer's sampled edges (no self-loops), ``layer_ptr`` [L + 1] delimits the layers (model
layer i uses edges ``layer_ptr[i]:layer_ptr[i+1]``) and ``self_weight`` [N_batch] is Â(v, v).
GCN uses the weights as its propagation; models without edge weights aggregate over the sampled
edges and their own root term.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from ladle.data.graph import Graph
from ladle.sampling.base import Categorical, edges_of, seed_batches
from ladle.sampling.options import SamplerConfig


class LayerwiseSampler:
    """FastGCN or LADIES batches for a model of ``num_layers`` layers; ``budget`` draws per layer."""

    carries_edge_attr = False  # its layers' edges are re-drawn and re-weighted, not the graph's edges

    def __init__(self, graph: Graph, config: SamplerConfig, seed: int, *, num_layers: int = 2):
        self.graph, self.config, self.seed, self.num_layers = graph, config, seed, num_layers
        self.name = config.name
        rowptr, col = (t.cpu() for t in graph.csr())
        self.rowptr, self.col = rowptr, col
        degree = (rowptr[1:] - rowptr[:-1]).to(torch.float64)
        self.dinv = (degree + 1.0).rsqrt()  # D̃^-1/2
        self.train_nodes = graph.mask("train").nonzero().view(-1).cpu()
        if self.name == "fastgcn":
            # ||Â[:, u]||² over u's neighbours (the self term is exact, never sampled).
            owner = torch.repeat_interleave(torch.arange(graph.num_nodes), rowptr[1:] - rowptr[:-1])
            column = torch.zeros(graph.num_nodes, dtype=torch.float64).index_add_(0, owner, self.dinv[col] ** 2)
            self.global_q = column * self.dinv**2
            total = self.global_q.sum()
            self.global_q = self.global_q / total if total > 0 else self.global_q
            self.global_draw = Categorical(self.global_q)
        self.mark = torch.zeros(graph.num_nodes, dtype=torch.float64)  # draws per node, reset after each layer
        self.local = torch.full((graph.num_nodes,), -1, dtype=torch.long)

    def __len__(self) -> int:
        return -(-self.train_nodes.numel() // self.config.batch_size)

    def batches(self, epoch: int):
        for seeds, gen in seed_batches(self.train_nodes, self.seed, epoch, self.config.batch_size):
            yield self.sample(seeds, gen)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Data:
        self.local[seeds] = torch.arange(seeds.numel())
        nodes, targets, total = [seeds], seeds, seeds.numel()
        layers = []  # top-down: (src_local, dst_local, weight)
        for _ in range(self.num_layers):
            drawn, src, dst, weight = self._sample_layer(targets, gen)
            fresh = drawn[self.local[drawn] < 0]
            self.local[fresh] = torch.arange(total, total + fresh.numel())
            total += fresh.numel()
            nodes.append(fresh)
            layers.append((self.local[src], self.local[dst], weight))
            targets = torch.cat([targets, fresh])
        n_id = torch.cat(nodes)
        self.local[n_id] = -1
        layers.reverse()  # model layer 0 reads the widest set
        sizes = torch.tensor([0] + [layer[0].numel() for layer in layers])
        data = self.graph.data
        return Data(
            x=data.x.index_select(0, n_id), y=data.y.index_select(0, n_id), n_id=n_id,
            edge_index=torch.stack([torch.cat([s for s, _, _ in layers]), torch.cat([d for _, d, _ in layers])]),
            edge_weight=torch.cat([w for _, _, w in layers]).float(), layer_ptr=torch.cumsum(sizes, 0),
            self_weight=(self.dinv[n_id] ** 2).float(), batch_size=seeds.numel(), num_nodes=n_id.numel())

    def _sample_layer(self, targets: torch.Tensor, gen: torch.Generator):
        """Draw the layer's nodes; return them (distinct) and the weighted edges drawn node -> target."""
        owner, neighbour = edges_of(self.rowptr, self.col, targets)
        coefficient = self.dinv[targets[owner]] * self.dinv[neighbour]  # Â(v, u)
        budget = self.config.budget
        if self.name == "fastgcn":
            q_all = self.global_q
            if neighbour.numel() == 0 or float(q_all.sum()) == 0.0:
                return _empty_layer()
            draws = self.global_draw.sample(budget, gen)
        else:
            if neighbour.numel() == 0:
                return _empty_layer()
            candidates, inverse = torch.unique(neighbour, return_inverse=True)
            q = torch.zeros(candidates.numel(), dtype=torch.float64).index_add_(0, inverse, coefficient**2)
            q = q / q.sum()
            q_all = None
            draws = candidates[torch.multinomial(q, budget, replacement=True, generator=gen)]
        self.mark.index_add_(0, draws, torch.ones(draws.numel(), dtype=torch.float64))
        count = self.mark[neighbour]
        self.mark[draws] = 0
        kept = count > 0
        q_edge = q_all[neighbour] if q_all is not None else q[inverse]
        src, dst = neighbour[kept], targets[owner[kept]]
        weight = coefficient[kept] * count[kept] / (budget * q_edge[kept])
        # A FastGCN draw with no edge to the layer above contributes nothing above it: drop it.
        return torch.unique(src), src, dst, weight


def _empty_layer():
    empty = torch.empty(0, dtype=torch.long)
    return empty, empty, empty, torch.empty(0, dtype=torch.float64)
