"""Parameter-server data parallelism (`mapping.dp_mode` ps_sync / ps_async), staleness and stragglers,
each against its closed form on a small case."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from analytical import MappingSpec, ModelSpec, SystemSpec, evaluate, single_design, stack_designs
from analytical.codes import Reason
from analytical.specs import SpecError
from analytical.step import collectives as coll

GB = 1e9
RESNET50 = ModelSpec(name="r50", kind="cnn", cnn_arch="resnet50")


def cluster(nodes: int, **changes) -> SystemSpec:
    """`nodes` machines of 8 devices, one 100 Gbit/s NIC per machine (12.5 Gbit/s a device)."""
    values = dict(name="c", num_devices=8 * nodes, devices_per_node=8, scale_up_domain=8, topology="fat-tree",
                  scale_out_gbit_per_device=12.5, ps_server_gbit=100.0)
    values.update(changes)
    return SystemSpec(**values)


def mapping(devices: int, **changes) -> MappingSpec:
    values = dict(name="m", micro_batch_size=32, global_batch_size=32 * devices, precision="fp16",
                  flash_attention=False)
    values.update(changes)
    return MappingSpec(**values)


def t(x: float) -> torch.Tensor:
    return torch.tensor([x], dtype=torch.float64)


def test_push_and_pull_against_hand_computed_bytes():
    """1 GB of gradients, 4 domains of 8 ranks, 25 GB/s per rank inside, 1 GB/s per rank across,
    k servers at 8 GB/s: inside 2 x 7/8 GB / 25 GB/s; across max(1/8 GB / 1 GB/s, 4 GB / k / 8 GB/s)."""
    def ps(servers: float, summing: float = 0.0) -> float:
        return float(coll.group_parameter_server_time_s(t(1 * GB), t(32), t(1), t(8), t(25 * GB), t(0.0), t(1 * GB),
                                                        t(0.0), t(servers), t(8 * GB), t(summing * GB))[0])

    inside = 2 * (7 / 8) / 25
    assert ps(4) == pytest.approx(inside + max(0.125, 4 / 4 / 8))  # 4 servers: their NICs bound it (0.125 s)
    assert ps(8) == pytest.approx(inside + 0.125)  # enough servers: the workers' NICs bound it
    assert ps(1) == pytest.approx(inside + 0.5)  # one server takes 4 GB in at 8 GB/s
    assert ps(8, summing=2.0) == pytest.approx(inside + 4 / 8 / 2)  # summing at 2 GB/s per server is slower
    ar = float(coll.group_all_reduce_time_s(t(1 * GB), t(32), t(1), t(8), t(25 * GB), t(0.0), t(1 * GB), t(0.0))[0])
    assert ar == pytest.approx(inside + 2 * (3 / 4) * 0.125)  # all-reduce across 4 domains: 1.5x the worker link


def test_with_as_many_servers_as_machines_ps_beats_all_reduce_when_the_network_binds(a100):
    devices = 64
    slow = cluster(8, scale_out_gbit_per_device=2.5, ps_server_gbit=20.0)
    designs = stack_designs([a100] * 2, [slow] * 2, [RESNET50] * 2,
                            [mapping(devices), mapping(devices, dp_mode="ps_sync", ps_shards=8)])
    result = evaluate(designs)
    ar, ps = result.time_breakdown_s["dp_comm"].tolist()
    assert ps < ar and bool(result.feasible.all())
    assert ar / ps == pytest.approx(2 * 7 / 8, rel=0.1)  # the across-domain part dominates the exchange


def test_allreduce_designs_are_untouched_by_parameter_server_ones(a100):
    devices = 16
    system = cluster(2)
    alone = evaluate(single_design(a100, system, RESNET50, mapping(devices)))
    mixed = evaluate(stack_designs([a100] * 2, [system] * 2, [RESNET50] * 2,
                                   [mapping(devices), mapping(devices, dp_mode="ps_async", ps_shards=2)]))
    for name in ("step_time_s", "energy_j", "memory_per_device_bytes"):
        assert torch.equal(getattr(mixed, name)[:1], getattr(alone, name)), name


@pytest.mark.parametrize("changes", [dict(ps_shards=0), dict(ps_shards=2, zero_stage=1),
                                     dict(ps_shards=2, distributed_optimizer=True)])
def test_a_parameter_server_needs_shards_and_plain_data_parallelism(a100, changes):
    result = evaluate(single_design(a100, cluster(2), RESNET50, mapping(16, dp_mode="ps_sync", **changes)))
    assert int(result.reason[0]) == Reason.PARAMETER_SERVER_INVALID
    assert torch.isfinite(result.step_time_s).all()


def test_stragglers_cost_synchronous_steps_and_staleness_hides_them(a100):
    devices = 64
    noisy = cluster(8, straggler_cv=0.1)
    quiet = cluster(8)
    maps = [mapping(devices), mapping(devices, dp_mode="ps_sync", ps_shards=8),
            mapping(devices, dp_mode="ps_sync", ps_shards=8, staleness=3),
            mapping(devices, dp_mode="ps_async", ps_shards=8)]
    base = evaluate(stack_designs([a100] * 4, [quiet] * 4, [RESNET50] * 4, maps)).step_time_s
    slow = evaluate(stack_designs([a100] * 4, [noisy] * 4, [RESNET50] * 4, maps)).step_time_s
    spread = 0.1 * math.sqrt(2 * math.log(devices))
    assert float(slow[0]) == pytest.approx(float(base[0]) * (1 + spread))  # BSP all-reduce waits
    assert float(slow[1]) == pytest.approx(float(base[1]) * (1 + spread))  # BSP parameter server too
    assert float(slow[2]) == pytest.approx(float(base[2]) * (1 + spread / 2))  # SSP, staleness 3: sigma / 2
    assert float(slow[3]) == float(base[3])  # Downpour never waits


@pytest.mark.parametrize("changes,field", [(dict(dp_mode="gossip"), "dp_mode"), (dict(ps_shards=-1), "ps_shards"),
                                           (dict(staleness=2), "staleness"),
                                           (dict(dp_mode="ps_async", staleness=2), "staleness")])
def test_bad_parameter_server_fields_are_named(changes, field):
    with pytest.raises(SpecError) as err:
        MappingSpec(name="bad", **changes).validate()
    assert err.value.field == field


def test_bad_server_fields_are_named():
    with pytest.raises(SpecError) as err:
        dataclasses.replace(cluster(1), straggler_cv=-0.1).validate()
    assert err.value.field == "straggler_cv"
