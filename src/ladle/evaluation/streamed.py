"""Scoring on a graph divided on disk (``parts:PDIR``) without putting it together: layer by layer over node chunks.

An L-layer model's logits at the split's nodes S read layer l only at the nodes within L - l hops of S. The
:class:`StreamedEvaluator` builds those node sets once (T_L = S, T_l = T_{l+1} and their neighbours), by streaming
the parts' neighbour lists, and keeps each as a sorted id list in a scratch file. A score then computes layer l for
T_l, ``chunk`` target nodes at a time: the chunk's neighbour rows are read from its part's memory-mapped CSR, its
inputs gathered from layer l-1's output (the parts' features for the first layer), and the layer is the model's own
:meth:`~ladle.models.base.GNN.block_conv` on that block, as for a receptive field in memory
(:mod:`ladle.evaluation.field`). Each layer's output is written to a memory-mapped scratch file, so the driver holds
one chunk's block and the model, not N rows: its anonymous memory does not grow with the graph.

What does not depend on the weights is computed once: the first layer's neighbour aggregation of the raw features
(the mean, sum or normalised sum a SAGE, GIN or GCN layer takes of its in-neighbours), over T_1, captured from the
block the first score builds and reused by every later one, with T_1's own features beside it: a later first layer
reads two [T_1, F] arrays in order instead of gathering rows scattered over the parts. Attention (GAT) recomputes
its first layer per score.

Ids here are the partition's own order (part P's own nodes are ``node_map[P]``); a part's halo nodes are mapped
to that order once (:class:`PartsView`). The scores equal the in-memory :class:`~ladle.evaluation.Evaluator`'s on
the same graph up to float rounding (a node whose two best classes tie within rounding may flip).
"""
from __future__ import annotations

import copy
import logging
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ladle.data.graph import csr_tensor
from ladle.errors import LadleError
from ladle.evaluation.chunked import can_chunk
from ladle.evaluation.evaluator import Evaluator, Mix, State, ensemble_probabilities, mix_states, probabilities_as_logits
from ladle.evaluation.field import Block
from ladle.evaluation.metrics import score_logits
from ladle.models import build_model
from ladle.sampling.base import edge_positions

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")
# The floats one chunk's gathered inputs may hold when no chunk size is given: the chunk's rows are this divided by
# (average degree + 1) times the widest layer input.
CHUNK_FLOATS = 2**24
# The scratch bytes the layer outputs of one pass of several mixes may take, and the most mixes in one pass.
GROUP_BYTES, MAX_GROUP = 2**31, 32
# The entries (neighbours and input rows) of the later layers' blocks kept in memory between scores; the rest are
# kept in scratch files.
BLOCK_ENTRIES = 2**23


