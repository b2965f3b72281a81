"""MLP: the graph-free baseline, with the same template (its layers ignore the edges)."""
from torch import Tensor, nn

from ladle.models.base import GNN


class _Linear(nn.Linear):
    def forward(self, x: Tensor, edge_index: Tensor | None = None) -> Tensor:
        return super().forward(x)


class MLP(GNN):
    trims_by_hop = False  # no edges to trim; the whole batch is a few matmuls anyway
    adjacency = None  # it reads no edges

    def init_conv(self, in_channels, out_channels, *, last):
        return _Linear(in_channels, out_channels)
