"""How much the same run differs between software releases: the floor a release-agnostic model stands on.

    python experiments/validation/release_spread.py [data=experiments/validation/modern_runs.csv]

modern_runs.csv keeps one row per (release, configuration), and several configurations were measured in
more than one release (a NeMo or Megatron-Bridge container, a DGX Cloud recipe version, a torchtitan
benchmark date). This pairs every two rows with the same model, GPU, GPU count, precision, sequence length
and parallel layout (tp, pp, vp, cp, ep, dp, micro-batch) from different releases, and prints the measured
tokens/s/GPU ratio of each pair beside the model's ratio for the same two rows. The model sees a release
only through what its row types differently (the global batch, recompute, CUDA graphs, the MoE dispatcher
and overlaps, ...), so where the two ratios differ the release changed something no column holds. The
summary gives the median and largest measured ratio, and the share of the pairs' log-ratio that the model's
ratio accounts for, then ONE JSON line with the same figures.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

from analytical import DEFAULT_EFFICIENCY
from deepflow.presets import ConfigError
from deepflow.validation import read_rows
from deepflow.validation.report import predict

DATA = Path(__file__).resolve().parent / "modern_runs.csv"
# what makes two rows the same configuration; the global batch is left out (it changes the step, not the
# tokens/s a layout reaches, and the model accounts for it)
LAYOUT = ("model", "gpu", "num_gpus", "precision", "seq_length", "tp", "pp", "vp", "cp", "ep", "dp",
          "micro_batch_size")


def release(row_id: str) -> str:
    """The release a row was measured in: its id's first two fields (`mbridge-26.04.01`, `nemo-24.07`,
    `dgxc-v25.05.05`, `titan-2412`)."""
    return "-".join(row_id.split("-")[:2])


def row_key(frame: pd.DataFrame, columns) -> pd.Series:
    """Each row's values of those of `columns` the table has, joined into one string (empty for an empty cell): rows
    with equal keys agree on them."""
    return frame[[c for c in columns if c in frame.columns]].astype(object).fillna("").astype(str).agg("|".join, axis=1)


def pairs(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Index pairs `(i, j)` of rows with the same `LAYOUT` from different releases (each release's first row)."""
    key = row_key(frame, LAYOUT)
    out = []
    for _, group in frame.groupby(key, sort=False):
        firsts = group.groupby(group["id"].map(release), sort=False).head(1).index
        out.extend(itertools.combinations(firsts, 2))
    return out


def measured_and_predicted(argv: list[str]) -> tuple[str, pd.DataFrame, list, list]:
    """The CSV a `data=` argument names (modern_runs.csv without one), its table, and its rows' measured and
    predicted step times (shipped constants)."""
    path = next((a.split("=", 1)[1] for a in argv if a.startswith("data=")), str(DATA))
    try:
        rows = read_rows(path)
    except ConfigError as exc:  # a missing file or a bad row: the reader's one line, no traceback
        raise SystemExit(f"{Path(sys.argv[0]).name}: {exc}") from None
    predicted_s = predict(rows, DEFAULT_EFFICIENCY)["predicted_s"]
    return path, pd.read_csv(path), list(rows.measured_s), [float(t) for t in predicted_s]


def main(argv: list[str]) -> None:
    path, frame, measured_s, predicted_s = measured_and_predicted(argv)
    tokens_s = frame["global_batch_size"] * frame["seq_length"] / frame["num_gpus"]  # tokens a GPU a step
    found = pairs(frame)
    if not found:
        print(f"{path}: no configuration was measured in two releases")
        return
    print(f"{'measured':>8s} {'model':>7s}  model, GPU, precision: faster release vs slower")
    measured_ratios, logs, explained = [], [], []
    for i, j in found:
        tps = [tokens_s[k] / measured_s[k] for k in (i, j)]
        fast, slow = (i, j) if tps[0] >= tps[1] else (j, i)
        ratio = max(tps) / min(tps)
        model = (tokens_s[fast] / predicted_s[fast]) / (tokens_s[slow] / predicted_s[slow])
        measured_ratios.append(ratio)
        logs.append(math.log(ratio))
        explained.append(math.log(model))
        r = frame.loc[fast]
        print(f"{ratio:7.3f}x {model:6.3f}x  {r['model']}, {r['gpu']}, {r['precision']}: "
              f"{release(frame.loc[fast, 'id'])} vs {release(frame.loc[slow, 'id'])}")
    residual = [abs(a - b) for a, b in zip(logs, explained)]
    print(f"\n{len(found)} pairs: measured ratio median {statistics.median(measured_ratios):.3f}x, "
          f"max {max(measured_ratios):.3f}x; the model's ratio accounts for {sum(explained) / sum(logs):.0%} of "
          f"their summed log-ratio; what it leaves: median {math.exp(statistics.median(residual)):.3f}x, "
          f"max {math.exp(max(residual)):.3f}x")
    print(json.dumps({"pairs": len(found), "measured_ratio_median": statistics.median(measured_ratios),
                      "measured_ratio_max": max(measured_ratios), "model_share": sum(explained) / sum(logs),
                      "residual_median": math.exp(statistics.median(residual)),
                      "residual_max": math.exp(max(residual))}))


if __name__ == "__main__":
    main(sys.argv[1:])
