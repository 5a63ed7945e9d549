#!/usr/bin/env python3
"""Validate dashboards/remedy.json without Grafana (none is installable here).

Checks the dashboard's identity (uid, title, schemaVersion), that it has exactly
one Prometheus `datasource` variable and that every panel and target uses it,
that every rate()/irate()/increase() window is $__rate_interval, that every
panel sets a unit, and that dashboard variables are only used with regex
matchers (their "All" value is ".*").

On success it prints every panel target as one JSON object per line on stdout,
with variables substituted so the expression is plain PromQL:
  {"panel_id": 2, "panel": "...", "ref_id": "A", "expr": "..."}
Diagnostics go to stderr.

  --promtool          also parse every expression with `promtool check rules`
                      (wrapped as recording rules; promtool has no PromQL-only check);
                      uses $PROMTOOL or promtool on PATH
  --prometheus URL    run every expression as an instant query against URL and fail
                      if any query errors; empty results are reported per panel
  --require-data      with --prometheus: fail on empty results as well

Exit status: 0 ok, 1 a check failed, 2 usage or I/O error.
Python 3 standard library only.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

EXPECTED_UID = "remedy-overview"
EXPECTED_TITLE = "remedy"
EXPECTED_SCHEMA = 39
DATASOURCE_REF = "${datasource}"

# Grafana built-ins with the value used to turn an expression into plain PromQL.
BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
# Dashboard query variables are substituted with their "All" value.
ALL_VALUE = ".*"

# $var, ${var}, ${var:format} and the deprecated [[var]].
VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
RANGE_FUNC_RE = re.compile(r"\b(rate|irate|increase)\s*\(")
RANGE_RE = re.compile(r"\[([^\]]*)\]")
# A label matcher whose value contains a variable: label op "…$var…".
MATCHER_RE = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, msg):
        self.items.append(f"{where}: {msg}")


def iter_panels(panels):
    """Yield every panel, including those nested in (collapsed) rows."""
    for p in panels or []:
        yield p
        yield from iter_panels(p.get("panels"))


def panel_where(p):
    return f'panel {p.get("id")} "{p.get("title", "")}"'


def datasource_uid(ds):
    if isinstance(ds, dict):
        return ds.get("uid")
    return ds  # legacy string form


def call_argument(expr, open_paren):
    """Return the text between the parenthesis at open_paren and its match."""
    depth = 0
    for i in range(open_paren, len(expr)):
        if expr[i] == "(":
            depth += 1
        elif expr[i] == ")":
            depth -= 1
            if depth == 0:
                return expr[open_paren + 1 : i]
    return None


def check_rate_windows(expr, where, problems):
    for m in RANGE_FUNC_RE.finditer(expr):
        arg = call_argument(expr, m.end() - 1)
        if arg is None:
            problems.add(where, f"unbalanced parentheses after {m.group(1)}(")
            continue
        ranges = RANGE_RE.findall(arg)
        if not ranges:
            problems.add(where, f"{m.group(1)}() without a range selector")
        for r in ranges:
            if r.strip() != "$__rate_interval":
                problems.add(where, f"{m.group(1)}() window [{r}] must be [$__rate_interval]")


# Every selector names its target: several remedy deployments (clusters,
# jobs, replicas) can share one Prometheus. The variable's own query may
# only filter on the variables before it.
SCOPE = (("cluster", '"$cluster"'), ("job", '"$job"'), ("instance", '"$instance"'))
SELECTOR_RE = re.compile(r"\b(remedy_\w+|up)\b(?!\s*\()(\{[^}]*\})?")


def check_scope(expr, where, problems, scope=SCOPE):
    for m in SELECTOR_RE.finditer(expr):
        inner = m.group(2) or ""
        for label, value in scope:
            if f"{label}=~{value}" not in inner:
                problems.add(where, f"{m.group(0)} has no {label}=~{value} matcher")


def substitute(expr, variables, where, problems):
    """Replace variables with values that make the expression plain PromQL."""
    for m in MATCHER_RE.finditer(expr):
        label, op, value = m.groups()
        used = [a or b or c for a, b, c in VAR_RE.findall(value)]
        if any(v in variables for v in used) and op not in ("=~", "!~"):
            problems.add(where, f'{label}{op}"{value}": dashboard variables need =~ or !~ (All is ".*")')

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in variables:
            return variables[name]
        problems.add(where, f"unknown variable ${name}")
        return m.group(0)

    return VAR_RE.sub(repl, expr)


def check_dashboard(dash, problems):
    """Check the dashboard; return the list of targets to print."""
    if dash.get("uid") != EXPECTED_UID:
        problems.add("dashboard", f'uid is {dash.get("uid")!r}, want {EXPECTED_UID!r}')
    if dash.get("title") != EXPECTED_TITLE:
        problems.add("dashboard", f'title is {dash.get("title")!r}, want {EXPECTED_TITLE!r}')
    if dash.get("schemaVersion") != EXPECTED_SCHEMA:
        problems.add("dashboard", f'schemaVersion is {dash.get("schemaVersion")!r}, want {EXPECTED_SCHEMA}')

    variables = (dash.get("templating") or {}).get("list") or []
    ds_vars = [v for v in variables if v.get("type") == "datasource"]
    if len(ds_vars) != 1:
        problems.add("templating", f"want exactly one datasource variable, found {len(ds_vars)}")
    for v in ds_vars:
        if v.get("name") != "datasource" or v.get("query") != "prometheus":
            problems.add("templating", f'datasource variable must be name "datasource", query "prometheus"; '
                                       f'got name {v.get("name")!r}, query {v.get("query")!r}')
    if dash.get("editable") is not False:
        problems.add("dashboard", "editable must be false (provisioned: edits would be lost)")
    names = [v.get("name") for v in variables if v.get("type") == "query"]
    if names[:3] != ["cluster", "job", "instance"]:
        problems.add("templating", f"want query variables cluster, job, instance first; got {names}")
    # Substituted value: "All" (.*) where offered, else the default.
    query_vars = {}
    for i, v in enumerate(variables):
        if v.get("type") != "query":
            continue
        where = f'variable {v.get("name")}'
        current = (v.get("current") or {}).get("value")
        if v.get("includeAll"):
            query_vars[v.get("name")] = ALL_VALUE
        elif isinstance(current, str) and current:
            query_vars[v.get("name")] = current
        else:
            problems.add(where, "no All and no current value")
        name = v.get("name")
        scope_names = [s[0] for s in SCOPE]
        own = SCOPE[: scope_names.index(name)] if name in scope_names else SCOPE
        if datasource_uid(v.get("datasource")) != DATASOURCE_REF:
            problems.add(where, f"datasource must be {DATASOURCE_REF}")
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if not isinstance(q, str) or not re.fullmatch(r"label_values\(.+,\s*\w+\s*\)", q.strip()):
            problems.add(where, f"query {q!r} is not label_values(<selector>, <label>)")
        else:
            check_scope(q, where, problems, own)
        if v.get("includeAll") and v.get("allValue") != ALL_VALUE:
            problems.add(where, f'includeAll needs allValue "{ALL_VALUE}" so new values match')

    targets = []
    seen_ids = set()
    panels = list(iter_panels(dash.get("panels")))
    if not panels:
        problems.add("dashboard", "no panels")
    for p in panels:
        where = panel_where(p)
        if p.get("id") in seen_ids:
            problems.add(where, "duplicate panel id")
        seen_ids.add(p.get("id"))
        if "gridPos" not in p:
            problems.add(where, "no gridPos")
        if p.get("type") == "row":
            continue
        if datasource_uid(p.get("datasource")) != DATASOURCE_REF:
            problems.add(where, f"datasource must be {DATASOURCE_REF}")
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        if not unit:
            problems.add(where, "fieldConfig.defaults.unit is not set")
        if not p.get("targets"):
            problems.add(where, "no targets")
        for t in p.get("targets") or []:
            twhere = f'{where} target {t.get("refId")}'
            if "datasource" in t and datasource_uid(t["datasource"]) != DATASOURCE_REF:
                problems.add(twhere, f"datasource must be {DATASOURCE_REF}")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                problems.add(twhere, "empty expr")
                continue
            check_rate_windows(expr, twhere, problems)
            check_scope(expr, twhere, problems)
            targets.append({
                "panel_id": p.get("id"),
                "panel": p.get("title", ""),
                "ref_id": t.get("refId"),
                "expr": substitute(expr, query_vars, twhere, problems),
            })
    return targets


def promtool_parse(promtool, targets, problems):
    """Parse every expression with promtool by wrapping them as recording rules."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:target_{i}", "expr": t["expr"]} for i, t in enumerate(targets)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".rules.json", delete=False) as f:
        json.dump(rules, f)  # JSON is YAML, which promtool reads
        path = f.name
    try:
        res = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    except OSError as e:
        print(f"error: cannot run {promtool}: {e}", file=sys.stderr)
        sys.exit(2)
    finally:
        os.unlink(path)
    if res.returncode != 0:
        out = (res.stdout + res.stderr).strip()
        # promtool names failing rules by index; map them back to panels.
        for m in re.finditer(r"rule (\d+)", out):
            i = int(m.group(1)) - 1  # promtool counts from 1
            if 0 <= i < len(targets):
                t = targets[i]
                problems.add(f'panel {t["panel_id"]} "{t["panel"]}" target {t["ref_id"]}',
                             f'promtool cannot parse {t["expr"]!r}')
        problems.add("promtool", out.replace("\n", " | "))
    else:
        print(f"promtool: {len(targets)} expressions parse", file=sys.stderr)


