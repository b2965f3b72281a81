"""The full-batch "sampler": one batch per epoch, the whole graph, loss on the training nodes."""
from __future__ import annotations

from torch_geometric.data import Data

from ladle.data.graph import Graph


class FullBatch:
    name = "full"

    def __init__(self, graph: Graph):
        data = graph.data
        self.batch = Data(x=data.x, y=data.y, edge_index=data.edge_index, loss_mask=data.train_mask,
                          num_nodes=graph.num_nodes)

    def batches(self, epoch: int):
        yield self.batch
