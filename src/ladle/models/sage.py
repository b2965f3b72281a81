"""GraphSAGE: Hamilton et al., *Inductive Representation Learning on Large Graphs* (NeurIPS 2017)."""
from torch_geometric.nn import SAGEConv

from ladle.models.base import GNN


class GraphSAGE(GNN):
    """Mean aggregation with a separate root weight (PyG ``SAGEConv``)."""

    def init_conv(self, in_channels, out_channels, *, last):
        return SAGEConv(in_channels, out_channels, aggr="mean")
