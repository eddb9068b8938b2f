"""Scale-out: Hydra's application machinery and multiruns (hydra_app, sweep_runs), and Ray for large
design batches (executor, shards)."""
