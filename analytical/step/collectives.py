"""Collective communication in the alpha-beta model, and placement of parallel groups.

Closed forms (n ranks, `bytes_` the full buffer per rank, bandwidth `bw` per rank per direction,
latency `alpha` per step; Thakur et al. 2005, Patarasuk & Yuan 2009, NCCL's documentation):

- ring all-reduce:      2 (n-1)/n * bytes/bw + 2 (n-1) alpha
- tree all-reduce:      2 bytes/bw + 2 log2(n) alpha   (pipelined double binary tree)
- ring all-gather / reduce-scatter:  (n-1)/n * bytes/bw + (n-1) alpha  (bytes = gathered size)
- all-to-all (pairwise): (n-1)/n * bytes/bw + (n-1) alpha
- MoE dispatch deduplicated per scale-up domain (DeepEP, HybridEP): each token once through the NIC
  to every other domain holding one of its experts, then over the scale-up fabric to the experts
- point-to-point:        bytes/bw + alpha
- hierarchical all-reduce over `n_local` ranks per fast domain and `n_domains` domains:
  reduce-scatter inside, all-reduce of bytes/n_local across, all-gather inside.
- parameter server with k server machines outside the domains (BytePS, Jiang et al. OSDI 2020,
  sec. 4.1): reduce-scatter inside, every rank pushes its bytes/n_local shard and pulls it back
  (full duplex: one direction's time), the servers take n_domains * bytes in over k NICs and sum it,
  all-gather inside: max(bytes/(n_local bw), n_domains bytes/(k server_bw), n_domains bytes/(k sum))
  across. With k = n_domains servers this is bytes/(n_local bw) against all-reduce's
  2 (n_domains - 1)/n_domains of it: BytePS's "up to 2x" (its docs/rationale.md).

All arguments broadcast; every function returns 0 for groups of one rank. The `group_*` functions place their group
themselves, or take its `placement` as `placed` (`placed_group`: once per evaluation for the time and energy models).
"""

from __future__ import annotations

import torch

from analytical.design import DesignBatch, per_evaluation


def _only_groups(n, time):
    """0 for single-rank groups (also where a missing link would make 0 * inf)."""
    return torch.where(n > 1, time, 0.0)


def ring_all_reduce_time_s(bytes_, n, bw_bytes_per_s, alpha_s):
    steps = n - 1.0
    return _only_groups(n, 2.0 * steps / n * bytes_ / bw_bytes_per_s + 2.0 * steps * alpha_s)


def tree_all_reduce_time_s(bytes_, n, bw_bytes_per_s, alpha_s):
    return _only_groups(n, 2.0 * bytes_ / bw_bytes_per_s + 2.0 * torch.log2(n) * alpha_s)


def all_reduce_time_s(bytes_, n, bw_bytes_per_s, alpha_s):
    """The faster of ring and tree, as NCCL's tuner picks per message size."""
    return torch.minimum(ring_all_reduce_time_s(bytes_, n, bw_bytes_per_s, alpha_s),
                         tree_all_reduce_time_s(bytes_, n, bw_bytes_per_s, alpha_s))


def all_gather_time_s(bytes_, n, bw_bytes_per_s, alpha_s):
    steps = n - 1.0
    return _only_groups(n, steps / n * bytes_ / bw_bytes_per_s + steps * alpha_s)


reduce_scatter_time_s = all_gather_time_s
all_to_all_time_s = all_gather_time_s


def p2p_time_s(bytes_, bw_bytes_per_s, alpha_s):
    return bytes_ / bw_bytes_per_s + alpha_s


def hierarchical_all_reduce_time_s(bytes_, n_local, n_domains, local_bw_bytes_per_s, local_alpha_s,
                                   global_bw_bytes_per_s, global_alpha_s):
    inside = 2.0 * all_gather_time_s(bytes_, n_local, local_bw_bytes_per_s, local_alpha_s)
    across = all_reduce_time_s(bytes_ / n_local, n_domains, global_bw_bytes_per_s, global_alpha_s)
    return inside + across


