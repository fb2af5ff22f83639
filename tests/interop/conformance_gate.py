#!/usr/bin/env python3
"""Judge one conformance run from its checks.json files.

Usage: conformance_gate.py OUTDIR SCENARIO LABEL

The conformance CLI exits 1 whenever any check FAILs, and some checks can only pass
against the suite's own "everything" fixture server (docs/protocol.md#interop-and-conformance). So instead of the
exit code we look at every check: each FAILURE fails the run unless its id is listed
in KNOWN_FIXTURE_FAILURES for this scenario. Ids are matched exactly, so a new or
renamed check can never hide behind the list. REQUIRED_SUCCESS names checks that must
be present and SUCCESS, so a scenario cannot pass by silently not running them.
"""

import glob
import json
import os
import sys

KNOWN_FIXTURE_FAILURES = {
    # These need the fixture's diagnostic tools (test_missing_capability,
    # test_streaming_elicitation, test_logging_tool); a real server lists none of them,
    # so the suite reports "Not testable" or "Server executed 'test_missing_capability'".
    "server-stateless": {
        "sep-2575-server-rejects-undeclared-capability",
        "sep-2575-missing-capability-http-400",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "sep-2575-server-no-log-without-loglevel",
    },
}

REQUIRED_SUCCESS = {
    # Every cacheable result carries ttlMs and cacheScope, and every value is valid.
    "caching": {
        "sep-2549-tools-list-caching-hints",
        "sep-2549-prompts-list-caching-hints",
        "sep-2549-resources-list-caching-hints",
        "sep-2549-resources-templates-list-caching-hints",
        "sep-2549-resources-read-caching-hints",
        "sep-2549-ttl-non-negative",
        "sep-2549-cache-scope-valid",
    },
    "tools-list": {"tools-list"},
    "resources-list": {"resources-list"},
    "prompts-list": {"prompts-list"},
    "sep-2164-resource-not-found": {"sep-2164-error-code"},
}


def short(text, limit: int = 600) -> str:
    # Some messages quote whole JSON-RPC responses; the start says what went wrong.
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit] + " …"


def main() -> int:
    outdir, scenario, label = sys.argv[1:4]
    files = sorted(glob.glob(os.path.join(outdir, "**", "checks.json"), recursive=True))
    checks = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            checks.extend(json.load(fh))
    if not checks:
        print(f"FAIL conformance {label}: no checks.json with checks under {outdir}")
        return 2  # the suite itself did not run: the caller shows its output

    allowed = KNOWN_FIXTURE_FAILURES.get(scenario, set())
    counts = {"SUCCESS": 0, "FAILURE": 0, "WARNING": 0, "SKIPPED": 0, "INFO": 0, "other": 0}
    tolerated, problems = [], []
    status_by_id = {}
    for chk in checks:
        cid, status = chk.get("id"), chk.get("status")
        status_by_id[cid] = status
        if status == "FAILURE" and cid in allowed:
            tolerated.append(cid)
            continue
        counts[status if status in counts else "other"] += 1
        if status == "FAILURE":
            problems.append(f"[{cid}] {chk.get('description', '')}: {short(chk.get('errorMessage'))}")
        elif status == "WARNING":
            print(f"  warning [{cid}] {short(chk.get('errorMessage') or chk.get('description'))}")

    for cid in sorted(REQUIRED_SUCCESS.get(scenario, set())):
        if status_by_id.get(cid) != "SUCCESS":
            problems.append(f"[{cid}] must be SUCCESS, was {status_by_id.get(cid, 'missing')}")

    for line in problems:
        print(f"  FAILED {line}")
    extra = []
    if tolerated:
        extra.append(f"{len(tolerated)} known fixture failures ignored")
    if counts["SKIPPED"]:
        extra.append(f"{counts['SKIPPED']} skipped")
    if counts["WARNING"]:
        extra.append(f"{counts['WARNING']} warnings")
    suffix = f" ({', '.join(extra)})" if extra else ""
    print(f"conformance {label}: {counts['SUCCESS']} passed, {len(problems)} failed{suffix}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
