"""What a newer or bigger accelerator buys on the same workload: measured against the model, pair by pair.

    python experiments/validation/accelerator_pairs.py [data=experiments/validation/modern_runs.csv]

NVIDIA's performance tables measure one model, precision and sequence length on several accelerators in the same
release (a NeMo or Megatron-Bridge container, a DGX Cloud recipe version). Their tokens/s/GPU ratio is what the
second accelerator buys in training, with the layout each was run with (a part with more memory often runs fewer
pipeline stages or no recompute: the model prices the layout too). This prints, for every such pair, the
measured ratio, the model's ratio for the same two rows and their ratio (model / measured: below 1, the model
gives the second accelerator too little), marks the pairs run with the same layout (the cleanest comparison),
then sums up each pair of accelerators (and ends with ONE JSON line of those sums). It checks how the model carries
from one part's datasheet to another's, apart from the layout and the release: a change to what a datasheet peak is
worth in training (a sustained operating point under the TDP, say) should move these ratios toward 1.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from release_spread import measured_and_predicted, release, row_key  # noqa: E402

from deepflow.presets import load_preset  # noqa: E402

# what makes two rows the same workload measured on two accelerators
WORKLOAD = ("model", "precision", "seq_length")
# what makes them the same run as well (the rest of a row's layout)
LAYOUT = ("num_gpus", "tp", "pp", "vp", "cp", "ep", "dp", "micro_batch_size", "global_batch_size", "recompute",
          "cuda_graph", "offload_layers")


def accelerator_rank(name: str) -> tuple[float, float, str]:
    """Sort key of an accelerator: its dense 16-bit peak, then its TDP (the first of a pair is the smaller part)."""
    spec = load_preset("hardware", name)
    return float(spec.peak_tflops_bf16), float(spec.tdp_w), name


def accelerator_pairs(frame: pd.DataFrame) -> list[tuple[int, int, bool]]:
    """`(i, j, same_layout)` for rows of one release and `WORKLOAD` on two accelerators (each accelerator's first
    row), `i` on the smaller part (`accelerator_rank`); `same_layout` where the `LAYOUT` columns the CSV has agree."""
    workload = row_key(frame, WORKLOAD) + "|" + frame["id"].map(release)
    layout = row_key(frame, LAYOUT)
    out = []
    for _, group in frame.groupby(workload, sort=False):
        firsts = group.groupby("gpu", sort=False).head(1)
        ranked = sorted(firsts.index, key=lambda k: accelerator_rank(frame.at[k, "gpu"]))
        out.extend((i, j, layout[i] == layout[j]) for i, j in itertools.combinations(ranked, 2))
    return out


def main(argv: list[str]) -> None:
    path, frame, measured_s, predicted_s = measured_and_predicted(argv)
    found = accelerator_pairs(frame)
    if not found:
        print(f"{path}: no workload was measured on two accelerators in one release")
        return
    tokens = frame["global_batch_size"] * frame["seq_length"] / frame["num_gpus"]  # tokens a GPU a step
    print(f"{'measured':>8s} {'model':>7s} {'ratio':>6s}  layout  accelerators, model, precision, release")
    by_parts: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for i, j, same in found:
        measured = (tokens[j] / measured_s[j]) / (tokens[i] / measured_s[i])
        model = (tokens[j] / predicted_s[j]) / (tokens[i] / predicted_s[i])
        parts = (frame.at[i, "gpu"], frame.at[j, "gpu"])
        by_parts.setdefault(parts, []).append((measured, model, same))
        row = frame.loc[i]
        print(f"{measured:7.3f}x {model:6.3f}x {model / measured:6.3f}  {'same' if same else 'other':6s}  "
              f"{parts[1]} / {parts[0]}, {row['model']}, {row['precision']}, {release(row['id'])}")
    print(f"\n{len(found)} pairs; tokens/s/GPU of the second accelerator over the first, median measured and model, "
          f"and the mean of model / measured (all pairs; same layout):")
    sums = {}
    for (a, b), rows in sorted(by_parts.items(), key=lambda kv: -len(kv[1])):
        ratios = [model / measured for measured, model, _ in rows]
        same = [model / measured for measured, model, s in rows if s]
        same_text = f"{statistics.mean(same):.3f} ({len(same)})" if same else "none"
        print(f"  {b} / {a}: {len(rows)} pairs, measured {statistics.median(m for m, _, _ in rows):.3f}x, model "
              f"{statistics.median(p for _, p, _ in rows):.3f}x; model / measured {statistics.mean(ratios):.3f}; "
              f"same layout {same_text}")
        sums[f"{b} / {a}"] = {"pairs": len(rows), "measured_median": statistics.median(m for m, _, _ in rows),
                              "model_median": statistics.median(p for _, p, _ in rows),
                              "model_over_measured_mean": statistics.mean(ratios),
                              "same_layout_pairs": len(same)}
    print(json.dumps({"pairs": len(found), "same_layout_pairs": sum(same for _, _, same in found),
                      "by_accelerators": sums}))


if __name__ == "__main__":
    main(sys.argv[1:])
