#!/usr/bin/env python3
"""Fails when the layers docs/architecture.md describes are not what the
code does.

1. Pure layers do no I/O and read no clock: no tokio, reqwest, hyper, axum,
   kube's client (`kube::Client`, `kube::Api`, `kube::api::Api`,
   `kube::runtime`, `kube::client`), std::fs, std::net, `Instant::now`,
   `Utc::now` or `SystemTime::now`, and none of the I/O modules (`daemon`,
   `signals`, `metrics`, `supervise`, `sync`, `cli`). Their `#[cfg(test)]`
   code and `tests.rs` files may.
2. The top-level modules import each other without a cycle (test code left
   out), so each layer can be read knowing only those below it.
3. Each top-level module imports only what the table in
   docs/architecture.md allows.

Prints every problem; exits 1 if there is any.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")

# Pure: folders, and single files of mixed folders.
PURE = ["model", "decide", "remediate", "sim", "record/mod.rs", "record/sync.rs"]

# What each top-level module may import (crate::X). docs/architecture.md has
# the same table; keep them in step.
ALLOWED = {
    "model": set(),
    "config": {"model"},
    "decide": {"config", "model"},
    "remediate": {"model"},
    "sim": {"config", "decide", "model"},
    "metrics": {"config", "model"},
    "sync": set(),
    "supervise": {"sync"},
    "record": {"config", "decide", "metrics", "model"},
    "signals": {"config", "metrics", "model", "record", "supervise", "sync"},
    "daemon": {"config", "decide", "metrics", "model", "record", "remediate",
               "signals", "sim", "supervise", "sync"},
    "cli": {"config", "daemon", "decide", "metrics", "model", "record",
            "remediate", "signals", "sim", "supervise", "sync"},
    # Test fixtures (`#[cfg(test)]` only): builders from any layer.
    "testkit": {"config", "daemon", "decide", "metrics", "model", "record",
                "remediate", "signals", "sim", "supervise", "sync"},
}

FORBIDDEN = [
    (r"\btokio\b", "tokio"),
    (r"\breqwest\b", "reqwest"),
    (r"\bhyper(_util)?\b", "hyper"),
    (r"\baxum\b", "axum"),
    (r"\bkube::(Client|Api|runtime|client)\b", "kube's client"),
    (r"\bkube::api::Api\b", "kube's client"),
    (r"\bstd::(fs|net)\b", "std::fs/std::net"),
    (r"\b(Instant|Utc|SystemTime|Local)::now\s*\(", "a clock"),
    (r"\bcrate::(daemon|signals|metrics|supervise|sync|cli)\b", "an I/O module"),
]


def production(text):
    """The file without its `#[cfg(test)]` module at the end, and without
    comments (a comment may name what the code must not use)."""
    cut = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r"//[^\n]*", "", text)
    return text


def rust_files(rel):
    path = os.path.join(SRC, rel)
    if path.endswith(".rs"):
        return [path]
    return sorted(glob.glob(os.path.join(path, "**", "*.rs"), recursive=True))


def top_of(path):
    rel = os.path.relpath(path, SRC)
    return rel.split(os.sep)[0].removesuffix(".rs")


problems = []

for rel in PURE:
    files = rust_files(rel)
    if not files:
        problems.append(f"pure layer {rel} has no files: update scripts/check-layers.py")
    for f in files:
        if os.path.basename(f) == "tests.rs":
            continue
        text = production(open(f, encoding="utf-8").read())
        for pattern, what in FORBIDDEN:
            for m in re.finditer(pattern, text):
                line = text[: m.start()].count("\n") + 1
                problems.append(
                    f"{os.path.relpath(f, ROOT)}:{line}: pure layer uses {what} ({m.group(0)})"
                )

edges = {}
for f in glob.glob(os.path.join(SRC, "**", "*.rs"), recursive=True):
    top = top_of(f)
    if top in ("lib", "main") or os.path.basename(f) == "tests.rs":
        continue
    text = production(open(f, encoding="utf-8").read())
    for m in re.finditer(r"\bcrate::([a-z_]+)\b", text):
        target = m.group(1)
        module = os.path.isdir(os.path.join(SRC, target)) or os.path.exists(
            os.path.join(SRC, target + ".rs")
        )
        if target == top or not module:
            continue  # itself, or an item of the crate root
        edges.setdefault(top, set()).add(target)
        if target not in ALLOWED.get(top, set()):
            line = text[: m.start()].count("\n") + 1
            problems.append(
                f"{os.path.relpath(f, ROOT)}:{line}: {top} imports {target}, "
                "which docs/architecture.md does not allow"
            )

for top in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
    if top not in ALLOWED:
        problems.append(f"src/{top}: a top-level module with no layer in scripts/check-layers.py")

# A cycle, if any (depth-first search over the import graph).
state = {}


def visit(node, path):
    state[node] = "open"
    for nxt in sorted(edges.get(node, ())):
        if state.get(nxt) == "open":
            cycle = path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            problems.append("import cycle: " + " -> ".join(cycle))
        elif nxt not in state:
            visit(nxt, path + [nxt])
    state[node] = "done"


for node in sorted(edges):
    if node not in state:
        visit(node, [node])

for p in problems:
    print(f"check-layers: {p}")
if problems:
    sys.exit(1)
print(
    f"check-layers: {len(PURE)} pure layers without I/O or clocks; "
    f"{len(edges)} top-level modules import each other without a cycle, as allowed"
)
