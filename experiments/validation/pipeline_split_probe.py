"""What uneven pipeline splits would do to the modern rows: a probe, not a model change.

    python experiments/validation/pipeline_split_probe.py

The step model puts ceil(L / (pp vp)) layers on every virtual stage and the output layer on the last one
(`analytical.step.workload.stage_layers`). Two recipe families split otherwise:

- Megatron-Bridge's DeepSeek-V3 recipe pins a layout per (pp, vp) with the embedding alone on the first
  virtual stage's side and one multi-token-prediction (MTP) layer beside the loss on the last
  (src/megatron/bridge/recipes/deepseek/deepseek_v3.py: `mtp_num_layers = 1` and `layout_map` at v0.2.0
  lines 174 and 235-243; the 25.11 performance table labels its rows "w/ MTP" or "w/o MTP"). Only the
  layouts of that map are used; a row whose (pp, vp) is not in it is listed as unknown (later releases
  set `pp_layout` per config, which this probe does not read).
- Megatron-Bridge's Llama 3.1 405B recipe counts the embedding and the loss as one layer each in the split
  (`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`: v0.4.2
  src/megatron/bridge/recipes/llama/llama3.py:1132-1133), so the first and last virtual stages hold one
  layer fewer. Taken for every Megatron-Bridge 405B row with pp > 1 (earlier releases not checked).

For each row the probe takes the model's own per-micro-batch time of one layer (`T_l`) and of the output
layer and loss (`T_o`, the row evaluated again with an 8-token vocabulary), rebuilds the slowest stage
under the recipe's split (an MTP layer priced as one more layer plus one more output layer), and moves the
step time by micro-batches x the change of the slowest stage; the pipeline bubble is left as it is. The
first stage's embedding lookup is taken as free. Prints each row, a line per family, then ONE JSON line.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from analytical import evaluate, stack_designs
from analytical.step.memory import micro_batches_per_step
from analytical.step.workload import stage_layers
from deepflow.validation import read_rows

HERE = Path(__file__).resolve().parent
# per-micro-batch parts of the slowest stage (analytical.step.model: breakdown = micro-batches x stage part)
STAGE_PARTS = ("forward_compute", "backward_compute", "recompute", "tp_comm", "cp_comm", "ep_comm")
# DeepSeek-V3 recipe (v0.2.0 deepseek_v3.py:235-243): (pp, vp) -> decoder layers of the first and the last
# virtual stage (the middle ones share the rest evenly); MTP and the loss sit on the last
DEEPSEEK_LAYOUTS = {(4, 1): (16, 13), (8, 1): (8, 5), (4, 2): (8, 5), (16, 1): (4, 1), (8, 2): (4, 1), (4, 4): (4, 1)}


def _stage_s(row: dict, micro_batches: float) -> float:
    return sum(row["breakdown"].get(k, 0.0) for k in STAGE_PARTS) / micro_batches


def _layer_and_output_s(spec: tuple) -> tuple[float, float, dict, float]:
    """`(T_l, T_o, row, micro-batches)` of one row: one layer's and the output layer's per-micro-batch time."""
    accelerator, system, model, mapping = spec
    design = stack_designs([accelerator], [system], [model], [mapping])
    row = evaluate(design).row(0)
    small = dataclasses.replace(model, vocab_size=8)
    no_output = evaluate(stack_designs([accelerator], [system], [small], [mapping])).row(0)
    # the model's own stage and micro-batch counts (analytical.step.workload / memory)
    micro_batches, layers = float(micro_batches_per_step(design)[0]), float(stage_layers(design)[0])
    with_output, without = _stage_s(row, micro_batches), _stage_s(no_output, micro_batches)
    return without / layers, with_output - without, row, micro_batches


def split_stage_s(num_layers: int, pp: int, vp: int, first: float, last: float, layer_s: float,
                  last_extra_s: float) -> float:
    """Slowest device's per-micro-batch time when the first and last virtual stages hold `first` and `last`
    layers, the other pp vp - 2 share the rest, and the last stage adds `last_extra_s` (output layer, MTP)."""
    middle = (num_layers - first - last) / (pp * vp - 2)
    first_device = first + (vp - 1) * middle
    last_device = (vp - 1) * middle + last
    return max(first_device * layer_s, vp * middle * layer_s, last_device * layer_s + last_extra_s)


def probe() -> list[dict]:
    rows = read_rows(str(HERE / "modern_runs.csv"))
    with open(HERE / "modern_runs.csv", newline="") as f:  # the notes say which 25.11 rows ran without MTP
        notes = {r["id"]: r["notes"] for r in csv.DictReader(f)}
    out = []
    for i, row_id in enumerate(rows.ids):
        spec = rows.specs[i]
        model, mapping = spec[2], spec[3]
        deepseek = row_id.startswith("mbridge-") and "deepseek-v3" in row_id
        llama405 = row_id.startswith("mbridge-") and "llama3.1-405b" in row_id and mapping.pp > 1
        if not (deepseek or llama405):
            continue
        layer_s, output_s, row, micro_batches = _layer_and_output_s(spec)
        pp, vp, n = mapping.pp, mapping.vp, model.num_layers
        if deepseek:
            mtp = 0 if "w/o MTP" in notes[row_id] else 1
            if (pp, vp) not in DEEPSEEK_LAYOUTS:
                out.append({"id": row_id, "rule": "deepseek layout unknown",
                            "error": row["step_time_s"] / rows.measured_s[i] - 1})
                continue
            first, last = DEEPSEEK_LAYOUTS[(pp, vp)]
            stage = split_stage_s(n, pp, vp, first, last, layer_s, output_s + mtp * (layer_s + output_s))
            rule = f"deepseek layout {first}/{last}, mtp {mtp}"
        else:
            slots = (n + 2) / (pp * vp)  # embedding and loss one slot each
            stage = split_stage_s(n, pp, vp, slots - 1, slots - 1, layer_s, output_s)
            rule = "embedding and loss in the split"
        old = _stage_s(row, micro_batches)
        new_s = row["step_time_s"] + micro_batches * (stage - old)
        measured = rows.measured_s[i]
        out.append({"id": row_id, "rule": rule, "error": row["step_time_s"] / measured - 1,
                    "error_split": new_s / measured - 1, "layer_ms": 1e3 * layer_s, "output_ms": 1e3 * output_s})
    return out


def main() -> None:
    results = probe()
    families = {}
    for r in results:
        split = f"{r['error_split']:+7.1%}" if "error_split" in r else "      -"
        print(f"{r['id']:52s} {r['rule']:32s} {r['error']:+7.1%} -> {split}")
    for family in ("deepseek", "embedding"):
        done = [r for r in results if family in r["rule"] and "error_split" in r]
        if done:
            before = sum(abs(r["error"]) for r in done) / len(done)
            after = sum(abs(r["error_split"]) for r in done) / len(done)
            print(f"{family}: {len(done)} rows, mean |error| {before:.1%} -> {after:.1%}")
            families[family] = {"rows": len(done), "mean_abs_error": before, "mean_abs_error_split": after}
    print(json.dumps({"rows": len(results), "families": families}))


if __name__ == "__main__":
    main()
