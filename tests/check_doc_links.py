#!/usr/bin/env python3
"""Checks the relative links and images of the project's Markdown (README.md, docs/, zoo/, ...).

Every link that is not a URL must name a file or folder of the checkout, and a `#fragment` must
be the GitHub anchor of a heading of its target (lower case, punctuation but '-' and '_' dropped,
spaces as '-', repeats numbered -1, -2, ...). Exit status 1 lists the broken links.
Usage: check_doc_links.py [ROOT]   (ROOT: the checkout, default: this file's parent's parent)
"""
import functools
import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def strip_code(lines):
    """The lines, with those of fenced code blocks blanked (line numbers stay)."""
    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def slug(text):
    """A heading's anchor as GitHub makes it (before numbering repeats)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path):
    """The anchors of the headings of the Markdown file at `path`."""
    seen, found = {}, set()
    with open(path, encoding="utf-8") as f:
        lines = strip_code(f.read().splitlines())
    for line in lines:
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return found


def markdown_files(root):
    yield os.path.join(root, "README.md")
    for top in ("docs", "zoo", "datasets", "kernels", "apps", "lib", "scripts"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in sorted(files):
                if name.endswith(".md"):
                    yield os.path.join(folder, name)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    broken, checked = [], 0
    for path in markdown_files(root):
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            lines = strip_code(f.read().splitlines())
        text = re.sub(r"`[^`\n]*`", "", "\n".join(lines))
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:, ...
                continue
            checked += 1
            file_part, _, fragment = target.partition("#")
            dest = path if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(path), file_part))
            line = text.count("\n", 0, m.start()) + 1
            where = f"{os.path.relpath(path, root)}:{line}: {target}"
            if not os.path.exists(dest):
                broken.append(f"{where} (no such file)")
            elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                broken.append(f"{where} (no heading with that anchor)")
    for b in broken:
        print(b)
    print(f"{checked} relative links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
