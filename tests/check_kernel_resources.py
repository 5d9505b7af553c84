#!/usr/bin/env python3
"""Checks the INT2 kernels' registers and spills (ptxas's report of the sm_90a build) against the
ceilings recorded in kernels/resources-sm90a.txt.

A kernel's registers decide how many of its blocks a multiprocessor holds, and a change in shared
code can move them without any test noticing (one did: 128 -> 210 registers, half the resident
warps, a quarter of a kernel's speed). This check fails when a kernel uses more registers or
spills more than recorded, or when a kernel appears or disappears; fewer is fine. After a change
that moves them on purpose, rewrite the ceilings with --update and say why in the commit.
With another ptxas than the one that recorded the ceilings, the check is skipped (exit 77): the
allocation differs between versions.

Usage: check_kernel_resources.py --report BUILD/kernels/resources/int2_cache.cu.o.resources
                                 --expect kernels/resources-sm90a.txt [--update]
"""
import argparse
import re
import shutil
import subprocess
import sys

ARCH = "sm_90a"
SKIP = 77


def parse_report(path):
    """Returns (ptxas version line, {mangled name: (registers, spill stores, spill loads)})."""
    version, kernels, current, spills = "", {}, None, {}
    entry = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
    props = re.compile(r"Function properties for (\S+)")
    frame = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
    used = re.compile(r"Used (\d+) registers")
    pending = None  # the function whose properties the next frame line gives
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# ptxas:"):
                version = line[len("# ptxas:"):].strip()
                continue
            m = entry.search(line)
            if m:
                current = m.group(1) if m.group(2) == ARCH else None
                continue
            m = props.search(line)
            if m:
                pending = m.group(1)
                continue
            m = frame.search(line)
            if m and pending is not None:
                spills[pending] = (int(m.group(2)), int(m.group(3)))
                pending = None
                continue
            m = used.search(line)
            if m and current is not None:
                stores, loads = spills.get(current, (0, 0))
                kernels[current] = (int(m.group(1)), stores, loads)
                current = None
    return version, kernels


def short_names(mangled):
    """Readable kernel names: the demangled name without namespaces, return type or parameters."""
    names = list(mangled)
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                             check=True).stdout.splitlines()
        if len(out) == len(names):
            names = out
    result = {}
    for m, name in zip(mangled, names):
        name = re.sub(r"^void ", "", name.replace("(anonymous namespace)::", ""))
        name = name.split("(", 1)[0].replace("oscar::kernels::", "")
        result[m] = name.replace(" ", "")
    return result


def read_expected(path):
    version, ceilings = "", {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# ptxas:"):
                version = line[len("# ptxas:"):].strip()
            if not line.strip() or line.startswith("#"):
                continue
            name, registers, stores = line.split()
            ceilings[name] = (int(registers), int(stores))
    return version, ceilings


def write_expected(path, version, kernels):
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Registers and spill stores (bytes a thread) of the INT2 kernels compiled for sm_90a, as\n"
                "# ptxas reports them: ceilings that tests/check_kernel_resources.py holds the build to.\n"
                "# Rewritten by that script's --update after a change that moves them on purpose.\n")
        f.write(f"# ptxas: {version}\n")
        f.write("# kernel registers spill-stores\n")
        for name in sorted(kernels):
            registers, stores, _ = kernels[name]
            f.write(f"{name} {registers} {stores}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", required=True)
    ap.add_argument("--expect", required=True)
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args()
    try:
        version, raw = parse_report(args.report)
    except OSError as e:
        print(f"check_kernel_resources: cannot read the report {args.report}: {e.strerror}"
              " (build oscar_kernels with CUDA first)", file=sys.stderr)
        return 1
    if not raw:
        print(f"check_kernel_resources: no {ARCH} kernels in {args.report}"
              " (is 90a in OSCAR_CUDA_ARCHITECTURES?)", file=sys.stderr)
        return SKIP
    names = short_names(raw)
    kernels = {names[m]: v for m, v in raw.items()}
    if args.update:
        write_expected(args.expect, version, kernels)
        print(f"wrote {len(kernels)} kernels' ceilings to {args.expect}")
        return 0
    expected_version, ceilings = read_expected(args.expect)
    if expected_version != version:
        print(f"check_kernel_resources: skipped: the ceilings were recorded with ptxas"
              f" '{expected_version}', this build's is '{version}'")
        return SKIP
    problems = []
    for name, (registers, stores, _) in sorted(kernels.items()):
        if name not in ceilings:
            problems.append(f"{name}: not recorded ({registers} registers, {stores} bytes of spill"
                            " stores)")
            continue
        max_registers, max_stores = ceilings[name]
        if registers > max_registers:
            problems.append(f"{name}: {registers} registers, recorded ceiling {max_registers}")
        if stores > max_stores:
            problems.append(f"{name}: {stores} bytes of spill stores, recorded ceiling {max_stores}")
    for name in sorted(set(ceilings) - set(kernels)):
        problems.append(f"{name}: recorded but not built")
    print(f"{len(kernels)} {ARCH} kernels checked against {args.expect}")
    if problems:
        print("kernel resources above their recorded ceilings (more registers or spills may cost"
              " resident blocks or speed; if the change is meant, rerun with --update and say why"
              " in the commit):")
        for p in problems:
            print("  " + p)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
