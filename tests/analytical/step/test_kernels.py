"""analytical.step.kernels: wave and tile quantization, rooflines, memory-bound kernels."""

from __future__ import annotations

import math

import pytest
import torch

from analytical import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.kernels import (
    attention_tiles_time_s,
    ceil_div,
    flash_attention_time_s,
    gemm_compute_time_s,
    gemm_flops,
    gemm_hbm_bytes,
    gemm_time_s,
    gemm_waves,
    memory_bound_time_s,
)

F = torch.float64


def t(*values):
    return torch.tensor(values, dtype=F)


def a100_gemm_time(m, n, k, count=1.0, bytes_per_element=2.0, eff=DEFAULT_EFFICIENCY, peak=312e12):
    """gemm_time_s on the A100-80GB-like spec of conftest (fp16/bf16 tensor cores)."""
    as_t = lambda x: x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=F)  # noqa: E731
    return gemm_time_s(as_t(m), as_t(n), as_t(k), as_t(count), as_t(peak), as_t(108.0), as_t(128.0), as_t(128.0),
                       as_t(2039e9), as_t(7e12), as_t(4e-6), as_t(bytes_per_element), eff)


def test_ceil_div_exact_on_integers():
    a = torch.arange(1, 2000, dtype=F)
    for b in (1.0, 7.0, 108.0, 128.0):
        want = torch.tensor([math.ceil(int(x) / int(b)) for x in a], dtype=F)
        assert torch.equal(ceil_div(a, torch.tensor(b, dtype=F)), want)


@pytest.mark.parametrize("m,n,count,tm,tn,units", [
    (128, 128, 1, 128, 128, 108),
    (129, 128, 1, 128, 128, 108),
    (16384, 12288, 1, 128, 128, 108),
    (8192, 1024, 1, 128, 128, 108),
    (2048, 2048, 96, 128, 256, 132),
    (1, 1, 1, 64, 64, 1),
    (1000, 3000, 7, 256, 128, 80),
])
def test_gemm_waves_formula(m, n, count, tm, tn, units):
    want = math.ceil(count * math.ceil(m / tm) * math.ceil(n / tn) / units)
    got = gemm_waves(t(m), t(n), t(count), t(tm), t(tn), t(units))
    assert float(got[0]) == want


def test_gemm_compute_time_closed_form():
    eff = DEFAULT_EFFICIENCY
    m, n, k = 16384.0, 12288.0, 12288.0
    waves = math.ceil(math.ceil(m / 128) * math.ceil(n / 128) / 108)
    want = waves * (2 * 128 * 128 * k / (312e12 * eff.gemm_peak_fraction / 108) + eff.gemm_tile_overhead_s)
    got = gemm_compute_time_s(t(m), t(n), t(k), t(1), t(312e12), t(108), t(128), t(128), eff)
    assert float(got[0]) == pytest.approx(want, rel=1e-12)


def test_tile_quantization_one_row_past_a_tile_is_slower_per_flop():
    n, k = 8192.0, 8192.0
    at_tile = a100_gemm_time(128.0, n, k)
    past_tile = a100_gemm_time(129.0, n, k)
    per_flop_at = float(at_tile) / (2 * 128 * n * k)
    per_flop_past = float(past_tile) / (2 * 129 * n * k)
    assert per_flop_past > 1.5 * per_flop_at


def test_wave_quantization_one_tile_past_a_wave_costs_a_wave():
    # 108 tiles fill one wave on 108 units; 109 tiles need two
    eff = Efficiency(gemm_tile_overhead_s=0.0)
    one_wave = gemm_compute_time_s(t(128), t(108 * 128), t(4096), t(1), t(312e12), t(108), t(128), t(128), eff)
    two_waves = gemm_compute_time_s(t(128), t(109 * 128), t(4096), t(1), t(312e12), t(108), t(128), t(128), eff)
    assert float(two_waves[0]) == pytest.approx(2.0 * float(one_wave[0]), rel=1e-12)


