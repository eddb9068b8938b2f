"""How far the model lands when a run states only its model and mapping, not how its software ran.

    python experiments/validation/unstated_stack_probe.py [--ablate]

A performance table states the model, the GPUs, the parallel mapping, the batch and the precision; the
columns modern_runs.csv adds beyond those (overlap flags, the MoE dispatcher, CUDA graphs, fp8 details, the
attention kernel, the optimizer's precision, ...) come from reading each release's recipes, which a user
with a new table has not done. This probe drops those stack columns from modern_runs.csv and validates what
is left, so the reader's defaults (`deepflow.validation`: the stack's overlaps, the platform's NVLink domain,
the kernels of the framework a source names, what the run having trained implies) do the typing. It prints
the error with every column typed and with the stack left unstated, by source family; `--ablate` adds each
stack column back alone and prints the error it buys. A column's absence is read exactly as an empty cell.
Ends with ONE JSON line: the mean and largest |error| typed and unstated (and the mean with each column added back).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import pandas as pd

from analytical import DEFAULT_EFFICIENCY
from deepflow.presets import ConfigError
from deepflow.validation import read_rows, report

DATA = Path(__file__).resolve().parent
# what a performance table or a model card states besides the columns of published_runs.csv
STATED = ("flash_attention", "fsdp", "ep", "num_experts", "top_k", "moe_ffn_hidden_size", "num_shared_experts",
          "head_dim", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "moe_router_num_groups",
          "moe_router_group_topk", "window_size", "window_attn_skip_freq", "activation_clamp", "linear_bias",
          "rope_mscale", "measured_tokens_per_s_per_gpu",
          "measured_memory_gib", "power_limit_w")


def stack_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of `frame` that say how the software ran (neither published_runs.csv's nor `STATED`)."""
    base = set(pd.read_csv(DATA / "published_runs.csv", nrows=0).columns) | set(STATED)
    return [c for c in frame.columns if c not in base]


def summary(frame: pd.DataFrame) -> tuple[dict, dict[str, float]]:
    """`deepflow validate`'s summary of `frame`, and its mean |error| by source family (the id's prefix)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        frame.to_csv(path, index=False)
        result = report(read_rows(str(path)), DEFAULT_EFFICIENCY)
    errors = pd.DataFrame([(r["id"].split("-")[0], abs(r["error"])) for r in result["rows"]],
                          columns=["family", "error"])
    return result["summary"], errors.groupby("family")["error"].mean().to_dict()


def line(label: str, s: dict, families: dict[str, float]) -> str:
    by_family = "  ".join(f"{k} {100 * v:4.1f}" for k, v in sorted(families.items()))
    return (f"{label:30s} mean {100 * s['mape']:5.2f} %  max {100 * s['max_abs_error']:6.1f} %  "
            f"infeasible {s['infeasible_rows']:2d}  |  {by_family}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ablate", action="store_true", help="add each stack column back alone")
    args = parser.parse_args()
    typed = pd.read_csv(DATA / "modern_runs.csv")
    stack = stack_columns(typed)
    unstated = typed.drop(columns=stack)
    print(f"modern_runs.csv, {len(typed)} rows; stack columns dropped ({len(stack)}): {', '.join(stack)}")
    typed_summary, typed_families = summary(typed)
    print(line("every column typed", typed_summary, typed_families))
    base_summary, base_families = summary(unstated)
    print(line("stack unstated", base_summary, base_families))
    figures = lambda s: {k: s[k] for k in ("mape", "max_abs_error", "infeasible_rows")}  # noqa: E731
    out = {"rows": len(typed), "stack_columns": stack, "typed": figures(typed_summary),
           "unstated": figures(base_summary)}
    if args.ablate:
        out["ablated_mape"] = {}
        for column in stack:
            try:
                s, families = summary(unstated.assign(**{column: typed[column]}))
            except ConfigError as exc:  # a column that is valid only beside another (the reader names the pair)
                print(f"+ {column:28s} not alone: {exc}")
                out["ablated_mape"][column] = None
                continue
            print(line(f"+ {column}", s, families) + f"  ({100 * (s['mape'] - base_summary['mape']):+.2f})")
            out["ablated_mape"][column] = s["mape"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
