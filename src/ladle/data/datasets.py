"""The dataset registry: ``load_graph(name, root)`` resolves every name ladle knows.

Each entry's target is a loader ``(spec, root) -> Graph``; the parameterised spellings (``csbm:k=v,...``,
``npz:PATH#K``) are looked up by the part before the colon. A user's own loader is one ``DATASETS.add`` line.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ladle.errors import LadleError, normalise_name
from ladle.registry import Registry

if TYPE_CHECKING:
    from ladle.data.graph import Graph


def _planetoid(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.planetoid import load_planetoid

    return load_planetoid(normalise_name(spec), root)


def _pyg(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.pyg_sets import load_pyg_set

    return load_pyg_set(normalise_name(spec), root)


def _ogb(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.ogb import load_ogb

    return load_ogb(normalise_name(spec), root)


def _csbm(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.csbm import generate_csbm, parse_csbm_spec

    return generate_csbm(parse_csbm_spec(spec))


def _dcsbm(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.dcsbm import generate_dcsbm, parse_dcsbm_spec

    return generate_dcsbm(parse_dcsbm_spec(spec))


def _npz(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.npz import load_npz, parse_npz_spec

    if not spec.partition(":")[2]:
        raise LadleError(f"dataset {spec!r} names no file", fix="write npz:PATH or npz:PATH#K (split K)")
    return load_npz(*parse_npz_spec(spec))


def _npy(spec, root):
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.data.npy import load_npy, parse_npy_spec

    return load_npy(*parse_npy_spec(spec))



DATASETS = Registry("dataset")
PARAMETERISED = ("csbm", "csbm-arxiv", "csbm-products", "dcsbm", "dcsbm-arxiv", "dcsbm-products", "npz", "npy",
                 "parts")  # NAME:options spellings
for _name, _help in [
    ("csbm", "synthetic contextual SBM with planted communities (3,000 nodes by default); csbm:k=v,... sets options"),
    ("csbm-arxiv", "synthetic, sized like ogbn-arxiv: 169,343 nodes, ~1.17M edges, 128 features, 40 classes"),
    ("csbm-products", "synthetic, sized like ogbn-products: 2,449,029 nodes, ~61.9M edges, 100 features, 47 classes"),
]:
    DATASETS.add(_name, _csbm, "ladle.data.csbm:CSBMConfig", _help, reference="ladle", traits=("generated",))
for _name, _help in [
    ("dcsbm", "synthetic degree-corrected SBM: power-law degrees, unequal classes, planted communities; dcsbm:k=v,..."),
    ("dcsbm-arxiv", "synthetic, degree-corrected, sized like ogbn-arxiv: 169,343 nodes, 128 features, 40 classes"),
    ("dcsbm-products", "synthetic, degree-corrected, sized like ogbn-products: 2,449,029 nodes, 100 features, 47 "
                       "classes"),
]:
    DATASETS.add(_name, _dcsbm, "ladle.data.dcsbm:DCSBMConfig", _help, reference="ladle", traits=("generated",))
DATASETS.add("npz", _npz, None, "npz:PATH[#K]: your graph in the common .npz layout, split K (default 0)",
             reference="your file", traits=("own-path",))
DATASETS.add("npy", _npy, None, "npy:DIR[#K]: the npz layout as one memory-mappable .npy per array (ladle.save_npy)",
             reference="your folder", traits=("own-path",))
# Named, not imported: ladle.parts builds on this package (a partition is cut from a loaded graph).
DATASETS.add("parts", "ladle.parts.reader:load_parts_dataset", None, "parts:PDIR: a graph cut on disk by ladle "
             "partition; ingredient i trains on part i mod K from its files alone", reference="ladle partition",
             traits=("own-path",))
for _name, _source, _help, _loader in [
    ("Cora", "PyG Planetoid", "2,708 nodes, 7 classes, public split 140/500/1000", _planetoid),
    ("CiteSeer", "PyG Planetoid", "3,327 nodes, 6 classes, public split 120/500/1000", _planetoid),
    ("PubMed", "PyG Planetoid", "19,717 nodes, 3 classes, public split 60/500/1000", _planetoid),
    ("Flickr", "PyG (GraphSAINT)", "89,250 nodes, 7 classes, accuracy", _pyg),
    ("Reddit", "PyG", "232,965 nodes, 41 classes, accuracy", _pyg),
    ("Yelp", "PyG (GraphSAINT)", "716,847 nodes, 100 labels, multi-label micro-F1", _pyg),
    ("AmazonProducts", "PyG (GraphSAINT)", "1,569,960 nodes, 107 labels, micro-F1", _pyg),
    ("ogbn-arxiv", "OGB", "169,343 nodes, 40 classes, time split, accuracy", _ogb),
    ("ogbn-products", "OGB", "2,449,029 nodes, 47 classes, sales-rank split, accuracy", _ogb),
    ("ogbn-proteins", "OGB", "132,534 nodes, 112 binary tasks, species split, ROC-AUC", _ogb),
    ("ogbn-papers100M", "OGB", "111M nodes, 172 classes, time split, accuracy", _ogb),
]:
    DATASETS.add(_name, _loader, None, _help, reference=_source)


def _entry(name: str) -> str:
    head, colon, _ = name.partition(":")
    parameterised = colon and head in DATASETS and DATASETS.resolve(head) in PARAMETERISED
    return head if parameterised else name


def dataset_has(name: str, trait: str) -> bool:
    """Whether dataset ``name`` (a spec) declares ``trait``: ``generated`` (made again from its spec and seed: no
    file, no root) or ``own-path`` (the spec names its own file or folder: no root); an unknown name has none."""
    entry = _entry(name)
    return entry in DATASETS and DATASETS.has(DATASETS.resolve(entry), trait)


def graph_name(name: str) -> str | None:
    """The name the graph of spec ``name`` will carry, known without loading it (a file's, a generator's), or None
    where only loading tells."""
    entry = DATASETS.resolve(_entry(name)) if _entry(name) in DATASETS else None
    loader = DATASETS.entries[entry].target if entry else None
    if loader is _npz:
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.data.npz import parse_npz_spec

        path, split = parse_npz_spec(name)
        return f"npz:{path.name}#{split}"
    if loader is _csbm:
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.data.csbm import csbm_name, parse_csbm_spec

        return csbm_name(parse_csbm_spec(name))
    if loader is _dcsbm:
        # start-up: `ladle --help` loads this module, and no torch
        from ladle.data.dcsbm import dcsbm_name, parse_dcsbm_spec

        return dcsbm_name(parse_dcsbm_spec(name))
    return None


def check_name(name: str) -> None:
    """Refuse an unknown dataset name (with the nearest ones) before anything heavy is imported or loaded."""
    DATASETS.resolve(_entry(name), "dataset")


def load_graph(name: str, root: str | Path = "data") -> Graph:
    """Load a dataset by name: a registry name, ``csbm...[:k=v,...]`` or ``npz:PATH[#K]``."""
    return DATASETS.get(_entry(name))(name, root)


__all__ = ["DATASETS", "check_name", "dataset_has", "graph_name", "load_graph"]
