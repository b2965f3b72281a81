"""Training options users reach for: a learning-rate schedule, gradient clipping, SWA from a start epoch, bf16;
each against an independent reference, the same on every engine, and old runs keep their identity."""
import dataclasses
import math

import pytest
import torch

from ladle.config import build_config
from ladle.data import load_graph
from ladle.models import build_model
from ladle.seeding import seed_everything
from ladle.store import spec_differences
from ladle.train_options import TrainConfig
from ladle.trainer import loss_fn, train_ingredient

SMALL = "csbm:nodes=300,classes=3,features=8,seed=3"


def spec_of(train: dict, model: dict | None = None, **more):
    config = build_config({"dataset": SMALL, "ingredients": 1, "train": train,
                           "model": {"hidden": 8, **(model or {})}, **more})
    return config.ingredient_specs()[0], config


@pytest.mark.parametrize("schedule, expected", [
    ("cosine", [0.1, 0.1 * (1 + math.cos(math.pi / 4)) / 2, 0.05, 0.1 * (1 + math.cos(3 * math.pi / 4)) / 2]),
    ("step", [0.1, 0.1, 0.05, 0.05]),
    ("none", [0.1] * 4),
])
def test_the_learning_rate_of_each_epoch(schedule, expected):
    train = TrainConfig(epochs=4, lr=0.1, lr_schedule=schedule, lr_step=2, lr_gamma=0.5)
    assert [train.lr_at(e) for e in range(1, 5)] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("schedule", ["cosine", "step"])
def test_the_schedules_match_torch_schedulers(schedule):
    """torch's own schedulers, stepped once per epoch, are the reference (the step default: a third of the epochs)."""
    train = TrainConfig(epochs=30, lr=0.02, lr_schedule=schedule, lr_gamma=0.3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.02)
    scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=30) if schedule == "cosine"
                 else torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.3))
    for epoch in range(1, 31):
        assert train.lr_at(epoch) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-9, abs=1e-15), epoch
        optimizer.step()
        scheduler.step()


