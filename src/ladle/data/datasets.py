"""The dataset registry: ``load_graph(name, root)`` resolves every name ladle knows."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ladle.data.graph import Graph
from ladle.errors import LadleError, normalise_name, suggest


class DatasetInfo(NamedTuple):
    name: str
    source: str
    description: str
    loader: Callable[[str, str | Path], Graph]


def _planetoid(key, root):
    from ladle.data.planetoid import load_planetoid

    return load_planetoid(key, root)


def _pyg(key, root):
    from ladle.data.pyg_sets import load_pyg_set

    return load_pyg_set(key, root)


def _ogb(key, root):
    from ladle.data.ogb import load_ogb

    return load_ogb(key, root)


REGISTRY: dict[str, DatasetInfo] = {
    normalise_name(info.name): info
    for info in [
        DatasetInfo("Cora", "PyG Planetoid", "2,708 nodes, 7 classes, public split 140/500/1000", _planetoid),
        DatasetInfo("CiteSeer", "PyG Planetoid", "3,327 nodes, 6 classes, public split 120/500/1000", _planetoid),
        DatasetInfo("PubMed", "PyG Planetoid", "19,717 nodes, 3 classes, public split 60/500/1000", _planetoid),
        DatasetInfo("Flickr", "PyG (GraphSAINT)", "89,250 nodes, 7 classes, accuracy", _pyg),
        DatasetInfo("Reddit", "PyG", "232,965 nodes, 41 classes, accuracy", _pyg),
        DatasetInfo("Yelp", "PyG (GraphSAINT)", "716,847 nodes, 100 labels, multi-label micro-F1", _pyg),
        DatasetInfo("AmazonProducts", "PyG (GraphSAINT)", "1,569,960 nodes, 107 labels, micro-F1", _pyg),
        DatasetInfo("ogbn-arxiv", "OGB", "169,343 nodes, 40 classes, time split, accuracy", _ogb),
        DatasetInfo("ogbn-products", "OGB", "2,449,029 nodes, 47 classes, sales-rank split, accuracy", _ogb),
        DatasetInfo("ogbn-proteins", "OGB", "132,534 nodes, 112 binary tasks, species split, ROC-AUC", _ogb),
        DatasetInfo("ogbn-papers100M", "OGB", "111M nodes, 172 classes, time split, accuracy", _ogb),
    ]
}
SPECIAL = {
    "csbm[:k=v,...]": "synthetic contextual SBM with planted communities (3,000 nodes by default)",
    "csbm-arxiv": "synthetic, sized like ogbn-arxiv: 169,343 nodes, ~1.17M edges, 128 features, 40 classes",
    "csbm-products": "synthetic, sized like ogbn-products: 2,449,029 nodes, ~61.9M edges, 100 features, 47 classes",
    "npz:PATH[#K]": "your graph in the common .npz layout, split K (default 0)",
}


def load_graph(name: str, root: str | Path = "data") -> Graph:
    """Load a dataset by name: a registry name, ``csbm...`` or ``npz:PATH[#K]``."""
    if name.lower().startswith("npz:"):
        from ladle.data.npz import load_npz, parse_npz_spec

        return load_npz(*parse_npz_spec(name))
    if name.lower().startswith("csbm"):
        from ladle.data.csbm import generate_csbm, parse_csbm_spec

        return generate_csbm(parse_csbm_spec(name))
    key = normalise_name(name)
    if key not in REGISTRY:
        choices = [i.name for i in REGISTRY.values()] + ["csbm", "csbm-arxiv", "csbm-products", "npz:PATH"]
        raise LadleError(f"unknown dataset {name!r}", fix=suggest(name, choices))
    return REGISTRY[key].loader(key, root)
