"""Issue 33, item 6: training from parts on a real multi-node Ray cluster with no shared part folder.

Each node of a ``ray.cluster_utils.Cluster`` on this machine holds its own copy of some parts (its own folder, named
by ``LADLE_PARTS_ROOT`` in its environment) and advertises them as the resources ``ladle_part_P``; the driver holds
the manifest alone. ``--part-placement`` trains each part's ingredient on a node that holds it, with the same
weights as the serial engine; a node that leaves mid-run has its ingredient retried where the part is still held,
or the run stops naming the part, keeping what finished, and ``--resume`` finishes it.
"""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import in_fresh_process
from ladle import api
from ladle.config import build_config
from ladle.data import load_graph
from ladle.data.npy import save_npy
from ladle.errors import LadleError
from ladle.parts import MANIFEST
from ladle.parts.writer import open_source, write_parts
from ladle.store import RunDir

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

NAME = "pdir"


CHILD = "LADLE_RAY_PARTS_CHILD"
CASES = ("each_part_trains_on_the_node", "replaced_where_its_part_is_held", "only_copy_stops_the_run",
         "no_node_needs_the_run_directory")
child_only = pytest.mark.skipif(os.environ.get(CHILD) != "1", reason="run by test_in_a_fresh_process")


if os.environ.get(CHILD) != "1":
    @pytest.mark.parametrize("case", CASES)
    def test_in_a_fresh_process(case):
        # one retry: the node-removal cases race a live cluster (flaky once in CI, under study)
        in_fresh_process(__file__, case, CHILD, retries=1)


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-parts")
    save_npy(load_graph("csbm:nodes=1500,classes=3,features=8,seed=1"), root / "g")
    full = root / "full" / NAME
    write_parts(open_source(f"npy:{root / 'g'}"), full, 3)
    driver = root / "driver" / NAME  # the driver's copy: the manifest, no part
    driver.mkdir(parents=True)
    shutil.copy(full / MANIFEST, driver / MANIFEST)
    return root, full, driver


def node_folder(root, name, parts, full):
    """A node's own partition folder: the manifest and its parts only."""
    folder = root / name / NAME
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(full / MANIFEST, folder / MANIFEST)
    for p in parts:
        shutil.copytree(full / f"part-{p}", folder / f"part-{p}", dirs_exist_ok=True)
    return folder.parent


def add_node(cluster, root, name, parts, full):
    return cluster.add_node(num_cpus=1, resources={f"ladle_part_{p}": 1 for p in parts},
                            env_vars={"LADLE_PARTS_ROOT": str(node_folder(root, name, parts, full))})


# Small batches: each ingredient takes seconds, so a node can leave while its ingredient trains.
RECIPE = {"train": {"epochs": 8}, "sampler": {"name": "neighbor", "batch_size": 8}, "seed": 3, "soups": []}


def settings(address):
    return {**RECIPE, "engine": {"name": "ray", "address": address, "part_placement": True, "retries": 2}}


def train(config, out, source, **kw):
    return api.train({**config, "dataset": f"parts:{source}"}, out, progress=False, **kw)


@pytest.fixture(scope="module")
def serial_weights(partition, tmp_path_factory):
    _, full, _ = partition
    out = tmp_path_factory.mktemp("serial") / "run"
    api.train({**RECIPE, "dataset": f"parts:{full}"}, out, progress=False)
    return {n: RunDir(out).load_ingredient(n)[0] for n in RunDir(out).ingredient_names()}


def same_weights(out, expected):
    run = RunDir(out)
    assert run.ingredient_names() == sorted(expected)
    for name, state in expected.items():
        got = run.load_ingredient(name)[0]
        assert all(got[k].equal(v) for k, v in state.items()), name


