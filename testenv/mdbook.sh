#!/usr/bin/env bash
# mdBook, which builds docs/ as a book (docs/book.toml; scripts/check-book.sh
# builds it and checks its links), from its crate, cached outside the clone
# (about 12 min of wall time once here, beside other builds; not timed
# alone) and linked as testenv/bin/mdbook. Only the `search` feature: the
# book is built, never served from here.
set -euo pipefail
cd "$(dirname "$0")"
MDBOOK_VERSION=0.5.4
cache=${REMEDY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/remedy-tools}
dir=$cache/mdbook-$MDBOOK_VERSION
if [[ ! -x $dir/bin/mdbook ]]; then
  echo "   building mdbook $MDBOOK_VERSION (once; cached in $dir)"
  rm -rf "$dir.tmp"
  # Its own target directory: not the tests' (cargo would lock it), removed after.
  CARGO_TARGET_DIR=$dir.build cargo install --locked --quiet mdbook --version "$MDBOOK_VERSION" \
    --no-default-features --features search --root "$dir.tmp"
  rm -rf "$dir" "$dir.build"
  mv "$dir.tmp" "$dir"
fi
mkdir -p bin
ln -sfn "$dir/bin/mdbook" bin/mdbook
