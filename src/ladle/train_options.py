"""How one model is trained, from where, and how whole-graph scores are computed: the ``[train]``, ``[trunk]`` and
``[eval]`` tables (imports no torch; :mod:`ladle.trainer` reads them)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import ClassVar

from ladle.errors import LadleError
from ladle.options import Options, check_int, option


@dataclass(frozen=True)
class TrainConfig(Options):
    """How one ingredient is trained: Adam, the best-validation weights kept."""

    table: ClassVar[str] = "train"
    epochs: int = option(200, "epochs per ingredient (GAT 500)", low=1, high=1_000_000)
    lr: float = option(0.01, "Adam learning rate (GAT 0.005)", low=0.0, high=10.0, open_low=True)
    weight_decay: float = option(5e-4, "Adam weight decay", low=0.0, high=1.0)
    eval_every: int = option(1, "validate every k epochs", low=1)
    patience: int = option(0, "early stopping: validations without improvement before an ingredient stops, "
                              "keeping its best weights (0: train every epoch)", low=0, high=1_000_000, unrecorded=0)
    average: str = option("none", "validate, early-stop on and keep each model's weights averaged over its epochs: "
                                  "swa (their mean, Izmailov et al., 2018), ema", choices=("none", "swa", "ema"),
                        before="none")
    ema_decay: float = option(0.8, "the ema's weight on its past, per epoch", low=0.0, high=1.0, open_low=True,
                              unrecorded=0.8)
    average_start: int = option(1, "the first epoch whose weights enter the average (train.average, the long "
                                   "model's SWA): a warm-up first, as Izmailov et al. start SWA late; early "
                                   "stopping waits for it", low=1,
                                before=1)
    lr_schedule: str = option("none", "the learning rate over the epochs: cosine (to 0 at train.epochs, Loshchilov "
                                      "& Hutter, 2017), step (times train.lr_gamma every train.lr_step epochs)",
                              choices=("none", "cosine", "step"), before="none")
    lr_step: int = option(0, "step schedule: epochs between decays (0: a third of train.epochs)", low=0, before=0)
    lr_gamma: float = option(0.1, "step schedule: what each decay multiplies the learning rate by", low=0.0,
                             high=1.0, open_low=True, before=0.1)
    clip_grad: float = option(0.0, "clip the gradients' global L2 norm to this before each step (0: no clipping)",
                              low=0.0, high=1e9, before=0.0)
    precision: str = option("fp32", "training arithmetic: bf16 runs forward and loss under bfloat16 autocast "
                                    "(weights, optimiser and validation stay fp32)", choices=("fp32", "bf16"),
                            before="fp32")

    def validate(self):
        check_int("train.eval_every", self.eval_every, 1, self.epochs)
        check_int("train.average_start", self.average_start, 1, self.epochs)

    def scaled(self, k: int) -> TrainConfig:
        """K times this budget (the equal-compute baselines): epochs, patience and every epoch count scaled."""
        return replace(self, epochs=k * self.epochs, patience=k * self.patience, lr_step=k * self.lr_step,
                       average_start=k * (self.average_start - 1) + 1)

    def lr_at(self, epoch: int) -> float:
        """The learning rate of epoch ``epoch`` (1-based): ``lr`` throughout; cosine: lr (1 + cos(π (e-1) / E)) / 2;
        step: lr γ^⌊(e-1) / s⌋."""
        if self.lr_schedule == "cosine":
            return self.lr * (1 + math.cos(math.pi * (epoch - 1) / self.epochs)) / 2
        if self.lr_schedule == "step":
            return self.lr * self.lr_gamma ** ((epoch - 1) // (self.lr_step or max(self.epochs // 3, 1)))
        return self.lr


@dataclass(frozen=True)
class TrunkConfig(Options):
    """A shared trunk the ingredients branch from (Frankle et al., ICML 2020, *Linear Mode Connectivity and the
    Lottery Ticket Hypothesis*: after a short common trunk, runs that differ only in SGD noise are linearly
    connected, the condition for averaging their weights to help)."""

    table: ClassVar[str] = "trunk"
    epochs: int = option(0, "train one shared trunk this many epochs, then start every ingredient from it "
                            "(0: from the shared initialisation)", low=0, high=1_000_000, flag="--trunk-epochs")


@dataclass(frozen=True)
class EvalConfig(Options):
    """How whole-graph scores are computed: in training's validation, the soups, verify and predict."""

    table: ClassVar[str] = "eval"
    chunk: int = option(0, "layer-wise inference over chunks of this many nodes, bounding memory (0: one "
                           "full-batch forward)", low=0, flag="--eval-chunk", unrecorded=0)
    device: str = option("", "where soups and predictions run (default: the run's device)", flag="--eval-device",
                         empty=True, unrecorded="")

    def validate(self):
        if self.device and self.device.split(":")[0] not in ("cpu", "cuda"):
            raise LadleError(f"eval.device must be cpu, cuda or cuda:N, got {self.device!r}",
                             fix="give eval.device cpu or cuda, or leave it out")


def omitted_at_before(table: Options) -> dict:
    """``table.to_dict()`` without the options at the value runs had before the option existed (``before``): a run
    that does not use a later option keeps the identity it had."""
    at_before = {f.name for f in fields(table) if "before" in f.metadata and getattr(table, f.name) == f.metadata["before"]}
    return {k: v for k, v in table.to_dict().items() if k not in at_before}


def before_values(*tables) -> dict:
    """``{"train.lr_schedule": "none", "train.patience": 0, ...}``: what a sidecar written before each option was
    recorded is read as (an option's ``before``, or its ``unrecorded``)."""
    return {f"{cls.table}.{f.name}": f.metadata["before"] if "before" in f.metadata else f.metadata["unrecorded"]
            for cls in tables for f in fields(cls) if "before" in f.metadata or "unrecorded" in f.metadata}
