#!/usr/bin/env python3
"""Fails when the layers docs/architecture.md describes are not what the
code does.

1. Pure layers do no I/O and read no clock: no tokio, reqwest, hyper, axum,
   kube's client (`kube::Client`, `kube::Api`, `kube::api::Api`,
   `kube::runtime`, `kube::client`), std::fs, std::net, `Instant::now`,
   `Utc::now` or `SystemTime::now`, and no module that is not pure itself
   (or `config`), however it is named: `crate::`, `super::`, `self::` or a
   child module's name. Their `#[cfg(test)]` code and `tests.rs` files may.
2. The top-level modules, and the crate root (`lib.rs`, which declares
   them and imports none), import each other without a cycle (test code left
   out), so each layer can be read knowing only those below it.
3. Each top-level module imports only what the table in
   docs/architecture.md allows.
4. One rule for poisoned locks (src/sync.rs): production code takes a std
   lock with `locked()`, `read_locked()` or `write_locked()`, which exit
   the process when it is poisoned; it never handles the lock's result
   itself (`.lock().unwrap_or_else(PoisonError::into_inner)`, `.ok()`,
   `.unwrap()`, ...) and never names `PoisonError`. src/sync.rs aside.

Test code is left out of every rule: `#[cfg(test)]` items, `tests.rs`
files and the files of modules declared under `#[cfg(test)]`. Paths are
resolved to the file of the module they name, so a pure file's
`use super::io::X` is caught when `super::io` is an I/O module.

Prints every problem; exits 1 if there is any. `--self-test` runs the
checker on small trees of its own instead and fails if it misses a hole.
"""
import glob
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Pure: folders, and single files of mixed folders (relative to src/).
PURE = ["lib.rs", "model", "decide", "remediate", "sim", "record/mod.rs", "record/sync.rs"]
# Not pure (it reads its file) but below the pure layers that use it.
PURE_MAY_USE = ["config.rs"]

