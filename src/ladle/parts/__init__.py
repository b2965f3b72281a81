"""A graph divided on disk: one folder per part, each worker reading only its own (Graph Ladling's data partition).

``ladle partition --dataset SPEC --parts K --out PDIR`` writes (:mod:`ladle.parts.writer`)::

    PDIR/manifest.json      format, num_parts, node_map (each part's node-id range after renumbering), halo_hops,
                            feature dtype and width, classes, task, metric, split, the source's SHA-256, every
                            file's shape, dtype and SHA-256, partition seconds and peak memory
    PDIR/part-P/indptr.npy  [n_P + 1] int64: the part's own nodes' full neighbour lists (CSR rows) ...
    PDIR/part-P/indices.npy [E_P] int64: ... in local ids: own nodes 0..n_P-1, then its halo (the neighbours that
                            lie in other parts), in ascending original id
    PDIR/part-P/x.npy       [n_P (+ h_P), F] features of the own nodes, then (halo_hops 1) of the halo
    PDIR/part-P/y.npy       [n_P (+ h_P)] or [n_P (+ h_P), T] labels, likewise
    PDIR/part-P/orig_ids.npy [n_P + h_P] int64 original node ids (own ascending, then halo ascending)
    PDIR/part-P/{train,val,test}_mask.npy  [n_P] bool

Part P's own nodes are the nodes of the partition's part P; renumbered, they form the contiguous range
``node_map[P]``. Every edge of the (undirected, deduplicated, self-loop-free) graph is stored once per endpoint's
part, in that endpoint's row, so the parts together hold the whole graph. ``halo_hops`` (0 or 1) is how a part
trains: on its own nodes' induced subgraph, or with its halo as message sources (the edges touching its own nodes),
whose features and labels the part then holds too.

``parts:PDIR`` (:mod:`ladle.parts.reader`) trains ingredient i on part i mod K from that part's files alone,
memory-mapped. A partition folder is data: its manifest is checked before anything is mapped (sizes, dtypes, ranges,
checksums, no path leaving the folder, no link), and nothing in it is unpickled.
"""

from pathlib import Path

from ladle.errors import LadleError

PARTS_FORMAT = "ladle.parts/1"
MANIFEST = "manifest.json"
PART_FILES = ("indptr", "indices", "x", "y", "orig_ids", "train_mask", "val_mask", "test_mask")



def parts_count(dataset) -> int | None:
    """K, for a ``parts:PDIR`` dataset whose manifest says it (a run's default number of ingredients); None
    otherwise (a folder that cannot say is refused later, when it is opened, with the reason)."""
    # start-up: `ladle --help` loads this module, and no torch
    from ladle.files import read_json

    if not (isinstance(dataset, str) and dataset.lower().startswith("parts:")):
        return None
    folder = Path(dataset[len("parts:"):])
    try:
        count = read_json(folder / MANIFEST, root=folder, what="partition manifest").get("num_parts")
    except LadleError:
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 4096 else None


__all__ = ["MANIFEST", "PARTS_FORMAT", "PART_FILES", "parts_count"]
