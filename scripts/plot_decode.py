#!/usr/bin/env python3
"""Plots decode attention time against context: oscar-bench's decode table and torch's SDPA.

Reads `oscar-bench --json` (INT2, INT2 on CUDA cores, the kernel's own BF16 variant) and,
optionally, `scripts/gpu/bench_sdpa.py --json` (torch's BF16 flash decode), and writes one SVG
panel per batch size: µs against context on log axes, each INT2 point labelled with its speedup
over torch's decode (over the own BF16 variant without SDPA figures). Standard library only.
Usage: plot_decode.py --decode BENCH.json [--sdpa SDPA.json] --out PLOT.svg [--title TEXT]
"""
import argparse
import json
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from xml.sax.saxutils import escape

COLORS = {"sdpa": "#c44e52", "bf16": "#dd8452", "simt": "#8172b3", "int2": "#4c72b0"}
LABELS = {"sdpa": "torch SDPA flash (BF16)", "bf16": "own BF16 kernel",
          "simt": "INT2, CUDA cores", "int2": "INT2, tensor cores"}
PANEL_W, PANEL_H, LEFT, TOP, BOTTOM = 330, 300, 60, 60, 50


def fail(message):
    print(f"plot_decode: {message}", file=sys.stderr)
    sys.exit(1)


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")


