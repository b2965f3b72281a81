"""Callbacks and trackers: what a run reports while it works, delivered in the driver process by every engine.

A callback subclasses :class:`Callback` and overrides what it needs (Lightning's and Ray Tune's way)::

    class Print(ladle.Callback):
        def on_epoch(self, ingredient, epoch, metrics):
            print(ingredient, epoch, metrics.get("val"))

    ladle.run(config, "runs/x", callbacks=[Print(), ladle.TensorBoardLogger("runs/x-tb")])

``metrics`` holds ``loss`` (the epoch's mean training loss), ``best_val``, ``epochs`` (the cap) and ``worker``,
and ``train`` and ``val`` on the epochs that validate. The process and Ray engines forward each worker's epochs
to the driver, so a callback sees every ingredient wherever it trained. A callback that raises is reported once
in the log and left out for the rest of the run: a tracker's failure never loses training.

A callback stops a model by raising :class:`StopIngredient` from ``on_epoch``::

    class StopBelow(ladle.Callback):
        def on_epoch(self, ingredient, epoch, metrics):
            if epoch >= 5 and metrics.get("val", 1.0) < 0.3:
                raise ladle.StopIngredient(f"val {metrics['val']:.2f} < 0.3 at epoch {epoch}")

The model stops at the end of an epoch, keeps its best validated weights (as early stopping does) and is stored;
its sidecar's ``stopped`` records the reason, the epoch the callback saw and the epoch it stopped at. On the serial
engine that is the same epoch; a process or Ray worker hears of it through the driver, at the end of the epoch it
is training then. Ingredients, the trunk and the long baseline can be stopped; a DDP model cannot (its ranks would
all have to agree), and a stop asked for it is logged and ignored.

The three loggers write where their tool reads, without a server: TensorBoard event files
(``tensorboard --logdir DIR``), a local MLflow store (``DIR/mlflow.db``), and an offline
Weights & Biases run (``wandb sync DIR/wandb/offline-run-*``). Each needs its extra: ``pip install
'ladle[tensorboard]'``, ``'ladle[mlflow]'``, ``'ladle[wandb]'``.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from ladle.errors import LadleError, install_hint, suggest
from ladle.files import tracker_folder

log = logging.getLogger(__name__)


class Callback:
    """The hooks of a run; each does nothing unless overridden."""

    def on_epoch(self, ingredient: str, epoch: int, metrics: dict) -> None:
        """After each training epoch of an ingredient, the trunk or the long baseline."""

    def on_ingredient_end(self, ingredient: str, summary: dict) -> None:
        """A model is trained and stored: ``val``, ``test``, ``seconds``, ``worker``, ``host``."""

    def on_soup_end(self, method: str, summary: dict) -> None:
        """A soup is made and stored: ``val``, ``test``, ``seconds``, ``is_soup``."""

    def close(self) -> None:
        """The run is over (or failed): flush and release what the callback holds."""


class StopIngredient(Exception):
    """Raised by a callback's ``on_epoch``: stop that model at the end of an epoch, for ``reason``.

    Args:
        reason (str): why, recorded in the model's sidecar (``stopped.reason``) and the log.
    """

    def __init__(self, reason: str = "stopped by a callback"):
        super().__init__(reason)
        self.reason = str(reason)


class Dispatch:
    """The run's callbacks behind the engines' progress signature; a failing callback is dropped, once.

    The stops the callbacks asked for are kept here, and the engines ask :meth:`stop_reason` for them."""

    def __init__(self, callbacks: Sequence[Callback]):
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise LadleError(f"callbacks must be ladle.Callback instances, got {type(callback).__name__}",
                                 fix="subclass ladle.Callback and override on_epoch, on_ingredient_end or on_soup_end")
        self.callbacks = list(callbacks)
        self.stops: dict[str, dict] = {}  # model name -> what stopping it asked: reason, epoch, callback

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def _call(self, hook: str, *args) -> None:
        for callback in list(self.callbacks):
            try:
                getattr(callback, hook)(*args)
            except StopIngredient as stop:
                if hook != "on_epoch":
                    log.warning("callback %s raised StopIngredient in %s, where nothing trains; ignored",
                                type(callback).__name__, hook)
                elif args[0] not in self.stops:
                    log.info("%s: callback %s asks it to stop at epoch %d: %s", args[0], type(callback).__name__,
                             args[1], stop.reason)
                    self.stops[args[0]] = {"reason": stop.reason, "asked_at_epoch": args[1],
                                           "by": type(callback).__name__}
            except Exception as err:  # a tracker's bug or a full disk must not stop the training
                log.warning("callback %s failed in %s and is left out from now on: %s", type(callback).__name__,
                            hook, err)
                self.callbacks.remove(callback)

    def progress(self, name: str, epoch: int, epochs: int, best_val: float, worker: str = "", metrics=None) -> None:
        """The engines' ``on_epoch`` signature."""
        metrics = dict(metrics or {})
        if not metrics:  # early stopping's closing event: the epoch count is now final
            metrics["stopped"] = True
        self._call("on_epoch", name, epoch, {**metrics, "best_val": best_val, "epochs": epochs, "worker": worker})

    def stop_reason(self, name: str) -> dict | None:
        """The stop a callback asked for model ``name`` (``reason``, ``asked_at_epoch``, ``by``), or None."""
        return self.stops.get(name)

    def finished(self, done) -> None:
        self._call("on_ingredient_end", done.name, {"val": done.val, "test": done.test, "seconds": done.seconds,
                                                    "worker": done.worker, "host": done.host})

    def soup(self, method: str, sidecar: dict) -> None:
        self._call("on_soup_end", method, {**sidecar["scores"], "seconds": sidecar["seconds"],
                                           "is_soup": sidecar["is_soup"]})

    def close(self) -> None:
        self._call("close")


