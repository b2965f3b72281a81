"""GIN: Xu et al., *How Powerful are Graph Neural Networks?* (ICLR 2019)."""
import torch
from torch import nn
from torch_geometric.nn import GINConv

from ladle.models.base import GNN, FastPath


class GINFast(FastPath):
    """Layer 1 is MLP((1 + ε) x + Σ x_j): its first linear map's parts, X W₁ and (Σ X) W₁ + b₁, are banked apart
    (ε scales one of them per mix)."""

    @staticmethod
    def propagation(ev):
        return ev.edge_index, torch.ones(ev.edge_index.size(1), dtype=ev.x.dtype, device=ev.device)  # a sum

    @staticmethod
    def part_widths(model):
        return [model.get_parameter("convs.0.nn.0.weight").size(0)] * 2

    @staticmethod
    def first_parts(ev, state, out):
        w1 = state["convs.0.nn.0.weight"].t()
        torch.mm(ev.x_in[:ev.plans[0].n_out], w1, out=out[0])
        torch.addmm(state["convs.0.nn.0.bias"], ev.ax, w1, out=out[1])

    @staticmethod
    def conv(ev, i, h, w, first):
        p, n_out = f"convs.{i}.", ev.plans[i].n_out
        scale = (1 + w[p + "eps"]).view(1, -1, 1)
        mixes = scale.size(1)  # layer 1's input is the features, shared by the mixes
        if first:
            z = first[1].addcmul_(first[0], scale)  # nn.0's bias is banked in first[1]
        else:
            agg = ev.propagate(i, f"p{i}", h).addcmul_(h[:n_out], scale)
            z = ev.per_mix(agg, w[p + "nn.0.weight"], w[p + "nn.0.bias"],
                           ev.block(f"y{i}", n_out, mixes, w[p + "nn.0.weight"].size(1)))
        return ev.per_mix(z.clamp_min_(0), w[p + "nn.2.weight"], w[p + "nn.2.bias"],
                          ev.block(f"z{i}", n_out, mixes, w[p + "nn.2.weight"].size(1)))


class GIN(GNN):
    """Sum aggregation followed by a two-layer MLP, with a learnt ε (PyG ``GINConv``, GIN-ε)."""

    fast_path = GINFast

    def init_conv(self, in_channels, out_channels, *, last):
        hidden = self.config.hidden
        mlp = nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, out_channels))
        return GINConv(mlp, train_eps=True)

    def block_conv(self, conv, x, block):
        # GINConv's math, MLP((1 + ε) x + Σ x_j), with the sum from the block's memo while x is the features.
        return conv.nn(block.aggregate(x) + (1 + conv.eps) * x[:block.n_out])