# What each top-level module may import (crate::X). docs/architecture.md has
# the same table; keep them in step. `lib` is the crate root: every module
# may use its items, and it imports nothing.
ALLOWED = {
    "lib": set(),
    "model": set(),
    "config": {"model"},
    "decide": {"config", "model"},
    "remediate": {"model"},
    "sim": {"config", "decide", "model"},
    "metrics": {"config", "model", "sync"},
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

# Where the poisoned-lock rule lives; the only file that handles a lock's
# result itself.
LOCK_HOME = "sync.rs"
# A std lock's result handled in place instead of by src/sync.rs.
LOCK_RESULT = re.compile(
    r"\.(lock|read|write)\(\)\s*\.\s*(unwrap\w*|expect|ok|err|map\w*|is_ok|is_err|into_inner)\b"
    r"|\bPoisonError\b"
)

FORBIDDEN = [
    (r"\btokio\b", "tokio"),
    (r"\breqwest\b", "reqwest"),
    (r"\bhyper(_util)?\b", "hyper"),
    (r"\baxum\b", "axum"),
    (r"\bkube::(Client|Api|runtime|client)\b", "kube's client"),
    (r"\bkube::api::Api\b", "kube's client"),
    (r"\bstd::(fs|net)\b", "std::fs/std::net"),
    (r"\b(Instant|Utc|SystemTime|Local)::now\s*\(", "a clock"),
]


def blank(s):
    """`s` with every character but newlines made a space: positions and
    line numbers stay."""
    return re.sub(r"[^\n]", " ", s)


def strip(text):
    """The code without comments and without the contents of string and
    character literals (a comment or a message may name what the code must
    not use), positions kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = text.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + blank(text[i + 2 : end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + blank(text[i + 2 : j + 1]))
            i = j + 1
        elif c == "'" and (m := re.compile(r"'(\\.[^']*|[^'\\\n])'").match(text, i)):
            out.append("' '" + blank(text[i + 3 : m.end()]))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching(text, start):
    """The index after the brace that closes the one at `start`."""
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def item_end(text, start):
    """The end of the item that begins at `start`: its `;` or its block."""
    m = re.compile(r"[;{]").search(text, start)
    if not m:
        return len(text)
    return m.end() if m.group(0) == ";" else matching(text, m.start())


def production(text):
    """Stripped code without the items `#[cfg(test)]` marks (a test module,
    a helper for tests), positions kept."""
    text = strip(text)
    for m in reversed(list(re.finditer(r"#\[cfg\(test\)\]", text))):
        end = item_end(text, m.end())
        text = text[: m.start()] + blank(text[m.start() : end]) + text[end:]
    return text


def module_of(src, path):
    """The module path of a file: src/record/sync.rs is ["record", "sync"]."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod" or rel == ["lib"]:
        rel = rel[:-1]
    return rel


def file_of(src, segments):
    """The file of the longest prefix of `segments` that is a module file,
    relative to src (lib.rs for the crate root)."""
    for k in range(len(segments), 0, -1):
        base = os.path.join(src, *segments[:k])
        for cand in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.exists(cand):
                return os.path.relpath(cand, src)
    return "lib.rs"


def top_of_file(rel):
    parts = rel.split(os.sep)
    return "lib" if parts == ["lib.rs"] else parts[0].removesuffix(".rs")


def inline_modules(text):
    """(start, end, name) of every `mod name { ... }` in the text."""
    spans = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        spans.append((m.end() - 1, matching(text, m.end() - 1), m.group(1)))
    return spans


def expand(tree):
    """The paths of a use tree: `a::{b, c::{d, e}}` is a::b, a::c::d,
    a::c::e (renames and globs kept as the last segment)."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand(prefix + part)]


def paths(text, children):
    """(position, path) of each path in the code that may name a module of
    the crate: every path of a `use`, and `crate::`, `super::`, `self::` or
    a child module's name followed by `::` elsewhere."""
    found = []
    for m in re.finditer(r"\buse\s+([^;]*);", text):
        for p in expand(m.group(1)):
            found.append((m.start(), p.split(" as ")[0]))
        text = text[: m.start()] + blank(m.group(0)) + text[m.end() :]
    heads = ["crate", "super", "self"] + sorted(children)
    pattern = r"(?<![\w:])(?:" + "|".join(map(re.escape, heads)) + r")(?:::\w+)+"
    for m in re.finditer(pattern, text):
        found.append((m.start(), m.group(0)))
    return found


def resolve(path, here, children):
    """The segments a path names from the crate root, or None when it names
    another crate (std, kube, ...)."""
    segs = [s for s in re.split(r"::", path.lstrip(":")) if s]
    if not segs:
        return None
    if segs[0] in ("crate", "$crate"):
        return segs[1:]
    if segs[0] in ("super", "self"):
        cur = list(here)
        while segs and segs[0] in ("super", "self"):
            if segs.pop(0) == "super":
                if not cur:
                    return None
                cur.pop()
        return cur + segs
    if segs[0] in children:
        return list(here) + segs
    return None


def test_only_files(src, files):
    """The files of modules declared under `#[cfg(test)]` (`mod x;`), and
    every file below them."""
    roots = set()
    for f in files:
        text = strip(open(f, encoding="utf-8").read())
        decl = r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;"
        for name in re.findall(decl, text):
            base = os.path.basename(f)
            here = os.path.dirname(f) if base in ("mod.rs", "lib.rs") else f[: -len(".rs")]
            roots.add(os.path.join(here, name))
    return {
        f for f in files
        if any(f == r + ".rs" or f.startswith(r + os.sep) for r in roots)
    }


def pure_unit(rel, pure):
    for p in pure:
        if rel == p or (not p.endswith(".rs") and rel.startswith(p + os.sep)):
            return True
    return False


def check(src, pure=PURE, pure_may_use=PURE_MAY_USE, allowed=ALLOWED, lock_home=LOCK_HOME):
    """Every problem of the tree under `src`, as strings, and the import
    graph of its top-level modules."""
    problems = []
    edges = {}
    files = sorted(glob.glob(os.path.join(src, "**", "*.rs"), recursive=True))
    tests = test_only_files(src, files)
    for p in pure:
        if not any(pure_unit(os.path.relpath(f, src), [p]) for f in files):
            problems.append(f"pure layer {p} has no files: update scripts/check-layers.py")
    for f in files:
        rel = os.path.relpath(f, src)
        if rel == "main.rs" or os.path.basename(f) == "tests.rs" or f in tests:
            continue
        raw = open(f, encoding="utf-8").read()
        text = production(raw)
        is_pure = pure_unit(rel, pure)
        shown = os.path.relpath(f, os.path.dirname(src))

        def at(pos):
            return f"{shown}:{text[:pos].count(chr(10)) + 1}"

        if is_pure:
            for pattern, what in FORBIDDEN:
                for m in re.finditer(pattern, text):
                    problems.append(f"{at(m.start())}: pure layer uses {what} ({m.group(0)})")
        if rel != lock_home:
            for m in LOCK_RESULT.finditer(text):
                code = re.sub(r"\s+", "", m.group(0))
                problems.append(
                    f"{at(m.start())}: a lock's poisoning handled in place ({code}): "
                    "use locked(), read_locked() or write_locked() (src/sync.rs)"
                )
        here = module_of(src, f)
        # Child modules declared in this file (`mod x;`), named without a prefix.
        children = set(re.findall(r"\bmod\s+(\w+)\s*;", text))
        spans = inline_modules(text)
        top = top_of_file(rel)
        for pos, path in paths(text, children):
            inner = [name for (s, e, name) in spans if s < pos < e]
            segs = resolve(path, here + inner, children if not inner else set())
            if segs is None:
                continue
            target = file_of(src, segs)
            if is_pure and not pure_unit(target, pure) and target not in pure_may_use:
                problems.append(
                    f"{at(pos)}: pure layer uses an I/O module ({path}: src/{target})"
                )
            ttop = top_of_file(target)
            if ttop == top or ttop == "lib":
                continue  # itself, or an item of the crate root
            edges.setdefault(top, set()).add(ttop)
            if ttop not in allowed.get(top, set()):
                problems.append(
                    f"{at(pos)}: {top} imports {ttop} ({path}), "
                    "which docs/architecture.md does not allow"
                )

    for top in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if top not in allowed:
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
    return problems, edges


# --self-test: trees that must pass, and holes that must each be caught.
SELF_PURE = ["lib.rs", "core", "rec/mod.rs", "rec/sync.rs"]
SELF_ALLOWED = {"lib": set(), "core": set(), "rec": {"core"}, "io": {"core", "rec", "sync"},
                "sync": set()}
SELF_BASE = {
    "lib.rs": "pub mod core;\npub mod io;\npub mod rec;\npub const NAME: &str = \"x\";\n",
    "core/mod.rs": "pub mod a;\npub use a::A;\n",
    "core/a.rs": "pub struct A;\n",
    "rec/mod.rs": "pub mod cm;\npub mod sync;\nuse crate::core::A;\npub struct Doc(pub A);\n",
    "rec/sync.rs": (
        "use super::Doc;\nuse crate::NAME;\n"
        "// super::cm::read() in a comment\n"
        "pub fn f(d: &Doc) -> &'static str { let _ = '{'; let _ = \"super::cm::x\"; NAME }\n"
        "#[cfg(test)]\nfn helper() { super::cm::read(); }\n"
        "pub fn g() {}\n"
        "#[cfg(test)]\nmod tests {\n    use super::super::cm::*;\n}\n"
    ),
    "rec/cm.rs": "use super::Doc;\nuse std::fs;\npub fn read() -> Option<Doc> { let _ = fs::read(\"\"); None }\n",
    "io/mod.rs": (
        "use crate::rec::cm::read;\nuse crate::NAME;\nuse crate::sync::LockExt;\n"
        "pub fn run(m: &std::sync::Mutex<u8>) -> u8 { let _ = (read(), NAME); *m.locked() }\n"
        "#[cfg(test)]\nmod helpers;\n"
        "#[cfg(test)]\nfn t(m: &std::sync::Mutex<u8>) { let _ = m.lock().unwrap(); }\n"
    ),
    "io/helpers.rs": "pub fn h(m: &std::sync::RwLock<u8>) -> u8 { *m.read().unwrap() }\n",
    "sync.rs": (
        "use std::sync::{Mutex, MutexGuard, PoisonError};\n"
        "pub trait LockExt<T> { fn locked(&self) -> MutexGuard<'_, T>; }\n"
        "impl<T> LockExt<T> for Mutex<T> {\n"
        "    fn locked(&self) -> MutexGuard<'_, T> { self.lock().unwrap_or_else(|_: PoisonError<_>| std::process::exit(70)) }\n"
        "}\n"
    ),
}
SELF_HOLES = [
    ("a pure file's super:: import of an I/O module",
     {"rec/sync.rs": "use super::cm::read;\n"}, "rec/sync.rs:1: pure layer uses an I/O module"),
    ("a super:: import in a use group",
     {"rec/sync.rs": "use super::{Doc, cm::{read}};\n"}, "rec/sync.rs:1: pure layer uses an I/O module"),
    ("a super:: path in an expression",
     {"rec/sync.rs": "pub fn f() {\n    let _ = super::cm::read();\n}\n"},
     "rec/sync.rs:2: pure layer uses an I/O module"),
    ("super::super:: out of a pure folder",
     {"core/a.rs": "use super::super::io::run;\n"}, "core/a.rs:1: pure layer uses an I/O module"),
    ("a pure mod.rs naming its I/O child",
     {"rec/mod.rs": "pub mod cm;\npub mod sync;\npub fn f() { cm::read(); }\n"},
     "rec/mod.rs:3: pure layer uses an I/O module"),
    ("crate:: into an I/O module",
     {"core/a.rs": "use crate::rec::cm;\n"}, "core/a.rs:1: pure layer uses an I/O module"),
    ("the crate root importing a layer",
     {"lib.rs": "pub mod core;\npub mod io;\npub mod rec;\npub fn f() { io::run(); }\n"},
     "lib.rs:4: lib imports io"),
    ("a layer the table does not allow",
     {"core/a.rs": "use crate::rec::Doc;\n"}, "core/a.rs:1: core imports rec"),
    ("a clock in a pure layer",
     {"core/a.rs": "pub fn t() { let _ = std::time::Instant::now(); }\n"}, "pure layer uses a clock"),
    ("an import cycle",
     {"core/a.rs": "use crate::rec::Doc;\n"}, "import cycle: core -> rec -> core"),
    ("a poisoned lock taken over",
     {"io/mod.rs": "pub fn f(m: &std::sync::Mutex<u8>) {\n    let _g = m\n        .lock()\n        .unwrap_or_else(std::sync::PoisonError::into_inner);\n}\n"},
     "io/mod.rs:3: a lock's poisoning handled in place"),
    ("a lock's result dropped with ok()",
     {"io/mod.rs": "pub fn f(l: &std::sync::RwLock<u8>) -> Option<u8> { l.read().ok().map(|g| *g) }\n"},
     "io/mod.rs:1: a lock's poisoning handled in place (.read().ok)"),
]


def self_test():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        def tree(changes):
            src = os.path.join(tmp, f"t{len(os.listdir(tmp))}", "src")
            for rel, body in {**SELF_BASE, **changes}.items():
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                with open(os.path.join(src, rel), "w", encoding="utf-8") as out:
                    out.write(body)
            return check(src, SELF_PURE, [], SELF_ALLOWED)[0]

        clean = tree({})
        if clean:
            failures.append(f"the clean tree has problems: {clean}")
        for what, changes, expect in SELF_HOLES:
            got = tree(changes)
            if not any(expect in p for p in got):
                failures.append(f"missed {what} (expected {expect!r}, got {got})")
    for f in failures:
        print(f"check-layers --self-test: {f}")
    if failures:
        sys.exit(1)
    print(f"check-layers --self-test: a clean tree passes, {len(SELF_HOLES)} holes caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    problems, edges = check(os.path.join(ROOT, "src"))
    for p in problems:
        print(f"check-layers: {p}")
    if problems:
        sys.exit(1)
    print(
        f"check-layers: {len(PURE)} pure layers without I/O or clocks; "
        f"{len(edges)} top-level modules import each other without a cycle, as allowed"
    )


if __name__ == "__main__":
    main()
