#!/usr/bin/env python3
"""Fails on a broken internal link or anchor in the Markdown of the book
(docs/, built by mdBook: docs/book.toml) and the README.

For every link `[text](target)` and image `![alt](target)` outside code:
- a relative target must exist, relative to the file;
- a link from a page of the book must stay inside docs/: mdBook publishes
  only that folder, so a link to ../src or ../deploy would be broken on the
  published book (name such files in `code` instead);
- `#anchor` (alone or after a Markdown file) must be the id of a heading of
  that file, as mdBook makes it (lowercase; letters, digits, `-` and `_`
  kept, whitespace to `-`, the rest dropped; a repeated id gets -1, -2...);
- every page of the book is listed in docs/SUMMARY.md (mdBook renders only
  those), and every SUMMARY entry exists (an empty target `()` is a draft
  chapter mdBook shows unlinked).
mdBook checks none of this. Links to other sites (`scheme:`) are not
followed. Prints every problem; exits 1 if there is any. `--self-test`
runs the checker on a small tree of its own and fails if it misses one.
"""
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def strip_code(line):
    """The line without its `code spans` (links in them are text)."""
    return re.sub(r"(`+)(.+?)\1", "", line)


def prose_lines(text):
    """(line number, line) outside fenced code blocks and HTML comments."""
    fenced = False
    comment = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if comment:
            if "-->" in line:
                comment = False
                line = line.split("-->", 1)[1]
            else:
                continue
        if "<!--" in line:
            before, _, after = line.partition("<!--")
            if "-->" not in after:
                comment = True
            line = before + after.split("-->", 1)[-1] if "-->" in after else before
        yield n, line


def heading_text(raw):
    """A heading's text as rendered: no code ticks, emphasis or link targets."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    t = re.sub(r"<[^>]+>", "", t)
    t = t.replace("`", "")
    t = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", t)
    return t.strip()


def slug(text):
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower())
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    if path not in cache:
        ids = set()
        seen = {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line in prose_lines(text):
            m = HEADING.match(line)
            if m:
                base = slug(heading_text(m.group(2)))
                k = seen.get(base, 0)
                seen[base] = k + 1
                ids.add(base if k == 0 else f"{base}-{k}")
            for a in re.findall(r"""<a\s+(?:name|id)=["']([^"']+)["']""", line):
                ids.add(a)
        cache[path] = ids
    return cache[path]


def links(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        for m in LINK.finditer(strip_code(line)):
            yield n, m.group(3)


def check(root):
    docs = os.path.join(root, "docs")
    problems = []
    pages = [os.path.join(root, "README.md")]
    for d, _, files in os.walk(docs):
        pages += [os.path.join(d, f) for f in files if f.endswith(".md")]
    for page in sorted(pages):
        in_book = os.path.commonpath([page, docs]) == docs
        rel = os.path.relpath(page, root)
        for n, target in links(page):
            where = f"{rel}:{n}: {target}"
            if target == "":
                if os.path.basename(page) != "SUMMARY.md":
                    problems.append(f"{where}: empty link")
                continue
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file")
                continue
            if in_book and os.path.commonpath([dest, docs]) != docs:
                problems.append(f"{where}: outside docs/, not in the published book (name it in `code`)")
                continue
            if anchor:
                if not dest.endswith(".md"):
                    problems.append(f"{where}: anchor into a file that is not Markdown")
                elif anchor not in anchors(dest):
                    problems.append(f"{where}: no heading with id {anchor!r} in {os.path.relpath(dest, root)}")
    summary = os.path.join(docs, "SUMMARY.md")
    if os.path.exists(summary):
        listed = set()
        for _, target in links(summary):
            if target:
                listed.add(os.path.normpath(os.path.join(docs, target.partition("#")[0])))
        for page in pages:
            if (os.path.commonpath([page, docs]) == docs and page != summary
                    and os.path.normpath(page) not in listed):
                problems.append(f"{os.path.relpath(page, root)}: not in docs/SUMMARY.md, so not in the book")
    return problems, len(pages)


def self_test():
    files = {
        "README.md": "[ok](docs/a.md#first-heading) [bad anchor](docs/a.md#nope) [gone](docs/gone.md)\n"
                     "`[in code](docs/gone.md)` [repo file](src/x.rs) <https://example.com>\n",
        "src/x.rs": "",
        "docs/SUMMARY.md": "# Summary\n\n- [A](a.md)\n- [Draft]()\n",
        "docs/a.md": "# First heading\n\n## It's `code`, v0.15.0-beta.0!\n\n## Dup\n\n## Dup\n\n"
                     "[self](#its-code-v0150-beta0) [dup](#dup-1) [nodup](#dup-2) [out](../src/x.rs)\n"
                     "```\n[fenced](nowhere.md)\n```\n<!-- [commented](nowhere.md) -->\n![img](pic.svg)\n",
        "docs/pic.svg": "<svg/>",
        "docs/orphan.md": "# Orphan\n",
    }
    with tempfile.TemporaryDirectory() as t:
        for p, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(t, p)), exist_ok=True)
            with open(os.path.join(t, p), "w") as f:
                f.write(text)
        problems, _ = check(t)
    want = [
        "README.md:1: docs/a.md#nope: no heading with id 'nope'",
        "README.md:1: docs/gone.md: no such file",
        "docs/a.md:9: #dup-2: no heading with id 'dup-2'",
        "docs/a.md:9: ../src/x.rs: outside docs/",
        "docs/orphan.md: not in docs/SUMMARY.md",
    ]
    missed = [w for w in want if not any(p.startswith(w) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(w) for w in want)]
    if missed or extra:
        print(f"check-links self-test: missed {missed}, wrongly reported {extra}")
        sys.exit(1)
    print(f"check-links self-test: all {len(want)} planted problems found, nothing else")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    problems, n = check(ROOT)
    for p in problems:
        print(p)
    if problems:
        print(f"check-links: {len(problems)} broken links in {n} Markdown files")
        sys.exit(1)
    print(f"check-links: {n} Markdown files, every internal link and anchor resolves")


if __name__ == "__main__":
    main()
