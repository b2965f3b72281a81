"""The degree-corrected synthetic graphs (issue 38, item 1): fixed-seed statistical checks of the degree
distribution, the class proportions and the homophily of the drawn edges, and chunk-by-chunk generation equal to
all at once."""
import math

import pytest
import torch

from ladle.data import load_graph
from ladle.data.dcsbm import Blocks, DCSBMConfig, chunks, draw_chunk, generate_dcsbm, parse_dcsbm_spec
from ladle.errors import LadleError

SPEC = "dcsbm:nodes=20000,classes=5,degree=12,seed=4"


@pytest.fixture(scope="module")
def graph():
    return generate_dcsbm(parse_dcsbm_spec(SPEC))


def ccdf_slope(degrees: torch.Tensor) -> float:
    """The least-squares slope of log P(D >= k) against log k, k log-spaced from the mean to half the maximum."""
    d = degrees[degrees > 0].double()
    ks = torch.logspace(math.log10(d.mean().item()), math.log10(d.max().item() / 2), 8, dtype=torch.float64)
    tail = torch.tensor([(d >= k).double().mean().item() for k in ks], dtype=torch.float64)
    design = torch.stack([ks.log(), torch.ones_like(ks)], 1)
    return torch.linalg.lstsq(design, tail.log().unsqueeze(1)).solution[0].item()


def test_degrees_are_heavy_tailed_with_the_stated_exponent(graph):
    degrees = torch.bincount(graph.data.edge_index[0], minlength=graph.num_nodes)
    # θ ~ Pareto with exponent 2.5: P(D >= k) falls as k^-(γ-1) = k^-1.5 (more steeply at the cap's end).
    assert -2.2 < ccdf_slope(degrees) < -1.4
    assert 250 < int(degrees.max()) < 1000  # a hub of tens of times the mean, as real graphs have
    assert 7 < degrees.float().mean().item() < 12  # 12 draws per node, duplicates merged
    balanced = load_graph("csbm:nodes=20000,classes=5,degree=12,seed=4")
    flat = torch.bincount(balanced.data.edge_index[0], minlength=20000)
    assert degrees.max() / degrees.float().mean() > 25 > 4 > flat.max() / flat.float().mean()  # csbm has no tail


def test_class_sizes_follow_the_stated_imbalance(graph):
    counts = torch.bincount(graph.data.y, minlength=5).double()
    share = torch.arange(1, 6, dtype=torch.float64) ** -1.0
    expected = share / share.sum()
    # a multinomial of 20000 draws: each share within 4 standard deviations
    assert torch.all((counts / 20000 - expected).abs() < 4 * (expected * (1 - expected) / 20000).sqrt())


def test_drawn_edges_stay_in_class_with_the_stated_homophily_and_the_graph_says_how_many_remain(graph):
    config = parse_dcsbm_spec(SPEC)
    blocks = Blocks(config, torch.Generator().manual_seed(config.seed))
    draws = torch.cat(list(chunks(config, blocks)), 1)
    same = (blocks.y[draws[0]] == blocks.y[draws[1]]).double()
    sigma = math.sqrt(0.7 * 0.3 / same.numel())
    assert abs(same.mean().item() - 0.7) < 4 * sigma  # another class is never the source's own
    edges = graph.data.edge_index
    measured = (graph.data.y[edges[0]] == graph.data.y[edges[1]]).double().mean().item()
    assert 0.55 < measured < 0.7  # duplicates merged fall mostly inside communities: a little lower, as stated


def test_chunk_by_chunk_is_the_same_graph_as_all_at_once(monkeypatch):
    import ladle.data.dcsbm as dcsbm

    config = parse_dcsbm_spec("dcsbm:nodes=3000,degree=8,seed=2")
    whole = generate_dcsbm(config)
    assert whole.fingerprint == generate_dcsbm(config).fingerprint != generate_dcsbm(
        parse_dcsbm_spec("dcsbm:nodes=3000,degree=8,seed=3")).fingerprint
    blocks = Blocks(config, torch.Generator().manual_seed(config.seed))
    streamed = list(chunks(config, blocks))
    backwards = [draw_chunk(config, blocks, i, c.size(1)) for i, c in reversed(list(enumerate(streamed)))][::-1]
    assert all(torch.equal(a, b) for a, b in zip(streamed, backwards))  # each chunk from its own generator
    monkeypatch.setattr(dcsbm, "CHUNK", 1000)  # many small chunks: another graph, but again the same every time
    small = [generate_dcsbm(config) for _ in range(2)]
    assert torch.equal(small[0].data.edge_index, small[1].data.edge_index)


def test_bad_options_are_named():
    with pytest.raises(LadleError, match="exponent > 2"):
        DCSBMConfig(exponent=1.8)
    with pytest.raises(LadleError, match="bad option 'degre=3'"):
        load_graph("dcsbm:degre=3")


@pytest.mark.benchmark
def test_the_calibration_table_gives_the_graphs_shape_and_the_strongest_models_scores(capsys, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import calibrate

    assert calibrate.main(["--preset", "dcsbm-arxiv", "--nodes", "3000", "--signals", "1.0", "--epochs", "3",
                           "--patience", "2", "--strong", "--chunk", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    row = lines[2].strip("| ").split(" | ")
    assert lines[0].startswith("| signal | nodes | mean deg | max deg | tail slope | homophily | loss |")
    assert row[1] == "3000" and int(row[3]) > 5 * float(row[2]) and -2.5 < float(row[4]) < -1.2
    assert len(row[10].split(" / ")) == 3  # the SWA's train / val / test
    figures = dict(pair.split("=") for pair in lines[-1].split())
    assert figures["preset"] == "dcsbm-arxiv" and {"test_1", "swa_1"} <= set(figures)
