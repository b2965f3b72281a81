"""GAT: Veličković et al., *Graph Attention Networks* (ICLR 2018)."""
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv
from torch_geometric.utils import add_self_loops, remove_self_loops, softmax

from ladle.data.graph import csr_tensor, spmm
from ladle.models.base import GNN, FastPath


class GATFast(FastPath):
    """Attention is not linear in the weights: layer 1 banks X W on every input (a mix's X W is exact), but the
    scores, their softmax and the aggregation run per mix, so a block holds one mix."""

    shares_first_propagation = False
    one_mix_per_block = True

    @staticmethod
    def propagation(ev):  # GATConv drops existing self-loops and adds one per node
        edge_index, _ = add_self_loops(remove_self_loops(ev.edge_index)[0], num_nodes=ev.graph.num_nodes)
        return edge_index, torch.ones(edge_index.size(1), dtype=ev.x.dtype, device=ev.device)

    @staticmethod
    def part_widths(model):
        return [model.get_parameter("convs.0.lin.weight").size(0)]

    @staticmethod
    def first_parts(ev, state, out):
        torch.mm(ev.x_in, state["convs.0.lin.weight"].t(), out=out[0])

    @staticmethod
    def conv(ev, i, h, w, first):
        p = f"convs.{i}."
        xw = first[0][:, 0] if first else h[:, 0] @ w[p + "lin.weight"][0].t()
        return attention(ev.plans[i], xw, {k: v[0] for k, v in w.items()}, p).unsqueeze(1)


def attention(plan, xw, w, p):
    """GATConv in eval mode on a layer plan: xw [n_in, H*C] -> [n_out, H*C] (heads concatenated) or [n_out, C]."""
    att_src, att_dst = w[p + "att_src"][0], w[p + "att_dst"][0]  # [H, C]
    heads, channels = att_src.shape
    xw = xw.view(-1, heads, channels)
    score_src = (xw * att_src).sum(-1)  # [n_in, H]
    score_dst = (xw[:plan.n_out] * att_dst).sum(-1)  # [n_out, H]
    # over each target's in-edges: the plan's rows are sorted, so PyG's softmax reduces by segments of crow
    alpha = softmax(F.leaky_relu(score_src[plan.col] + score_dst[plan.row], 0.2), ptr=plan.adj.crow_indices(), dim=0)
    by_head = xw.transpose(0, 1).contiguous() if heads > 1 else xw.view(1, -1, channels)
    crow, col = plan.adj.crow_indices(), plan.adj.col_indices()
    out = [spmm(csr_tensor(crow, col, alpha[:, k].contiguous(), plan.adj.shape), by_head[k]) for k in range(heads)]
    out = torch.cat(out, 1) if heads > 1 else out[0]
    return out.add_(w[p + "bias"])


class GAT(GNN):
    """Multi-head attention (PyG ``GATConv``): hidden layers concatenate ``heads`` heads of
    ``hidden / heads`` channels; the output layer is one head. Attention coefficients get the
    same dropout as the features, as in the paper; ELU activations."""

    act = staticmethod(F.elu)
    adjacency = None  # attention is computed per edge: whole-graph passes keep the edge list
    fast_path = GATFast

    def init_conv(self, in_channels, out_channels, *, last):
        cfg = self.config
        if last:
            return GATConv(in_channels, out_channels, heads=1, concat=False, dropout=cfg.dropout)
        return GATConv(in_channels, out_channels // cfg.heads, heads=cfg.heads, dropout=cfg.dropout)
