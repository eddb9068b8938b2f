"""Figures of an optimization run, from its evaluations table (`deepflow.run.store`).

- `convergence_png`: every verified objective value and the best so far against the evaluation
  index (log scale), the known optimum when there is one; for two objectives, the hypervolume.
- `pareto_png` / `pareto_html`: the feasible designs in the plane of two outcomes (step time and
  energy per step when the energy model provides it, else step time and memory per device) with
  their Pareto front; the HTML is an interactive plotly figure with plotly.js embedded, so it opens
  offline, and shows each design's parameters on hover.

matplotlib runs on the Agg backend (no display needed). Pure functions of a DataFrame.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

GIB = 2.0**30


def hypervolume_2d(Y: np.ndarray, ref: Sequence[float]) -> float:
    """Area dominated by the rows of `Y n x 2` (both minimized) and bounded by `ref`."""
    Y = np.asarray(Y, dtype=float).reshape(-1, 2)
    Y = Y[(Y[:, 0] < ref[0]) & (Y[:, 1] < ref[1])]
    if not len(Y):
        return 0.0
    Y = Y[np.lexsort((Y[:, 1], Y[:, 0]))]
    area, best_y1 = 0.0, ref[1]
    for y0, y1 in Y:
        if y1 < best_y1:
            area += (ref[0] - y0) * (best_y1 - y1)
            best_y1 = y1
    return float(area)


def pareto_front_mask(points: np.ndarray) -> np.ndarray:
    """`n` bool: rows of `points n x 2` (minimized) that no other row dominates."""
    points = np.asarray(points, dtype=float)
    le = (points[None, :, :] <= points[:, None, :]).all(-1)
    lt = (points[None, :, :] < points[:, None, :]).any(-1)
    return ~(le & lt).any(-1)


def trade_off_columns(frame: pd.DataFrame) -> tuple[str, str, str, float]:
    """`(x column, y column, y label, y scale)` of the Pareto plots."""
    if "energy_j" in frame.columns and np.isfinite(frame["energy_j"].to_numpy(dtype=float)).any():
        return "step_time_s", "energy_j", "energy per step (J)", 1.0
    return "step_time_s", "memory_per_device_bytes", "memory per device (GiB)", 1.0 / GIB


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def convergence_png(frame: pd.DataFrame, path: str | Path, label: str, values: np.ndarray,
                    best: np.ndarray, optimum: Optional[float] = None,
                    hypervolume: Optional[np.ndarray] = None, title: str = "") -> Path:
    """Objective `values` (natural units, NaN where infeasible) and `best` so far against the
    evaluation index; with `hypervolume`, a second panel."""
    plt = _pyplot()
    panels = 2 if hypervolume is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ax = axes[0, 0]
    index = frame["index"].to_numpy()
    feasible = np.isfinite(values)
    ax.scatter(index[feasible], values[feasible], s=12, alpha=0.6,
               label=f"verified feasible ({int(feasible.sum())} of {len(index)})")
    ax.step(index, best, where="post", color="C3", label="best so far")
    if optimum is not None and math.isfinite(optimum):
        ax.axhline(optimum, color="k", linestyle="--", linewidth=1, label="optimum (enumerated)")
    if np.isfinite(values).any() and np.nanmin(values) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("evaluation")
    ax.set_ylabel(label)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "convergence", fontsize=10)
    if hypervolume is not None:
        ax2 = axes[0, 1]
        ax2.step(index, hypervolume, where="post", color="C2")
        ax2.set_xlabel("evaluation")
        ax2.set_ylabel("hypervolume (log objectives)")
        ax2.set_title("dominated hypervolume", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def _feasible_plane(frame: pd.DataFrame) -> tuple[pd.DataFrame, str, str, str, float]:
    xcol, ycol, ylabel, yscale = trade_off_columns(frame)
    ok = frame["objective_feasible"].to_numpy(dtype=bool) & np.isfinite(frame[xcol].to_numpy(dtype=float)) \
        & np.isfinite(frame[ycol].to_numpy(dtype=float))
    return frame[ok], xcol, ycol, ylabel, yscale


def pareto_png(frame: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    plt = _pyplot()
    data, xcol, ycol, ylabel, yscale = _feasible_plane(frame)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    if len(data):
        pts = np.stack([data[xcol].to_numpy(float), data[ycol].to_numpy(float) * yscale], axis=1)
        front = pareto_front_mask(pts)
        ax.scatter(pts[~front, 0], pts[~front, 1], s=12, alpha=0.4, label="feasible designs")
        order = np.argsort(pts[front, 0])
        ax.plot(pts[front, 0][order], pts[front, 1][order], "o-", color="C3", markersize=5, label="Pareto front")
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no feasible design", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step time (s)")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "Pareto front", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def pareto_html(frame: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Interactive Pareto plot; plotly.js is embedded in the file (works offline)."""
    import plotly.graph_objects as go

    data, xcol, ycol, ylabel, yscale = _feasible_plane(frame)
    design_cols = [c for c in data.columns if c.startswith("design.")]
    hover = ["<br>".join([f"evaluation {int(r['index'])}"] + [f"{c[7:]}={r[c]}" for c in design_cols])
             for _, r in data.iterrows()]
    fig = go.Figure()
    if len(data):
        pts = np.stack([data[xcol].to_numpy(float), data[ycol].to_numpy(float) * yscale], axis=1)
        front = pareto_front_mask(pts)
        hover_arr = np.array(hover, dtype=object)
        fig.add_trace(go.Scatter(x=pts[~front, 0], y=pts[~front, 1], mode="markers", name="feasible designs",
                                 text=hover_arr[~front], hoverinfo="text+x+y", opacity=0.5))
        order = np.argsort(pts[front, 0])
        fig.add_trace(go.Scatter(x=pts[front, 0][order], y=pts[front, 1][order], mode="lines+markers",
                                 name="Pareto front", text=hover_arr[front][order], hoverinfo="text+x+y"))
    fig.update_layout(title=title or "Pareto front", xaxis_title="step time (s)", yaxis_title=ylabel,
                      xaxis_type="log", template="plotly_white")
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
    return Path(path)