def _tensor(array: np.ndarray) -> Tensor:
    """A torch view of a (read-only, memory-mapped) array; nothing writes through it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


class PartsView:
    """The parts of a partition folder seen as one graph in the partition's node order, read from the part files.

    Opening it checks every part file against its SHA-256 (once) and writes, to a scratch folder, each part's halo
    in that order; it never holds an array of N rows in memory. The scratch folder (under ``scratch``, default the
    system's temporary folder) is removed by :meth:`close` or when the view is collected.

    Args:
        source: the :class:`~ladle.parts.reader.PartSource` of ``parts:PDIR``.
        scratch: the folder the scratch folder is made in (a run directory: ``ladle soup`` spills beside the run).
    """

    def __init__(self, source, scratch: str | Path | None = None):
        self.source = source
        m = source.manifest
        self.num_parts, self.num_nodes = m["num_parts"], m["num_nodes"]
        self.num_features, self.num_classes = m["num_features"], m["num_classes"]
        self.task, self.metric, self.name, self.fingerprint = m["task"], m["metric"], source.name, source.fingerprint
        self.bounds = torch.tensor([r[0] for r in m["node_map"]] + [self.num_nodes], dtype=torch.long)
        try:
            self.dir = Path(tempfile.mkdtemp(prefix=".ladle-scratch-", dir=scratch))
        except OSError:  # a run someone sent, on a read-only disk: the system's temporary folder instead
            self.dir = Path(tempfile.mkdtemp(prefix="ladle-scratch-"))
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self.arrays = [source.arrays(p) for p in range(self.num_parts)]
        self.edges = sum(int(a["indices"].shape[0]) for a in self.arrays)
        self.halo = self._halo_ids()
        self._splits: dict[str, np.ndarray] = {}

    def close(self) -> None:
        self._remove()

    def own(self, p: int) -> int:
        return int(self.bounds[p + 1] - self.bounds[p])

    def memmap(self, name: str, shape, dtype) -> np.ndarray:
        """A new scratch array, memory-mapped (its pages are the file's, not the process's)."""
        return np.lib.format.open_memmap(self.dir / f"{name}.npy", mode="w+", dtype=dtype, shape=tuple(shape))

    def _halo_ids(self) -> list[Tensor]:
        order = self.memmap("order", (self.num_nodes,), np.int64)  # original id -> partition order
        order[:] = -1
        for p, a in enumerate(self.arrays):
            lo, hi = int(self.bounds[p]), int(self.bounds[p + 1])
            order[np.asarray(a["orig_ids"][:hi - lo])] = np.arange(lo, hi)
        step = 2**22
        if any(order[i:i + step].min() < 0 for i in range(0, self.num_nodes, step)):
            raise LadleError(f"{self.source.folder}: its parts' own nodes do not cover the graph",
                             fix="write the partition again with ladle partition")
        halo = []
        for p, a in enumerate(self.arrays):
            keep = self.memmap(f"halo-{p}", (a["orig_ids"].shape[0] - self.own(p),), np.int64)
            keep[:] = order[np.asarray(a["orig_ids"][self.own(p):])]
            halo.append(_tensor(keep))
        del order
        (self.dir / "order.npy").unlink()
        return halo

    def part_of(self, ids: Tensor) -> Tensor:
        return torch.searchsorted(self.bounds, ids, right=True) - 1

    def neighbours(self, p: int, targets: Tensor) -> tuple[Tensor, Tensor]:
        """(owner: position in ``targets`` of each entry, source: its neighbour's id) over the rows of ``targets``,
        ids in part ``p``'s range, read from that part's CSR."""
        a, start, own = self.arrays[p], int(self.bounds[p]), self.own(p)
        owner, position = edge_positions(_tensor(a["indptr"]), targets - start)
        local = _tensor(a["indices"])[position]
        source = local + start
        halo = local >= own
        source[halo] = self.halo[p][local[halo] - own]
        return owner, source

    def _gather(self, key: str, ids: Tensor, rows) -> Tensor:
        part = self.part_of(ids)
        out = None
        for p in part.unique().tolist():
            where = (part == p).nonzero().view(-1)
            values = rows(self.arrays[p][key], (ids[where] - self.bounds[p]).numpy())
            if out is None:
                out = torch.empty((ids.numel(), *values.shape[1:]), dtype=values.dtype)
            out[where] = values
        return out

    def features(self, ids: Tensor) -> Tensor:
        """[len(ids), F] float32 features of ``ids`` (partition order), from their parts' own rows."""
        if not ids.numel():
            return torch.empty(0, self.num_features)
        return self._gather("x", ids, lambda x, rows: torch.from_numpy(np.asarray(x[rows], dtype=np.float32)))

    def degree(self, ids: Tensor) -> Tensor:
        """Each node's number of neighbours (its CSR row's length in its own part)."""
        def rows(indptr, r):
            return torch.from_numpy(np.asarray(indptr[r + 1]) - np.asarray(indptr[r]))
        return self._gather("indptr", ids, rows) if ids.numel() else torch.empty(0, dtype=torch.long)

    def labels(self, ids: Tensor) -> Tensor:
        multilabel = self.task == "multilabel"
        y = self._gather("y", ids, lambda y, rows: torch.from_numpy(np.asarray(y[rows])))
        if y is None:
            return torch.empty(0, self.num_classes) if multilabel else torch.empty(0, dtype=torch.long)
        return y.float() if multilabel else y

    def split_ids(self, split: str) -> np.ndarray:
        """The sorted ids (partition order) of ``split``'s nodes (``all``: every node), memory-mapped."""
        if split not in self._splits:
            counts = [self.own(p) if split == "all" else int(self.arrays[p][f"{split}_mask"].sum())
                      for p in range(self.num_parts)]
            ids = self.memmap(f"split-{split}", (sum(counts),), np.int64)
            at = 0
            for p in range(self.num_parts):
                lo = int(self.bounds[p])
                found = (np.arange(self.own(p)) if split == "all"
                         else np.flatnonzero(np.asarray(self.arrays[p][f"{split}_mask"]))) + lo
                ids[at:at + found.size] = found
                at += found.size
            self._splits[split] = ids
        return self._splits[split]

    def original_ids(self, ids: np.ndarray) -> np.ndarray:
        """The original (source) node id of each partition-order id in ``ids`` (sorted)."""
        out = np.empty(ids.size, dtype=np.int64)
        cuts = np.searchsorted(ids, self.bounds.numpy())
        for p in range(self.num_parts):
            a, b = cuts[p], cuts[p + 1]
            out[a:b] = np.asarray(self.arrays[p]["orig_ids"])[ids[a:b] - int(self.bounds[p])]
        return out

    def slices(self, ids: np.ndarray, chunk: int):
        """(part, start, stop): ``ids`` (sorted) cut at the part boundaries, then into runs of at most ``chunk``."""
        cuts = np.searchsorted(ids, self.bounds.numpy())
        for p in range(self.num_parts):
            for start in range(int(cuts[p]), int(cuts[p + 1]), chunk):
                yield p, start, min(start + chunk, int(cuts[p + 1]))


class StreamedEvaluator:
    """The :class:`~ladle.evaluation.Evaluator` interface (``score``, ``score_many``, ``score_ensemble``) on a
    :class:`PartsView`, streaming layer by layer (see the module).

    Args:
        view: the :class:`PartsView` (shared by the validation and test evaluators).
        model_config: architecture of every state it will score (ladle's own: a model from Python needs the
            graph in memory).
        split: ``train``, ``val``, ``test`` or ``all`` (default ``val``).
        chunk_size: target nodes per block (default 0: as many as keep one block's inputs near 2^24 floats).
        device: where each block's layer runs (default cpu); the layers' outputs always go to the scratch files.
    """

    def __init__(self, view: PartsView, model_config, split: str = "val", chunk_size: int = 0, device=None):
        self.view, self.split, self.model_config = view, split, model_config
        self.device = torch.device(device or "cpu")
        self.model = build_model(model_config, view.num_features, view.num_classes).to(self.device).eval()
        if not can_chunk(self.model):
            raise LadleError(f"{model_config.name}: a model from Python runs one whole-graph forward, which a graph "
                             "read from its parts never allows", fix="soup it where the graph fits in memory (ladle "
                                                                     "soup with --graph of the source), or use one of "
                                                                     "ladle's architectures")
        widest = max(view.num_features, model_config.hidden)
        degree = view.edges / max(view.num_nodes, 1)
        self.chunk = chunk_size or max(256, int(CHUNK_FLOATS / ((degree + 1) * widest)))
        layers = len(self.model.convs)
        self.levels: list[np.ndarray] = [None] * (layers + 1)  # levels[l]: the nodes layer l computes (sorted)
        self.levels[layers] = view.split_ids(split)
        for level in range(layers - 1, 0, -1):
            self.levels[level] = self._widen(self.levels[level + 1], f"{split}-level{level}")
        self.y = view.labels(torch.from_numpy(np.asarray(self.levels[layers])))
        self._aggregate: tuple | None = None  # the first layer's weight-free part and its targets' features, once known
        self._first_pass = True
        self._whole = None
        self._pending = None
        self._outputs: dict[tuple, np.ndarray] = {}
        self._pool: list = []
        self._blocks: dict[tuple, tuple] = {}
        self._kept = 0
        self.forwards = 0
        # Mixes scored in one pass: as many as keep their layer outputs (scratch files) near GROUP_BYTES.
        widths = [model_config.hidden] * (layers - 1) + [self.model.out_channels]
        per_mix = sum(4 * len(level) * width for level, width in zip(self.levels[1:], widths))
        self.group = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, per_mix)))

    def _widen(self, ids: np.ndarray, name: str) -> np.ndarray:
        """``ids`` and all their neighbours, sorted, in a scratch file."""
        mark = self.view.memmap(f"{name}-mark", (self.view.num_nodes,), np.bool_)
        for p, a, b in self.view.slices(ids, self.chunk):
            targets = torch.from_numpy(np.asarray(ids[a:b]))
            mark[targets.numpy()] = True
            mark[self.view.neighbours(p, targets)[1].numpy()] = True
        step = 2**22
        count = sum(int(np.count_nonzero(mark[i:i + step])) for i in range(0, mark.size, step))
        out = self.view.memmap(name, (count,), np.int64)
        at = 0
        for i in range(0, mark.size, step):
            found = np.flatnonzero(mark[i:i + step]) + i
            out[at:at + found.size] = found
            at += found.size
        del mark
        (self.view.dir / f"{name}-mark.npy").unlink()
        return out

    def _block(self, p: int, targets: Tensor) -> tuple[Block, Tensor]:
        """The block of ``targets`` (sorted ids of part ``p``): its [T, n_in] adjacency of the model's kind over
        its inputs, the targets first and then their other neighbours (ascending), and the inputs' ids."""
        owner, source = self.view.neighbours(p, targets)
        t = targets.numel()
        unique, inverse = torch.unique(source, return_inverse=True)
        at = torch.searchsorted(targets, unique).clamp_max(max(t - 1, 0))
        is_target = targets[at] == unique if t else torch.zeros_like(unique, dtype=torch.bool)
        others = unique[~is_target]
        local = torch.empty_like(unique)
        local[is_target] = at[is_target]
        local[~is_target] = torch.arange(t, t + others.numel())
        col = local[inverse]
        n_in = t + others.numel()
        kind = getattr(self.model, "adjacency", None)
        if kind == "gcn":  # D^-1/2 (A + I) D^-1/2 with every node's own degree, the self-loop in each row
            inv_t = (self.view.degree(targets) + 1).float().rsqrt()
            inv_s = (self.view.degree(source) + 1).float().rsqrt()
            loops = torch.arange(t)
            values = torch.cat([inv_t[owner] * inv_s, inv_t * inv_t])
            owner, col = torch.cat([owner, loops]), torch.cat([col, loops])
        else:
            values = torch.ones(col.numel())
        order = torch.argsort(owner * n_in + col)
        crow = torch.zeros(t + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(owner, minlength=t), 0, out=crow[1:])
        adj = csr_tensor(crow, col[order], values[order], (t, n_in)).to(self.device)
        adj.ladle_kind = kind
        return Block(adj, t, n_in), torch.cat([targets, others])

    def _inputs(self, layer: int, ids: Tensor, previous: np.ndarray | None) -> Tensor:
        if layer == 0:
            return self.view.features(ids).to(self.device)
        at = np.searchsorted(self.levels[layer], ids.numpy())
        return torch.from_numpy(np.asarray(previous[at])).to(self.device)

    def _first_layer(self, models, p: int, a: int, b: int, targets: Tensor) -> list[Tensor]:
        """Layer 1 of a chunk for each model: from the stored aggregation where there is one; otherwise from the
        block, keeping the aggregation the model took of it (the first pass), if it took one."""
        if self._aggregate is not None:
            stored, reduce, own = self._aggregate
            x = torch.from_numpy(np.asarray(own[a:b])).to(self.device)
            block = Block(None, targets.numel(), targets.numel())
            block._memo = ((x, reduce), torch.from_numpy(np.asarray(stored[a:b])).to(self.device))
            return [m.finish_layer(0, m.block_conv(m.convs[0], x, block), x) for m in models]
        block, ids = self._block(p, targets)
        x = self._inputs(0, ids, None)
        # One block for every model: the weight-free aggregation the first takes is the others' too (block._memo).
        out = [m.finish_layer(0, m.block_conv(m.convs[0], x, block), x[:targets.numel()]) for m in models]
        if self._first_pass:
            memo = block._memo
            if memo is None or memo[0][0] is not x:
                self._first_pass = False  # the layer aggregates nothing weight-free (attention): no store
            else:
                if self._pending is None:
                    rows = len(self.levels[1])
                    self._pending = (self.view.memmap(f"{self.split}-aggregate", (rows, memo[1].size(1)), np.float32),
                                     memo[0][1], self.view.memmap(f"{self.split}-features", (rows, x.size(1)),
                                                                  np.float32))
                self._pending[0][a:b] = memo[1].cpu().numpy()
                self._pending[2][a:b] = x[:targets.numel()].cpu().numpy()  # the targets' own rows, in order
        return out

    def _later_block(self, layer: int, p: int, a: int, targets: Tensor) -> tuple[Block, np.ndarray]:
        """A chunk's block past the first layer and its inputs' rows in the layer below, built once (they do not
        depend on the weights) and kept: in memory while the kept blocks hold fewer than BLOCK_ENTRIES entries,
        beyond that in scratch files (a later pass maps them from the page cache instead of reading the parts)."""
        kept = self._blocks.get((layer, a))
        if kept is not None:
            crow, col, values, n_in, at = kept
            adj = csr_tensor(_tensor(crow), _tensor(col), _tensor(values), (targets.numel(), n_in)).to(self.device)
            adj.ladle_kind = getattr(self.model, "adjacency", None)
            return Block(adj, targets.numel(), n_in), at
        block, inputs = self._block(p, targets)
        at = np.searchsorted(self.levels[layer], inputs.numpy())
        arrays = [t.cpu().numpy() for t in (block.adj.crow_indices(), block.adj.col_indices(), block.adj.values())]
        arrays.append(at)
        size = block.adj.col_indices().numel() + at.size
        if self._kept + size > BLOCK_ENTRIES:  # spilled: each array to a file of its own
            arrays = [self._spill(f"{self.split}-block{layer}-{a}-{i}", array) for i, array in enumerate(arrays)]
        else:
            self._kept += size
        self._blocks[(layer, a)] = (*arrays[:3], block.n_in, arrays[3])
        return block, at

    def _spill(self, name: str, array: np.ndarray) -> np.ndarray:
        out = self.view.memmap(name, array.shape, array.dtype)
        out[:] = array
        return out

    def _models(self, states: Sequence[State]) -> list:
        """One model per state (copies of the architecture, made once and reloaded)."""
        while len(self._pool) < len(states):
            self._pool.append(copy.deepcopy(self.model))
        for model, state in zip(self._pool, states):
            model.load_state_dict({k: v.to(self.device) for k, v in state.items()})
        return self._pool[:len(states)]

    @torch.no_grad()
    def _forward(self, states: Sequence[State]) -> list[np.ndarray]:
        """Each state's [n_split, C] logits (memory-mapped), in one pass over the chunks: a chunk's block, stored
        aggregation and features are read once for all the states."""
        models = self._models(states)
        self.forwards += len(models)
        self._pending = None
        previous: list = [None] * len(models)
        for layer in range(len(self.model.convs)):
            ids = self.levels[layer + 1]
            outs: list = [None] * len(models)
            for p, a, b in self.view.slices(ids, self.chunk):
                targets = torch.from_numpy(np.asarray(ids[a:b]))
                if layer == 0:
                    hs = self._first_layer(models, p, a, b, targets)
                else:
                    block, at = self._later_block(layer, p, a, targets)
                    hs = []
                    for model, before in zip(models, previous):
                        x = torch.from_numpy(np.asarray(before[at])).to(self.device)
                        h = model.block_conv(model.convs[layer], x, block)
                        hs.append(model.finish_layer(layer, h, x[:targets.numel()]))
                for k, h in enumerate(hs):
                    if outs[k] is None:
                        outs[k] = self._output(layer, len(ids), h.size(1), k)
                    outs[k][a:b] = h.cpu().numpy()
            previous = [o if o is not None else self._output(layer, 0, self.model.out_channels, k)
                        for k, o in enumerate(outs)]
            if layer == 0 and self._first_pass:
                self._first_pass = False
                if self._pending is not None:
                    self._aggregate = self._pending
        self._pending = None
        return previous

    def logits(self, state: State) -> Tensor:
        """[n_split, C] logits of the split's nodes (ascending partition order), memory-mapped."""
        return _tensor(self._forward([state])[0])

    def _output(self, layer: int, rows: int, width: int, slot: int = 0) -> np.ndarray:
        """Layer ``layer``'s scratch output for the ``slot``-th state of a pass, made once and rewritten."""
        key = (layer, rows, width, slot)
        if key not in self._outputs:
            self._outputs[key] = self.view.memmap(f"{self.split}-layer{layer}-{width}-{slot}", (rows, width),
                                                  np.float32)
        return self._outputs[key]

    def describe(self) -> dict:
        return {"path": "streamed", "chunk": self.chunk, "chunk_bound": True,
                "first_layer_stored": self._aggregate is not None}

    def release(self) -> None:
        """Nothing a soup builds stays here (the whole-graph evaluator of a fitted soup is dropped)."""
        self._whole = None

    def score(self, state: State) -> float:
        return score_logits(self.view.metric, self.logits(state), self.y)

    def score_many(self, mixes: Sequence[Mix]) -> list[float]:
        """The mixes' scores, ``group`` at a time through one pass over the chunks."""
        scores = []
        for start in range(0, len(mixes), self.group):
            outs = self._forward([mix_states(mix) for mix in mixes[start:start + self.group]])
            scores += [score_logits(self.view.metric, _tensor(out), self.y) for out in outs]
        return scores

    def ensemble_logits(self, states: Sequence[State]) -> Tensor:
        """Average of the members' probabilities, as logits (member by member: one [n_split, C] sum is kept)."""
        multilabel = self.view.task == "multilabel"
        total, states = None, list(states)
        for start in range(0, len(states), self.group):
            for out in self._forward(states[start:start + self.group]):
                probabilities = ensemble_probabilities([_tensor(out)], multilabel)
                total = probabilities if total is None else total.add_(probabilities)
        return probabilities_as_logits(total / len(states), multilabel)

    def score_ensemble(self, states: Sequence[State]) -> float:
        return score_logits(self.view.metric, self.ensemble_logits(states), self.y)

    # The fitted soups (learned, pls) differentiate through the validation field: in memory, from the parts put
    # together, where the graph fits (refused with the reason where it does not).
    def _in_memory(self):
        if self._whole is None:
            log.info("%s: the fitted soups put the graph together from its parts", self.view.name)
            self._whole = Evaluator(self.view.source.whole_graph(), self.model_config, self.split)
        return self._whole

    def loss(self, state: State, nodes: Tensor | None = None) -> Tensor:
        return self._in_memory().loss(state, nodes)

    def parts(self, count: int, seed: int = 0) -> list[Tensor]:
        return self._in_memory().parts(count, seed)
