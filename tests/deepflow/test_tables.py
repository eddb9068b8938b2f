"""deepflow.tables: the one table renderer of the commands (rich)."""

from __future__ import annotations

import pandas as pd

from deepflow.tables import frame_table, table


def test_columns_align_by_content_numbers_right():
    text = table(["rank", "step_s", "mapping"], [[1, "9.31", "tp=8"], [10, "123.45", "tp=4 pp=8"]], align="rrl")
    head, rule, first, second = text.splitlines()
    assert head.split() == ["rank", "step_s", "mapping"] and set(rule) == {"─"}
    assert first.index("9.31") + len("9.31") == second.index("123.45") + len("123.45")  # right-aligned
    assert first.index("tp=8") == second.index("tp=4")  # left-aligned
    assert first.startswith("   1") and second.startswith("  10")


def test_a_long_row_is_never_wrapped_and_a_title_and_indent_apply():
    long = "x" * 500
    text = table(["a", "b"], [["k", long]], title="section", indent=2, show_header=False)
    assert text.splitlines() == ["section", f"  k  {long}"]


def test_a_frame_formats_floats_and_leaves_nan_blank():
    text = frame_table(pd.DataFrame({"job": ["seed=0", "seed=1"], "best_s": [1.234567, float("nan")]}))
    lines = text.splitlines()
    assert lines[2].split() == ["seed=0", "1.235"] and lines[3].split() == ["seed=1"]
