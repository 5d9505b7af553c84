#!/usr/bin/env python3
"""Forward throughput of transformers on a model, timed like oscar-bench-forward (median of runs,
random token ids, logits included), for side-by-side numbers on the same GPU in the same run."""
import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--attn", default="sdpa")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype,
                                                 attn_implementation=args.attn).cuda().eval()
    cfg = json.load(open(f"{args.model}/config.json"))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(cfg["vocab_size"], (args.batch, args.seq_len), generator=g).cuda()
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(ids)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            t0 = time.perf_counter()
            model(ids)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    s = sorted(times)[len(times) // 2]
    out = {"impl": f"transformers-{args.attn}", "model": args.model, "batch": args.batch,
           "seq_len": args.seq_len, "dtype": args.dtype, "seconds": s,
           "tokens_per_second": args.batch * args.seq_len / s,
           "transformers": __import__("transformers").__version__, "torch": torch.__version__}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
