"""A sliding-window attention layer against a full one, timed on this GPU beside the model's price of each.

    python experiments/benchmarks/bench_window_attention.py [--hardware h200-sxm-141gb] [--json out.json]
    python experiments/benchmarks/bench_window_attention.py --device cpu --hardware h200-sxm-141gb --seq 256  # a try

Needs only torch (with Triton, for FlexAttention), PyYAML and `analytical/`, so it runs on a bare GPU machine with
`PYTHONPATH=.`. The model prices a fused attention pass as its FLOPs at one rate plus a fixed time for each (query
tile of 128 rows, head) (`kernels.attention_tiles_time_s`, measured on cuDNN's full causal kernel by
`bench_kernels.py`): a windowed layer runs as many tiles as a full one, each over few keys, so its price is mostly
that fixed time. This checks it where a kernel skips the tiles outside the window: PyTorch's FlexAttention
(`torch.nn.attention.flex_attention`, block-sparse, compiled), causal, bf16, one layer of gpt-oss-120b (64 heads
of 64, 8 key-value heads, mbs 4, seq 4096) and of Llama 3 8B (32 of 128, mbs 1, seq 8192), with every key
(causal) and through a 128-key window (gpt-oss's, Megatron-Core's window_size (127, 0)): forward and backward
time, the windowed / full ratio measured and the model's. Prints a table, then ONE JSON line.
`--device cpu` is a quick try of the script, not a measurement: FlexAttention has no backward on a CPU, so there the
same masked product runs as `scaled_dot_product_attention` with a dense mask (every tile computed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kernels import design, predicted_attention_s, preset, preset_for_gpu, timed_s  # noqa: E402

from analytical.step.efficiency import Efficiency  # noqa: E402

WINDOW = 128  # gpt-oss-120b's sliding window (conf/model/gpt-oss-120b.yaml)
CASES = (("gpt-oss-120b", 4, 4096), ("llama3-8b", 1, 8192))  # (model preset, micro-batch, sequence), tp 1


def windowed(hardware: str, model: str, mbs: int, seq: int):
    """`bench_kernels.design`'s layer (tp 1) with every layer attending through the window."""
    return design(hardware, model, 1, mbs, seq, "bf16", window=WINDOW)


def measure(model: str, mbs: int, seq: int, window: int | None, repeats: int,
            device: torch.device = torch.device("cuda")) -> tuple[float, float]:
    """(forward, backward) milliseconds of FlexAttention on the layer's shapes, causal, within `window` keys (on a
    CPU: `scaled_dot_product_attention` with the dense mask, a quick try)."""
    spec = preset("model", model)
    heads, kv = spec["num_heads"], spec.get("num_kv_heads", spec["num_heads"])
    dim = spec.get("head_dim") or spec["hidden_size"] // heads

    def mask(b, h, q, k):
        return (q >= k) & (q - k < window) if window else q >= k
    q = torch.randn(mbs, heads, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(mbs, kv, seq, dim, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    grad = torch.randn_like(q)
    if device.type == "cuda":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        block = create_block_mask(mask, B=None, H=None, Q_LEN=seq, KV_LEN=seq, device=device)
        compiled = torch.compile(flex_attention)
        attend = lambda: compiled(q, k, v, block_mask=block, enable_gqa=kv != heads)  # noqa: E731
    else:  # FlexAttention has no backward on a CPU
        i = torch.arange(seq, device=device)
        dense = mask(None, None, i[:, None], i[None, :])
        attend = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense, enable_gqa=kv != heads)  # noqa: E731
    wall_ms = lambda fn: 1e3 * timed_s(fn, device, repeats)[0]  # noqa: E731 (CUDA events on a GPU)
    fwd = wall_ms(attend)

    def both():
        torch.autograd.grad(attend(), (q, k, v), grad)
    return fwd, wall_ms(both) - fwd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a quick try of the script (no measurement)")
    parser.add_argument("--hardware", default=None, help="hardware preset (default: from the GPU's name)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seq", type=int, default=None, help="every case's sequence length (a quick CPU try)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (FlexAttention is compiled with Triton); --device cpu for a quick try")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    hardware = args.hardware or preset_for_gpu(name)
    if hardware is None:
        parser.error(f"--hardware: no preset known for {name!r}")
    eff, rows = Efficiency(), []
    print(f"torch {torch.__version__} on {name}; model preset {hardware}")
    print(f"{'model':13} {'keys':>6} {'meas fwd':>9} {'meas bwd':>9} {'pred fwd':>9} {'pred bwd':>9}  (ms)")
    for model, mbs, seq in ((m, mbs, args.seq or seq) for m, mbs, seq in CASES):
        got = {}
        for label, window, d in (("full", None, design(hardware, model, 1, mbs, seq, "bf16")),
                                 ("window", WINDOW, windowed(hardware, model, mbs, seq))):
            meas = measure(model, mbs, seq, window, args.repeats, device)
            pred = tuple(1e3 * x for x in predicted_attention_s(d, eff))
            got[label] = (meas, pred)
            print(f"{model:13} {label:>6} {meas[0]:9.3f} {meas[1]:9.3f} {pred[0]:9.3f} {pred[1]:9.3f}")
        (mf, pf), (mw, pw) = got["full"], got["window"]
        row = {"model": model, "mbs": mbs, "seq": seq, "window": WINDOW, "measured_full_ms": mf,
               "measured_window_ms": mw, "predicted_full_ms": pf, "predicted_window_ms": pw,
               "measured_ratio": [mw[i] / mf[i] for i in range(2)],
               "predicted_ratio": [pw[i] / pf[i] for i in range(2)]}
        rows.append(row)
        print(f"  windowed / full: measured fwd {row['measured_ratio'][0]:.3f} bwd {row['measured_ratio'][1]:.3f}; "
              f"model fwd {row['predicted_ratio'][0]:.3f} bwd {row['predicted_ratio'][1]:.3f}")
    out = json.dumps({"device": name, "torch": torch.__version__, "hardware": hardware, "rows": rows})
    if args.json:
        Path(args.json).write_text(out + "\n")
    print(out)


if __name__ == "__main__":
    main()
