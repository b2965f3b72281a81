"""Engines: each maps the same plain ``train_and_store`` (around ``train_ingredient``) over the specs."""
from ladle.engines import process, serial


def get_engine(name: str):
    """The engine module for a resolved name; Ray is imported only when asked for."""
    if name == "ray":
        from ladle.engines import ray_cluster

        return ray_cluster
    return {"serial": serial, "process": process}[name]


__all__ = ["get_engine", "process", "serial"]
