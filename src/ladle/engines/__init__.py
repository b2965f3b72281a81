"""Engines: each wraps the same plain ``train_ingredient`` function."""
from ladle.engines import serial

ENGINES = {"serial": serial}

__all__ = ["ENGINES", "serial"]
