"""GCN: Kipf & Welling, *Semi-Supervised Classification with Graph Convolutional Networks* (ICLR 2017)."""
import torch
from torch_geometric.nn import GCNConv

from ladle.models.base import GNN, FastPath


class GCNFast(FastPath):
    """Layer 1 is Â (X W) + b: with Â X shared, an ingredient's part is Â X Wᵀ + b, the bias banked with it."""

    @staticmethod
    def propagation(ev):  # the graph's own D^-1/2 (A + I) D^-1/2 (Graph.adj_t), as (source, target) edges
        adj = ev.graph.adj_t("gcn")
        crow, col = adj.crow_indices(), adj.col_indices()
        row = torch.repeat_interleave(torch.arange(adj.size(0), device=col.device), crow[1:] - crow[:-1],
                                      output_size=col.numel())
        return (col.to(ev.device), row.to(ev.device)), adj.values().to(ev.device)

    @staticmethod
    def part_widths(model):
        return [model.get_parameter("convs.0.lin.weight").size(0)]

    @staticmethod
    def first_parts(ev, state, out):
        torch.addmm(state["convs.0.bias"], ev.ax, state["convs.0.lin.weight"].t(), out=out[0])

    @staticmethod
    def conv(ev, i, h, w, first):
        if first:
            return first[0]
        return ev.linear_then_propagate(i, h, w[f"convs.{i}.lin.weight"], w[f"convs.{i}.bias"])


class GCN(GNN):
    """Symmetric-normalised graph convolutions with self-loops (PyG ``GCNConv``); takes edge weights."""

    supports_edge_weight = True
    trims_by_hop = False  # the normalisation reads source degrees, which trimming changes
    adjacency = "gcn"  # normalised once per graph, not in every forward
    fast_path = GCNFast

    def init_conv(self, in_channels, out_channels, *, last):
        return GCNConv(in_channels, out_channels)

    def block_conv(self, conv, x, block):
        # Â (X W) + b as (Â X) W + b: with the block's normalised rows, Â X is the block's memo while X is the
        # features, and the product then runs on the targets only.
        return conv.lin(block.aggregate(x)) + conv.bias

    def sparse_conv(self, conv, x, adj_t):
        # Graph.adj_t("gcn") is already D^-1/2 (A+I) D^-1/2; a raw adjacency is normalised by PyG as usual.
        if getattr(adj_t, "ladle_kind", None) != "gcn":
            return conv(x, adj_t)
        conv.normalize = False
        try:
            return conv(x, adj_t)
        finally:
            conv.normalize = True

    def sampled_conv(self, conv, x, edge_index, edge_weight, self_weight):
        # The sampler's weights already are Â's estimate: propagate them as they are, with the
        # exact self-loops, instead of renormalising the sampled graph.
        loops = torch.arange(x.size(0), device=x.device)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], 1)
        edge_weight = torch.cat([edge_weight, self_weight])
        conv.normalize = False
        try:
            return conv(x, edge_index, edge_weight)
        finally:
            conv.normalize = True
