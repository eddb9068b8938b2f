"""Scale-out of large design batches: Ray tasks over blocks of designs (executor) streaming to Parquet shards
keyed by design id (shards). Below `deepflow.run` and the commands that hand it batches; Hydra's multiruns are
`deepflow.launch`."""
