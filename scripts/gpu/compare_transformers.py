#!/usr/bin/env python3
"""Cross-checks the project's forward (oscar-dump-logits) against transformers' own forward.

For each model (real checkpoints given with --model, plus random-weight models that transformers
builds from configs covering Qwen2 biases, Mistral, llama3/linear/yarn RoPE, Qwen3 and untied heads),
both implementations run the same token ids in fp32 and in bf16; the script reports the max abs
logit error (fp32 must be <= --fp32-tol) and, for bf16, each side's distance from the fp32
reference so the two bf16 errors can be compared. Writes a JSON report with --json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch


def random_models(root):
    """Writes small random models with transformers and returns their directories."""
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=512, max_position_embeddings=1024)
    specs = {
        "qwen2-bias-random": Qwen2Config(**common, tie_word_embeddings=False),
        "mistral-random": MistralConfig(**common, sliding_window=None, head_dim=32),
        "llama-llama3rope-random": LlamaConfig(**common, head_dim=16, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 128}),
        "llama-linear-bias-random": LlamaConfig(**common, attention_bias=True, mlp_bias=True,
                                                rope_parameters={"rope_type": "linear",
                                                                 "rope_theta": 10000.0, "factor": 4.0}),
        "qwen2-yarn-random": Qwen2Config(**common, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
            "original_max_position_embeddings": 256}),
        "qwen3-untied-random": Qwen3Config(**common, head_dim=64, tie_word_embeddings=False),
    }
    dirs = {}
    for name, cfg in specs.items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
        # Default init has tiny weights; widen them so logits are O(1) and errors are visible.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname:
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                elif p.dim() > 1:
                    p.normal_(0, 0.08)
                else:
                    p.normal_(0, 0.05)
        d = os.path.join(root, name)
        model.save_pretrained(d, safe_serialization=True)
        dirs[name] = d
    return dirs


def hf_logits(model_dir, ids, dtype, device):
    from transformers import AutoModelForCausalLM
    # Eager attention on CPU: the most exact reference there (its SDPA kernel is less precise).
    attn = "eager" if device == "cpu" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype,
                                                 attn_implementation=attn).to(device).eval()
    with torch.inference_mode():
        out = model(torch.tensor(ids, device=device)).logits.float().cpu().numpy()
    del model
    torch.cuda.empty_cache()
    return out


def oscar_logits(tool, model_dir, ids_path, dtype, device, tmp):
    out = os.path.join(tmp, "oscar_logits.npy")
    subprocess.run([tool, "--model", model_dir, "--ids", ids_path, "--out", out, "--dtype", dtype,
                    "--device", device], check=True)
    return np.load(out)


def token_ids(model_dir, text_path, batch, seq_len, vocab):
    """Real tokens from the model's tokenizer on real text when available, else random ids."""
    tok_path = os.path.join(model_dir, "tokenizer.json")
    if text_path and os.path.exists(tok_path):
        from tokenizers import Tokenizer
        ids = Tokenizer.from_file(tok_path).encode(open(text_path, encoding="utf-8").read()).ids
        need = batch * seq_len
        if len(ids) >= need:
            return np.array(ids[:need]).reshape(batch, seq_len).tolist()
    rng = np.random.default_rng(0)
    return rng.integers(0, vocab, size=(batch, seq_len)).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tool", required=True, help="path of oscar-dump-logits")
    ap.add_argument("--model", action="append", default=[], help="real model directory (repeatable)")
    ap.add_argument("--random", action="store_true", help="also check random-weight models")
    ap.add_argument("--text", help="text to tokenize for real models")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--devices", default="cuda,cpu")
    ap.add_argument("--fp32-tol", type=float, default=1e-3)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    results, failures = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        models = {os.path.basename(m.rstrip("/")): m for m in args.model}
        if args.random:
            models.update(random_models(tmp))
        for name, mdir in models.items():
            cfg = json.load(open(os.path.join(mdir, "config.json")))
            ids = token_ids(mdir, args.text, args.batch, args.seq_len, cfg["vocab_size"])
            ids_path = os.path.join(tmp, "ids.json")
            json.dump(ids, open(ids_path, "w"))
            refs32 = {}  # transformers' fp32 logits by device
            for device in args.devices.split(","):
                if device == "cuda" and not torch.cuda.is_available():
                    continue
                ref32 = hf_logits(mdir, ids, torch.float32, device)
                ours32 = oscar_logits(args.tool, mdir, ids_path, "f32", device, tmp)
                err32 = float(np.abs(ref32 - ours32).max())
                row = {"model": name, "device": device, "batch": args.batch, "seq_len": args.seq_len,
                       "fp32_max_abs_err": err32, "logit_abs_max": float(np.abs(ref32).max()),
                       "fp32_ok": err32 <= args.fp32_tol}
                # The reference checked against itself across devices (a failure could be either
                # side's), and our logits against the other device's reference.
                for other, other32 in refs32.items():
                    row[f"reference_vs_{other}_reference"] = float(np.abs(ref32 - other32).max())
                    row[f"fp32_max_abs_err_vs_{other}_reference"] = float(
                        np.abs(ours32 - other32).max())
                refs32[device] = ref32
                if device == "cuda":
                    ref16 = hf_logits(mdir, ids, torch.bfloat16, device)
                    ours16 = oscar_logits(args.tool, mdir, ids_path, "bf16", device, tmp)
                    row.update({
                        "bf16_max_abs_err_vs_transformers_bf16": float(np.abs(ref16 - ours16).max()),
                        "bf16_oscar_max_abs_err_vs_fp32": float(np.abs(ours16 - ref32).max()),
                        "bf16_transformers_max_abs_err_vs_fp32": float(np.abs(ref16 - ref32).max()),
                        "bf16_oscar_mean_abs_err_vs_fp32": float(np.abs(ours16 - ref32).mean()),
                        "bf16_transformers_mean_abs_err_vs_fp32": float(np.abs(ref16 - ref32).mean()),
                        "bf16_argmax_agreement": float((ours16.argmax(-1) == ref16.argmax(-1)).mean()),
                    })
                failures += 0 if row["fp32_ok"] else 1
                results.append(row)
                print(json.dumps(row), flush=True)

    print(f"\n{'model':<28} {'dev':<5} {'fp32 max|err|':>14} {'bf16 vs hf-bf16':>16} "
          f"{'bf16 ours-fp32':>15} {'bf16 hf-fp32':>13}")
    for r in results:
        b = lambda k: f"{r[k]:.3g}" if k in r else "-"
        print(f"{r['model']:<28} {r['device']:<5} {r['fp32_max_abs_err']:>14.3g} "
              f"{b('bf16_max_abs_err_vs_transformers_bf16'):>16} "
              f"{b('bf16_oscar_max_abs_err_vs_fp32'):>15} {b('bf16_transformers_max_abs_err_vs_fp32'):>13}")
    if args.json:
        json.dump({"results": results, "fp32_tolerance": args.fp32_tol}, open(args.json, "w"), indent=2)
    print(f"\n{len(results) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
