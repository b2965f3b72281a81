"""GIN: Xu et al., *How Powerful are Graph Neural Networks?* (ICLR 2019)."""
from torch import nn
from torch_geometric.nn import GINConv

from ladle.models.base import GNN


class GIN(GNN):
    """Sum aggregation followed by a two-layer MLP, with a learnt ε (PyG ``GINConv``, GIN-ε)."""

    def init_conv(self, in_channels, out_channels, *, last):
        hidden = self.config.hidden
        mlp = nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, out_channels))
        return GINConv(mlp, train_eps=True)
