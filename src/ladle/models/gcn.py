"""GCN: Kipf & Welling, *Semi-Supervised Classification with Graph Convolutional Networks* (ICLR 2017)."""
from torch_geometric.nn import GCNConv

from ladle.models.base import GNN


class GCN(GNN):
    """Symmetric-normalised graph convolutions with self-loops (PyG ``GCNConv``); takes edge weights."""

    supports_edge_weight = True

    def init_conv(self, in_channels, out_channels, *, last):
        return GCNConv(in_channels, out_channels)
