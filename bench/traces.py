"""What traces cost a recall (BENCHMARKS.md, "Issue 50: traces"): the release binary twice, on
SQLite with e5, once without traces and once sending them to an OTLP/HTTP receiver in this
process, each seeded with the same 200 memories; then rounds that alternate the two servers,
each round 300 recalls one at a time. Prints each round's p50 and p95 per server, and how many
spans the receiver took.

    python3 bench/traces.py BINARY [MODEL_DIR] [ROUNDS]
"""
import json, os, statistics, subprocess, sys, tempfile, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

binary = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else ".models/multilingual-e5-small"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
spans = 0


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        global spans
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        spans += sum(len(s["spans"]) for r in body["resourceSpans"] for s in r["scopeSpans"])
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=receiver.serve_forever, daemon=True).start()
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start(port, traces):
    d = tempfile.mkdtemp()
    env = dict(os.environ, PORT=str(port), DATABASE_URL=f"sqlite:{d}/m.db", EMBEDDING_PROVIDER="local",
               EMBEDDING_MODEL=model)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    if traces:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{receiver.server_port}"
    p = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if opener.open(f"http://127.0.0.1:{port}/health", timeout=5).status == 200:
                return p
        except OSError:
            time.sleep(0.1)
    sys.exit("the server did not start")


def call(port, tool, arguments):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers={
        "Content-Type": "application/json", "X-Memory-Tenant": "bench"})
    return json.load(opener.open(request, timeout=30))


servers = {"off": 19300 + os.getpid() % 300, "on": 19700 + os.getpid() % 300}
processes = [start(port, name == "on") for name, port in servers.items()]
try:
    for port in servers.values():
        for i in range(200):
            call(port, "remember", {"content": f"fact {i}: service {i} deploys from branch release-{i % 17} at {i % 24}:00"})
    results = {name: [] for name in servers}
    for r in range(rounds):
        for name, port in servers.items():
            took = []
            for i in range(300):
                started = time.perf_counter()
                call(port, "recall", {"query": f"when does service {i % 200} deploy?"})
                took.append((time.perf_counter() - started) * 1000)
            took.sort()
            p50, p95 = statistics.median(took), took[int(len(took) * 0.95)]
            results[name].append((p50, p95))
            print(f"round {r + 1} traces {name:3}: p50 {p50:.2f} ms, p95 {p95:.2f} ms", flush=True)
    for name in servers:
        print(f"traces {name:3}: p50 median of rounds {statistics.median(p for p, _ in results[name]):.2f} ms")
finally:
    for p in processes:
        p.terminate()
        p.wait()
print(f"spans received: {spans}")
