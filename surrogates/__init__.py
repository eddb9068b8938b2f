"""DeepFlow's learned surrogates: models over unit-cube designs `X: n x d` that predict targets
`Y: n x t` (log step time, log energy) with uncertainty, and a feasibility classifier.

    from surrogates.models.ensemble import MLPEnsemble
    model = MLPEnsemble().fit(X, Y)
    mean, std = model.predict(X_new, return_std=True)
    model.save("dir"); same = surrogates.load_surrogate("dir")

Models (imported lazily: `import surrogates` does not import BoTorch):
`surrogates.models.gp.ExactGP` (BoTorch, n up to a few thousand), `surrogates.models.svgp.SVGP` (variational GP,
n >= 1e4), `surrogates.models.ensemble.MLPEnsemble` (fused deep ensemble, 1e5+),
`surrogates.models.classifier.FeasibilityClassifier`. The interface is in `surrogates.models.base`.
"""

from __future__ import annotations

from surrogates.models import MODELS, load_surrogate, model_class


def load(uri: str):
    """A trained surrogate of the MLflow registry or a run (`models:/<name>@champion`,
    `models:/<name>/<version>`, `runs:/<run id>/surrogate`) or a local directory, as an object with
    `.predict(designs DataFrame) -> DataFrame` (named design columns in; per target mean, std,
    median and 95 % interval out). See `surrogates.registry` (imports MLflow when called)."""
    from surrogates.registry import load as load_registered

    return load_registered(uri)


__all__ = ["MODELS", "load", "load_surrogate", "model_class"]
