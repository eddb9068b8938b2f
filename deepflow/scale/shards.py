"""Designs of a space drawn and evaluated in blocks that any worker can compute on its own.

Block `b` covers the raw points `b * block_size ... (b + 1) * block_size - 1` of the space's
scrambled Sobol sequence (`SobolEngine.fast_forward`), or of a uniform stream seeded by
`(seed, b)` for `method="random"`. It keeps the points that satisfy the space's known constraints,
in sequence order, and evaluates them; each design's `design_id` is its raw index. The first `n`
designs of the blocks in order are the sample: for Sobol exactly the points of
`space.sample(n, "sobol", seed)`, whatever the block size or the worker that ran each block.

A block's table is written as one Parquet shard (`part-<block>.parquet`, with the space's JSON
in its metadata like a samples file) through a temporary file and an atomic rename, so a block
computed twice (a retried task) leaves one shard, and a shard on disk is always whole. A shard
directory holds a `manifest.json` that names what it is a sample of (space, n, sampler, seed,
block size); a run that died leaves its finished shards, and a new run with the same manifest
keeps them and computes only the missing blocks.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from analytical.codes import DTYPE
from deepflow.allocator import retain_freed_memory

MANIFEST = "manifest.json"
DESIGN_ID = "design_id"
# Fault injection for the worker-death tests and bench_scale: the path of a marker file; the first
# block computed while it does not exist creates it and kills its process before renaming its shard.
KILL_ONCE_ENV = "DEEPFLOW_KILL_WORKER_ONCE"


@dataclass(frozen=True)
class BlockPlan:
    """What a sharded sample is: the same plan always gives the same designs."""

    space_json: str
    n: int
    method: str
    seed: int
    block_size: int

    def manifest(self) -> dict:
        return asdict(self)


def draw_block(space, method: str, seed: int, block: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(points k x d, design ids k)`: the known-feasible points among block `block`'s raw draws."""
    if method == "sobol":
        engine = torch.quasirandom.SobolEngine(space.dim, scramble=True, seed=seed)
        engine.fast_forward(block * block_size)
        raw = engine.draw(block_size, dtype=DTYPE)
    else:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + block)
        raw = torch.rand(block_size, space.dim, generator=generator, dtype=DTYPE)
    keep = space.known_feasible(raw)
    ids = torch.arange(block * block_size, (block + 1) * block_size, dtype=torch.int64)[keep]
    return raw[keep], ids


def block_frame(space, method: str, seed: int, block: int, block_size: int):
    """The samples table (`surrogates.columns.samples_frame`) of block `block`, with `design_id` first."""
    from surrogates.columns import samples_frame

    u, ids = draw_block(space, method, seed, block, block_size)
    frame = samples_frame(space, u, space.evaluate(u))
    frame.insert(0, DESIGN_ID, ids.numpy())
    return frame


def shard_path(directory: Path, block: int) -> Path:
    return Path(directory) / f"part-{block:08d}.parquet"


def write_shard(frame, space, directory: Path, block: int, worker: bool = False) -> Path:
    """Write block `block`'s table atomically (temporary file, then rename); returns its path.
    `worker`: written by `compute_block` (where `KILL_ONCE_ENV` may kill the process)."""
    from surrogates.columns import write_samples

    final = shard_path(directory, block)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    write_samples(frame, space, tmp)
    if worker:
        _maybe_die(tmp)
    os.replace(tmp, final)
    return final


def compute_block(space, method: str, seed: int, block: int, block_size: int, directory: str,
                  threads: int | None = None) -> dict:
    """Evaluate block `block` and write its shard: what a worker runs (`threads`: torch's intra-op
    threads there; a Ray worker takes one, one worker per CPU). Returns
    `{"rows", "feasible"}` (no table: the driver stays small)."""
    retain_freed_memory()
    if threads is not None:
        torch.set_num_threads(threads)
    frame = block_frame(space, method, seed, block, block_size)
    write_shard(frame, space, Path(directory), block, worker=True)
    return block_summary(frame)


