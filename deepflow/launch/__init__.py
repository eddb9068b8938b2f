"""Launching the commands that run experiments as Hydra applications: `hydra_app` (every job checked, then
`@hydra.main` with the config's launcher) and `sweep_runs` (the multirun's parent MLflow run and table). Above
`deepflow.run` and the commands' own modules, below `deepflow.commands`, which launch through it."""
