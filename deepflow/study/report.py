"""What a study shows: its table (printed and as markdown), a figure (PNG and offline HTML) and the
JSON line of `output=json`, all made from the same rows (`deepflow.study.context`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

COLUMNS = ("workload", "variant", "objective_s", "step_time_s", "energy_j", "mfu", "loss_pct", "mapping")
HEADER = ("workload", "variant", "objective (s)", "step (s)", "energy / step (kJ)", "MFU", "vs reference",
          "mapping")
EXTRA_HEADER = {"gain_pct": "faster than baseline", "binding": "binding limit", "flop_per_hbm_byte": "FLOP per HBM byte",
                "sram_kib_per_unit": "SRAM KiB per unit", "scale_up_byte_per_kflop": "scale-up bytes per kFLOP",
                "throughput_seq_per_s": "sequences / s", "vs_tpu_v4": "x TPU v4", "vs_derived": "x derived"}


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if key in ("objective_s", "step_time_s"):
        return f"{value:.4g}"
    if key == "energy_j":
        return f"{value / 1e3:.4g}"
    if key == "mfu":
        return f"{100 * value:.1f} %"
    if key == "gain_pct":
        return f"{value:+.1f} %"
    if key == "loss_pct":
        return "0" if abs(value) < 0.005 else f"{value:+.2f} %"
    return str(value)


def table_cells(rows: list[dict[str, Any]], reference: str = "the best", extra: tuple[str, ...] = ()
                ) -> tuple[list[str], list[list[str]]]:
    header = [f"vs {reference}" if h == "vs reference" else h for h in HEADER] + [EXTRA_HEADER.get(k, k) for k in extra]
    cells = [[r["label"] if k == "variant" else _cell(k, r.get(k)) for k in COLUMNS] + [_cell(k, r.get(k)) for k in extra]
             for r in rows]
    return header, cells


def markdown(header: list[str], cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def checks_text(checks: dict[str, bool]) -> str:
    return "\n".join(f"  [{'ok' if ok else 'FAILED'}] {name}" for name, ok in checks.items())


def figure(rows: list[dict[str, Any]], directory: Path, title: str, value: str = "objective_s",
           label: str = "objective (s)", horizontal: bool = False) -> list[Path]:
    """A bar chart of `value` per workload (one panel each) and variant (one colour a variant, or a lever
    where rows have one): `study.png` and `study.html`. `horizontal`: bars across, for many variants
    (a study of levers); infeasible rows are hatched there, left out otherwise."""
    import plotly.graph_objects as go

    from deepflow.plots import _pyplot

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    variants = list(dict.fromkeys(r["label"] for r in rows))
    kinds = list(dict.fromkeys(r.get("lever") or r["variant"] for r in rows))  # one colour a variant (lever)

    def height(r):
        v = r.get(value)
        return 0.0 if v is None or not (horizontal or r["feasible"]) else float(v)

    plt = _pyplot()
    n = max(len([r for r in rows if r["workload"] == w]) for w in workloads)
    size = (4.6 * len(workloads), max(4.2, 0.24 * n + 1.5)) if horizontal else (max(5.0, 4.2 * len(workloads)), 4.2)
    fig, axes = plt.subplots(1, len(workloads), figsize=size, squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        mine = [r for r in rows if r["workload"] == workload]
        colours = [f"C{kinds.index(r.get('lever') or r['variant']) % 10}" for r in mine]
        if horizontal:
            bars = ax.barh(range(len(mine)), [height(r) for r in mine], color=colours)
            for bar, r in zip(bars, mine):
                if not r["feasible"]:
                    bar.set_hatch("//")
                    bar.set_alpha(0.5)
            ax.set_yticks(range(len(mine)), [r["variant"] for r in mine], fontsize=8)
            ax.invert_yaxis()
            ax.axvline(0.0, color="black", linewidth=0.8)
            ax.set_xlabel(label)
        else:
            ax.bar(range(len(mine)), [height(r) for r in mine], color=colours)
            ax.set_xticks(range(len(mine)), [r["variant"] for r in mine], rotation=30, ha="right", fontsize=8)
            ax.set_ylabel(label)
        ax.set_title(workload, fontsize=10)
    fig.suptitle(title + (" (hatched: infeasible)" if horizontal else ""), fontsize=11)
    fig.tight_layout()
    png = directory / "study.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    html = go.Figure()
    for variant in variants:
        mine = [r for r in rows if r["label"] == variant]
        html.add_trace(go.Bar(name=variant, x=[r["workload"] for r in mine],
                              y=[height(r) if horizontal or r["feasible"] else None for r in mine],
                              text=[r.get("mapping", "") for r in mine]))
    html.update_layout(title=title, barmode="group", yaxis_title=label, template="plotly_white")
    path = directory / "study.html"
    html.write_html(str(path), include_plotlyjs=True, full_html=True)
    return [png, path]


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_line(study: str, rows: list[dict[str, Any]], checks: dict[str, bool], extra: Optional[dict] = None) -> str:
    return json.dumps(jsonable({"study": study, "rows": rows, "checks": checks, **(extra or {})}))
