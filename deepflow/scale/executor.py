"""Where the blocks of a sample are computed: in this process (`local`) or as Ray tasks (`ray`).

`executor=ray` (`pip install -e ".[ray]"`) runs each block (`deepflow.scale.shards.compute_block`) as a
Ray task that evaluates its designs and writes its own Parquet shard, so the driver holds only a
few numbers per block whatever the sample's size. At most `ray.max_in_flight` tasks are pending
(default twice the cluster's CPUs); blocks are submitted in order until the finished ones hold n
designs, then the sample is cut to exactly n. A task whose worker dies is run again by Ray
(`ray.max_retries`, default 3); its shard is written atomically, so a block is on disk once.
`ray.address`: `local` starts a Ray instance on this machine with `ray.num_cpus` CPUs (default:
all), `auto` joins the cluster this machine belongs to, `ray://host:port` a remote one (Ray Client).
On a cluster of several machines the shard directory must be one every node sees (a shared file
system): each task writes its shard where it runs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepflow.allocator import retain_freed_memory
from deepflow.presets import ConfigError
from deepflow.scale.shards import (
    KILL_ONCE_ENV,
    BlockPlan,
    block_frame,
    check_complete,
    compute_block,
    prepare_directory,
    trim,
)

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ExecutorOptions:
    name: str = "local"
    address: str = "local"
    num_cpus: Optional[int] = None
    max_in_flight: Optional[int] = None
    max_retries: int = 3


def executor_options(cfg) -> ExecutorOptions:
    """The `executor` and `ray.*` keys of a config, checked (one named error)."""
    name = cfg.get("executor", "local")
    if name not in EXECUTORS:
        raise ConfigError(f"executor={name!r} is invalid: allowed one of {', '.join(EXECUTORS)}")
    ray_cfg = cfg.get("ray") or {}
    address = str(ray_cfg.get("address", "local"))
    if address not in ("local", "auto") and not address.startswith("ray://"):
        raise ConfigError(f"ray.address={address!r} is invalid: allowed local, auto or ray://<host>:<port>")
    values = {}
    for key, low in (("num_cpus", 1), ("max_in_flight", 1), ("max_retries", 0)):
        value = ray_cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ConfigError(f"ray.{key}={value!r} is invalid: allowed an integer >= {low} or null")
        values[key] = value
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("executor=ray needs Ray: allowed after `pip install -e \".[ray]\"` "
                              "(or executor=local)") from None
    return ExecutorOptions(name=name, address=address, num_cpus=values["num_cpus"],
                           max_in_flight=values["max_in_flight"],
                           max_retries=3 if values["max_retries"] is None else values["max_retries"])


def sample_in_memory(space, plan: BlockPlan, progress: bool = True):
    """The sample's table, its blocks computed one after another in this process (the default
    path: the same designs and values as the sharded one)."""
    import pandas as pd
    from tqdm import tqdm

    parts, rows, block = [], 0, 0
    with tqdm(total=plan.n, unit="design", desc=f"evaluating {space.name}", disable=not progress) as bar:
        while rows < plan.n:
            frame = block_frame(space, plan.method, plan.seed, block, plan.block_size)
            parts.append(frame.iloc[: plan.n - rows])
            rows += len(parts[-1])
            bar.update(len(parts[-1]))
            block += 1
            _check_not_barren(space, plan, block, rows)
    return pd.concat(parts, ignore_index=True)


def _check_not_barren(space, plan: BlockPlan, blocks: int, rows: int) -> None:
    """A named error once 64 blocks have been drawn and none held a design (the space's known
    constraints leave nothing; `space.sample` gives up after as many rounds)."""
    if blocks >= 64 and rows == 0:
        raise ConfigError(f"space {space.name!r}: no design of {blocks * plan.block_size:,} drawn satisfies "
                          "its known constraints")


def sample_to_shards(space, plan: BlockPlan, directory: Path, options: ExecutorOptions,
                     progress: bool = True) -> dict:
    """Compute the sample's blocks on Ray (or here, with `options.name == "local"`) into Parquet
    shards under `directory`, cut it to `plan.n` designs and check it. Returns
    `{"designs", "lost_designs", "duplicate_designs", "shards", "missing_blocks", "resumed_blocks",
    "feasible"}`."""
    from tqdm import tqdm

    done = prepare_directory(directory, plan)
    resumed = len(done)
    if options.name == "ray":
        submit, wait, stop = _ray_backend(space, plan, directory, options)
    else:
        submit, wait, stop = _local_backend(space, plan, directory)
    limit = options.max_in_flight or 2 * max(1, _cluster_cpus(options))
    in_flight: dict = {}
    next_block = prefix_rows = 0
    try:
        with tqdm(total=plan.n, unit="design", desc=f"evaluating {space.name} ({options.name})",
                  disable=not progress) as bar:
            bar.update(min(plan.n, sum(s["rows"] for s in done.values())))
            while True:
                estimate = _rows_per_block(done, plan.block_size)
                while (len(in_flight) < limit and prefix_rows + estimate * len(in_flight) < plan.n):
                    if next_block in done:
                        prefix_rows += done[next_block]["rows"]
                    else:
                        in_flight[submit(next_block)] = next_block
                    next_block += 1
                if not in_flight:
                    break
                _check_not_barren(space, plan, len(done), prefix_rows)
                for handle, summary in wait(list(in_flight)):
                    block = in_flight.pop(handle)
                    done[block] = summary
                    prefix_rows += summary["rows"]
                    bar.update(max(0, min(summary["rows"], plan.n - bar.n)))
    finally:
        stop()
    kept = trim(directory, done, plan.n, space)
    report = check_complete(directory, plan.n, plan.block_size)
    report.update(resumed_blocks=resumed, feasible=sum(s["feasible"] for s in kept.values()))
    return report


def _rows_per_block(done: dict, block_size: int) -> float:
    """Designs a block yields, from the finished ones (a whole block before any is finished)."""
    if not done:
        return float(block_size)
    return max(1.0, sum(s["rows"] for s in done.values()) / len(done))


def _cluster_cpus(options: ExecutorOptions) -> int:
    if options.name != "ray":
        return 1
    import ray

    return int(ray.cluster_resources().get("CPU", 1))


def _local_backend(space, plan: BlockPlan, directory: Path):
    """Blocks computed here, one at a time, into shards (the handle of a block is its number)."""
    finished: dict[int, dict] = {}

    def submit(block: int) -> int:
        finished[block] = compute_block(space, plan.method, plan.seed, block, plan.block_size, str(directory))
        return block

    def wait(handles):
        return [(h, finished.pop(h)) for h in handles]

    return submit, wait, lambda: None


def start_ray(options: ExecutorOptions) -> bool:
    """Ray as `options` say (`ray.address`, `ray.num_cpus`) unless this process has it already;
    True when it was started here (the caller shuts it down)."""
    import ray

    if ray.is_initialized():
        return False
    if options.address == "local":
        ray.init(num_cpus=options.num_cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    else:
        ray.init(address=options.address, logging_level="ERROR", log_to_driver=False)
    return True


def _run_chunk(fn, chunk: list[tuple]) -> list:
    retain_freed_memory()  # (in a Ray worker)
    return [fn(*args) for args in chunk]


class RayMap:
    """`map_fn(fn, argument tuples) -> results` on Ray (`fn` a module-level function), in order:
    the calls are cut into one chunk per CPU of the cluster, each chunk a Ray task (a call of ~20 ms
    would otherwise pay Ray's per-task cost each time). Ray is started on the first call, not
    before (checking a config starts nothing); a task whose worker dies is run again
    (`ray.max_retries`)."""

    def __init__(self, options: ExecutorOptions) -> None:
        self.options = options
        self._remote = None

    def __call__(self, fn, arguments: list[tuple]) -> list:
        import ray

        if not arguments:
            return []
        if start_ray(self.options):
            print(f"ray: {int(ray.cluster_resources().get('CPU', 0))} CPUs (started here)", file=sys.stderr)
        if self._remote is None:
            self._remote = ray.remote(num_cpus=1, max_retries=self.options.max_retries)(_run_chunk)
        chunks = max(1, min(len(arguments), _cluster_cpus(self.options)))
        size = -(-len(arguments) // chunks)
        parts = ray.get([self._remote.remote(fn, arguments[i:i + size]) for i in range(0, len(arguments), size)])
        return [result for part in parts for result in part]


def _ray_backend(space, plan: BlockPlan, directory: Path, options: ExecutorOptions):
    import ray

    started = start_ray(options)
    env = {KILL_ONCE_ENV: os.environ[KILL_ONCE_ENV]} if os.environ.get(KILL_ONCE_ENV) else {}
    remote = ray.remote(num_cpus=1, max_retries=options.max_retries)(compute_block)
    if env:
        remote = remote.options(runtime_env={"env_vars": env})
    space_ref = ray.put(space)

    def submit(block: int):
        return remote.remote(space_ref, plan.method, plan.seed, block, plan.block_size, str(directory.resolve()), 1)

    def wait(handles):
        ready, _ = ray.wait(handles, num_returns=1)
        return [(h, ray.get(h)) for h in ready]

    def stop():
        if started:
            ray.shutdown()

    print(f"ray: {int(ray.cluster_resources().get('CPU', 0))} CPUs "
          f"({'started here' if started else 'connected'})", file=sys.stderr)
    return submit, wait, stop
