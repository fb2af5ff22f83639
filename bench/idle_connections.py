"""Idle connections against the server (BENCHMARKS.md, "Issue 49: idle connections"): opens N
connections that send nothing or half a header (every other one) and hold them, then 32
clients make 128 `remember` calls. Prints the resident memory before and with the sockets
held, what the server counts (waiting, closed to make room), whether /health answered, and
how many calls were answered. SQLite in a temporary directory, the local model.

    python3 bench/idle_connections.py BINARY N MCP_MAX_IDLE_CONNECTIONS [MODEL_DIR]
"""
import os, socket, subprocess, sys, time, json, urllib.request, tempfile, threading
binary, n, bound = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
d = tempfile.mkdtemp()
port = 18000 + os.getpid() % 1000
env = dict(os.environ, PORT=str(port), DATABASE_URL=f"sqlite:{d}/m.db", EMBEDDING_PROVIDER="local", EMBEDDING_MODEL=sys.argv[4] if len(sys.argv) > 4 else ".models/multilingual-e5-small",
           MCP_HEADER_TIMEOUT_MS="600000", MCP_MAX_IDLE_CONNECTIONS=bound)
p = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
def health():
    try: return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30).status
    except Exception as e: return str(e)
for _ in range(400):
    if health() == 200: break
    time.sleep(0.05)
def rss(): return int([l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split()[1]) // 1024
base = rss()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    if i % 2: s.send(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Ty")
    socks.append(s)
def metric(name):
  try:
    t = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return next((float(l.split()[1]) for l in t.splitlines() if l.startswith(name + " ")), None)
  except Exception: return None
want = min(n, int(bound))
if metric("mcp_memory_connections_waiting") is None: time.sleep(5)
while (metric("mcp_memory_connections_waiting") or want) < want - 2: time.sleep(0.1)
held = rss()
t0 = time.time(); h = health(); hs = time.time() - t0
ok = 0; lock = threading.Lock()
def caller(c):
    global ok
    for k in range(4):
        body = json.dumps({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"remember","arguments":{"content":f"caller {c} call {k} port {8000+c*4+k}"}}}).encode()
        try:
            r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/mcp", body, {"Content-Type":"application/json","Accept":"application/json, text/event-stream","X-Memory-Tenant":"acme"}), timeout=60)
            if r.status == 200 and b"Stored" in r.read():
                with lock: ok += 1
        except Exception as e: pass
ts = [threading.Thread(target=caller, args=(c,)) for c in range(32)]
t1 = time.time(); [t.start() for t in ts]; [t.join() for t in ts]; calls = time.time() - t1
print(json.dumps({"idle_sockets": n, "bound": int(bound), "rss_mib_before": base, "rss_mib_held": held,
  "waiting": metric("mcp_memory_connections_waiting"), "closed_to_make_room": metric("mcp_memory_connections_waiting_closed_total"),
  "health_s": round(hs, 3), "health": h, "calls_answered": ok, "calls_s": round(calls, 2), "rss_mib_after": rss()}))
p.kill()
