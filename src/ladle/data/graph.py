"""The Graph every later stage receives: a PyG ``Data`` plus what the task is and how it is scored."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

TASKS = ("multiclass", "multilabel")
METRICS = ("acc", "f1", "rocauc")


@dataclass
class Graph:
    """A node-classification graph.

    Attributes:
        data: PyG ``Data`` with ``x`` [N, F] float32, ``edge_index`` [2, E] int64 (undirected:
            both directions present, no duplicates, no self-loops), ``y`` ([N] int64 for
            multiclass, [N, T] float32 0/1 for multilabel) and bool masks
            ``train_mask``/``val_mask``/``test_mask`` [N].
        name: the dataset's canonical name.
        num_classes: classes (multiclass) or tasks (multilabel): the model's output width.
        task: ``multiclass`` or ``multilabel``.
        metric: ``acc``, ``f1`` (micro-F1) or ``rocauc``, named as OGB names them.
        fingerprint: SHA-256 of the content (features, edges, labels, masks).
    """

    data: Data
    name: str
    num_classes: int
    task: str
    metric: str
    fingerprint: str
    _csr: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def num_nodes(self) -> int:
        return int(self.data.num_nodes)

    @property
    def num_features(self) -> int:
        return int(self.data.x.size(1))

    def csr(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rowptr [N+1], col [E]): each node's neighbours, built once and shared by samplers.

        ``edge_index`` is sorted by its first row, so this is a view of it plus one bincount.
        """
        if self._csr is None:
            row, col = self.data.edge_index
            counts = torch.bincount(row, minlength=self.num_nodes)
            rowptr = torch.zeros(self.num_nodes + 1, dtype=torch.long, device=row.device)
            torch.cumsum(counts, 0, out=rowptr[1:])
            self._csr = (rowptr, col)
        return self._csr

    def to(self, device) -> Graph:
        device = torch.device(device)
        if self.data.x.device == device:
            return self
        return replace(self, data=self.data.to(device), _csr=None)

    def mask(self, split: str) -> torch.Tensor:
        return getattr(self.data, f"{split}_mask")

    def summary(self) -> dict:
        d = self.data
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "undirected_edges": int(d.edge_index.size(1)) // 2,
            "features": self.num_features,
            "classes": self.num_classes,
            "task": self.task,
            "metric": self.metric,
            "train": int(d.train_mask.sum()),
            "val": int(d.val_mask.sum()),
            "test": int(d.test_mask.sum()),
            "fingerprint": self.fingerprint,
        }


def make_graph(x, edge_index, y, train_mask, val_mask, test_mask, *, name, num_classes, task="multiclass",
               metric="acc", canonical=False) -> Graph:
    """Canonicalise raw arrays into a :class:`Graph`: undirected, deduplicated, self-loops removed.

    ``canonical=True`` says the edges already are (sorted, both directions, no duplicates).
    """
    num_nodes = int(x.size(0))
    if not canonical:
        edge_index = canonical_edges(edge_index.to(torch.long), num_nodes)
    y = y.to(torch.float32) if task == "multilabel" else y.to(torch.long).view(-1)
    data = Data(
        x=x.to(torch.float32).contiguous(),
        edge_index=edge_index,
        y=y,
        train_mask=train_mask.to(torch.bool),
        val_mask=val_mask.to(torch.bool),
        test_mask=test_mask.to(torch.bool),
        num_nodes=num_nodes,
    )
    return Graph(data, name, int(num_classes), task, metric, fingerprint(data))


def canonical_edges(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    return coalesce(edge_index, num_nodes=num_nodes)


def fingerprint(data: Data) -> str:
    digest = hashlib.sha256()
    for key in ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        tensor = getattr(data, key).contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(memoryview(tensor.view(torch.uint8).numpy() if tensor.dtype == torch.bool else tensor.numpy()))
    return digest.hexdigest()
