"""OGB node-property datasets (Hu et al., NeurIPS 2020) with their official splits and metrics.

Read from OGB's raw layout under ``ROOT/ogbn_<name>/`` (``raw/*.csv.gz`` or ``raw/data.npz``
for papers100M, ``split/<type>/{train,valid,test}.csv.gz``) with OGB's own readers. ladle
skips OGB's ``torch.load`` caches: nothing here is unpickled. Missing files are downloaded
from OGB's address for the dataset. Needs the ``ogb`` extra.

ogbn-proteins has no node features; as is common, a node gets the mean of its edges' features.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from ladle.data.fetch import require_files
from ladle.data.graph import Graph, make_graph
from ladle.errors import LadleError, install_hint

SETS = {"ogbnarxiv": "ogbn-arxiv", "ogbnproducts": "ogbn-products", "ogbnproteins": "ogbn-proteins",
        "ogbnpapers100m": "ogbn-papers100M"}


def _meta(name: str) -> dict:
    try:
        # optional: the ogb extra
        import ogb
        import pandas as pd
    except ImportError:
        raise LadleError(f"{name} needs the OGB extra", fix=install_hint("ogb")) from None
    master = pd.read_csv(Path(ogb.__file__).parent / "nodeproppred" / "master.csv", index_col=0,
                         keep_default_na=False)
    return dict(master[name])


def expected_files(meta: dict) -> tuple[list[str], list[str]]:
    if meta["binary"] == "True":
        raw = ["data.npz", "node-label.npz"]
    else:
        raw = ["edge.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz", "node-label.csv.gz"]
        raw += ["node-feat.csv.gz"] if meta["has_node_attr"] == "True" else []
        raw += ["edge-feat.csv.gz"] if meta["has_edge_attr"] == "True" else []
    split = [f"{s}.csv.gz" for s in ("train", "valid", "test")]
    return raw, split


def load_ogb(key: str, root: str | Path) -> Graph:
    name = SETS[key]
    meta = _meta(name)
    base = Path(root) / name.replace("-", "_")
    raw_files, split_files = expected_files(meta)
    split_dir = base / "split" / meta["split"]

    def download():
        _download(meta, Path(root), base)

    require_files(name, root, base / "raw", raw_files, download)
    require_files(name, root, split_dir, split_files, download)
    graph, labels = _read_raw(meta, base / "raw")
    n = int(graph["num_nodes"])
    masks = [_index_mask(split_dir / f, n) for f in split_files]
    edge_index = torch.from_numpy(graph["edge_index"]).long()
    if graph.get("node_feat") is not None:
        x = torch.from_numpy(graph["node_feat"]).float()
    else:
        x = _mean_edge_features(edge_index, torch.from_numpy(graph["edge_feat"]).float(), n)
    multilabel = int(meta["num tasks"]) > 1
    y = torch.from_numpy(np.array(labels))
    if multilabel:
        task, metric, classes = "multilabel", meta["eval metric"], int(meta["num tasks"])
    else:
        y = y.view(-1)
        y = torch.where(torch.isnan(y), torch.full_like(y, -1), y) if y.is_floating_point() else y
        task, metric, classes = "multiclass", meta["eval metric"], int(meta["num classes"])
    return make_graph(x, edge_index, y, *masks, name=name, num_classes=classes, task=task, metric=metric)


def _read_raw(meta: dict, raw: Path):
    # optional: the ogb extra
    from ogb.io.read_graph_raw import read_binary_graph_raw, read_csv_graph_raw

    inverse = meta["add_inverse_edge"] == "True"
    if meta["binary"] == "True":
        graph = read_binary_graph_raw(str(raw), add_inverse_edge=inverse)[0]
        with np.load(raw / "node-label.npz", allow_pickle=False) as f:
            labels = f["node_label"]
    else:
        # optional: the ogb extra
        import pandas as pd

        graph = read_csv_graph_raw(str(raw), add_inverse_edge=inverse)[0]
        labels = pd.read_csv(raw / "node-label.csv.gz", compression="gzip", header=None).values
    return graph, labels


def _index_mask(path: Path, n: int) -> torch.Tensor:
    # optional: the ogb extra
    import pandas as pd

    index = torch.as_tensor(np.array(pd.read_csv(path, compression="gzip", header=None).values.T[0]), dtype=torch.long)
    if index.numel() and (index.min() < 0 or index.max() >= n):
        raise LadleError(f"{path} holds node ids outside [0, {n - 1}]", fix="the split does not belong to this graph")
    mask = torch.zeros(n, dtype=torch.bool)
    mask[index] = True
    return mask


def _mean_edge_features(edge_index, edge_feat, n):
    total = torch.zeros(n, edge_feat.size(1)).index_add_(0, edge_index[1], edge_feat)
    count = torch.bincount(edge_index[1], minlength=n).clamp_min(1).unsqueeze(1)
    return total / count


def _download(meta: dict, root: Path, base: Path) -> None:
    # optional: the ogb extra
    from ogb.utils.url import download_url, extract_zip

    root.mkdir(parents=True, exist_ok=True)
    path = download_url(meta["url"], str(root))
    extract_zip(path, str(root))
    Path(path).unlink()
    if base.exists():
        shutil.rmtree(base)
    shutil.move(str(root / meta["download_name"]), str(base))
