"""Engines: the same weights from serial, process and Ray; killed workers retried; killed runs resumed."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import wait_until, workers_training
from ladle import api
from ladle.cli import main
from ladle.config import build_config
from ladle.errors import LadleError
from ladle.store import RunDir


def config(**engine):
    return build_config({"dataset": "csbm:nodes=500,classes=3,features=8", "ingredients": 3,
                         "sampler": {"name": "neighbor", "fanouts": [5, 5], "batch_size": 64},
                         "train": {"epochs": 4}, "model": {"hidden": 8}, "soups": ["uniform", "gis"],
                         "engine": engine})


def weights(run: Path) -> dict[str, bytes]:
    """The stored tensors of every ingredient and soup (sidecars hold times, which may differ)."""
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.glob("*/*.safetensors"))}


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("engines") / "serial"
    api.run(config(name="serial"), out)
    return out


def test_process_engine_gives_bit_identical_weights(serial_run, tmp_path):
    events = []
    out = tmp_path / "process"
    api.run(config(workers=2), out, on_epoch=lambda *event: events.append(event))
    assert weights(out) == weights(serial_run)
    timeline = RunDir(out).timeline()
    assert sorted(t["name"] for t in timeline) == ["ingredient-00", "ingredient-01", "ingredient-02"]
    assert len({t["worker"] for t in timeline}) >= 2  # really ran on separate processes
    assert {e[0] for e in events} == {"ingredient-00", "ingredient-01", "ingredient-02"}
    assert all(e[4].startswith("process-") for e in events)
    assert (out / "plots" / "timeline.png").stat().st_size > 1000


def test_a_worker_killed_mid_training_is_retried(serial_run, tmp_path):
    killed = []

    def on_epoch(name, epoch, epochs, best, worker, metrics):
        if name == "ingredient-01" and epoch == 2 and not killed:
            pid = int(worker.split("pid ")[1].rstrip(")"))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    out = tmp_path / "killed"
    api.run(config(workers=2, retries=1), out, on_epoch=on_epoch)
    assert killed
    assert weights(out) == weights(serial_run)
    tries = {t["name"]: t["attempts"] for t in RunDir(out).timeline()}  # the timeline (and its plot) says so
    assert tries == {"ingredient-00": 1, "ingredient-01": 2, "ingredient-02": 1}


def test_a_run_killed_then_resumed_matches_an_uninterrupted_one(serial_run, tmp_path):
    out = tmp_path / "resumed"
    api.train(config(name="serial"), out)
    run_dir = RunDir(out)
    # Simulate kills: ingredient-01 died between its weights and its sidecar (weights, no sidecar: not
    # finished); ingredient-02 died while writing its weights (a truncated temporary file, nothing else).
    (run_dir.ingredients / "ingredient-01.json").unlink()
    weights_02 = run_dir.ingredients / "ingredient-02.safetensors"
    (run_dir.ingredients / ".ingredient-02.safetensors.tmp-999").write_bytes(weights_02.read_bytes()[:100])
    weights_02.unlink()
    (run_dir.ingredients / "ingredient-02.json").unlink()
    assert run_dir.ingredient_names() == ["ingredient-00"]
    assert main(["run", "--resume", str(out), "--quiet", "--workers", "2"]) == 0
    assert weights(out) == weights(serial_run)
    sessions = {t["name"]: t["session"] for t in RunDir(out).timeline()}  # two drivers: the run and its resume
    assert sessions["ingredient-01"] == sessions["ingredient-02"] != sessions["ingredient-00"]


def test_sigkill_of_the_whole_run_then_resume(serial_run, tmp_path):
    out = tmp_path / "sigkill"
    cmd = [sys.executable, "-m", "ladle.cli", "run", "--dataset", "csbm:nodes=500,classes=3,features=8",
           "--ingredients", "3", "--sampler", "neighbor", "--fanouts", "5,5", "--batch-size", "64",
           "--epochs", "4", "--hidden", "8", "--soups", "uniform,gis", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not (out / "ingredients" / "ingredient-00.json").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "results.json").exists()
    assert main(["run", "--resume", str(out), "--quiet"]) == 0
    assert weights(out) == weights(serial_run)


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path):
    out = tmp_path / "interrupted"
    cmd = [sys.executable, "-m", "ladle.cli", "run", "--dataset", "csbm:nodes=500,classes=3,features=8",
           "--ingredients", "3", "--epochs", "3000", "--hidden", "8", "--workers", "2", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    wait_until(workers_training(proc.pid, 2), proc, "two workers training")
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C does: the whole process group
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 130, err
    assert f"ladle run --resume {out}" in err and "Traceback" not in err, err


def test_resume_refuses_config_flags(serial_run, capsys):
    assert main(["run", "--resume", str(serial_run), "--epochs", "9"]) == 2
    assert "--epochs" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    pytest.importorskip("ray")
    ray_bin = Path(sys.executable).with_name("ray")
    port = _free_port()
    temp = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                    "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
                   check=True, env=env, capture_output=True)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(ray_bin), "stop", "--force"], env=env, capture_output=True)


def test_ray_engine_gives_bit_identical_weights(serial_run, ray_cluster, tmp_path):
    out = tmp_path / "ray"
    events = []
    api.run(config(name="ray", address=ray_cluster), out, on_epoch=lambda *e: events.append(e))
    assert weights(out) == weights(serial_run)
    assert all(t["worker"].startswith("ray-") for t in RunDir(out).timeline())
    assert {e[0] for e in events} == {"ingredient-00", "ingredient-01", "ingredient-02"}


def test_a_callback_stops_ray_tasks_through_the_board(ray_cluster, tmp_path):
    """A callback's stop reaches a Ray task through the run's board actor: each model ends well before its cap."""
    import json

    import ladle

    class StopAtOne(ladle.Callback):
        def on_epoch(self, ingredient, epoch, metrics):
            if not metrics.get("stopped"):
                raise ladle.StopIngredient("enough")

    cap = 3000
    base = {"dataset": "csbm:nodes=300,classes=3,features=8", "ingredients": 2, "soups": ["uniform"],
            "train": {"epochs": cap, "patience": 0}, "engine": {"name": "ray", "address": ray_cluster}}
    api.train(build_config(base), tmp_path / "run", callbacks=[StopAtOne()], progress=False)
    for name in ("ingredient-00", "ingredient-01"):
        stopped = json.loads((tmp_path / "run" / "ingredients" / f"{name}.json").read_text())["stopped"]
        assert stopped["reason"] == "enough" and stopped["asked_at_epoch"] == 1 and 1 <= stopped["epoch"] < cap


def on_every_engine(base: dict, ray_cluster: str, tmp_path: Path) -> dict[str, dict[str, bytes]]:
    """The stored weights of ``base`` trained on the serial, process and Ray engines, by engine."""
    runs = {}
    for name, engine in (("serial", {"name": "serial"}), ("process", {"workers": 2}),
                         ("ray", {"name": "ray", "address": ray_cluster})):
        api.train(build_config({**base, "engine": engine}), tmp_path / name)
        runs[name] = weights(tmp_path / name)
    return runs


def test_every_engine_trains_the_same_weights_with_the_options(ray_cluster, tmp_path):
    """A learning-rate schedule, clipping and SWA from a start epoch (ladle.train_options) on every engine."""
    base = {"dataset": "csbm:nodes=400,classes=3,features=8", "ingredients": 2, "soups": ["uniform"],
            "sampler": {"name": "neighbor", "fanouts": [5, 5], "batch_size": 64}, "model": {"hidden": 8},
            "train": {"epochs": 4, "lr_schedule": "step", "lr_step": 1, "lr_gamma": 0.5, "clip_grad": 0.5,
                      "average": "swa", "average_start": 2}}
    runs = on_every_engine(base, ray_cluster, tmp_path)
    assert len(runs["serial"]) == 2 and runs["serial"] == runs["process"] == runs["ray"]


def partitioned(**engine):
    """4 ingredients on a 3-part random partition, K left to resolve (the issue-34 defect's shape)."""
    return build_config({"dataset": "csbm:nodes=500,classes=3,features=8", "ingredients": 4,
                         "sampler": {"name": "neighbor", "fanouts": [5, 5], "batch_size": 64},
                         "partition": {"method": "random", "parts": 3}, "train": {"epochs": 2},
                         "model": {"hidden": 8}, "soups": ["uniform"], "engine": engine})


def part_sidecars(run: Path) -> list:
    import json

    return [(s["partition"], s["part_graph"]) for s in
            (json.loads(p.read_text()) for p in sorted((run / "ingredients").glob("ingredient-*.json")))]


@pytest.fixture(scope="module")
def serial_partitioned(tmp_path_factory):
    out = tmp_path_factory.mktemp("engines") / "serial-parts"
    api.train(partitioned(name="serial"), out)
    return out


def test_every_engine_trains_each_ingredient_on_the_same_part(serial_partitioned, ray_cluster, tmp_path):
    recorded = part_sidecars(serial_partitioned)
    assert [p["part"] for p, _ in recorded] == [0, 1, 2, 0] and recorded[0][1] == recorded[3][1]
    assert len({g["nodes_sha256"] for _, g in recorded}) == 3
    for engine in ({"workers": 2}, {"name": "ray", "address": ray_cluster}):
        out = tmp_path / str(engine.get("name", "process"))
        api.train(partitioned(**engine), out)
        assert part_sidecars(out) == recorded, engine
        assert weights(out) == weights(serial_partitioned), engine


def test_training_from_parts_is_the_same_on_every_engine(ray_cluster, tmp_path):
    """From a partition folder each worker is sent its path (nothing through Ray's object store) and maps its own
    part; serial, process and Ray give the same weights."""
    from ladle.parts.writer import open_source, write_parts

    write_parts(open_source("csbm:nodes=500,classes=3,features=8"), tmp_path / "pdir", 3, halo=1)
    base = {"dataset": f"parts:{tmp_path / 'pdir'}", "sampler": {"name": "neighbor", "fanouts": [5, 5],
                                                                  "batch_size": 64},
            "train": {"epochs": 2}, "model": {"hidden": 8}, "soups": ["uniform"]}
    runs = on_every_engine(base, ray_cluster, tmp_path)
    assert len(runs["serial"]) == 3 and runs["serial"] == runs["process"] == runs["ray"]


def test_graph_payload_round_trips():
    from ladle.data import load_graph
    from ladle.engines.ray_cluster import graph_from_payload, graph_payload

    g = load_graph("csbm:nodes=200,classes=3,features=4")
    back = graph_from_payload(graph_payload(g))
    assert back.fingerprint == g.fingerprint and back.name == g.name
    for key in ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(back.data, key), getattr(g.data, key))
    assert all(torch.equal(a, b) for a, b in zip(back.csr(), g.csr()))


