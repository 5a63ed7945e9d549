#!/usr/bin/env python3
"""Writes the JSON schemas kubeconform validates the manifests against.

No schema registry is reachable here, so they are made from the sources the
test cluster is built from, not written by hand:
- built-in kinds: the OpenAPI document of the Kubernetes release the
  apiserver is built from (k8s.io/kubernetes@VERSION/api/openapi-spec/
  swagger.json in the Go module cache), each kind with its references
  inlined, as kubernetes-json-schema's "standalone" flavour;
- custom resources: the openAPIV3Schema of each CRD the cluster installs
  (testenv/bin/crds/default: prometheus-operator, cert-manager, ...).

Files are named {kind}_{group}_{version}.json (kind lower-case; for the
core group kubeconform's .Group is the version, "v1"), for kubeconform's
  -schema-location 'DIR/{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json'

Usage: kube-schemas.py SWAGGER_JSON CRD_DIR OUT_DIR
"""
import json
import os
import sys

import yaml

# Types whose OpenAPI form is a string but whose YAML form may be a number,
# as kubernetes-json-schema (openapi2jsonschema) writes them.
STRING_OR_NUMBER = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "oneOf": [{"type": "string"}, {"type": "integer"}]
    },
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {
        "oneOf": [{"type": "string"}, {"type": "number"}]
    },
}


def inline(node, defs, seen):
    """The schema with every $ref replaced by its definition; a definition
    that refers back to itself (JSONSchemaProps) becomes "anything"."""
    if isinstance(node, list):
        return [inline(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if ref is not None:
        name = ref.rsplit("/", 1)[-1]
        if name in STRING_OR_NUMBER:
            return STRING_OR_NUMBER[name]
        if name in seen:
            return {}
        return inline(defs[name], defs, seen | {name})
    out = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") and key != "x-kubernetes-preserve-unknown-fields":
            continue
        if key == "properties" and isinstance(value, dict):
            # Property names are not schema keywords (JSONSchemaProps has a
            # property called "$ref").
            out[key] = {k: inline(v, defs, seen) for k, v in value.items()}
        else:
            out[key] = inline(value, defs, seen)
    return out


def strict(node):
    """additionalProperties: false wherever properties are listed and unknown
    fields are not kept (kubernetes-json-schema's "-strict" flavour), so a
    misspelt field is a finding, as the apiserver's field validation says."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if (
        isinstance(out.get("properties"), dict)
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


class Loader(yaml.SafeLoader):
    """PyYAML reads a bare `=` (an enum value in prometheus-operator's CRDs)
    as YAML 1.1's "value" tag; it is the string "="."""


Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def write(out_dir, kind, group, version, schema):
    schema = dict(schema)
    schema["$schema"] = "http://json-schema.org/schema#"
    path = os.path.join(out_dir, f"{kind.lower()}_{group or version}_{version}.json")
    with open(path, "w") as f:
        json.dump(schema, f, sort_keys=True)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    swagger, crd_dir, out_dir = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    defs = json.load(open(swagger))["definitions"]
    written = 0
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            # The same List/options kinds appear under many groups; only
            # the definition in the kind's own package is the kind.
            if gvk["kind"] != name.rsplit(".", 1)[-1]:
                continue
            write(out_dir, gvk["kind"], gvk["group"], gvk["version"],
                  strict(inline(schema, defs, {name})))
            written += 1
    for file in sorted(os.listdir(crd_dir)):
        if not file.endswith(".yaml"):
            continue
        for crd in yaml.load_all(open(os.path.join(crd_dir, file)), Loader=Loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for v in spec["versions"]:
                schema = (v.get("schema") or {}).get("openAPIV3Schema")
                if schema is None:
                    continue
                # apiVersion/kind/metadata are checked by the apiserver, not
                # listed in a CRD's schema.
                schema = dict(schema)
                props = dict(schema.get("properties") or {})
                props.setdefault("apiVersion", {"type": "string"})
                props.setdefault("kind", {"type": "string"})
                props.setdefault("metadata", {"type": "object"})
                schema["properties"] = props
                write(out_dir, spec["names"]["kind"], spec["group"], v["name"], strict(schema))
                written += 1
    print(f"{written} schemas in {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
