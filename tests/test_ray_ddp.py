"""The data-parallel baseline on Ray (issue 34, item 2): Ray Train starts the K ranks and their process group on a
real multi-node cluster (``ray.cluster_utils.Cluster``, one CPU per node, so the two ranks are on two nodes); the
model equals the process engine's bit for bit, with the same all-reduced bytes."""
import os

import pytest
import torch

from conftest import in_fresh_process
from ladle import api
from ladle.cli import main
from ladle.config import build_config
from ladle.store import RunDir

pytestmark = pytest.mark.slow
pytest.importorskip("ray")
pytest.importorskip("ray.train.torch")  # the ray extra installs Ray Train
from ray.cluster_utils import Cluster  # noqa: E402

CHILD = "LADLE_RAY_DDP_CHILD"
BASE = {"dataset": "csbm:nodes=300,classes=3,features=8,degree=4,seed=3", "ingredients": 2, "baseline": "ddp",
        "train": {"epochs": 2}, "model": {"name": "sage", "hidden": 8}, "soups": ["uniform"],
        "sampler": {"name": "neighbor", "batch_size": 64}}

if os.environ.get(CHILD) != "1":
    def test_in_a_fresh_process():
        in_fresh_process(__file__, "ranks_on_two_nodes", CHILD)


@pytest.mark.skipif(os.environ.get(CHILD) != "1", reason="run by test_in_a_fresh_process")
def test_ranks_on_two_nodes_train_the_process_engines_model(tmp_path):
    api.train(build_config({**BASE, "engine": {"name": "process", "workers": 2}}), tmp_path / "local", progress=False)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        api.train(build_config({**BASE, "engine": {"name": "ray", "address": cluster.address}}), tmp_path / "ray",
                  progress=False)
    finally:
        cluster.shutdown()
    spec = build_config(BASE).long_spec("ddp")
    (local, local_sidecar), (on_ray, ray_sidecar) = (RunDir(tmp_path / n).load_checkpoint(spec) for n in ("local", "ray"))
    assert local.keys() == on_ray.keys() and all(torch.equal(local[k], on_ray[k]) for k in local)
    assert ray_sidecar["communication"] == local_sidecar["communication"]
    assert ray_sidecar["communication"]["backend"] == "gloo" and ray_sidecar["communication"]["steps"] == 4
    worker = {t["name"]: t["worker"] for t in RunDir(tmp_path / "ray").timeline()}["ddp"]
    assert worker.startswith("ddp (2 ranks on Ray")
    assert main(["soup", str(tmp_path / "ray")]) == 0  # the stored run is whole: its report has the DDP row
    assert "data-parallel, 2 ranks all-reducing" in (tmp_path / "ray" / "report.md").read_text()
