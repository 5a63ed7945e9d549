#!/usr/bin/env bash
# The book of docs/ (docs/book.toml): builds it with mdBook into
# target/book, failing on any error or warning mdBook prints, and checks
# every internal link and anchor of the book and the README, which mdBook
# does not (scripts/check-links.py, with its self-test first).
# MDBOOK names the binary; default testenv/bin/mdbook (testenv/mdbook.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK=${MDBOOK:-testenv/bin/mdbook}
python3 scripts/check-links.py --self-test
python3 scripts/check-links.py
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$MDBOOK" build docs 2>&1 | tee "$log"
if grep -E '\b(WARN|ERROR)\b' "$log" >/dev/null; then
  echo "check-book: mdbook warned (above)" >&2
  exit 1
fi
test -f target/book/index.html
echo "check-book: the book built into target/book ($(find target/book -name '*.html' | wc -l) pages)"
