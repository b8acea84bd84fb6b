#!/usr/bin/env python3
"""Checks what the Markdown files of the repository point to, so that a reader who follows them
finds what they name:

- every relative link `[text](path)`, `[text](path#anchor)`, `[text](<path>)` or
  `[text](path "title")` names a file or folder of the repository, and an anchor names a heading
  of the Markdown file it points into, and only one (two headings of the same title would send
  the link to the first, whatever the writer meant);
- every script a document runs, in backticks (`bash X`, `python3 X`) or as a command line of a
  fenced code block, exists; `.gpu/NAME` is the
  staging folder ci/gpu.sh fills from ci/ and tests/gpu/, so NAME must exist there;
- every `RCB_*` name a document mentions exists in the sources (src/, include/, ci/, tests/,
  build.rs, abi/); a name ending in `_` (`RCB_FALLBACK_`) stands for a family, of which one name
  must exist.

Links to other sites are not fetched (CI has no network guarantee). Prints each broken reference
as FILE:LINE and exits 1 when there is one.

    python3 ci/doc-links.py [REPO_ROOT]
"""
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
tracked = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
markdown = sorted(f for f in tracked if f.endswith(".md"))

LINK = re.compile(r"!?\[[^\]]*\]\((?:<([^>]+)>|([^)\s]+))(?:\s+\"[^\"]*\")?\)")
SCRIPT = re.compile(r"`(?:bash|python3|sh)\s+([^\s`]+)")
FENCED_COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:bash|python3|sh)\s+([^\s`]+)")
NAME = re.compile(r"\bRCB_[A-Z0-9_]+")
FENCE = re.compile(r"^\s*(```|~~~)")


def anchors(path):
    """GitHub's anchors of a Markdown file's headings, each with the number of headings whose
    title gives that slug (GitHub suffixes the later ones with -1, -2, ...)."""
    found, seen, fenced = {}, {}, False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
            if fenced or not line.startswith("#"):
                continue
            title = line.lstrip("#").strip()
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            if n == 0:
                found[slug] = 1
            else:
                found[slug] += 1
                found[f"{slug}-{n}"] = 1
    return found


def source_text():
    parts = []
    for f in tracked:
        if f.endswith(".md") or not f.startswith(("src/", "include/", "ci/", "tests/", "abi/", "build.rs", "crates/")):
            continue
        try:
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as h:
                parts.append(h.read())
        except OSError:
            pass
    return "\n".join(parts)


sources = source_text()
known_names = set(NAME.findall(sources))
problems = []
anchor_cache = {}
for doc in markdown:
    here = os.path.dirname(doc)
    fenced = False
    with open(os.path.join(root, doc), encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines, 1):
        where = f"{doc}:{number}"
        if FENCE.match(line):
            fenced = not fenced
        if not fenced:
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(root, here, path)) if path else os.path.join(root, doc)
                if not os.path.exists(full):
                    problems.append(f"{where}: link to {target}: no {os.path.relpath(full, root)}")
                    continue
                if anchor and full.endswith(".md"):
                    if full not in anchor_cache:
                        anchor_cache[full] = anchors(full)
                    count = anchor_cache[full].get(anchor, 0)
                    if count == 0:
                        problems.append(f"{where}: link to {target}: no heading with anchor #{anchor}")
                    elif count > 1:
                        problems.append(f"{where}: link to {target}: {count} headings have anchor #{anchor}; the link lands on the first")
        commands = list(SCRIPT.finditer(line))
        if fenced and not FENCE.match(line):
            commands += list(FENCED_COMMAND.finditer(line))
        for m in commands:
            script = m.group(1)
            if not re.search(r"\.(sh|py)$", script) or script.startswith(("$", "/")) or "XLA" in script:
                continue
            if script.startswith(".gpu/"):
                name = script[len(".gpu/"):]
                if not any(os.path.exists(os.path.join(root, d, name)) for d in ("ci", "tests/gpu")):
                    problems.append(f"{where}: {script}: ci/gpu.sh stages no {name}")
            elif not os.path.exists(os.path.join(root, here, script)) and not os.path.exists(os.path.join(root, script)):
                problems.append(f"{where}: runs {script}, which does not exist")
        for name in NAME.findall(line):
            if name.endswith("_"):
                if not any(k.startswith(name) for k in known_names):
                    problems.append(f"{where}: {name}*: no such name in the sources")
            elif name not in known_names:
                problems.append(f"{where}: {name}: no such name in the sources")

for p in problems:
    print(p)
print(f"{len(markdown)} Markdown files: {'every link, script and RCB_ name found' if not problems else f'{len(problems)} broken'}")
sys.exit(1 if problems else 0)