def test_a_product_that_underfills_a_wave_splits_its_reduction():
    """One 128 x 128 output tile reducing over k = 108 x 256 on 108 units splits into 108 parts of
    256 elements (one wave, 1/108 of the unsplit time); k = 1024 allows only 4 parts; a product
    that fills the wave does not split. The split pays its fp32 partial sums in HBM traffic."""
    eff = Efficiency(gemm_tile_overhead_s=0.0)

    def compute(m, n, k):
        return float(gemm_compute_time_s(t(m), t(n), t(k), t(1), t(312e12), t(108), t(128), t(128), eff)[0])

    tile_s = lambda k: 2.0 * 128 * 128 * k / (312e12 * eff.gemm_peak_fraction / 108)  # noqa: E731
    assert compute(128, 128, 108 * 256) == pytest.approx(tile_s(256), rel=1e-12)
    assert compute(128, 128, 1024) == pytest.approx(tile_s(256), rel=1e-12)  # 4 parts of 256
    assert compute(128, 108 * 128, 4096) == pytest.approx(tile_s(4096), rel=1e-12)  # a full wave: no split
    slow_memory = dict(peak_flops_per_s=t(312e12), compute_units=t(108), tile_m=t(128), tile_n=t(128),
                       hbm_bw_bytes_per_s=t(1e9), sram_bw_bytes_per_s=t(1e15), launch_s=t(0.0),
                       bytes_per_element=t(2.0), eff=eff)
    split = float(gemm_time_s(t(128), t(128), t(1024), t(1), **slow_memory)[0])
    plain = 2.0 * (128 * 1024 * 2 + 128 * 128) / (1e9 * eff.hbm_bw_fraction)
    partials = 8.0 * 128 * 128 * 3 / (1e9 * eff.hbm_bw_fraction)  # 4 parts: 3 extra partial sums
    assert split == pytest.approx(plain + partials, rel=1e-12)


def test_large_gemm_reaches_a_higher_rate_than_a_small_one():
    big = (16384.0, 12288.0, 12288.0)
    small = (8192.0, 1024.0, 1024.0)
    rate_big = 2 * math.prod(big) / float(a100_gemm_time(*big))
    rate_small = 2 * math.prod(small) / float(a100_gemm_time(*small))
    assert rate_big > rate_small
    assert rate_big < 312e12


def test_achieved_rate_never_exceeds_peak():
    g = torch.Generator().manual_seed(0)
    n = 20000
    m, nn, k = (2.0 ** torch.randint(0, 16, (n,), generator=g).to(F) + torch.randint(0, 3, (n,), generator=g).to(F)
                for _ in range(3))
    count = torch.randint(1, 64, (n,), generator=g).to(F)
    for peak, nbytes in ((312e12, 2.0), (19.5e12, 4.0), (989e12, 1.0)):
        time = a100_gemm_time(m, nn, k, count, bytes_per_element=nbytes, peak=peak)
        rate = gemm_flops(m, nn, k, count) / time
        assert torch.all(time > 0)
        assert torch.all(rate <= peak * DEFAULT_EFFICIENCY.gemm_peak_fraction * (1 + 1e-12))


def test_zero_size_gemm_costs_nothing():
    for shape in ((0, 1024, 1024, 1), (1024, 0, 1024, 1), (1024, 1024, 0, 1), (1024, 1024, 1024, 0)):
        assert float(a100_gemm_time(*shape)) == 0.0


def test_gemm_roofline_bounds():
    # a matrix-vector product is bandwidth bound: time >= compulsory bytes / HBM bandwidth
    m, n, k = 1.0, 16384.0, 16384.0
    time = float(a100_gemm_time(m, n, k))
    hbm = float(gemm_hbm_bytes(t(m), t(n), t(k), t(1), t(2.0))[0]) / (2039e9 * DEFAULT_EFFICIENCY.hbm_bw_fraction)
    assert time >= hbm + 4e-6
    # and a compute-bound GEMM is not: its time is the tensor-core time plus the launch
    big = 8192.0
    compute = gemm_compute_time_s(t(big), t(big), t(big), t(1), t(312e12), t(108), t(128), t(128), DEFAULT_EFFICIENCY)
    assert float(a100_gemm_time(big, big, big)) == pytest.approx(float(compute[0]) + 4e-6, rel=1e-12)


