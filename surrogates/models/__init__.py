"""The surrogate model classes (one per module, on `surrogates.models.base`), and the catalog that
rebuilds a saved one by the class its config names (`load_surrogate`; classes imported lazily, so
this import does not pull in BoTorch)."""

from __future__ import annotations

import importlib
from pathlib import Path

# class name in a saved config.json -> "module:class" (the only classes load_surrogate builds)
MODELS = {"ExactGP": "surrogates.models.gp:ExactGP", "SVGP": "surrogates.models.svgp:SVGP",
          "MLPEnsemble": "surrogates.models.ensemble:MLPEnsemble",
          "FeasibilityClassifier": "surrogates.models.classifier:FeasibilityClassifier"}


def model_class(name: str):
    """The surrogate class called `name` (a key of `MODELS`)."""
    from analytical.specs import SpecError

    if name not in MODELS:
        raise SpecError("surrogates", "class", name, "one of " + ", ".join(MODELS))
    module, _, cls = MODELS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def load_surrogate(directory: str | Path):
    """Any model `save` wrote into `directory`, rebuilt by the class its `config.json` names
    (state read with `torch.load(..., weights_only=True)`: no pickling)."""
    from surrogates.models.base import read_config

    config = read_config(directory)
    return model_class(config["class"]).load(directory)
