#!/usr/bin/env python3
"""Validates YAML files against a JSON Schema (draft 2020-12), as an
editor's yaml-language-server or a CI job would: prints one line per error,
`FILE: /json/pointer: message`, and exits 1 if any file has one.

    scripts/check-schema.py docs/reference/config.schema.json deploy/base/config.yaml

`--key K` validates the value under the top-level key K of each file (the
chart's `config:` in values.yaml). Needs python3's jsonschema and PyYAML.
"""
import argparse
import json
import sys

import jsonschema
import yaml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("schema")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--key")
    args = ap.parse_args()
    with open(args.schema) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    bad = 0
    for path in args.files:
        with open(path) as f:
            doc = yaml.safe_load(f)
        if args.key is not None:
            doc = (doc or {}).get(args.key)
        # An empty file is an empty config: every key has its default.
        doc = {} if doc is None else doc
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            pointer = "/" + "/".join(str(p) for p in e.absolute_path)
            print(f"{path}: {pointer}: {e.message}")
            bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
