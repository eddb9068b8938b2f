"""DeepFlow's learned surrogates: models over unit-cube designs `X: n x d` that predict targets
`Y: n x t` (log step time, log energy) with uncertainty, and a feasibility classifier.

    from surrogates.ensemble import MLPEnsemble
    model = MLPEnsemble().fit(X, Y)
    mean, std = model.predict(X_new, return_std=True)
    model.save("dir"); same = surrogates.load_surrogate("dir")

Models (imported lazily: `import surrogates` does not import BoTorch):
`surrogates.gp.ExactGP` (BoTorch, n up to a few thousand), `surrogates.svgp.SVGP` (variational GP,
n >= 1e4), `surrogates.ensemble.MLPEnsemble` (fused deep ensemble, 1e5+),
`surrogates.classifier.FeasibilityClassifier`. The interface is in `surrogates.base`.
"""

from __future__ import annotations

import importlib
from pathlib import Path

# class name in a saved config.json -> "module:class" (the only classes load_surrogate builds)
MODELS = {"ExactGP": "surrogates.gp:ExactGP", "SVGP": "surrogates.svgp:SVGP",
          "MLPEnsemble": "surrogates.ensemble:MLPEnsemble",
          "FeasibilityClassifier": "surrogates.classifier:FeasibilityClassifier"}


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
    from surrogates.base import read_config

    config = read_config(directory)
    return model_class(config["class"]).load(directory)


def load(uri: str):
    """A trained surrogate of the MLflow registry or a run (`models:/<name>@champion`,
    `models:/<name>/<version>`, `runs:/<run id>/surrogate`) or a local directory, as an object with
    `.predict(designs DataFrame) -> DataFrame` (named design columns in; per target mean, std,
    median and 95 % interval out). See `surrogates.registry` (imports MLflow when called)."""
    from surrogates.registry import load as load_registered

    return load_registered(uri)


__all__ = ["MODELS", "load", "load_surrogate", "model_class"]
