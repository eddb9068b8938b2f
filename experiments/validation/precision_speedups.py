"""What a narrow format buys over BF16 on the same run: measured against the model, pair by pair.

    python experiments/validation/precision_speedups.py [data=experiments/validation/modern_runs.csv]

Several configurations of modern_runs.csv were measured in BF16 and in a narrow format (fp8, mxfp8, nvfp4)
in the same release, on the same GPUs and layout. The ratio of their step times is the narrow format's speedup
in training, with everything around the GEMMs (Transformer Engine's quantization kernels, fp8 all-gathers, the
layers that stay in 16 bits) included. This prints, for every such pair, the measured speedup, the model's
speedup for the same two rows and their ratio (model / measured: below 1, the model gives the narrow format
too little), then the mean and the ratio's dependence on the model's size (and ends with ONE JSON line of those).
It checks the narrow-format GEMM fraction (`Efficiency.narrow_gemm_peak_fraction`) against what training measures,
apart from the rest of the model: a change to how narrow formats are priced should move these ratios toward 1, not
only the mean error.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from release_spread import measured_and_predicted, release, row_key  # noqa: E402

# what makes two rows the same run but for the precision: the layout and the stack columns a precision does not
# set (torch.compile's fusions, recompute, CUDA graphs, asynchronous tensor parallelism)
LAYOUT = ("model", "gpu", "num_gpus", "seq_length", "tp", "pp", "vp", "cp", "ep", "dp", "micro_batch_size",
          "global_batch_size", "recompute", "elementwise", "cuda_graph", "overlap_tp_comm")


def precision_pairs(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """Index pairs `(bf16 row, narrow row)` with the same `LAYOUT` (the columns of it the CSV has) and release (each
    precision's first row)."""
    key = row_key(frame, LAYOUT) + "|" + frame["id"].map(release)
    out = []
    for _, group in frame.groupby(key, sort=False):
        firsts = group.groupby("precision", sort=False).head(1)
        wide = firsts.index[firsts["precision"] == "bf16"]
        out.extend((wide[0], j) for j in firsts.index[firsts["precision"] != "bf16"] if len(wide))
    return out


def main(argv: list[str]) -> None:
    path, frame, measured_s, predicted_s = measured_and_predicted(argv)
    found = precision_pairs(frame)
    if not found:
        print(f"{path}: no configuration was measured in BF16 and a narrow format in one release")
        return
    print(f"{'measured':>8s} {'model':>7s} {'ratio':>6s}  model, GPU, precision, release")
    ratios = []
    for wide, narrow in found:
        measured = measured_s[wide] / measured_s[narrow]
        model = predicted_s[wide] / predicted_s[narrow]
        ratios.append((model / measured, frame.loc[narrow]))
        r = frame.loc[narrow]
        print(f"{measured:7.3f}x {model:6.3f}x {model / measured:6.3f}  {r['model']}, {r['gpu']}, {r['precision']}, "
              f"{release(r['id'])}")
    values = [r for r, _ in ratios]
    logs = [abs(math.log(r)) for r in values]
    print(f"\n{len(found)} pairs: model / measured speedup mean {statistics.mean(values):.3f}, median "
          f"{statistics.median(values):.3f}, range {min(values):.3f}-{max(values):.3f}; mean |log| {statistics.mean(logs):.3f}")
    width = [(float(r["hidden_size"]) if not pd.isna(r["hidden_size"]) else float("nan"), v) for v, r in ratios]
    small = [v for h, v in width if h < 8192]
    large = [v for h, v in width if h >= 8192]
    if small and large:
        print(f"hidden size below 8192: mean ratio {statistics.mean(small):.3f} ({len(small)} pairs); 8192 and "
              f"above: {statistics.mean(large):.3f} ({len(large)} pairs)")
    print(json.dumps({"pairs": len(found), "model_over_measured_mean": statistics.mean(values),
                      "model_over_measured_median": statistics.median(values),
                      "model_over_measured_range": [min(values), max(values)], "mean_abs_log": statistics.mean(logs),
                      "mean_below_8192": statistics.mean(small) if small else None,
                      "mean_8192_and_above": statistics.mean(large) if large else None}))


if __name__ == "__main__":
    main(sys.argv[1:])
