"""Scrambled Sobol baseline (defined with the random baseline, which shares its bookkeeping)."""

from deepflow.strategies.random_search import SobolSearch

__all__ = ["SobolSearch"]
