#!/usr/bin/env python3
"""Checks oscar-tokenize against Hugging Face `tokenizers` on the same text, token for token.

The C++ side writes the ids (and the byte spans of the units it encoded) with
  oscar-tokenize --tokenizer T --text FILE --unit file|paragraph|line [--no-special] --json IDS.json
and this script encodes exactly those byte spans of FILE with tokenizers.Tokenizer.from_file(T),
encode(text, add_special_tokens=...) as recorded in IDS.json, and reports every unit whose ids differ
(first differing position with context, as ids and tokens). With --decode it also compares
tokenizer.decode(ids) to the "decoded" strings the C++ side wrote (oscar-tokenize --with-decode).
Several --ids files may be given (e.g. one per unit). Exit status 1 on any mismatch.
"""
import argparse
import json
import sys

from tokenizers import Tokenizer


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def show(tok, ids, at, width):
    lo, hi = max(0, at - width), at + width
    parts = []
    for i in range(lo, min(hi, len(ids))):
        mark = ">>" if i == at else ""
        parts.append(f"{mark}{ids[i]}:{tok.id_to_token(ids[i])!r}")
    return " ".join(parts)


def check_file(tok, text_bytes, ids_path, args):
    with open(ids_path, encoding="utf-8") as f:
        rec = json.load(f)
    add_special = bool(rec["add_special_tokens"])
    spans, ours = rec["spans"], rec["ids"]
    decoded = rec.get("decoded")
    if len(spans) != len(ours):
        print(f"{ids_path}: {len(spans)} spans but {len(ours)} id lists", file=sys.stderr)
        return 1, 0
    bad = 0
    decode_errors = 0
    for k, ((b, e), mine) in enumerate(zip(spans, ours)):
        # The C++ side replaces ill-formed UTF-8 like Python's "replace" handler does.
        text = text_bytes[b:e].decode("utf-8", errors="replace")
        ref = tok.encode(text, add_special_tokens=add_special).ids
        if ref != mine:
            bad += 1
            if bad <= args.max_report:
                at = first_diff(ref, mine)
                print(f"MISMATCH {ids_path} unit {k} (bytes {b}..{e}, {len(ref)} ref ids, "
                      f"{len(mine)} ours), first difference at id {at}")
                print(f"  text near: {text[:200]!r}")
                print(f"  tokenizers: {show(tok, ref, at, args.context)}")
                print(f"  oscar:      {show(tok, mine, at, args.context)}")
        if args.decode and decoded is not None:
            try:
                ref_text = tok.decode(mine, skip_special_tokens=True)
            except BaseException as e:  # a Rust panic arrives as pyo3's PanicException
                if isinstance(e, KeyboardInterrupt):
                    raise
                decode_errors += 1
                if decode_errors <= args.max_report:
                    print(f"NOTE {ids_path} unit {k}: tokenizers' decode failed ({e!r:.120}); "
                          f"oscar decoded {decoded[k][:60]!r}")
                continue
            if ref_text != decoded[k]:
                bad += 1
                if bad <= args.max_report:
                    at = first_diff(ref_text, decoded[k])
                    print(f"DECODE MISMATCH {ids_path} unit {k} at char {at}: "
                          f"tokenizers {ref_text[max(0, at - 20):at + 20]!r} vs "
                          f"oscar {decoded[k][max(0, at - 20):at + 20]!r}")
    print(f"{ids_path}: unit={rec['unit']} add_special_tokens={add_special} "
          f"{len(spans)} units, {sum(len(x) for x in ours)} ids, {bad} mismatches"
          + (f", {decode_errors} units tokenizers could not decode" if decode_errors else ""))
    return bad, len(spans)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json")
    ap.add_argument("--text", required=True, help="the text file the C++ side encoded")
    ap.add_argument("--ids", required=True, action="append", help="JSON written by oscar-tokenize")
    ap.add_argument("--decode", action="store_true", help="also compare decoded text")
    ap.add_argument("--context", type=int, default=5, help="ids shown around a difference")
    ap.add_argument("--max-report", type=int, default=10, help="mismatches printed per file")
    args = ap.parse_args()

    tok = Tokenizer.from_file(args.tokenizer)
    with open(args.text, "rb") as f:
        text_bytes = f.read()
    total_bad = 0
    for path in args.ids:
        bad, _ = check_file(tok, text_bytes, path, args)
        total_bad += bad
    print("OK" if total_bad == 0 else f"FAILED: {total_bad} mismatches")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
