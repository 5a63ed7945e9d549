#!/usr/bin/env bash
# Fails when a Rust file is compiled by no target, when a file cites
# notes that are not in the repository, or when a dependency is unused.
#
# 1. Every .rs file under src/, tests/, benches/ and examples/ must be in the
#    dep-info of a target the current build produced. A file that no `mod`
#    reaches is never built, so its tests silently never run (issue #21: a
#    `mod` line swallowed by a doc comment). Only the dep-info files of the
#    artifacts this cargo run reports are read, never every *.d in target/:
#    those of older builds linger there and would still list a file that is no
#    longer compiled.
# 2. fuzz/ is a crate of its own (own target dir, built by scripts/fuzz with
#    sanitizer flags, too slow to build here): each of its files must be the
#    root of one of its targets, read from `cargo metadata`.
# 3. No file cites FACTS.md or DESIGN.md unless the repository has it: those
#    notes lived outside the repository; what the code relies on is in
#    docs/upstream-behaviour.md.
# 4. Every dependency of Cargo.toml's [dependencies] is named in src/: one
#    that only tests, benches or examples use is a dev-dependency.
#
# Builds what `cargo test` builds, plus benches: all targets in the test
# profile, so after `cargo test` only the benches compile. Prints every
# problem, exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

msgs=$(mktemp)
trap 'rm -f "$msgs" "$msgs.fuzz"' EXIT
cargo test --locked --no-run --all-targets --message-format=json >"$msgs"
cargo metadata --no-deps --format-version 1 --manifest-path fuzz/Cargo.toml >"$msgs.fuzz"

status=0
"$PYTHON" - "$msgs" "$msgs.fuzz" <<'EOF' || status=1
import json, os, subprocess, sys

root = os.path.realpath(os.getcwd())
msgs, fuzz_meta = sys.argv[1], sys.argv[2]

def rel(path):
    return os.path.relpath(os.path.realpath(os.path.join(root, path)), root)

def dep_info_paths(path):
    """Every path a Makefile-style dep-info file names (`out: dep dep`)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or ":" not in line:
                continue
            # Paths escape spaces as "\ "; split on unescaped spaces only.
            deps = line.split(": ", 1)[1] if ": " in line else ""
            tokens, cur, i = [], "", 0
            while i < len(deps):
                c = deps[i]
                if c == "\\" and i + 1 < len(deps) and deps[i + 1] == " ":
                    cur += " "
                    i += 2
                    continue
                if c.isspace():
                    if cur:
                        tokens.append(cur)
                    cur = ""
                else:
                    cur += c
                i += 1
            if cur:
                tokens.append(cur)
            out.extend(tokens)
    return out

def dep_info_of(filename):
    """The dep-info rustc (or cargo, for an uplifted binary) wrote next to an
    artifact: deps/libremedy-HASH.rlib -> deps/remedy-HASH.d,
    deps/it-HASH -> deps/it-HASH.d, debug/remedy -> debug/remedy.d."""
    d, base = os.path.split(filename)
    stem, ext = os.path.splitext(base)
    if ext in (".rlib", ".rmeta", ".so", ".a", ".dylib"):
        if stem.startswith("lib"):
            stem = stem[3:]
    elif ext not in ("", ".exe", ".dll"):
        stem = base
    own = os.path.join(d, stem + ".d")
    if os.path.exists(own) or not os.path.exists(filename):
        return own
    # Cargo writes debug/remedy.d only for the units a command asked for; a
    # binary built as a dependency of the integration tests (CARGO_BIN_EXE)
    # is uplifted from deps/ without it. The uplifted file is a hard link
    # to (or a copy of) deps/remedy-HASH, whose dep-info rustc did write.
    deps = os.path.join(d, "deps")
    if os.path.isdir(deps):
        for name in os.listdir(deps):
            cand = os.path.join(deps, name)
            if os.path.splitext(name)[1] == "" and os.path.samefile(cand, filename):
                return cand + ".d"
    return own

compiled = set()
artifacts = 0
problems = []
with open(msgs, encoding="utf-8") as f:
    for line in f:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") != "compiler-artifact":
            continue
        manifest = m.get("manifest_path", "")
        if os.path.dirname(os.path.realpath(manifest)) != root:
            continue  # a dependency, not this package
        artifacts += 1
        found = [p for p in map(dep_info_of, m.get("filenames", [])) if os.path.exists(p)]
        if not found:
            problems.append(f"no dep-info found for {m['target']['name']} ({m['filenames']})")
        for d in found:
            compiled.update(rel(p) for p in dep_info_paths(d))

if artifacts == 0:
    problems.append("cargo reported no artifact of this package: nothing was checked")

# Tracked files and new ones not yet added (so a forgotten `mod` shows before
# the commit); files deleted from the work tree are not looked at.
ls = subprocess.run(
    ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.rs"],
    check=True, capture_output=True, text=True,
).stdout.split("\0")
files = sorted({p for p in ls if p and os.path.exists(p)})

orphans = [
    p for p in files
    if p.split("/", 1)[0] in ("src", "tests", "benches", "examples") and p not in compiled
]

with open(fuzz_meta, encoding="utf-8") as f:
    meta = json.load(f)
fuzz_roots = {rel(t["src_path"]) for pkg in meta["packages"] for t in pkg["targets"]}
for p in orphans:
    print(f"check-targets: {p} belongs to no compiled target (no `mod` reaches it?)")
for p in files:
    if p.startswith("fuzz/") and p not in fuzz_roots:
        orphans.append(p)
        print(f"check-targets: {p} is not a target of fuzz/Cargo.toml")
for p in problems:
    print(f"check-targets: {p}")
if orphans or problems:
    sys.exit(1)
print(f"check-targets: {len(files)} .rs files, each compiled by one of "
      f"{artifacts} artifacts or a fuzz target")
EOF

# Citations of notes outside the repository.
cited=0
for note in FACTS.md DESIGN.md; do
  if [[ -z "$(git ls-files -- "$note" "**/$note")" ]]; then
    if git grep -n --untracked -F "$note" -- . ':!scripts/check-targets.sh'; then
      cited=1
    fi
  fi
done
if ((cited)); then
  echo "check-targets: the lines above cite notes not in the repository; cite docs/upstream-behaviour.md or the README instead"
  status=1
else
  echo "check-targets: no citation of notes outside the repository"
fi
# Dependencies of the shipped build that no code of src/ names (issue #38.19:
# anyhow and tower-http were built into every binary for nothing). What only
# tests, benches or examples use is a dev-dependency.
if ! "$PYTHON" - <<'EOF'; then
import glob, re, sys, tomllib

manifest = tomllib.load(open("Cargo.toml", "rb"))
text = "\n".join(open(f, encoding="utf-8").read() for f in glob.glob("src/**/*.rs", recursive=True))
unused = [d for d in manifest["dependencies"]
          if not re.search(r"\b%s\b" % re.escape(d.replace("-", "_")), text)]
for d in unused:
    print(f"check-targets: dependency {d} is named nowhere in src/ (remove it, or make it a dev-dependency)")
sys.exit(1 if unused else 0)
EOF
  status=1
else
  echo "check-targets: every dependency is named in src/"
fi
exit "$status"
