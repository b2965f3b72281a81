"""Cora, CiteSeer and PubMed with the public Planetoid split (Yang et al., ICML 2016), via PyG.

With the raw files present under ``ROOT/<Name>/raw`` they are read in place (no network, no
writes, so a read-only root works); otherwise PyG's ``Planetoid`` downloads them there.
Features are row-normalised (each row sums to 1), as Kipf & Welling and PyG's examples do.
"""
from __future__ import annotations

from pathlib import Path

from ladle.data.fetch import require_files
from ladle.data.graph import Graph, make_graph

NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def load_planetoid(key: str, root: str | Path) -> Graph:
    from torch_geometric.io import read_planetoid_data

    name = NAMES[key]
    raw = Path(root) / name / "raw"
    expected = [f"ind.{name.lower()}.{s}" for s in SUFFIXES]

    def download():
        from torch_geometric.datasets import Planetoid

        Planetoid(str(root), name)

    require_files(name, root, raw, expected, download)
    data = read_planetoid_data(str(raw), name.lower())
    x = data.x / data.x.sum(dim=1, keepdim=True).clamp_min(1.0)
    return make_graph(x, data.edge_index, data.y, data.train_mask, data.val_mask, data.test_mask,
                      name=name, num_classes=int(data.y.max()) + 1)
