#!/usr/bin/env bash
# The server under a memory limit (BENCHMARKS.md, "a leaner index"): one SQLite file of one
# tenant (`load-0`) served by BINARY in a cgroup-v1 memory group capped at LIMIT_MIB, its
# first recall (the index build) and 300 recalls timed, then whether the kernel killed it.
# Needs root, cgroup v1's memory controller, and the Python stub embedder of bench/peers
# running (`python bench/peers/stub.py PORT`, numpy from .venv-model).
#
#   bench/pressure.sh BINARY LIMIT_MIB SEEDED.db STUB_PORT
#
# SEEDED.db was the load bench's 100k store (`LOAD_ONLY=1x100000w384`), copied with
# sqlite3's backup API while the bench ran.
set -u
bin=$1 limit=$2 seeded=$3 stub=$4
port=$((39100 + RANDOM % 800))
group=/sys/fs/cgroup/memory/mcp-memory-pressure
work=$(mktemp -d)
trap 'rm -rf "$work"; rmdir "$group" 2>/dev/null' EXIT
rmdir "$group" 2>/dev/null; mkdir -p "$group"
echo $((limit << 20)) > "$group/memory.limit_in_bytes"
cp "$seeded" "$work/m.db"
# A cold page cache, as after a restart on a busy machine.
sync; echo 1 > /proc/sys/vm/drop_caches
env -i PATH="$PATH" DATABASE_URL="sqlite:$work/m.db" EMBEDDING_PROVIDER=openai \
  EMBEDDING_BASE_URL="http://127.0.0.1:$stub/v1" EMBEDDING_API_KEY=x EMBEDDING_MODEL=stub-384 \
  EMBEDDING_DIM=384 RECALL_MIN_SIMILARITY=0.2 PORT=$port \
  sh -c "echo \$\$ > $group/cgroup.procs; exec $bin" > "$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.1; done
python3 - "$port" "$pid" <<'PY'
import json, random, sys, time, urllib.request
port, pid = sys.argv[1], sys.argv[2]
def call(query):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "recall", "arguments": {"query": query}}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", body, {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "X-Memory-Tenant": "load-0", "MCP-Protocol-Version": "2025-06-18"})
    began = time.perf_counter()
    answer = urllib.request.urlopen(request, timeout=60).read()
    assert b'"isError":true' not in answer, answer[:300]
    return (time.perf_counter() - began) * 1000
def mib(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024
words = ["deploy", "redis", "cache", "port", "config", "test", "build", "release", "queue",
         "index", "schema", "token"]
random.seed(1)
try:
    print(f"first recall (builds the index) {call('how do we deploy redis'):.0f} ms; "
          f"RssAnon {mib('RssAnon:')} MiB, RssFile {mib('RssFile:')} MiB")
    times = sorted(call(" ".join(random.sample(words, 3))) for _ in range(300))
    print(f"300 recalls: p50 {times[150]:.1f} ms, p99 {times[296]:.1f} ms; "
          f"RssAnon {mib('RssAnon:')} MiB, RssFile {mib('RssFile:')} MiB")
except Exception as e:
    print("failed:", type(e).__name__, str(e)[:200])
PY
echo "$(grep oom_kill "$group/memory.oom_control" | tr '\n' ' ')"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; echo "server exit code: $?"
