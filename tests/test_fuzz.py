"""Property tests and fuzzing of the readers users feed by hand: the .npz graph reader and the config.

Random valid inputs round-trip; random invalid ones (mangled arrays, raw bytes, random TOML) give a
LadleError, the one clear message, and never any other exception."""
import io
import tomllib
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ladle.config import build_config, dump_toml
from ladle.data import load_graph
from ladle.errors import LadleError

# Derandomised so CI runs the same examples each time; run with a random seed locally to search further.
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def valid_graphs(draw):
    n = draw(st.integers(3, 30))
    f = draw(st.integers(1, 6))
    classes = draw(st.integers(2, min(4, n)))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    e = draw(st.integers(0, 3 * n))
    edges = rng.integers(0, n, size=(e, 2))
    labels = rng.integers(0, classes, size=n)
    labels[:classes] = np.arange(classes)  # every class present
    order = rng.permutation(n)
    cut = sorted(rng.choice(np.arange(1, n), size=2, replace=False))
    masks = [np.zeros(n, bool) for _ in range(3)]
    for mask, part in zip(masks, np.split(order, cut)):
        mask[part] = True
    return {"node_features": rng.normal(size=(n, f)).astype(np.float32), "node_labels": labels, "edges": edges,
            "train_masks": masks[0], "val_masks": masks[1], "test_masks": masks[2]}


@FUZZ
@given(arrays=valid_graphs())
def test_valid_npz_graphs_round_trip(tmp_path, arrays):
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    graph = load_graph(f"npz:{path}")
    assert torch.equal(graph.data.x, torch.from_numpy(arrays["node_features"]))
    assert torch.equal(graph.data.y, torch.from_numpy(arrays["node_labels"]).long())
    for split in ("train", "val", "test"):
        assert torch.equal(graph.mask(split), torch.from_numpy(arrays[f"{split}_masks"]))
    # Edges are made undirected, without duplicates or self-loops: the same set, both directions.
    expected = {(int(u), int(v)) for u, v in arrays["edges"] if u != v}
    expected |= {(v, u) for u, v in expected}
    assert set(map(tuple, graph.data.edge_index.t().tolist())) == expected


def mangle(arrays, draw):
    """One random corruption of a valid graph: a key dropped, or an array of another shape or dtype."""
    key = draw(st.sampled_from(sorted(arrays)))
    how = draw(st.sampled_from(["drop", "reshape", "dtype", "values"]))
    arrays = dict(arrays)
    if how == "drop":
        arrays.pop(key)
    elif how == "reshape":
        arrays[key] = arrays[key].reshape(-1)[: max(arrays[key].size - 1, 0)]
    elif how == "dtype":
        arrays[key] = arrays[key].astype(draw(st.sampled_from([np.str_, np.complex64, np.float16, np.int8])))
    else:
        arrays[key] = np.full_like(arrays[key], draw(st.sampled_from([-5, 10**6, 2])))
    return arrays


@FUZZ
@given(arrays=valid_graphs(), data=st.data())
def test_mangled_npz_graphs_give_the_clear_error_or_load(tmp_path, arrays, data):
    path = tmp_path / "g.npz"
    np.savez(path, **mangle(arrays, data.draw))
    try:
        load_graph(f"npz:{path}")
    except LadleError as err:
        assert str(path) in err.message
    # Anything else escaping (IndexError, ValueError, a segfault) fails the test.


@FUZZ
@given(payload=st.binary(max_size=2048), data=st.data())
def test_raw_bytes_never_crash_the_npz_reader(tmp_path, payload, data):
    path = tmp_path / "g.npz"
    if data.draw(st.booleans()):  # a real zip with random members, or plain random bytes
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as zf:
            zf.writestr(data.draw(st.sampled_from(["edges.npy", "node_features.npy", "x.pkl"])), payload)
        payload = buffer.getvalue()
    path.write_bytes(payload)
    with pytest.raises(LadleError) as err:
        load_graph(f"npz:{path}")
    assert str(path) in err.value.message


CONFIG_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**7), st.floats(allow_nan=True),
                          st.text(max_size=8), st.lists(st.integers(-3, 30), max_size=4))
CONFIG_KEYS = ["dataset", "ingredients", "seed", "granularity", "soups", "init", "device", "model", "train",
               "sampler", "engine", "learned", "partition", "recipes", "ingrediants", "x"]
SUBKEYS = ["name", "hidden", "layers", "epochs", "lr", "fanouts", "parts", "budget", "workers", "dropout", "norm",
           "heads", "batch_size", "method", "bogus"]


@st.composite
def config_dicts(draw):
    out = {}
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), max_size=5, unique=True)):
        if key in ("model", "train", "sampler", "engine", "learned", "partition"):
            out[key] = draw(st.dictionaries(st.sampled_from(SUBKEYS), CONFIG_VALUES, max_size=3))
        else:
            out[key] = draw(CONFIG_VALUES)
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values=config_dicts())
def test_random_configs_are_accepted_or_get_the_clear_error(values):
    try:
        config = build_config(values)
    except LadleError as err:
        assert err.message and "Traceback" not in err.message
        return
    # Accepted: it survives a TOML round trip unchanged.
    assert build_config(tomllib.loads(dump_toml(config.to_dict()))) == config


@settings(max_examples=200, deadline=None, derandomize=True)
@given(text=st.text(max_size=200))
def test_random_toml_text_is_accepted_or_gets_the_clear_error(tmp_path_factory, text):
    from ladle.config import load_config

    path = tmp_path_factory.mktemp("toml") / "c.toml"
    path.write_text(text)
    try:
        load_config(path)
    except LadleError as err:
        assert err.message