def test_gemm_time_decreases_with_hbm_bandwidth():
    m, n, k = t(4096, 1, 64), t(4096, 16384, 64), t(4096, 16384, 65536)
    args = lambda bw: gemm_time_s(m, n, k, t(1, 1, 1), t(312e12), t(108), t(128), t(128), t(bw), t(7e12),  # noqa
                                  t(4e-6), t(2), DEFAULT_EFFICIENCY)
    slow, fast = args(1e12), args(2e12)
    assert torch.all(fast <= slow)
    assert torch.any(fast < slow)


@pytest.mark.parametrize("hbm_bw, sram_bw", [(2039e9, 7e12), (1e9, 7e12), (2039e9, 1e9)])
def test_a_gradient_gemm_may_count_its_traffic_on_the_forward_shape(hbm_bw, sram_bw):
    """The input- and weight-gradient GEMMs' compulsory and tile traffic is the forward's, exactly (integer shapes):
    what `traffic=` lets `analytical.step.model` count once for the three tables, in every bound (compute, HBM,
    SRAM; split-K's partial sums stay the gradient shape's own)."""
    g = torch.Generator().manual_seed(3)
    m, n, k = (torch.randint(1, 20000, (200,), generator=g).to(F) for _ in range(3))
    count = torch.randint(1, 9, (200,), generator=g).to(F)

    def time(shape, traffic=None):
        return gemm_time_s(*shape, count, t(312e12), t(108), t(128), t(256), t(hbm_bw), t(sram_bw), t(4e-6), t(2),
                           DEFAULT_EFFICIENCY, traffic=traffic)

    for grad in ((m, k, n), (k, n, m)):  # `Gemms.backward`'s input and weight gradients
        assert torch.equal(time(grad, traffic=(m, n, k)), time(grad))
    if sram_bw > hbm_bw > 1e12:  # where some products are compute-bound, the shapes' own times differ
        assert not torch.equal(time((m, k, n)), time((m, n, k)))


def test_memory_bound_time_is_linear_in_bytes():
    eff = DEFAULT_EFFICIENCY
    nbytes = torch.linspace(0, 1e10, 11, dtype=F)
    time = memory_bound_time_s(nbytes, t(0.0), t(2039e9), t(4e-6), eff)
    assert torch.allclose(time, nbytes / (2039e9 * eff.hbm_bw_fraction), rtol=1e-12, atol=0)
    with_launch = memory_bound_time_s(nbytes, t(3.0), t(2039e9), t(4e-6), eff)
    assert torch.allclose(with_launch - time, torch.full_like(time, 12e-6), rtol=1e-9, atol=0)
    diffs = torch.diff(with_launch)
    assert torch.allclose(diffs, diffs[0].expand_as(diffs), rtol=1e-9, atol=0)


def test_flash_attention_roofline():
    eff = DEFAULT_EFFICIENCY
    flops, nbytes = t(1e12, 1e6, 0.0), t(1e6, 1e10, 1e6)
    time = flash_attention_time_s(flops, nbytes, t(312e12), t(2039e9), t(4e-6), eff)
    assert float(time[0]) == pytest.approx(1e12 / (312e12 * eff.flash_attention_fraction) + 4e-6, rel=1e-12)
    assert float(time[1]) == pytest.approx(1e10 / (2039e9 * eff.hbm_bw_fraction) + 4e-6, rel=1e-12)
    assert float(time[2]) == 0.0


def test_attention_tiles_time_is_one_sms_time_a_tile_spread_over_the_sms():
    time = attention_tiles_time_s(t(1024.0, 8192.0, 0.0), 8e-6, t(132.0, 132.0, 132.0))
    assert time.tolist() == pytest.approx([1024 * 8e-6 / 132, 8192 * 8e-6 / 132, 0.0], rel=1e-12)
    assert float(attention_tiles_time_s(t(1024.0), 8e-6, t(264.0))[0]) == pytest.approx(float(time[0]) / 2, rel=1e-12)


def test_default_efficiency_fractions_are_fractions():
    for name, value in DEFAULT_EFFICIENCY.as_dict().items():
        if name.endswith("_fraction"):
            assert 0.0 < value <= 1.0, name
    assert DEFAULT_EFFICIENCY.gemm_tile_overhead_s >= 0.0
    assert DEFAULT_EFFICIENCY.layer_overhead_s >= 0.0
    assert 0.0 < DEFAULT_EFFICIENCY.flash_attention_fwd_tile_s < DEFAULT_EFFICIENCY.flash_attention_bwd_tile_s