def scalars(metrics: dict) -> dict[str, float]:
    """The numbers of an epoch worth plotting."""
    return {k: float(metrics[k]) for k in ("loss", "train", "val") if k in metrics}


class ProgressBar(Callback):
    """One rich progress bar per model and per soup, on stderr (or the console given)."""

    def __init__(self, console=None):
        class Seconds(TimeElapsedColumn):
            """A finished model's or soup's own recorded seconds (those of results.json); the clock until then."""

            def render(self, task):
                seconds = task.fields.get("seconds")
                return super().render(task) if seconds is None else Text(f"{seconds:.2f}s", style="progress.elapsed")

        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[info]}"), Seconds()]
        self.progress = Progress(*columns, console=console or Console(stderr=True), transient=False)
        self.tasks: dict[str, int] = {}
        self.started = False

    def _start(self):
        if not self.started:
            self.progress.start()
            self.started = True

    def on_epoch(self, ingredient, epoch, metrics):
        self._start()
        if ingredient not in self.tasks:
            self.tasks[ingredient] = self.progress.add_task(ingredient, total=metrics["epochs"], info="")
        total = epoch if metrics.get("stopped") else metrics["epochs"]
        self.progress.update(self.tasks[ingredient], completed=epoch, total=total,
                             info=f"best val {metrics['best_val']:.4f}  {metrics['worker']}")

    def on_ingredient_end(self, ingredient, summary):
        if ingredient in self.tasks:
            self.progress.update(self.tasks[ingredient], seconds=summary["seconds"])

    def on_soup_end(self, method, summary):
        self._start()
        self.progress.add_task(f"soup {method}", total=1, completed=1, info=f"val {summary['val']:.4f}",
                               seconds=summary["seconds"])

    def close(self):
        if self.started:
            self.progress.stop()
            self.started = False


def _need(module: str, extra: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LadleError(f"the {extra} logger needs {module.split('.')[0]}, which is not installed",
                         fix=install_hint(extra)) from None


class TensorBoardLogger(Callback):
    """TensorBoard event files under ``log_dir``: ``INGREDIENT/loss|train|val`` by epoch, ``soups/METHOD/val|test``.

    Args:
        log_dir: the folder ``tensorboard --logdir`` reads.
    """

    def __init__(self, log_dir: str | Path):
        _need("tensorboard", "tensorboard")
        # optional: the tensorboard extra
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir))

    def on_epoch(self, ingredient, epoch, metrics):
        for key, value in scalars(metrics).items():
            self.writer.add_scalar(f"{ingredient}/{key}", value, epoch)

    def on_ingredient_end(self, ingredient, summary):
        self.writer.add_scalar(f"{ingredient}/final_val", summary["val"], 0)

    def on_soup_end(self, method, summary):
        for key in ("val", "test"):
            self.writer.add_scalar(f"soups/{method}/{key}", summary[key], 0)

    def close(self):
        self.writer.close()