def query_prometheus(base, targets, require_data, problems):
    empty = 0
    for t in targets:
        where = f'panel {t["panel_id"]} "{t["panel"]}" target {t["ref_id"]}'
        url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": t["expr"]})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                body = json.load(e)
            except ValueError:
                problems.add(where, f"HTTP {e.code} from Prometheus")
                continue
        except (urllib.error.URLError, OSError, ValueError) as e:
            print(f"error: cannot query {base}: {e}", file=sys.stderr)
            sys.exit(2)
        if body.get("status") != "success":
            problems.add(where, f'query failed: {body.get("errorType")}: {body.get("error")} (expr {t["expr"]!r})')
            continue
        if not body.get("data", {}).get("result"):
            empty += 1
            msg = f"{where}: empty result"
            if require_data:
                problems.add(where, "empty result (--require-data)")
            else:
                print(msg, file=sys.stderr)
    print(f"prometheus: {len(targets)} queries ran, {empty} empty", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dashboard", nargs="?",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dashboards", "remedy.json"))
    ap.add_argument("--promtool", action="store_true",
                    help="parse every expression with promtool ($PROMTOOL or promtool on PATH)")
    ap.add_argument("--prometheus", metavar="URL", help="run every expression against this Prometheus")
    ap.add_argument("--require-data", action="store_true", help="with --prometheus, fail on empty results")
    args = ap.parse_args()
    if args.require_data and not args.prometheus:
        ap.error("--require-data needs --prometheus")

    try:
        with open(args.dashboard) as f:
            dash = json.load(f)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"error: {args.dashboard} is not valid JSON: {e}", file=sys.stderr)
        return 1

    problems = Problems()
    targets = check_dashboard(dash, problems)
    if not problems.items and args.promtool:
        promtool_parse(os.environ.get("PROMTOOL", "promtool"), targets, problems)
    if not problems.items and args.prometheus:
        query_prometheus(args.prometheus, targets, args.require_data, problems)

    if problems.items:
        for p in problems.items:
            print(f"FAIL {p}", file=sys.stderr)
        print(f"{args.dashboard}: {len(problems.items)} problem(s)", file=sys.stderr)
        return 1
    for t in targets:
        print(json.dumps(t))
    print(f"{args.dashboard}: ok, {len(targets)} targets", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