def test_the_ray_engine_tries_again_only_what_the_cluster_failed():
    """A raylet, node or actor lost while a task ran is the cluster's failure (the ingredient goes again); an
    exception from the ingredient's own code, or a LadleError, is not."""
    rx = pytest.importorskip("ray.exceptions")
    from ladle.engines.ray_cluster import cluster_failure

    def task_error(cause):
        return rx.RayTaskError("_task", "Traceback ...", cause)

    assert cluster_failure(rx.LocalRayletDiedError())
    assert cluster_failure(rx.NodeDiedError("node gone"))
    assert cluster_failure(task_error(rx.ActorUnavailableError("queue unavailable", None)))
    assert cluster_failure(task_error(rx.RaySystemError("raylet unreachable")))
    assert not cluster_failure(task_error(ValueError("a bug in the model")))
    assert not cluster_failure(task_error(LadleError("the disk is full")))
    assert not cluster_failure(rx.TaskCancelledError())


@pytest.mark.slow
@pytest.mark.benchmark
def test_gpu_script_runs_every_step_tiny_on_the_cpu(ray_cluster, tmp_path):
    """benchmarks/gpu.sh has no GPU here: LADLE_SMOKE_DEVICE=cpu runs every step tiny on the CPU, Ray through
    RAY_ADDRESS, each step's line written to $OUT/gpu.txt; on the CPU the engines' weights must be identical and
    the sparse and edge-list full-batch runs must agree."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.sh"
    env = {**os.environ, "LADLE_SMOKE_DEVICE": "cpu", "RAY_ADDRESS": ray_cluster, "OUT": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("steps=5 failed=0 device=cpu")
    lines = (tmp_path / "gpu.txt").read_text().splitlines()
    steps = {}
    for line in lines:
        figures = dict(pair.split("=", 1) for pair in line.split())
        steps[figures.pop("step")] = figures
    assert list(steps) == ["env", "throughput", "fullbatch", "gis", "smoke"]
    assert all("status" not in figures for figures in steps.values())
    assert steps["env"]["cuda"] == "False" and steps["env"]["ray"] != "missing"
    smoke = steps["smoke"]
    assert {k for k in smoke if k.endswith("_s")} == {"serial_s", "process_s", "ray_s"}
    assert all(0 <= float(smoke[f"{e}_gis"]) <= 1 for e in ("serial", "process", "ray"))
    assert smoke["identical_across_engines"] == "true" and float(smoke["max_weight_diff"]) == 0
    throughput = steps["throughput"]
    for run in ("alone", "sequential", "concurrent"):
        assert float(throughput[f"{run}_epochs_per_s"]) > 0 and float(throughput[f"{run}_span_s"]) > 0
    full = steps["fullbatch"]
    assert abs(float(full["sparse_val"]) - float(full["edge_list_val"])) < 0.02
    assert steps["gis"]["identical"] == "true" and float(steps["gis"]["speedup_gcn"]) > 0
    assert "=== smoke" in (tmp_path / "gpu.log").read_text()


def test_gpu_workers_are_spawned_and_a_spawned_worker_trains_the_same_weights(serial_run, tmp_path, monkeypatch):
    """CUDA cannot start in a child forked after its parent touched the driver (the H200 run showed the preloaded
    forkserver does), so GPU workers are spawned; on the CPU a spawned worker trains the serial run's weights."""
    import torch.multiprocessing as mp

    from ladle.engines import process

    assert process.context("cuda").get_start_method() == "spawn"
    assert process.context("cuda:1").get_start_method() == "spawn"
    assert process.context("cpu").get_start_method() == "forkserver"
    monkeypatch.setattr(process, "context", lambda device="cpu": mp.get_context("spawn"))
    out = tmp_path / "spawned"
    api.run(config(workers=2), out)
    assert weights(out) == weights(serial_run)


def test_ray_engine_without_an_address_starts_a_lean_local_ray(serial_run, ray_cluster, tmp_path, monkeypatch):
    """No --address and no RAY_ADDRESS: ladle starts a local Ray of its own (worker prestart and idle-worker
    killing off), trains the same weights, and shuts it down; a cluster ``ray start`` left on this machine (which
    Ray's own default would join) is not joined by chance."""
    ray = pytest.importorskip("ray")
    from ray._private import services

    from ladle.engines import ray_cluster as engine

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_bootstrap_address", lambda *a, **k: ray_cluster)  # as ray start leaves it
    started = []
    real_start = engine.start_local

    def start_and_check(*args, **kwargs):
        real_start(num_cpus=2)
        started.append(ray.get_runtime_context().gcs_address)

    monkeypatch.setattr(engine, "start_local", start_and_check)
    out = tmp_path / "ray-local"
    api.run(config(name="ray"), out)
    assert len(started) == 1 and started[0] != ray_cluster and not ray.is_initialized()
    assert weights(out) == weights(serial_run)
    assert engine.LOCAL_SYSTEM_CONFIG == {"enable_worker_prestart": False,
                                          "idle_worker_killing_time_threshold_ms": 3_600_000}
