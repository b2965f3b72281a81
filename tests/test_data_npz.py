import numpy as np
import pytest

from ladle.data import load_graph
from ladle.errors import LadleError


def test_cornell_splits(cornell):
    g0 = load_graph(f"npz:{cornell}")
    g3 = load_graph(f"npz:{cornell}#3")
    assert g0.num_nodes == 183 and g0.num_features == 1703 and g0.num_classes == 5
    f = np.load(cornell)
    assert int(g3.data.train_mask.sum()) == int(f["train_masks"][3].sum())
    assert g0.fingerprint != g3.fingerprint


def valid(n=6):
    return {
        "node_features": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
        "node_labels": np.array([0, 1, 0, 1, 2, 2][:n]),
        "edges": np.array([[0, 1], [1, 2], [2, 3], [4, 5]]),
        "train_masks": np.array([1, 1, 0, 0, 0, 0], bool),
        "val_masks": np.array([0, 0, 1, 1, 0, 0], bool),
        "test_masks": np.array([0, 0, 0, 0, 1, 1], bool),
    }


def write(tmp_path, arrays, name="g.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def test_valid_small_graph(tmp_path):
    graph = load_graph(f"npz:{write(tmp_path, valid())}")
    assert graph.data.edge_index.size(1) == 8 and graph.num_classes == 3


def broken(**changes):
    arrays = valid()
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    return arrays


@pytest.mark.parametrize("arrays, needle", [
    (broken(edges=None), "lacks the keys edges"),
    (broken(node_features=np.zeros(6, np.float32)), "node_features has shape (6,)"),
    (broken(node_features=np.array([["a", "b"]] * 6)), "node_features has dtype"),
    (broken(edges=np.array([[0, 1, 2], [1, 2, 3]])), "transpose"),
    (broken(edges=np.array([[0, 6]])), "outside [0, 5]"),
    (broken(edges=np.array([[-1, 2]])), "outside [0, 5]"),
    (broken(edges=np.array([[0.0, 1.0]])), "edges has dtype float64"),
    (broken(node_labels=np.array([0, 1, 0, 1, 2])), "node_labels has shape (5,)"),
    (broken(node_labels=np.array([0, 1, 0, 1, 2, -3])), "negative"),
    (broken(node_features=np.full((6, 2), np.nan, np.float32)), "NaN or infinite"),
    (broken(val_masks=np.array([1, 0, 1, 1, 0, 0], bool)), "train_masks and val_masks overlap on 1 nodes"),
    (broken(test_masks=np.zeros(6, bool)), "test_masks selects no nodes"),
    (broken(train_masks=np.ones((2, 5), bool)), "train_masks has shape (2, 5)"),
    (broken(train_masks=np.array([2, 1, 0, 0, 0, 0])), "boolean"),
])
def test_bad_npz_names_the_key(tmp_path, arrays, needle):
    with pytest.raises(LadleError) as err:
        load_graph(f"npz:{write(tmp_path, arrays)}")
    assert needle in str(err.value)
    assert "g.npz" in str(err.value)


def test_split_past_the_end_and_bad_paths(tmp_path, cornell):
    with pytest.raises(LadleError, match="split 10 asked for but train_masks holds 10 splits"):
        load_graph(f"npz:{cornell}#10")
    with pytest.raises(LadleError, match="does not exist"):
        load_graph(f"npz:{tmp_path / 'missing.npz'}")
    with pytest.raises(LadleError, match="not a number"):
        load_graph(f"npz:{cornell}#x")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(LadleError, match="not a readable .npz"):
        load_graph(f"npz:{junk}")


def test_object_arrays_are_never_unpickled(tmp_path):
    arrays = valid()
    arrays["node_labels"] = np.array([0, 1, 0, 1, 2, 2], dtype=object)
    with pytest.raises(LadleError, match="never unpickles"):
        load_graph(f"npz:{write(tmp_path, arrays)}")
