"""Every table the commands print, drawn by one library (rich): columns aligned by their content,
numbers right-aligned, no colour, never wrapped (a log or a pipe gets the same text as a terminal).

    print(table(["rank", "step_s"], [["1", "9.31"], ["2", "9.87"]], align="lr"))
"""

from __future__ import annotations

import io
from typing import Optional, Sequence

import pandas as pd


def table(header: Sequence[str], rows: Sequence[Sequence[object]], align: Optional[str] = None,
          title: Optional[str] = None, indent: int = 0, show_header: bool = True) -> str:
    """The rows as text under `header` (`align`: one letter per column, l / r / c; default: the
    first column left, the others right), optionally under a `title` line, indented by `indent`."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    align = align or "l" + "r" * (len(header) - 1)
    justify = {"l": "left", "r": "right", "c": "center"}
    grid = Table(box=box.SIMPLE_HEAD if show_header else None, show_header=show_header, show_edge=False,
                 pad_edge=False)
    for name, a in zip(header, align):
        grid.add_column(str(name), justify=justify[a], no_wrap=True)
    for row in rows:
        grid.add_row(*("" if v is None else str(v) for v in row))
    console = Console(file=io.StringIO(), width=10_000, color_system=None, highlight=False, emoji=False)
    with console.capture() as captured:
        console.print(grid)
    lines = [line.rstrip() for line in captured.get().splitlines() if line.strip()]
    pad = " " * indent
    return "\n".join(([title] if title else []) + [pad + line for line in lines])


def frame_table(frame: pd.DataFrame, floats: str = "{:.4g}") -> str:
    """A DataFrame as a `table` (floats formatted with `floats`, NaN as blank)."""
    def cell(value):
        if isinstance(value, float):
            return "" if value != value else floats.format(value)
        return value

    align = "".join("r" if pd.api.types.is_numeric_dtype(frame[c]) else "l" for c in frame.columns)
    return table(list(frame.columns), [[cell(v) for v in row] for row in frame.itertuples(index=False)], align)