def context_label(tokens):
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def panel(batch, rows, sdpa, x0):
    """One batch's chart at x offset x0, its y axis (log) spanning its own values."""
    contexts = [r["context"] for r in rows]
    times = [v for r in rows for v in (r["bf16_us"], r["int2_us"], r["int2_simt_us"]) if v > 0]
    times += [sdpa[(batch, c)] for c in contexts if (batch, c) in sdpa]
    lo, hi = math.log10(min(times)) - 0.12, math.log10(max(times)) + 0.05
    plot_w, plot_h = PANEL_W - LEFT - 10, PANEL_H - TOP - BOTTOM
    c_lo, c_hi = math.log2(contexts[0]), math.log2(contexts[-1])

    def px(context):
        span = c_hi - c_lo
        return x0 + LEFT + (plot_w * (math.log2(context) - c_lo) / span if span else plot_w / 2)

    def py(us):
        return TOP + plot_h - plot_h * (math.log10(us) - lo) / (hi - lo)

    out = [f"<text x='{x0 + LEFT}' y='{TOP - 12}' font-size='13' font-weight='bold'>"
           f"batch {batch}</text>",
           f"<rect x='{x0 + LEFT}' y='{TOP}' width='{plot_w}' height='{plot_h}' fill='none' "
           "stroke='#999'/>"]
    for decade in range(math.floor(lo), math.ceil(hi) + 1):
        for mantissa in (1, 2, 5):
            us = mantissa * 10 ** decade
            if not lo <= math.log10(us) <= hi:
                continue
            y = py(us)
            out.append(f"<line x1='{x0 + LEFT}' x2='{x0 + LEFT + plot_w}' y1='{y:.1f}' "
                       f"y2='{y:.1f}' stroke='#e5e5e5'/>")
            out.append(f"<text x='{x0 + LEFT - 4}' y='{y + 4:.1f}' font-size='10' "
                       f"text-anchor='end'>{us:g}</text>")
    for c in contexts:
        out.append(f"<text x='{px(c):.1f}' y='{TOP + plot_h + 15}' font-size='10' "
                   f"text-anchor='middle'>{context_label(c)}</text>")
    out.append(f"<text x='{x0 + LEFT + plot_w / 2}' y='{TOP + plot_h + 32}' font-size='11' "
               "text-anchor='middle'>context (tokens)</text>")
    series = {"bf16": [r["bf16_us"] for r in rows], "simt": [r["int2_simt_us"] for r in rows],
              "int2": [r["int2_us"] for r in rows]}
    if sdpa:
        series = {"sdpa": [sdpa.get((batch, c)) for c in contexts], **series}
    for name, values in series.items():
        points = [(px(c), py(v)) for c, v in zip(contexts, values) if v]
        dash = " stroke-dasharray='4 3'" if name == "simt" else ""
        out.append(f"<polyline fill='none' stroke='{COLORS[name]}' stroke-width='2'{dash} "
                   "points='" + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + "'/>")
        out += [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.5' fill='{COLORS[name]}'/>"
                for x, y in points]
    reference = series.get("sdpa") or series["bf16"]
    for i, (c, int2, ref) in enumerate(zip(contexts, series["int2"], reference)):
        if int2 and ref:
            # Below the point, or above it near the axis; the end points' labels inside the box.
            y = py(int2) + 15 if py(int2) + 15 < TOP + plot_h - 3 else py(int2) - 7
            anchor = "start" if i == 0 else "end" if i == len(contexts) - 1 else "middle"
            dx = 4 if i == 0 else -4 if i == len(contexts) - 1 else 0
            out.append(f"<text x='{px(c) + dx:.1f}' y='{y:.1f}' font-size='10' "
                       f"text-anchor='{anchor}' fill='{COLORS['int2']}'>{ref / int2:.1f}x</text>")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decode", required=True, help="oscar-bench --json output")
    ap.add_argument("--sdpa", help="scripts/gpu/bench_sdpa.py --json output (same shapes)")
    ap.add_argument("--out", required=True, help="the SVG to write")
    ap.add_argument("--title", help="default: the device and shape from the JSON")
    args = ap.parse_args()

    bench = load(args.decode)
    rows = bench.get("decode") or fail(f"{args.decode} has no decode table (oscar-bench --json)")
    sdpa = {}
    if args.sdpa:
        for p in load(args.sdpa).get("points", []):
            if p.get("flash_us"):
                sdpa[(p["batch"], p["context"])] = p["flash_us"]
        if not sdpa:
            fail(f"{args.sdpa} has no flash_us points (scripts/gpu/bench_sdpa.py --json)")
    batches = sorted({r["batch"] for r in rows})
    by_batch = {b: sorted((r for r in rows if r["batch"] == b), key=lambda r: r["context"])
                for b in batches}
    shape = bench.get("shape", {})
    title = args.title or (
        f"Decode attention, {bench.get('device', 'GPU')}: {shape.get('q_heads')} q / "
        f"{shape.get('kv_heads')} KV heads, d {shape.get('head_dim')}, page "
        f"{shape.get('page_size')} (INT2 labels: speedup over "
        f"{'torch SDPA' if sdpa else 'own BF16'})")
    width, height = PANEL_W * len(batches) + 20, PANEL_H + 40
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             "font-family='sans-serif'>",
             f"<rect width='{width}' height='{height}' fill='white'/>",
             f"<text x='{LEFT}' y='20' font-size='14' font-weight='bold'>{escape(title)}</text>",
             f"<text x='14' y='{TOP + (PANEL_H - TOP - BOTTOM) / 2}' font-size='11' "
             f"transform='rotate(-90 14 {TOP + (PANEL_H - TOP - BOTTOM) / 2})' "
             "text-anchor='middle'>µs (log)</text>"]
    for i, b in enumerate(batches):
        parts += panel(b, by_batch[b], sdpa, 10 + i * PANEL_W)
    legend = [n for n in ("sdpa", "bf16", "simt", "int2") if n != "sdpa" or sdpa]
    for i, name in enumerate(legend):
        x = LEFT + i * 190
        dash = " stroke-dasharray='4 3'" if name == "simt" else ""
        parts.append(f"<line x1='{x}' x2='{x + 24}' y1='{height - 14}' y2='{height - 14}' "
                     f"stroke='{COLORS[name]}' stroke-width='2'{dash}/>")
        parts.append(f"<text x='{x + 30}' y='{height - 10}' font-size='11'>"
                     f"{escape(LABELS[name])}</text>")
    parts.append("</svg>")
    svg = "\n".join(parts) + "\n"
    ElementTree.fromstring(svg)  # well-formed, or an exception before anything is written

    folder = os.path.dirname(os.path.abspath(args.out))
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".plot_decode.", suffix=".svg")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(svg)
        os.replace(temporary, args.out)
    except BaseException:
        os.unlink(temporary)
        raise
    print(f"plot_decode: wrote {args.out} ({len(batches)} batches, "
          f"{len(rows)} points{', with torch SDPA' if sdpa else ''})")


if __name__ == "__main__":
    main()