def block_summary(frame) -> dict:
    """`{"rows", "feasible"}` of a block's table (what the driver keeps of it)."""
    return {"rows": int(len(frame)), "feasible": int(frame["feasible"].sum())}


def block_of(path: Path) -> int:
    """The block number of a shard's path (`part-<block>.parquet`)."""
    return int(Path(path).stem.split("-")[1])


def _maybe_die(tmp: Path) -> None:
    marker = os.environ.get(KILL_ONCE_ENV)
    if marker and not Path(marker).exists():
        Path(marker).write_text(f"killed pid {os.getpid()} before renaming {tmp.name}\n")
        os._exit(1)


# ----------------------------------------------------------------------------------- directory
def prepare_directory(directory: Path, plan: BlockPlan) -> dict[int, dict]:
    """Create `directory` with the plan's manifest, or reuse one a dead run left with the same
    plan: `{block: summary}` of its whole shards (temporary files are removed). A directory that
    holds another plan's shards is an error naming it (nothing is overwritten)."""
    from deepflow.presets import ConfigError

    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / MANIFEST
    if manifest.exists():
        found = json.loads(manifest.read_text())
        if {k: found.get(k) for k in plan.manifest()} != plan.manifest():
            raise ConfigError(f"out={str(directory)!r} holds shards of another sample (its {MANIFEST} differs): "
                              "allowed an empty directory or one of the same space, n, sampler, seed and batch_size")
    elif any(directory.glob("part-*.parquet")):
        raise ConfigError(f"out={str(directory)!r} holds shards without a {MANIFEST}: allowed an empty directory")
    for tmp in directory.glob(".part-*.tmp"):
        tmp.unlink()
    manifest.write_text(json.dumps(plan.manifest(), indent=1))
    return {block_of(p): summary_of(p) for p in sorted(directory.glob("part-*.parquet"))}


def summary_of(path: Path) -> dict:
    """`block_summary` of a shard on disk, read from its feasibility column alone."""
    import pyarrow.parquet as pq

    return block_summary(pq.read_table(str(path), columns=["feasible"]).to_pandas())


def trim(directory: Path, summaries: dict[int, dict], n: int, space) -> dict[int, dict]:
    """Keep exactly the first `n` designs: blocks after the one that reaches n are deleted, that
    one is cut (rewritten atomically). `summaries` must hold every block up to it."""
    import pyarrow.parquet as pq

    total, kept = 0, {}
    for block in sorted(summaries):
        if total >= n:
            shard_path(directory, block).unlink(missing_ok=True)
            continue
        summary = summaries[block]
        if total + summary["rows"] > n:
            frame = pq.read_table(str(shard_path(directory, block))).to_pandas().iloc[: n - total]
            write_shard(frame, space, directory, block)
            summary = block_summary(frame)
        kept[block] = summary
        total += summary["rows"]
    return kept


def check_complete(directory: Path, n: int, block_size: int) -> dict:
    """`{"designs", "lost_designs", "duplicate_designs", "shards", "missing_blocks"}` from the shards
    on disk, reading their design ids alone (one shard at a time): every block up to the last must
    be there, each id inside its block and there once."""
    import numpy as np
    import pyarrow.parquet as pq

    unique = duplicates = 0
    blocks = sorted(block_of(p) for p in directory.glob("part-*.parquet"))
    for block in blocks:
        ids = pq.read_table(str(shard_path(directory, block)), columns=[DESIGN_ID]).column(DESIGN_ID).to_numpy()
        inside = ids[(ids >= block * block_size) & (ids < (block + 1) * block_size)]
        distinct = len(np.unique(inside))
        duplicates += len(ids) - distinct
        unique += distinct
    present = set(blocks)
    return {"designs": unique, "lost_designs": max(0, n - unique), "duplicate_designs": duplicates,
            "shards": len(blocks), "missing_blocks": [b for b in range(max(blocks, default=-1) + 1) if b not in present]}
