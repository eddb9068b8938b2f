"""analytical.step.collectives against the alpha-beta closed forms (Thakur et al. 2005, NCCL)."""

from __future__ import annotations

import math

import pytest
import torch

from analytical.design import memoizing
from analytical.step import collectives as coll
from tests.analytical.conftest import random_design_batch

F = torch.float64
B = 1.5e9  # bytes
BW = 200e9
ALPHA = 3e-6
UP_BW, UP_ALPHA = 240e9, 2e-6
OUT_BW, OUT_ALPHA = 22.5e9, 5e-6
SIZES = [2, 3, 4, 8, 16, 64, 1024]


def t(x):
    return torch.as_tensor(x, dtype=F)


def close(got, want, rel=1e-12):
    return abs(float(got) - want) <= rel * abs(want)


@pytest.mark.parametrize("n", SIZES)
def test_ring_all_reduce(n):
    want = 2 * (n - 1) / n * B / BW + 2 * (n - 1) * ALPHA
    assert close(coll.ring_all_reduce_time_s(t(B), t(n), t(BW), t(ALPHA)), want)


@pytest.mark.parametrize("n", SIZES)
def test_tree_all_reduce(n):
    want = 2 * B / BW + 2 * math.log2(n) * ALPHA
    assert close(coll.tree_all_reduce_time_s(t(B), t(n), t(BW), t(ALPHA)), want)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("nbytes", [1e3, 1e6, B])
def test_all_reduce_picks_the_faster(n, nbytes):
    ring = float(coll.ring_all_reduce_time_s(t(nbytes), t(n), t(BW), t(ALPHA)))
    tree = float(coll.tree_all_reduce_time_s(t(nbytes), t(n), t(BW), t(ALPHA)))
    assert close(coll.all_reduce_time_s(t(nbytes), t(n), t(BW), t(ALPHA)), min(ring, tree))


def test_tree_wins_small_messages_on_large_groups_and_ring_wins_large_ones():
    n = t(1024)
    assert coll.tree_all_reduce_time_s(t(1e3), n, t(BW), t(ALPHA)) < coll.ring_all_reduce_time_s(
        t(1e3), n, t(BW), t(ALPHA))
    assert coll.ring_all_reduce_time_s(t(B), t(8), t(BW), t(ALPHA)) < coll.tree_all_reduce_time_s(
        t(B), t(8), t(BW), t(ALPHA))


@pytest.mark.parametrize("n", SIZES)
def test_all_gather_reduce_scatter_all_to_all(n):
    want = (n - 1) / n * B / BW + (n - 1) * ALPHA
    for fn in (coll.all_gather_time_s, coll.reduce_scatter_time_s, coll.all_to_all_time_s):
        assert close(fn(t(B), t(n), t(BW), t(ALPHA)), want), fn.__name__


def test_p2p():
    assert close(coll.p2p_time_s(t(B), t(BW), t(ALPHA)), B / BW + ALPHA)


def test_ring_all_reduce_is_reduce_scatter_plus_all_gather():
    for n in SIZES:
        rs = coll.reduce_scatter_time_s(t(B), t(n), t(BW), t(ALPHA))
        ag = coll.all_gather_time_s(t(B), t(n), t(BW), t(ALPHA))
        assert close(coll.ring_all_reduce_time_s(t(B), t(n), t(BW), t(ALPHA)), float(rs + ag))