@child_only
def test_each_part_trains_on_the_node_that_holds_it(partition, serial_weights, tmp_path):
    root, full, driver = partition
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = {p: add_node(cluster, tmp_path, f"node{p}", [p], full) for p in range(2)}
        cluster.wait_for_nodes()
        # a part no node advertises is refused before anything trains
        with pytest.raises(LadleError, match="no node of the Ray cluster advertises part 2"):
            train(settings(cluster.address), tmp_path / "refused", driver)
        assert not (tmp_path / "refused").exists()
        nodes[2] = add_node(cluster, tmp_path, "node2", [2], full)
        cluster.wait_for_nodes()
        out = tmp_path / "run"
        train(settings(cluster.address), out, driver)
        same_weights(out, serial_weights)
        trained_on = {t["name"]: t["worker"] for t in RunDir(out).timeline()}
        for p, node in nodes.items():  # ingredient p on part p, on the node that holds part p
            assert trained_on[f"ingredient-0{p}"].startswith(f"ray-{node.node_id[:8]}")
    finally:
        cluster.shutdown()


def _remove_when(cluster, node, name):
    """An on_epoch callback that takes ``node`` out of the cluster when ``name`` reports its first epoch."""
    removed = []

    def on_epoch(who, epoch, *rest):
        if who == name and epoch >= 1 and not removed:
            removed.append(epoch)
            cluster.remove_node(node, allow_graceful=False)
    return on_epoch, removed


@child_only
def test_a_node_that_leaves_mid_run_is_replaced_where_its_part_is_held(partition, serial_weights, tmp_path):
    root, full, driver = partition
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        add_node(cluster, tmp_path, "a", [0, 1], full)
        leaving = add_node(cluster, tmp_path, "b", [2], full)
        add_node(cluster, tmp_path, "c", [2], full)  # a second holder of part 2
        cluster.wait_for_nodes()
        on_epoch, removed = _remove_when(cluster, leaving, "ingredient-02")
        out = tmp_path / "run"
        train(settings(cluster.address), out, driver, on_epoch=on_epoch)
        assert removed
        same_weights(out, serial_weights)
    finally:
        cluster.shutdown()


@child_only
def test_a_node_that_leaves_with_the_only_copy_stops_the_run_and_resume_finishes_it(partition, serial_weights,
                                                                                    tmp_path):
    root, full, driver = partition
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        add_node(cluster, tmp_path, "a", [0, 1], full)
        only = add_node(cluster, tmp_path, "b", [2], full)
        cluster.wait_for_nodes()
        on_epoch, removed = _remove_when(cluster, only, "ingredient-02")
        out = tmp_path / "run"
        with pytest.raises(LadleError) as stopped:
            train(settings(cluster.address), out, driver, on_epoch=on_epoch)
        assert removed
        assert "ingredient-02 could not train: no node of the cluster holds part 2" in stopped.value.message
        assert "--resume" in stopped.value.fix and "ladle_part_2" in stopped.value.fix
        assert RunDir(out).ingredient_names() == ["ingredient-00", "ingredient-01"]  # nothing finished is lost
        add_node(cluster, tmp_path, "d", [2], full)
        cluster.wait_for_nodes()
        api.resume(out, engine=build_config(settings(cluster.address)).engine, progress=False)
        same_weights(out, serial_weights)
    finally:
        cluster.shutdown()


DRIVER = """
import json, shutil, sys
from ladle import api
config, out, copy = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
api.train(config, out, progress=False)
shutil.copytree(out, copy)
"""


@child_only
def test_no_node_needs_the_run_directory(partition, serial_weights, tmp_path):
    """The driver runs in a mount namespace of its own, with a private filesystem over the folder its run is in:
    no node of the cluster (started outside it) can see the run, as on machines that share no filesystem. Each
    task sends its model back and the driver stores it: the same weights, and nothing written where the nodes
    could see."""
    import json

    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -m (root) to hide the run from the cluster's nodes")
    root, full, driver = partition
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for p in range(3):
            add_node(cluster, tmp_path, f"node{p}", [p], full)
        cluster.wait_for_nodes()
        private = tmp_path / "private"
        private.mkdir()
        config = json.dumps({**settings(cluster.address), "dataset": f"parts:{driver}"})
        command = (f"mount -t tmpfs none {private} && exec {sys.executable} -c \"$0\" \"$1\" {private / 'run'} "
                   f"{tmp_path / 'copy'}")
        done = subprocess.run(["unshare", "-m", "sh", "-c", command, DRIVER, config], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert not any(private.iterdir())  # no node wrote where it could see the run
        same_weights(tmp_path / "copy", serial_weights)
    finally:
        cluster.shutdown()
