"""The Graph every later stage receives: a PyG ``Data`` plus what the task is and how it is scored."""
from __future__ import annotations

import copy
import hashlib
import warnings
from dataclasses import dataclass, field, replace

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops

from ladle.errors import LadleError

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
    _adj: dict = field(default_factory=dict, repr=False, compare=False)

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

    def __getstate__(self) -> dict:
        # The adjacencies are a cache: a worker builds its own where it needs one, on its own device.
        return {**self.__dict__, "_adj": {}}

    def adj_t(self, kind: str = "plain") -> torch.Tensor:
        """The [N, N] sparse CSR adjacency that whole-graph passes propagate with, built once and cached.

        PyG's ``adj_t`` convention: row ``i`` holds ``i``'s in-neighbours. The edges are symmetric,
        so this is the CSR of :meth:`csr` itself, on the graph's device, float32 values:

        - ``plain``: ones (SAGE's mean and GIN's sum aggregate over it);
        - ``gcn``: ``D^-1/2 (A + I) D^-1/2`` with ``D`` the degrees counting the self-loop, the
          propagation of Kipf & Welling's GCN, normalised here once instead of in every forward.

        The tensor carries ``ladle_kind`` so a model can tell a normalised adjacency from a raw one.
        """
        if kind not in ADJACENCY_KINDS:
            raise ValueError(f"unknown adjacency kind {kind!r}; choose from {', '.join(ADJACENCY_KINDS)}")
        if kind not in self._adj:
            self._adj[kind] = build_adjacency(*self.csr(), self.num_nodes, kind, self.data.x.dtype)
        return self._adj[kind]

    def to(self, device) -> Graph:
        """This graph on ``device`` (itself when already there; ``cuda`` matches any ``cuda:N``), as a new Graph.

        PyG's ``Data.to`` moves tensors in place, so a shallow copy is moved: the graph it was called on
        stays where it was (a sampler may still be reading it on the CPU).
        """
        device, here = torch.device(device), self.data.x.device
        if device.type == here.type and device.index in (None, here.index):
            return self
        return replace(self, data=copy.copy(self.data).to(device), _csr=None, _adj={})

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


ADJACENCY_KINDS = ("plain", "gcn")


def build_adjacency(rowptr: torch.Tensor, col: torch.Tensor, n: int, kind: str, dtype=torch.float32) -> torch.Tensor:
    """The [n, n] sparse CSR adjacency of kind ``plain`` or ``gcn`` (see :meth:`Graph.adj_t`) of a symmetric
    graph's CSR (rows sorted), tagged with ``ladle_kind``."""
    row, col = _row_sorted(rowptr, col, n)
    if kind == "plain":
        adj = csr_tensor(rowptr, col, torch.ones(col.numel(), dtype=dtype, device=col.device), (n, n))
    else:
        adj = _gcn_adjacency(rowptr, row, col, n, dtype)
    adj.ladle_kind = kind
    return adj


