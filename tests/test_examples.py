from pathlib import Path

import pytest

from ladle.config import load_config
from ladle.soups import get_soup

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


def test_one_example_per_soup_method():
    from ladle.soups import SOUPS

    covered = {m for path in EXAMPLES for m in load_config(path).soups}
    assert set(SOUPS.names()) <= covered


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid_configs(path):
    config = load_config(path)
    for method in config.soups:
        get_soup(method)
