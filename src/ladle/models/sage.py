"""GraphSAGE: Hamilton et al., *Inductive Representation Learning on Large Graphs* (NeurIPS 2017)."""
import torch
from torch_geometric.nn import SAGEConv

from ladle.models.base import GNN, FastPath, mean_over_in_edges


class SAGEFast(FastPath):
    """Layer 1 is mean(X) W_l + b + X W_r: both linear parts of an ingredient banked in one, over its targets."""

    propagation = staticmethod(mean_over_in_edges)

    @staticmethod
    def part_widths(model):
        return [model.get_parameter("convs.0.lin_l.weight").size(0)]

    @staticmethod
    def first_parts(ev, state, out):
        torch.addmm(state["convs.0.lin_l.bias"], ev.ax, state["convs.0.lin_l.weight"].t(), out=out[0])
        out[0].addmm_(ev.x_in[:ev.plans[0].n_out], state["convs.0.lin_r.weight"].t())

    @staticmethod
    def conv(ev, i, h, w, first):
        if first:
            return first[0]
        p, n_out = f"convs.{i}.", ev.plans[i].n_out
        z = ev.linear_then_propagate(i, h, w[p + "lin_l.weight"], w[p + "lin_l.bias"])
        for m in range(z.size(1)):
            z[:, m].addmm_(h[:n_out, m], w[p + "lin_r.weight"][m].t())
        return z


class GraphSAGE(GNN):
    """Mean aggregation with a separate root weight (PyG ``SAGEConv``)."""

    fast_path = SAGEFast

    def init_conv(self, in_channels, out_channels, *, last):
        return SAGEConv(in_channels, out_channels, aggr="mean")

    def block_conv(self, conv, x, block):
        # SAGEConv's own math, lin_l(mean of in-neighbours) + lin_r(root), with the mean from the block's memo
        # (computed once while the input is the features).
        return conv.lin_l(block.aggregate(x, "mean")) + conv.lin_r(x[:block.n_out])