def test_a_scheduled_clipped_ingredient_equals_a_plain_reference_loop():
    """Full batch, no dropout: the trainer's weights after every epoch equal a hand-written Adam loop with torch's
    cosine scheduler and clip_grad_norm_, bit for bit."""
    spec, config = spec_of({"epochs": 5, "lr": 0.05, "lr_schedule": "cosine", "clip_grad": 0.05},
                           {"dropout": 0.0})
    graph = load_graph(config.dataset, config.root)
    seen = []
    train_ingredient(spec, graph, after_epoch=lambda e, m: seen.append({k: v.clone() for k, v in m.state_dict().items()}))

    model = build_model(spec.model, graph.num_features, graph.num_classes, init_seed=spec.init_seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=spec.train.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=5)
    seed_everything(spec.data_seed)
    data, adj = graph.data, graph.adj_t(model.adjacency)
    clipped = []
    for epoch in range(5):
        model.train()
        optimizer.zero_grad()
        loss = loss_fn(graph, model(data.x, adj)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        clipped.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
        optimizer.step()
        scheduler.step()
        for k, v in model.state_dict().items():
            assert torch.equal(v, seen[epoch][k]), (epoch, k)
    assert max(clipped) > 0.05  # the clip really bit: the norm before clipping was above it


def test_swa_from_a_start_epoch_averages_only_the_epochs_from_it():
    spec, config = spec_of({"epochs": 5, "eval_every": 5, "average": "swa", "average_start": 3})
    graph = load_graph(config.dataset, config.root)
    seen = []
    record = train_ingredient(spec, graph, after_epoch=lambda e, m: seen.append(
        {k: v.clone() for k, v in m.state_dict().items()}))
    for k, v in record.state.items():  # validated once, at epoch 5: the mean of epochs 3, 4 and 5
        torch.testing.assert_close(v, (seen[2][k] + seen[3][k] + seen[4][k]) / 3, rtol=0, atol=1e-6)
        assert not torch.allclose(v, (seen[0][k] + seen[1][k] + seen[2][k] + seen[3][k] + seen[4][k]) / 5)


def test_the_long_baseline_scales_every_epoch_count_and_its_swa_starts_late():
    _, config = spec_of({"epochs": 10, "patience": 2, "average_start": 4, "lr_step": 3, "lr_schedule": "step"},
                        baseline="long", ingredients=4)
    long, swa = config.baseline_specs()
    assert (long.train.epochs, long.train.patience, long.train.average_start, long.train.lr_step) == (40, 8, 13, 12)
    assert swa.role == "long-swa" and swa.train.average_start == 13
    trunk = build_config({"dataset": SMALL, "trunk": {"epochs": 2},
                          "train": {"epochs": 10, "lr_schedule": "cosine", "average_start": 4}}).trunk_spec()
    assert (trunk.train.lr_schedule, trunk.train.average_start) == ("none", 1)  # the branching point: constant rate


def test_an_average_start_past_the_epochs_is_refused():
    from ladle.errors import LadleError

    with pytest.raises(LadleError, match=r"train.average_start must be between 1 and 10, got 11"):
        build_config({"dataset": SMALL, "train": {"epochs": 10, "average_start": 11}})


def test_runs_that_use_no_new_option_keep_their_identity_and_sidecars():
    _, config = spec_of({"epochs": 3})
    assert set(config.identity()["train"]) == {"epochs", "lr", "weight_decay", "eval_every", "patience"}
    _, scheduled = spec_of({"epochs": 3, "lr_schedule": "cosine", "clip_grad": 1.0})
    assert {"lr_schedule", "clip_grad"} <= set(scheduled.identity()["train"])
    assert scheduled.identity_sha256() != config.identity_sha256()
    spec = config.ingredient_specs()[0]
    older = {"model": spec.model.to_dict(), "seeds": {"init": spec.init_seed, "data": spec.data_seed},
             "sampler": spec.sampler.to_dict(), "partition": None, "trunk_epochs": 0, "eval": spec.eval.to_dict(),
             "train": {k: v for k, v in spec.train.to_dict().items()  # a sidecar written before the options existed
                       if k not in ("average_start", "lr_schedule", "lr_step", "lr_gamma", "clip_grad", "precision")}}
    assert spec_differences(older, spec) == []
    assert spec_differences(older, scheduled.ingredient_specs()[0])  # but it was not trained with a schedule


def test_bf16_trains_fp32_weights_that_differ_from_fp32_training(caplog):
    base = {"dataset": SMALL, "ingredients": 1, "model": {"name": "sage", "hidden": 8},
            "sampler": {"name": "neighbor", "fanouts": [5, 5]}}
    graph = load_graph(SMALL, "data")
    records = [train_ingredient(build_config({**base, "train": {"epochs": 20, "precision": p}}).ingredient_specs()[0],
                                graph) for p in ("fp32", "bf16")]
    assert all(v.dtype == torch.float32 for r in records for v in r.state.values())
    assert any(not torch.equal(records[0].state[k], records[1].state[k]) for k in records[0].state)
    assert records[1].val > 0.6 and abs(records[1].val - records[0].val) < 0.1  # it learns as fp32 does (chance 1/3)
    # A full batch's sparse products have no bf16 kernel on the CPU: those layers run in fp32, and it is said.
    base = {**base, "model": {"name": "gcn", "hidden": 8}, "sampler": {"name": "full"}}
    full = [train_ingredient(build_config({**base, "train": {"epochs": 3, "precision": p}}).ingredient_specs()[0],
                             graph) for p in ("fp32", "bf16")]
    assert all(torch.equal(full[0].state[k], full[1].state[k]) for k in full[0].state)
    assert "fp32 on the CPU" in caplog.text


def test_what_an_older_sidecar_is_read_as_is_declared_on_the_options():
    """Each setting a sidecar may lack comes from its option's ``before`` or ``unrecorded``, none typed twice."""
    from ladle.store import LATER_DEFAULTS

    assert LATER_DEFAULTS == {"train.patience": 0, "train.ema_decay": 0.8, "eval.chunk": 0, "eval.device": "",
                              "train.average": "none", "train.average_start": 1, "train.clip_grad": 0.0,
                              "train.lr_gamma": 0.1, "train.lr_schedule": "none", "train.lr_step": 0,
                              "train.precision": "fp32", "trunk_epochs": 0}


def test_early_stopping_waits_for_a_late_average_to_start():
    """Patience 1 stops the plain model at epoch 2 (its validation falls); with SWA from epoch 5, kept by the model
    itself or tracked beside it, training goes on to epoch 5 at least, so the average is validated with epochs in
    it (before, it stopped at 2 and the "SWA" was the raw model under its name)."""
    train = {"epochs": 8, "patience": 1, "lr": 0.5}
    spec, config = spec_of(train)
    graph = load_graph(config.dataset, config.root)
    plain = train_ingredient(spec, graph)
    assert (plain.epochs_trained, plain.best_epoch) == (2, 1)

    spec, _ = spec_of({**train, "average": "swa", "average_start": 5})
    seen = []
    kept = train_ingredient(spec, graph, after_epoch=lambda e, m: seen.append(
        {k: v.clone() for k, v in m.state_dict().items()}))
    assert kept.epochs_trained >= 5 and [h["epoch"] for h in kept.history][:5] == [1, 2, 3, 4, 5]
    best = kept.best_epoch  # the kept weights are an average: of epochs 5 to the best one
    assert best >= 5
    for k, v in kept.state.items():
        torch.testing.assert_close(v, sum(seen[e - 1][k] for e in range(5, best + 1)) / (best - 4), rtol=0, atol=1e-6)

    spec, _ = spec_of({**train, "average_start": 5})
    tracked = train_ingredient(dataclasses.replace(spec, track_average="swa"), graph)
    assert tracked.epochs_trained >= 5 and 5 in [h["epoch"] for h in tracked.companion.history]


def test_a_late_average_competes_only_with_itself():
    """The raw model validated before the average's first epoch stands in for it (a stop before the start keeps it)
    but does not compete with it after: here the raw weights of epoch 1 validate above every later average, and
    the "SWA" kept or tracked used to be those raw weights under the average's name (a calibration run reported
    its SWA equal to the raw model's best epoch 3 of 30, the average starting at 23)."""
    train = {"epochs": 8, "patience": 0, "lr": 0.5}
    spec, config = spec_of(train)
    graph = load_graph(config.dataset, config.root)
    seen = []
    spec, _ = spec_of({**train, "average_start": 5})
    record = train_ingredient(dataclasses.replace(spec, track_average="swa"), graph, after_epoch=lambda e, m: seen.append(
        {k: v.clone() for k, v in m.state_dict().items()}))
    raw_before = max(h["val"] for h in record.history if h["epoch"] < 5)
    averages = [h["val"] for h in record.companion.history if h["epoch"] >= 5]
    assert raw_before > max(averages)  # the case: an early raw model validates above every average
    companion = record.companion
    assert companion.best_epoch >= 5 and companion.val == pytest.approx(max(averages), abs=0)
    best = companion.best_epoch
    for k, v in companion.state.items():
        torch.testing.assert_close(v, sum(seen[e - 1][k] for e in range(5, best + 1)) / (best - 4), rtol=0, atol=1e-6)
    assert record.val == max(h["val"] for h in record.history)  # the model itself still keeps its best raw epoch

    kept = train_ingredient(spec_of({**train, "average": "swa", "average_start": 5})[0], graph)
    assert kept.best_epoch >= 5 and kept.val == pytest.approx(max(averages), abs=0)