def placement(size, stride, domain):
    """How a group of `size` ranks, `stride` ranks apart, falls onto scale-up domains.

    Ranks are laid out in Megatron order (tp fastest, then cp, dp, pp), so a group covers
    `size * stride` consecutive ranks. Returns `(n_local, n_domains)`: members per domain and
    domains spanned (n_local = size when the group fits in one domain).
    """
    n_local = torch.minimum(torch.clamp_min(torch.floor(domain / stride), 1.0), size)
    return n_local, torch.ceil(size / n_local)


@per_evaluation
def placed_group(d: DesignBatch, size: torch.Tensor, stride: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`placement` of a group of the mapping on the batch's scale-up domains, computed once per evaluation for the
    same `size` and `stride` tensors (the time and energy models place the same few groups a dozen times)."""
    return placement(size, stride, d.scale_up_domain)


@per_evaluation
def adjacent(d: DesignBatch) -> torch.Tensor:
    """`(batch,)` ones: the stride of a group of consecutive ranks (tensor parallelism), one tensor per evaluation."""
    return torch.ones_like(d.tp)


def group_all_reduce_time_s(bytes_, size, stride, domain, up_bw, up_alpha, out_bw, out_alpha, placed=None):
    """Hierarchical all-reduce of a placed group (NCCL runs one ring or tree per NIC): reduce-scatter
    inside each domain, all-reduce of bytes/n_local across domains, all-gather inside. A group
    inside one domain is a plain ring on the scale-up fabric."""
    n_local, n_domains = placement(size, stride, domain) if placed is None else placed
    return hierarchical_all_reduce_time_s(bytes_, n_local, n_domains, up_bw, up_alpha, out_bw, out_alpha)


def group_all_gather_time_s(bytes_, size, stride, domain, up_bw, up_alpha, out_bw, out_alpha, placed=None):
    """Hierarchical all-gather (also the time of a reduce-scatter): across domains first, among
    same-position peers, then inside each domain. `bytes_` is the gathered size."""
    n_local, n_domains = placement(size, stride, domain) if placed is None else placed
    across = all_gather_time_s(bytes_ / n_local, n_domains, out_bw, out_alpha)
    return across + all_gather_time_s(bytes_, n_local, up_bw, up_alpha)


def group_all_to_all_time_s(bytes_, size, stride, domain, up_bw, up_alpha, out_bw, out_alpha, placed=None):
    """All-to-all of a placed group: the share of the buffer that leaves the domain goes through
    each member's NIC, the rest over the scale-up fabric."""
    n_local, _ = placement(size, stride, domain) if placed is None else placed
    leaving = (size - n_local) / size
    inside = (n_local - 1.0) / size
    across = _only_groups(size - n_local + 1.0, leaving * bytes_ / out_bw + (size - n_local) * out_alpha)
    return _only_groups(size, across + _only_groups(n_local, inside * bytes_ / up_bw + (n_local - 1.0) * up_alpha))


def expected_domains_per_token(top_k, n_domains, num_groups, group_topk):
    """Expected number of scale-up domains that hold at least one of a token's `top_k` experts,
    the experts spread evenly over `n_domains` domains and chosen alike by a balanced router:
    n (1 - (1 - 1/n)^k). Group-limited routing caps it (`num_groups` contiguous expert groups, a
    token's experts inside `group_topk` of them; DeepSeek-V3's node-limited routing): with G >= n
    groups (G/n per domain), g groups touch n (1 - C(G - G/n, g) / C(G, g)) domains on average;
    with G < n each group spans n/G domains, so at most g n / G. `num_groups` 1: no cap."""
    n, big_g, g = n_domains, num_groups, group_topk
    free = n * (1.0 - (1.0 - 1.0 / n) ** top_k)
    rest = big_g - big_g / n  # groups outside one domain
    log_ratio = (torch.lgamma(rest + 1.0) - torch.lgamma(torch.clamp_min(rest - g + 1.0, 1.0))
                 - torch.lgamma(big_g + 1.0) + torch.lgamma(big_g - g + 1.0))
    missed = torch.where(rest >= g, torch.exp(log_ratio), torch.zeros_like(rest))
    capped = torch.where(big_g >= n, n * (1.0 - missed), torch.minimum(g * n / big_g, n))
    return torch.where(big_g > 1, torch.minimum(free, capped), free)


def group_dispatch_time_s(token_bytes, top_k, num_groups, group_topk, size, stride, domain,
                          up_bw, up_alpha, out_bw, out_alpha, placed=None):
    """MoE token dispatch (or combine) of a placed expert-parallel group that sends each token once
    to every other scale-up domain holding one of its experts and forwards it there to the experts
    (DeepEP, HybridEP; DeepSeek-V3 report section 3.2.2): through the NIC `token_bytes` times the
    expected other domains (`expected_domains_per_token` times (n-1)/n), over the scale-up fabric
    the `top_k` copies' share bound for the other members of the domain."""
    n_local, n_domains = placement(size, stride, domain) if placed is None else placed
    domains = expected_domains_per_token(top_k, n_domains, num_groups, group_topk)
    across = _only_groups(n_domains, domains * (n_domains - 1.0) / n_domains * token_bytes / out_bw
                          + (n_domains - 1.0) * out_alpha)
    inside = _only_groups(n_local, top_k * token_bytes * (n_local - 1.0) / n_local / up_bw
                          + (n_local - 1.0) * up_alpha)
    return _only_groups(size, across + inside)


def p2p_link(size, stride, domain, up_bw, up_alpha, out_bw, out_alpha):
    """Slowest link of a chain of `size` ranks `stride` apart (a pipeline): the NIC as soon as the
    chain leaves one scale-up domain. Returns `(bw, alpha)`."""
    crosses = size * stride > domain
    return torch.where(crosses, out_bw, up_bw), torch.where(crosses, out_alpha, up_alpha)


def group_parameter_server_time_s(bytes_, size, stride, domain, up_bw, up_alpha, out_bw, out_alpha, servers,
                                  server_bw, server_sum_bytes_per_s, placed=None):
    """Push and pull of a placed data-parallel group through `servers` parameter-server machines
    (module docstring); `server_sum_bytes_per_s` 0 = summing keeps up with the NICs. A group inside one
    domain still goes through the servers (its gradients leave the domain). 0 servers: infinite (the
    mapping rule PARAMETER_SERVER_INVALID reports it)."""
    n_local, n_domains = placement(size, stride, domain) if placed is None else placed
    inside = 2.0 * all_gather_time_s(bytes_, n_local, up_bw, up_alpha)
    k = torch.clamp_min(servers, 1e-9)
    arriving = n_domains * bytes_ / k  # bytes each server receives (and sends back)
    summing = torch.where(server_sum_bytes_per_s > 0, arriving / torch.clamp_min(server_sum_bytes_per_s, 1e-9), 0.0)
    across = torch.maximum(torch.maximum(bytes_ / n_local / out_bw, arriving / server_bw), summing) + 2.0 * out_alpha
    return _only_groups(size, inside + across)


def straggler_wait_s(workers, cv, staleness, synchronous, step_s):
    """Expected wait of a synchronous step for the slowest of its `workers`, whose step times spread
    with coefficient of variation `cv`: E[max of n] - mean ~ sigma sqrt(2 ln n) (the Gaussian
    extreme-value bound). Under SSP with `staleness` s a worker waits only for a lag of more than s
    steps, which averages s + 1 steps: sigma / sqrt(s + 1). `synchronous` 0 (Downpour's ps_async)
    never waits. How staleness slows convergence per step is outside a step-time model."""
    spread = torch.sqrt(2.0 * torch.log(torch.clamp_min(workers, 1.0)) / (1.0 + staleness))
    return synchronous * step_s * cv * spread
