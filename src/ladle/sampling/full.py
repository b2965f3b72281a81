"""The full-batch "sampler": one batch per epoch, the whole graph, loss on the training nodes."""
from __future__ import annotations

from torch_geometric.data import Data

from ladle.data.graph import Graph


class FullBatch:
    """Args:
        graph: the graph, on the device the model trains on.
        adjacency: the :meth:`Graph.adj_t` kind the model propagates with (its ``adjacency``), carried
            as the batch's ``adj_t``; None: the edge list only.
    """

    name = "full"

    def __init__(self, graph: Graph, config=None, seed: int = 0, *, adjacency: str | None = None):
        data = graph.data
        extra = {} if adjacency is None else {"adj_t": graph.adj_t(adjacency)}
        if data.get("edge_attr") is not None:
            extra["edge_attr"] = data.edge_attr
        self.batch = Data(x=data.x, y=data.y, edge_index=data.edge_index, loss_mask=data.train_mask,
                          num_nodes=graph.num_nodes, **extra)

    def batches(self, epoch: int):
        yield self.batch
