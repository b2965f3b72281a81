"""What a run's members declare about themselves, for the code outside their families (imports no torch).

Traits sit on registry entries (:mod:`ladle.registry`); these are the marks on options (:func:`ladle.options.option`):
the cuts of the graph a run asks for before anything trains (``cuts``), and the options that do nothing for a member
(``only``), which stay out of the run's identity and of the settings a stored ingredient is compared on.
"""
from __future__ import annotations

from ladle.models import MODELS
from ladle.options import idle_for, marked
from ladle.sampling import SAMPLERS
from ladle.soups import SOUPS


def cuts(config) -> list[tuple[str, str, int]]:
    """``(setting, method, parts)`` for the partition's cut and each sampler's and soup's option declared ``cuts``."""
    found = [("partition.parts", config.partition.method, config.partition.parts)] * (config.partition.method != "none")
    for sampler in dict.fromkeys([config.sampler, *(r.sampler for r in config.recipes)]):
        found += [(f"sampler.{f.name}", f.metadata["cuts"], getattr(sampler, f.name))
                  for f in marked(SAMPLERS.options(sampler.name), "cuts")]
    for name in config.soups:
        found += [(f"soups.{name}.{f.name}", f.metadata["cuts"], config.soup(name)[f.name])
                  for f in marked(SOUPS.options(name), "cuts")]
    return found


def per_layer(sampler: str) -> list:
    """The options of sampler ``sampler`` that give one value per layer of the model (declared ``per_layer``)."""
    return marked(SAMPLERS.options(sampler), "per_layer")


def idle(family: str, name: str) -> set[str]:
    """The options of model or sampler ``name`` that do nothing for it."""
    return idle_for((MODELS if family == "model" else SAMPLERS).options(name), name)


def drop_idle(identity: dict) -> dict:
    """A config's identity (:meth:`ladle.config.RunConfig.identity`) without its model's and samplers' idle options."""
    for key in idle("model", identity["model"]["name"]):
        identity["model"].pop(key, None)
    for table in [identity["sampler"]] + [r["sampler"] for r in identity.get("recipes", [])]:
        options = table.get(table["name"], table)  # [sampler.NAME] nested, or a recipe's flat table
        for key in idle("sampler", table["name"]):
            options.pop(key, None)
    return identity
