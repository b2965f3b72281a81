"""When does communication-free training win in wall-clock? An epoch at cluster scale, computed from measured parts.

Nothing here is extrapolated silently: every input is measured on this machine or stated, and the formula is below.

Measured (here, on ``--dataset``, with the run's model and sampler):
    c      seconds of one training step (sample a batch of B seed nodes, forward, backward, Adam), one torch thread;
    s      nodes a batch samples besides its seeds (the neighbour rows a step reads);
    P      bytes DDP all-reduces per step, from the DDP model's sidecar of ``--run`` (its communication hook);
    f(K)   the fraction of edges whose ends lie in different parts, for a random and a METIS cut into K parts.
Stated (a papers100M-sized graph): N = 111 M nodes, T = 1.2 M training nodes, F = 128 float32 features.

Per epoch with K workers, each on its own machine holding N/K nodes (the graph does not fit on one):
    steps  = ceil(T / (K B))                    the same for both: K workers share the epoch's seed nodes
    DDP    = steps x (c + s f(K) F 4 / bw + 2 (K-1)/K P / bw)
             a step fetches the features of its sampled nodes held by other machines, then ring all-reduces P
    soup   = steps x c                          each ingredient trains on its own part, no message at all
and the soup pays once, after training, for souping (GIS: ``--soup-seconds``, measured on the run). Assumed:
links at full rate in both directions, no latency, no overlap of communication with compute (DDP overlaps the
all-reduce with the backward pass; the feature fetch cannot start before sampling), c independent of the graph's size
(same fanouts and batch), and a part's halo not stored (halo 0: the ingredients lose the cut edges; what that costs in
accuracy is the payoff table's question, not this one's).

    python benchmarks/ddp_wallclock.py --work W && python benchmarks/at_scale.py --run W/run
    python benchmarks/at_scale.py --run W/run --step-seconds 0.004   # c stated (a GPU's step), not measured here

The last line is key=value pairs: the measured inputs and, for each K and link speed, ``ddp_over_soup_K{k}_{gbit}g``.
"""
from __future__ import annotations

import argparse
import json
import math
import time

N_PAPERS, T_PAPERS, F_PAPERS = 111_059_956, 1_207_179, 128  # ogbn-papers100M's nodes, training nodes, features


def cut_fraction(graph, membership) -> float:
    rowptr, col = graph.csr()
    owner = membership.repeat_interleave(rowptr[1:] - rowptr[:-1])
    return float((owner != membership[col]).double().mean())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a run with --baseline ddp (its config, DDP sidecar and soups)")
    parser.add_argument("--ks", default="8,32,128", help="worker counts")
    parser.add_argument("--gbits", default="10,25,100", help="link speeds, Gbit/s")
    parser.add_argument("--steps", type=int, default=30, help="training steps timed for c (after 3 warm-up steps)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="use this c instead of the one measured here (say where it comes from)")
    args = parser.parse_args(argv)

    import torch

    from ladle.data import load_graph
    from ladle.models import build_model
    from ladle.sampling import build_sampler
    from ladle.sampling.partition import metis_parts, random_membership
    from ladle.store import RunDir
    from ladle.trainer import batch_loss

    run = RunDir(args.run)
    config = run.config()
    spec = config.long_spec("ddp")
    if spec is None or not run.has(spec):
        raise SystemExit(f"{args.run} has no ddp baseline: run it with --baseline ddp (or long+ddp)")
    _, ddp = run.load_checkpoint(spec)
    p_bytes = ddp["communication"]["allreduce_bytes_per_step"]
    soups = run.soup_sidecars()
    soup_seconds = soups["gis"]["seconds"] if "gis" in soups else 0.0

    torch.set_num_threads(1)
    graph = load_graph(config.dataset, config.root)
    model = build_model(config.model, graph.num_features, graph.num_classes, init_seed=0)
    sampler = build_sampler(graph, config.sampler, 0, num_layers=config.model.layers, adjacency=model.adjacency)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr)
    model.train()

    def batches():  # as many as asked, over as many epochs as that takes
        for epoch in range(1, 10**6):
            yield from sampler.batches(epoch)

    times, sampled = [], []
    for i, batch in enumerate(batches()):
        if i == args.steps + 3:
            break
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        batch_loss(graph, model, batch).backward()
        optimizer.step()
        if i >= 3:
            times.append(time.perf_counter() - began)
            sampled.append(int(batch.num_nodes) - int(batch.batch_size))
    # the step's sampling is the generator's work before the loop body: time it apart, once per batch
    began = time.perf_counter()
    for i, _ in enumerate(batches()):
        if i == args.steps:
            break
    sample_s = (time.perf_counter() - began) / args.steps
    measured_c = sorted(times)[len(times) // 2] + sample_s
    c = args.step_seconds or measured_c
    s = sum(sampled) / len(sampled)
    b = config.sampler.batch_size

    ks, gbits = [int(k) for k in args.ks.split(",")], [float(g) for g in args.gbits.split(",")]
    fractions = {}
    for k in ks:
        fractions[("random", k)] = cut_fraction(graph, random_membership(graph.num_nodes, k, 0))
        try:
            fractions[("metis", k)] = cut_fraction(graph, metis_parts(graph, k, 0))
        except Exception as err:  # pymetis missing: the random cut alone
            print(f"metis {k}: {err}")
    fields = {"dataset": config.dataset, "c_step_s": round(c, 6), "c_stated": bool(args.step_seconds),
              "c_measured_s": round(measured_c, 6), "sampled_per_batch": round(s), "batch": b,
              "allreduce_bytes_per_step": p_bytes, "gis_s": round(soup_seconds, 1)}
    print(f"measured: c = {measured_c * 1e3:.1f} ms per step (sampling {sample_s * 1e3:.1f} ms; used: {c * 1e3:.1f}"
          f" ms), s = {s:.0f} sampled nodes per batch of {b}, P = {p_bytes} bytes all-reduced per step")
    print("| K | cut | f(K) | link | steps/epoch | DDP s/epoch (compute + fetch + all-reduce) | soup s/epoch | DDP / soup |")
    print("|---|---|---|---|---|---|---|---|")
    for k in ks:
        steps = math.ceil(T_PAPERS / (k * b))
        for cut in ("random", "metis"):
            if (cut, k) not in fractions:
                continue
            f = fractions[(cut, k)]
            fields[f"cut_{cut}_{k}"] = round(f, 4)
            for g in gbits:
                bw = g * 1e9 / 8
                fetch = s * f * F_PAPERS * 4 / bw
                reduce = 2 * (k - 1) / k * p_bytes / bw
                ddp_epoch, soup_epoch = steps * (c + fetch + reduce), steps * c
                print(f"| {k} | {cut} | {f:.3f} | {g:g} Gbit/s | {steps} | {ddp_epoch:.1f} ({steps * c:.1f} + "
                      f"{steps * fetch:.1f} + {steps * reduce:.2f}) | {soup_epoch:.1f} | {ddp_epoch / soup_epoch:.2f} |")
                fields[f"ddp_over_soup_K{k}_{cut}_{g:g}g"] = round(ddp_epoch / soup_epoch, 3)
    print("features per machine (GB):", json.dumps({k: round(N_PAPERS / k * F_PAPERS * 4 / 1e9, 1) for k in ks}))
    print(" ".join(f"{key}={value}" for key, value in fields.items()))


if __name__ == "__main__":
    main()
