"""The `deepflow` commands, one module each (`deepflow.cli` dispatches to them)."""
