"""GAT: Veličković et al., *Graph Attention Networks* (ICLR 2018)."""
import torch.nn.functional as F
from torch_geometric.nn import GATConv

from ladle.models.base import GNN


class GAT(GNN):
    """Multi-head attention (PyG ``GATConv``): hidden layers concatenate ``heads`` heads of
    ``hidden / heads`` channels; the output layer is one head. Attention coefficients get the
    same dropout as the features, as in the paper; ELU activations."""

    act = staticmethod(F.elu)
    adjacency = None  # attention is computed per edge: whole-graph passes keep the edge list

    def init_conv(self, in_channels, out_channels, *, last):
        cfg = self.config
        if last:
            return GATConv(in_channels, out_channels, heads=1, concat=False, dropout=cfg.dropout)
        return GATConv(in_channels, out_channels // cfg.heads, heads=cfg.heads, dropout=cfg.dropout)
