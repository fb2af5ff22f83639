#!/usr/bin/env python3
"""What a desktop pays for the in-process model: WINDOWS `mcp-memory stdio` processes on one
SQLite file, started one after another as client windows start them. For each: the time from
start to the answer of `initialize`, and resident memory (now and at peak) after it has
remembered one memory and recalled another's. Prints a table row per process and a summary;
no assertion (BENCHMARKS.md, "Issue 36").

    python3 bench/desktop.py BINARY MODEL_DIR [WINDOWS] [ROUNDS]

ROUNDS repeats the whole start ROUNDS times (default 5) and reports the median start. Standard
library only.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return float("nan")


def ask(proc, message):
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def call(proc, n, tool, arguments):
    answer = ask(proc, {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": tool, "arguments": arguments}})
    return answer["result"]["content"][0]["text"]


def round_(binary, model, windows, data):
    env = dict(os.environ, MEMORY_TENANT="desktop", EMBEDDING_PROVIDER="local",
               EMBEDDING_MODEL=model, DATABASE_URL=f"sqlite:{data}/memory.db")
    procs, starts = [], []
    for w in range(windows):
        started = time.perf_counter()
        proc = subprocess.Popen([binary, "stdio"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        answer = ask(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}})
        assert "result" in answer, answer
        starts.append((time.perf_counter() - started) * 1e3)
        procs.append(proc)
    for w, proc in enumerate(procs):
        stored = call(proc, 1, "remember", {"content": f"window {w} keeps the note {w * 7919}"})
        assert "Stored as" in stored or "already" in stored, stored
    for w, proc in enumerate(procs):
        call(proc, 2, "recall", {"query": f"which note does window {(w + 1) % windows} keep?"})
    memory = [(status(p.pid, "VmRSS:"), status(p.pid, "VmHWM:")) for p in procs]
    for proc in procs:
        proc.stdin.close()
        proc.wait(timeout=30)
    return starts, memory


def main():
    binary, model = sys.argv[1], sys.argv[2]
    windows = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    all_starts, memory = [], None
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as data:
            starts, memory = round_(binary, model, windows, data)
            all_starts.extend(starts)
    for w, (rss, peak) in enumerate(memory):
        print(f"window {w}: resident {rss:.0f} MB, peak {peak:.0f} MB")
    print(f"{os.path.basename(model)}: initialize answered in {statistics.median(all_starts):.0f} ms "
          f"(median of {len(all_starts)}, max {max(all_starts):.0f}); resident per window "
          f"{max(m[0] for m in memory):.0f} MB, peak {max(m[1] for m in memory):.0f} MB; "
          f"{windows} windows {sum(m[0] for m in memory):.0f} MB in all")


if __name__ == "__main__":
    main()