class MLflowLogger(Callback):
    """One MLflow run in a local store: metrics ``INGREDIENT.loss|train|val`` by epoch, ``soup.METHOD.val|test``.

    Args:
        tracking_dir: the folder of the store, ``mlflow.db`` (SQLite; ``mlflow ui --backend-store-uri
            sqlite:///DIR/mlflow.db``), default ``mlruns``; no server is involved.
        experiment (str, default ``ladle``): the experiment's name.
        params (dict, optional): logged once as the run's parameters (the CLI passes the run's settings).
    """

    def __init__(self, tracking_dir: str | Path = "mlruns", experiment: str = "ladle", params: dict | None = None):
        mlflow = _need("mlflow", "mlflow")
        Path(tracking_dir).mkdir(parents=True, exist_ok=True)  # MLflow 3 keeps the plain-file store for old runs only
        self.uri = f"sqlite:///{(Path(tracking_dir) / 'mlflow.db').resolve()}"
        self.client = mlflow.tracking.MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id).info.run_id
        for key, value in (params or {}).items():
            self.client.log_param(self.run_id, key, str(value)[:500])

    def on_epoch(self, ingredient, epoch, metrics):
        for key, value in scalars(metrics).items():
            self.client.log_metric(self.run_id, f"{ingredient}.{key}", value, step=epoch)

    def on_soup_end(self, method, summary):
        for key in ("val", "test"):
            self.client.log_metric(self.run_id, f"soup.{method}.{key}", float(summary[key]))

    def close(self):
        self.client.set_terminated(self.run_id)


class WandbLogger(Callback):
    """A Weights & Biases run, offline by default: ``INGREDIENT/loss|train|val`` against ``INGREDIENT/epoch``, and
    ``soup/METHOD/val|test`` in its summary.

    Args:
        directory: where ``wandb/offline-run-*`` goes (``wandb sync`` uploads it later).
        project (str, default ``ladle``).
        mode (str, default ``offline``): ``online`` logs to the server directly.
        config (dict, optional): the run's settings.
    """

    def __init__(self, directory: str | Path, project: str = "ladle", mode: str = "offline",
                 config: dict | None = None):
        wandb = _need("wandb", "wandb")
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, mode=mode, dir=str(directory), config=config or {}, reinit="create_new",
                              settings=wandb.Settings(silent=True, console="off"))
        self.defined: set[str] = set()

    def on_epoch(self, ingredient, epoch, metrics):
        values = scalars(metrics)
        if not values:
            return
        if ingredient not in self.defined:  # each model's curve against its own epochs
            self.run.define_metric(f"{ingredient}/epoch")
            self.run.define_metric(f"{ingredient}/*", step_metric=f"{ingredient}/epoch")
            self.defined.add(ingredient)
        self.run.log({f"{ingredient}/epoch": epoch, **{f"{ingredient}/{k}": v for k, v in values.items()}})

    def on_soup_end(self, method, summary):
        for key in ("val", "test"):
            self.run.summary[f"soup/{method}/{key}"] = float(summary[key])

    def close(self):
        self.run.finish()


# name -> (class, the module it needs, the keyword that takes the run's settings)
LOGGERS = {"tensorboard": (TensorBoardLogger, "tensorboard", None), "mlflow": (MLflowLogger, "mlflow", "params"),
           "wandb": (WandbLogger, "wandb", "config")}


class Deferred(Callback):
    """A logger made at its first event, so that it can write inside a run directory not yet created."""

    def __init__(self, make):
        self.make, self.made = make, None

    def _get(self) -> Callback:
        if self.made is None:
            self.made = self.make()
        return self.made

    def on_epoch(self, ingredient, epoch, metrics):
        self._get().on_epoch(ingredient, epoch, metrics)

    def on_ingredient_end(self, ingredient, summary):
        self._get().on_ingredient_end(ingredient, summary)

    def on_soup_end(self, method, summary):
        self._get().on_soup_end(method, summary)

    def close(self):
        if self.made is not None:
            self.made.close()


def make_loggers(names: Sequence[str], directory: str | Path, settings: dict | None = None, *,
                 run_root: str | Path | None = None) -> list[Callback]:
    """The loggers ``--log`` names, each writing under ``directory/NAME`` from its first event on; a missing
    package is reported now, before any training. With ``run_root`` (``directory`` lies in a run, which may
    come from someone else), each tracker's folder is made and checked first: no link on the way or inside it."""
    def made(where: Path) -> Path:
        return where if run_root is None else tracker_folder(Path(run_root), where)

    out = []
    for name in names:
        if name not in LOGGERS:
            raise LadleError(f"unknown logger {name!r}", fix=suggest(name, list(LOGGERS)))
        cls, module, keyword = LOGGERS[name]
        _need(module, name)
        kwargs = {keyword: settings} if keyword else {}
        if run_root is not None and Path(run_root).is_dir():
            made(Path(directory) / name)  # a run that exists (a resume): refused now, before any training
        out.append(Deferred(lambda cls=cls, where=Path(directory) / name, kwargs=kwargs: cls(made(where), **kwargs)))
    return out


def flat_settings(values: dict, prefix: str = "") -> dict:
    """``{"model": {"hidden": 64}}`` -> ``{"model.hidden": 64}``: a run's settings as trackers take parameters."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