def test_every_collective_is_free_for_one_rank():
    one = t([1.0, 1.0])
    nbytes, bw, alpha = t([B, 1.0]), t([BW, 1e9]), t([ALPHA, 0.0])
    for fn in (coll.ring_all_reduce_time_s, coll.tree_all_reduce_time_s, coll.all_reduce_time_s,
               coll.all_gather_time_s, coll.reduce_scatter_time_s, coll.all_to_all_time_s):
        assert torch.equal(fn(nbytes, one, bw, alpha), torch.zeros(2, dtype=F)), fn.__name__
    assert float(coll.hierarchical_all_reduce_time_s(t(B), t(1), t(1), t(UP_BW), t(UP_ALPHA), t(OUT_BW),
                                                     t(OUT_ALPHA))) == 0.0
    for fn in (coll.group_all_reduce_time_s, coll.group_all_gather_time_s, coll.group_all_to_all_time_s):
        for stride in (1.0, 8.0, 64.0):
            got = fn(t(B), t(1), t(stride), t(8), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
            assert float(got) == 0.0, (fn.__name__, stride)


def test_one_rank_costs_nothing_even_without_a_link():
    """A group of one rank moves no bytes, so the bandwidth of a link it never uses must not matter.

    `AcceleratorSpec.validate()` accepts `scale_out_gbit_per_s = 0` (a device without a NIC), which
    reaches these functions as bw = 0 for the across-domain step of every group inside one node.
    The module promises 0 for groups of one rank; (n-1)/n * bytes / 0 = 0 * inf gives NaN instead.
    """
    zero_bw = t(0.0)
    for fn in (coll.ring_all_reduce_time_s, coll.all_reduce_time_s, coll.all_gather_time_s):
        got = fn(t(B), t(1.0), zero_bw, t(ALPHA))
        assert float(got) == 0.0, (fn.__name__, float(got))
    # a group of 8 ranks inside one domain never touches the (missing) scale-out link
    got = coll.group_all_reduce_time_s(t(B), t(8), t(1), t(8), t(UP_BW), t(UP_ALPHA), zero_bw, t(OUT_ALPHA))
    want = float(coll.ring_all_reduce_time_s(t(B), t(8), t(UP_BW), t(UP_ALPHA)))
    assert close(got, want), float(got)


@pytest.mark.parametrize("size,stride", [(2, 1), (4, 1), (8, 1), (4, 2), (2, 4)])
def test_group_inside_one_domain_is_a_scale_up_ring(size, stride):
    args = (t(B), t(size), t(stride), t(8), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
    assert close(coll.group_all_reduce_time_s(*args),
                 float(coll.ring_all_reduce_time_s(t(B), t(size), t(UP_BW), t(UP_ALPHA))))
    assert close(coll.group_all_gather_time_s(*args),
                 float(coll.all_gather_time_s(t(B), t(size), t(UP_BW), t(UP_ALPHA))))
    assert close(coll.group_all_to_all_time_s(*args),
                 float(coll.all_to_all_time_s(t(B), t(size), t(UP_BW), t(UP_ALPHA))))


@pytest.mark.parametrize("size", [2, 4, 16, 128])
@pytest.mark.parametrize("stride", [8, 16, 64])
def test_group_with_one_member_per_domain_uses_the_nic(size, stride):
    args = (t(B), t(size), t(stride), t(8), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
    assert close(coll.group_all_reduce_time_s(*args),
                 float(coll.all_reduce_time_s(t(B), t(size), t(OUT_BW), t(OUT_ALPHA))))
    assert close(coll.group_all_gather_time_s(*args),
                 float(coll.all_gather_time_s(t(B), t(size), t(OUT_BW), t(OUT_ALPHA))))
    assert close(coll.group_all_to_all_time_s(*args),
                 float(coll.all_to_all_time_s(t(B), t(size), t(OUT_BW), t(OUT_ALPHA))))


def test_group_spanning_domains_is_hierarchical():
    # 32 ranks, stride 1, domains of 8: reduce-scatter over 8 on NVLink, all-reduce of B/8 over 4 domains
    got = coll.group_all_reduce_time_s(t(B), t(32), t(1), t(8), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
    inside = 2 * ((8 - 1) / 8 * B / UP_BW + 7 * UP_ALPHA)
    across = float(coll.all_reduce_time_s(t(B / 8), t(4), t(OUT_BW), t(OUT_ALPHA)))
    assert close(got, inside + across)
    # slower than a ring entirely on NVLink, faster than a flat ring on the NIC
    assert float(got) > float(coll.ring_all_reduce_time_s(t(B), t(32), t(UP_BW), t(UP_ALPHA)))
    assert float(got) < float(coll.ring_all_reduce_time_s(t(B), t(32), t(OUT_BW), t(OUT_ALPHA)))


@pytest.mark.parametrize("size,stride,domain,n_local,n_domains", [
    (8, 1, 8, 8, 1),  # tp=8 in a DGX
    (4, 1, 8, 4, 1),
    (16, 1, 8, 8, 2),  # tp=16 over two DGX
    (4, 2, 8, 4, 1),  # dp=4 after tp=2
    (8, 2, 8, 4, 2),  # dp=8 after tp=2
    (8, 8, 8, 1, 8),  # dp=8 after tp=8: one member per node
    (16, 64, 8, 1, 16),
    (3, 1, 8, 3, 1),
    (6, 1, 4, 4, 2),
    (1, 1, 8, 1, 1),
    (72, 1, 72, 72, 1),  # NVL72
    (144, 1, 72, 72, 2),
])
def test_placement(size, stride, domain, n_local, n_domains):
    got_local, got_domains = coll.placement(t(size), t(stride), t(domain))
    assert (float(got_local), float(got_domains)) == (n_local, n_domains)


def test_placement_broadcasts():
    n_local, n_domains = coll.placement(t([8, 16, 8]), t([1, 1, 8]), t([8, 8, 8]))
    assert torch.equal(n_local, t([8, 8, 1])) and torch.equal(n_domains, t([1, 2, 8]))


@pytest.mark.parametrize("size,stride,domain,crosses", [
    (1, 1, 8, False),
    (8, 1, 8, False),  # a pipeline of 8 stages inside one DGX
    (2, 4, 8, False),  # tp=4, pp=2 in one DGX
    (4, 4, 8, True),  # tp=4, pp=4 on two DGX: stage 1 -> 2 crosses nodes
    (2, 8, 8, True),  # tp=8, pp=2: every boundary crosses
    (16, 64, 8, True),
    (2, 36, 72, False),  # NVL72
])
def test_p2p_link_is_the_slowest_link_of_the_chain(size, stride, domain, crosses):
    bw, alpha = coll.p2p_link(t(size), t(stride), t(domain), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
    assert (float(bw), float(alpha)) == ((OUT_BW, OUT_ALPHA) if crosses else (UP_BW, UP_ALPHA))


def test_collectives_decrease_with_bandwidth():
    sizes = t([2, 8, 16, 64, 512])
    strides = t([1, 1, 8, 2, 8])
    for fn in (coll.group_all_reduce_time_s, coll.group_all_gather_time_s, coll.group_all_to_all_time_s):
        base = fn(t(B), sizes, strides, t(8), t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
        faster_nic = fn(t(B), sizes, strides, t(8), t(UP_BW), t(UP_ALPHA), t(2 * OUT_BW), t(OUT_ALPHA))
        faster_nvl = fn(t(B), sizes, strides, t(8), t(2 * UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))
        assert torch.all(faster_nic <= base) and torch.all(faster_nvl <= base), fn.__name__
        assert torch.any(faster_nic < base) and torch.any(faster_nvl < base), fn.__name__


@pytest.mark.parametrize("k,n", [(1, 4), (2, 2), (8, 4), (8, 8), (4, 8)])
def test_expected_domains_without_groups_is_the_occupancy_formula(k, n):
    # k experts chosen alike over n domains: every domain is missed with probability (1 - 1/n)^k
    got = coll.expected_domains_per_token(t(k), t(n), t(1), t(1))
    assert close(got, n * (1 - (1 - 1 / n) ** k))


def _domains_by_enumeration(n, groups, group_topk):
    """Mean number of domains covered by `group_topk` of `groups` contiguous groups (groups >= n, so
    group g lies in domain g n / groups), over every choice of the groups."""
    import itertools

    picks = list(itertools.combinations(range(groups), group_topk))
    return sum(len({g * n // groups for g in c}) for c in picks) / len(picks)


@pytest.mark.parametrize("groups,group_topk,n", [(8, 4, 4), (8, 4, 8), (8, 2, 4), (16, 3, 4)])
def test_group_limited_routing_caps_the_domains_at_the_groups_mean(groups, group_topk, n):
    """With G >= n groups the cap is the mean number of domains `group_topk` groups cover, checked by
    enumerating every group choice; a token with many experts reaches that cap, one with one expert
    stays at one domain."""
    want = _domains_by_enumeration(n, groups, group_topk)
    many = coll.expected_domains_per_token(t(64), t(n), t(groups), t(group_topk))
    assert close(many, want, rel=1e-9)
    one = coll.expected_domains_per_token(t(1), t(n), t(groups), t(group_topk))
    assert close(one, 1.0)


def test_fewer_groups_than_domains_span_several_domains_each():
    # 2 groups over 8 domains, a token inside 1 group: at most 4 domains (DeepSeek-V3 at ep 256)
    got = coll.expected_domains_per_token(t(8), t(8), t(2), t(1))
    assert close(got, min(4.0, 8 * (1 - (7 / 8) ** 8)))


DISPATCH_LINKS = (t(UP_BW), t(UP_ALPHA), t(OUT_BW), t(OUT_ALPHA))


@pytest.mark.parametrize("size,k", [(32, 8), (64, 8), (16, 2), (64, 4)])
def test_deduplicated_dispatch_sends_one_copy_per_remote_domain(size, k):
    """Domains of 8, stride 1: the NIC carries token bytes x expected other domains, the scale-up
    fabric the k copies' share for the 7 other members; never more than the all-to-all of k copies'
    NIC share, and equal to it for one expert per token."""
    tok = 1e8
    n = size / 8
    got = coll.group_dispatch_time_s(t(tok), t(k), t(1), t(1), t(size), t(1), t(8), *DISPATCH_LINKS)
    domains = n * (1 - (1 - 1 / n) ** k)
    want = (domains * (n - 1) / n * tok / OUT_BW + (n - 1) * OUT_ALPHA
            + k * tok * 7 / 8 / UP_BW + 7 * UP_ALPHA)
    assert close(got, want)
    copies = coll.group_all_to_all_time_s(t(k * tok), t(size), t(1), t(8), *DISPATCH_LINKS)
    assert float(got) < float(copies)


def test_deduplicated_dispatch_inside_one_domain_never_uses_the_nic():
    args = (t(1e8), t(8), t(1), t(1), t(64), t(1), t(72), t(UP_BW), t(UP_ALPHA))
    assert float(coll.group_dispatch_time_s(*args, t(0.0), t(OUT_ALPHA))) > 0  # a zero NIC bandwidth is not touched
    assert float(coll.group_dispatch_time_s(t(1e8), t(8), t(1), t(1), t(1), t(1), t(8), *DISPATCH_LINKS)) == 0.0


def test_a_group_placed_once_gives_every_collective_the_same_times():
    """`placed_group` places a group once per evaluation; every group_* function given that placement
    (`placed=`) returns what it returns placing the group itself."""
    d = memoizing(random_design_batch(500, seed=4))
    size, stride, links = d.dp * d.cp, d.tp, (d.scale_up_bw_bytes_per_s, d.scale_up_latency_s,
                                               d.scale_out_bw_bytes_per_s, d.scale_out_latency_s)
    placed = coll.placed_group(d, size, stride)
    assert coll.placed_group(d, size, stride) is placed  # computed once for the same tensors
    for group in (coll.group_all_reduce_time_s, coll.group_all_gather_time_s, coll.group_all_to_all_time_s):
        alone = group(1e9, size, stride, d.scale_up_domain, *links)
        assert torch.equal(group(1e9, size, stride, d.scale_up_domain, *links, placed=placed), alone)
    dispatch = (1e8, d.top_k, d.moe_router_num_groups, d.moe_router_group_topk, size, stride, d.scale_up_domain, *links)
    assert torch.equal(coll.group_dispatch_time_s(*dispatch, placed=placed), coll.group_dispatch_time_s(*dispatch))
