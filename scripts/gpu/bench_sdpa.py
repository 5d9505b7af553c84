#!/usr/bin/env python3
"""BF16 decode attention with torch's scaled_dot_product_attention (flash backend) for the shapes of
oscar-bench: one query token per sequence, GQA, contiguous BF16 K/V; median of CUDA-event timings,
each run preceded by a 256 MiB read (default) or write that evicts L2 and hides Python's launch
overhead (as oscar-bench does: --flush read|write)."""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def ints(text):
    return [int(x) for x in text.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--contexts", type=ints, default=[4096, 16384, 32768, 131072])
    ap.add_argument("--batches", type=ints, default=[1, 8, 32])
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--flush", choices=["read", "write"], default="read",
                    help="empty L2 by reading 256 MiB (clean lines) or by a memset (dirty lines)")
    ap.add_argument("--json")
    args, _ = ap.parse_known_args()
    dev = "cuda"
    flush = torch.zeros(64 << 20, dtype=torch.float32, device=dev)  # 256 MiB

    def evict(i):
        if args.flush == "read":
            flush.sum()
        else:
            flush.fill_(float(i & 0x7f))

    rows = []
    print(f"{'batch':>6} {'context':>8} {'sdpa us':>10} {'GB/s':>8}  backend")
    for b in args.batches:
        for t in args.contexts:
            kv_bytes = 2 * b * args.kv_heads * t * args.head_dim * 2
            if kv_bytes > 60 * 2**30:
                print(f"{b:>6} {t:>8}  skipped (does not fit)")
                continue
            q = torch.randn(b, args.q_heads, 1, args.head_dim, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, args.kv_heads, t, args.head_dim, device=dev, dtype=torch.bfloat16)
            v = torch.randn_like(k)
            result = {"batch": b, "context": t}
            for backend, name in ((SDPBackend.FLASH_ATTENTION, "flash"),
                                  (SDPBackend.EFFICIENT_ATTENTION, "efficient")):
                try:
                    with sdpa_kernel(backend):
                        fn = lambda: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, enable_gqa=True)
                        for _ in range(3):
                            fn()
                        torch.cuda.synchronize()
                        times = []
                        for i in range(args.iters):
                            s, e = torch.cuda.Event(True), torch.cuda.Event(True)
                            evict(i)
                            s.record()
                            fn()
                            e.record()
                            e.synchronize()
                            times.append(s.elapsed_time(e) * 1e3)
                    us = sorted(times)[len(times) // 2]
                    result[f"{name}_us"] = us
                    result[f"{name}_gbs"] = kv_bytes / (us * 1e3)
                except Exception as exc:  # a backend may refuse the shape
                    result[f"{name}_error"] = str(exc).splitlines()[0][:120]
            best = "flash" if "flash_us" in result else "efficient"
            if f"{best}_us" in result:
                print(f"{b:>6} {t:>8} {result[best + '_us']:>10.1f} {result[best + '_gbs']:>8.0f}  {best}"
                      + (f" (efficient {result['efficient_us']:.1f} us)" if best == "flash" and "efficient_us" in result else ""))
            else:
                print(f"{b:>6} {t:>8}  failed: {result}")
            rows.append(result)
            del q, k, v
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "l2_flush": args.flush,
                       "points": rows}, f, indent=2)


if __name__ == "__main__":
    main()