def _row_sorted(rowptr: torch.Tensor, col: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of a CSR, the columns sorted within each row: canonical graphs already are (one check);
    a part graph's rows are sorted but not always its columns (one sort)."""
    count = rowptr[1:] - rowptr[:-1]
    row = torch.repeat_interleave(torch.arange(n, device=col.device), count, output_size=col.numel())
    if bool(((col[1:] <= col[:-1]) & (row[1:] == row[:-1])).any()):
        col = col[torch.argsort(row * n + col)]
    return row, col


def _gcn_adjacency(rowptr: torch.Tensor, row: torch.Tensor, col: torch.Tensor, n: int, dtype) -> torch.Tensor:
    """CSR of D^-1/2 (A + I) D^-1/2 from A's CSR (columns sorted in each row), without a sort.

    Row ``r`` gains one entry, its self-loop, placed after the neighbours smaller than ``r``, so
    the columns stay sorted: an edge keeps its rank in the row, shifted by one when it lies
    past the diagonal.
    """
    device = col.device
    count = rowptr[1:] - rowptr[:-1]
    before = torch.zeros(n, dtype=torch.long, device=device).index_add_(0, row, (col < row).long())
    new_rowptr = rowptr + torch.arange(n + 1, device=device)
    edge_slot = new_rowptr[row] + (torch.arange(col.numel(), device=device) - rowptr[row]) + (col > row).long()
    loop_slot = new_rowptr[:-1] + before
    inv_sqrt = (count + 1).to(dtype).rsqrt()
    new_col = torch.empty(col.numel() + n, dtype=col.dtype, device=device)
    values = torch.empty(col.numel() + n, dtype=dtype, device=device)
    new_col[edge_slot], values[edge_slot] = col, inv_sqrt[row] * inv_sqrt[col]
    new_col[loop_slot], values[loop_slot] = torch.arange(n, device=device), inv_sqrt * inv_sqrt
    return csr_tensor(new_rowptr, new_col, values, (n, n))


def csr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size) -> torch.Tensor:
    """A sparse CSR matrix of rows sorted by construction (no invariant check; torch calls CSR beta)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def spmm(adj: torch.Tensor, h: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """adj [n_out, n_in] (CSR) times h [n_in, d] -> [n_out, d], into ``out`` when given."""
    if out is None:
        return torch.sparse.mm(adj, h)
    if out.device.type != "cpu":  # the caching allocator makes the temporary cheap there
        return out.copy_(torch.sparse.mm(adj, h))
    return torch.addmm(out, adj, h, beta=0, out=out)  # beta=0: out's old values are ignored, NaNs included


def make_graph(x, edge_index, y, train_mask, val_mask, test_mask, *, name, num_classes, task="multiclass",
               metric="acc", canonical=False, edge_attr=None) -> Graph:
    """Canonicalise raw arrays into a :class:`Graph`: undirected, deduplicated, self-loops removed.

    ``canonical=True`` says the edges already are (sorted, both directions, no duplicates). ``edge_attr`` [E, D]
    (edge features, for a user's model whose ``forward`` takes ``edge_attr``) follows its edges: the two directions
    of an edge, and duplicates, get the mean of theirs; a self-loop's is dropped with it.
    """
    num_nodes = int(x.size(0))
    if task == "multiclass" and num_classes < 2:
        raise LadleError(f"dataset {name}: its labels hold {num_classes} class{'es' if num_classes != 1 else ''}; a "
                         "classifier needs at least two (every score would be 100%)",
                         fix="check the labels: class ids 0..C-1 with C >= 2")
    if x.dim() != 2 or x.size(1) < 1:
        raise LadleError(f"dataset {name}: node features of shape {list(x.shape)}; a GNN needs at least one feature "
                         "per node", fix="give x as [N, F] with F >= 1 (a column of ones where nodes have none)")
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0])
        raise LadleError(f"dataset {name}: node features hold NaN or infinite values ({int((~finite).sum())} rows, "
                         f"first row {row}); every ingredient would train to NaN",
                         fix="replace them (torch.nan_to_num, or impute) before giving the graph to ladle")
    if edge_attr is not None:
        edge_attr = checked_edge_attr(edge_attr, edge_index.size(1), name)
    if not canonical:
        edge_index, edge_attr = canonical_edges_with(edge_index.to(torch.long), num_nodes, edge_attr)
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
    if edge_attr is not None:
        data.edge_attr = edge_attr
    return Graph(data, name, int(num_classes), task, metric, fingerprint(data))


def checked_edge_attr(edge_attr, num_edges: int, name: str) -> torch.Tensor:
    """Edge features as float32 [E, D] (a [E] vector is one feature), or one error naming what is wrong."""
    if not isinstance(edge_attr, torch.Tensor) or not (edge_attr.is_floating_point() or edge_attr.dtype in (
            torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)):
        raise LadleError(f"dataset {name}: edge_attr is {getattr(edge_attr, 'dtype', type(edge_attr).__name__)}; "
                         "edge features are numbers", fix="give edge_attr as a float tensor [E, D]")
    edge_attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
    if edge_attr.dim() != 2 or edge_attr.size(0) != num_edges:
        raise LadleError(f"dataset {name}: edge_attr has shape {list(edge_attr.shape)} for {num_edges} edges",
                         fix="one row of edge features per column of edge_index: [E, D]")
    edge_attr = edge_attr.to(torch.float32)
    if not bool(torch.isfinite(edge_attr).all()):
        raise LadleError(f"dataset {name}: edge_attr holds NaN or infinite values",
                         fix="replace them (torch.nan_to_num) before giving the graph to ladle")
    return edge_attr.contiguous()


def check_metric_defined(name: str, metric: str, task: str, y: torch.Tensor, *masks: torch.Tensor) -> None:
    """ROC-AUC needs both a positive and a negative node in the split it scores (in some task, for multi-label
    targets); a binary graph whose validation nodes are one class cannot select anything."""
    if metric != "rocauc" or (task == "multiclass" and int(y.max()) > 1):
        return
    for split, mask in zip(("validation", "test"), masks):
        labels = y[mask.to(torch.bool)]
        labels = labels.view(-1, 1) if labels.dim() == 1 else labels
        both = ((labels == 1).any(0) & (labels == 0).any(0)).any()
        if labels.numel() and not bool(both):
            raise LadleError(f"dataset {name}: every {split} node has the same label, so ROC-AUC is undefined there",
                             fix="give the split nodes of both classes, or score by accuracy (--metric acc)")


def canonical_edges(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Sorted, both directions, no duplicates, no self-loops."""
    return canonical_edges_with(edge_index, num_nodes)[0]


def canonical_edges_with(edge_index: torch.Tensor, num_nodes: int, edge_attr: torch.Tensor | None = None):
    """:func:`canonical_edges` and the edges' features beside them (None without): each kept edge's the mean of those
    of the edges it merges (its two directions and any duplicates); a self-loop's dropped with it."""
    edge_index, edge_attr = remove_self_loops(edge_index, edge_attr)
    both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    if edge_attr is None:
        return coalesce(both, num_nodes=num_nodes), None
    return coalesce(both, torch.cat([edge_attr, edge_attr]), num_nodes=num_nodes, reduce="mean")


def fingerprint(data: Data) -> str:
    digest = hashlib.sha256()
    keys = ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask")
    for key in keys + (("edge_attr",) if data.get("edge_attr") is not None else ()):  # graphs without: as before
        tensor = getattr(data, key).contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(memoryview(tensor.view(torch.uint8).numpy() if tensor.dtype == torch.bool else tensor.numpy()))
    return digest.hexdigest()
