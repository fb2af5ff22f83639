"""Issue 21, item 1: this server side by side with two peers, over loopback HTTP, with the load
benchmark's corpus, query mix and zero-latency stub embedder (bench/load, ported to corpus.py
and stub.py).

    run.py seed     [--systems A,B] [--sizes 1000,10000]      untimed: run it under nice -n 19
    run.py measure  [--systems A,B] [--sizes ...] [--rounds 3] [--lock /tmp/machine.lock]
    run.py all      seed, then measure, at one priority (`make bench-peers` runs the two apart)
    run.py table    the tables again, from bench/results/peers.json

Systems: mcp-memory-sqlite, mcp-memory-postgres (needs TEST_DATABASE_URL, as
scripts/with-postgres.sh exports it), mcp-memory-service (12.4.0, SQLite-vec, hybrid search,
its MCP endpoint), mem0 (2.2.1, OSS Memory with infer=False and qdrant's local mode, behind
mem0_shim.py). Each runs as its own process; the stub runs as another (stub.py).

Seeding gives every system the same memories (seed.rs's texts, in order) through its own
write call and then checks that it holds exactly that many. The stores of the SQLite-file
systems are kept under $PEERS_CACHE (default ~/.cache/mcp-memory/peers) and reused by later
runs: mcp-memory-service needs tens of minutes for 10k. A measurement works on a copy, so the
cached store stays exactly as seeded. PostgreSQL lives only as long as scripts/with-postgres.sh,
so it is seeded in the same session: one database, a tenant per size and round.

Measuring, per round, system and size, from the server's start to its stop holding --lock (if
given, so that nothing else on a shared machine runs its benchmarks meanwhile): a cold first
recall, 50 unmeasured calls, then the recall-heavy mix (90 % recall) sent by one client (recall
latencies), the remember-only mix sent by one client (remember latencies), and the
recall-heavy mix sent by 8 clients for a fixed time (requests/s). The calls are drive.rs's:
its Rng seeds and texts in round 0, other seeds of the same mix in later rounds. Resident
memory is the server process's (and its children's) VmRSS, sampled every 100 ms; CPU time is
counted for the driver, the stub, the server and the rest of the machine. Afterwards each
system must hold what it held plus what it said it stored. The report takes each figure's
median over the rounds.

Results: bench/results/peers.json and Markdown tables on stdout.
"""

import argparse
import contextlib
import datetime
import fcntl
import http.client
import itertools
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ beside the sources
from corpus import Corpus, Rng, calls, seed_texts  # noqa: E402

WIDTH = 384
CACHE = Path(os.environ.get("PEERS_CACHE", Path.home() / ".cache/mcp-memory/peers"))
# Where the venv's scripts are: the driver runs with the venv's Python (see the Makefile).
VENV_BIN = Path(sys.executable).parent
SYSTEMS = ["mcp-memory-sqlite", "mcp-memory-postgres", "mcp-memory-service", "mem0"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- HTTP: one kept-alive connection per client, as drive.rs's pooled reqwest client ---

class Conn:
    def __init__(self, port, headers):
        self.port, self.headers, self.conn = port, headers, None

    def request(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            self.conn.connect()
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.conn.request(method, path, body=data, headers=headers)
            reply = self.conn.getresponse()
            payload = reply.read()
        except (http.client.HTTPException, OSError):
            self.close()
            raise
        if reply.getheader("Connection", "").lower() == "close":
            self.close()
        return reply.status, payload

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def mcp_tool(conn, tool, arguments):
    """One MCP tools/call over POST /mcp: (ok, text of the result or why it failed)."""
    status, payload = conn.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    })
    try:
        body = json.loads(payload)
        text = body["result"]["content"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return False, f"{tool}: HTTP {status}: {payload[:200]!r}"
    if status != 200 or body["result"].get("isError") is True:
        return False, f"{tool}: HTTP {status}: {text[:200]}"
    return True, text


# --- processes ---

class Process:
    """A system under test in its own process group, stopped with SIGTERM."""

    def __init__(self, name, argv, env, port, health, log_dir, headers=None):
        self.name, self.port = name, port
        self.log = open(Path(log_dir) / f"{name}.log", "ab")
        began = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        conn = Conn(port, headers or {})
        deadline = began + 600
        while True:
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(f"{name} exited with {self.proc.returncode}: see {self.log.name}")
            try:
                if conn.request("GET", health)[0] == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass  # not listening yet
            if time.perf_counter() > deadline:
                self.stop()
                raise RuntimeError(f"{name} never became healthy: see {self.log.name}")
            time.sleep(0.02)
        conn.close()
        self.startup_s = time.perf_counter() - began

    def pids(self):
        """The process and its descendants (mcp-memory-service could fork workers)."""
        children = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def status_mib(self, field):
        total = 0
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith(field):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total / 1024

    def rss_mib(self):
        return self.status_mib("VmRSS:")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class Stub(Process):
    def __init__(self, log_dir):
        port = free_port()
        super().__init__("stub", [sys.executable, str(HERE / "stub.py"), str(port)],
                         dict(os.environ), port, "/health", log_dir)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"


# --- the systems ---

class System:
    key = ""
    round = 0
    label = ""
    notes = []
    cached = True  # the store is a file set kept under CACHE and copied for each measurement

    def store_dir(self, size):
        return CACHE / f"{self.key}-{size}"

    def conn(self, proc, size):
        return Conn(proc.port, self.headers(size))

    def headers(self, size):
        return {}


class Ours(System):
    """This server: the release binary, started as bench/load/server.rs starts it."""

    def __init__(self, backend, binary, pg_url):
        self.backend, self.binary, self.pg_url = backend, binary, pg_url
        self.key = f"mcp-memory-{backend}"
        self.label = f"mcp-memory ({'SQLite' if backend == 'sqlite' else 'PostgreSQL'})"
        self.cached = backend == "sqlite"
        self.notes = []

    def version(self):
        return subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.strip()

    def headers(self, size):
        # One tenant per size; on PostgreSQL, which keeps what each round wrote, one per round
        # too (seeded before the rounds), so that every round starts from the seeded store.
        tenant = f"peers-{size}" if self.cached else f"peers-{size}-r{self.round}"
        return {"X-Memory-Tenant": tenant, "Accept": "*/*"}

    def start(self, data_dir, size, stub_url, log_dir):
        port = free_port()
        url = f"sqlite:{data_dir}/memory.db" if self.backend == "sqlite" else self.pg_url
        # The environment server.rs gives it, and nothing else (env_clear there too).
        env = {
            "DATABASE_URL": url, "EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": stub_url,
            "EMBEDDING_API_KEY": "bench", "EMBEDDING_MODEL": f"stub-{WIDTH}",
            "EMBEDDING_DIM": str(WIDTH), "RECALL_MIN_SIMILARITY": "0.2",
            "HOST": "127.0.0.1", "PORT": str(port),
        }
        return Process(self.key, [self.binary], env, port, "/health", log_dir)

    def remember(self, conn, text, memory_type="project", seeding=False):
        ok, said = mcp_tool(conn, "remember", {"content": text, "type": memory_type})
        if ok and not said.startswith("[MEMORY] Stored as "):
            return False, f"remember did not store: {said[:120]}"
        return ok, said

    def recall(self, conn, query, limit=None):
        arguments = {"query": query}
        if limit:
            arguments["limit"] = limit
        return mcp_tool(conn, "recall", arguments)

    def count(self, proc, data_dir, size):
        conn = self.conn(proc, size)
        ok, said = mcp_tool(conn, "memory_stats", {})
        conn.close()
        if ok and "has no memories yet" in said:
            return 0
        match = re.match(r"\[MEMORY\] (\d+) memor", said) if ok else None
        if not match:
            raise RuntimeError(f"memory_stats: {said[:200]}")
        return int(match.group(1))


class McpMemoryService(System):
    """mcp-memory-service 12.4.0: `memory server --http`, SQLite-vec, the stub as its
    OpenAI-compatible external embedder, nothing from a model hub."""

    key = "mcp-memory-service"
    label = "mcp-memory-service 12.4.0"
    notes = [
        "memory_search in mode hybrid (BM25 through FTS5 + vector), limit 10",
        "memory_store without conversation_id (its default semantic dedup on); seeded with a "
        "conversation_id so that no seeded memory is dropped as a near-duplicate",
        "no tenants: one server and database per size",
        "its scheduled backups off (MCP_BACKUP_ENABLED=false)",
    ]

    def version(self):
        return "12.4.0"

    def headers(self, size):
        return {"Authorization": "Bearer bench"}

    def start(self, data_dir, size, stub_url, log_dir):
        port = free_port()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(data_dir),
            "MCP_MEMORY_STORAGE_BACKEND": "sqlite_vec",
            "MCP_EXTERNAL_EMBEDDING_URL": f"{stub_url}/embeddings",
            "MCP_EXTERNAL_EMBEDDING_MODEL": f"stub-{WIDTH}",
            "MCP_MEMORY_SQLITE_PATH": f"{data_dir}/memory.db",
            "MCP_MEMORY_BASE_DIR": str(data_dir),
            "MCP_MEMORY_BACKUPS_PATH": f"{data_dir}/backups",
            "MCP_BACKUP_ENABLED": "false",
            "MCP_HTTP_ENABLED": "true", "MCP_HTTP_HOST": "127.0.0.1", "MCP_HTTP_PORT": str(port),
            "MCP_API_KEY": "bench", "MCP_MDNS_ENABLED": "false",
            "MCP_MEMORY_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "MCP_MEMORY_ONNX_ALLOW_DOWNLOAD": "0",
        }
        return Process(self.key, [str(VENV_BIN / "memory"), "server", "--http"], env, port,
                       "/api/health", log_dir, self.headers(size))

    def remember(self, conn, text, memory_type=None, seeding=False):
        arguments = {"content": text}
        if seeding:
            arguments["conversation_id"] = "peers-seed"
        ok, said = mcp_tool(conn, "memory_store", arguments)
        if ok and not said.startswith("Memory stored successfully"):
            return False, f"memory_store did not store: {said[:120]}"
        return ok, said

    def recall(self, conn, query, limit=None):
        ok, said = mcp_tool(conn, "memory_search", {"query": query, "mode": "hybrid", "limit": 10})
        # It answers a failed search as plain text, not as a tool error.
        if ok and said.startswith("Error"):
            return False, said[:200]
        return ok, said

    def count(self, proc, data_dir, size):
        db = sqlite3.connect(f"file:{data_dir}/memory.db?mode=ro", uri=True)
        try:
            return db.execute("SELECT count(*) FROM memories WHERE deleted_at IS NULL").fetchone()[0]
        finally:
            db.close()


class Mem0(System):
    """mem0ai 2.2.1: OSS Memory, infer=False, qdrant local mode, behind mem0_shim.py."""

    key = "mem0"
    label = "mem0 2.2.1"
    notes = [
        "Memory.add(infer=False) and Memory.search(top_k=10) behind mem0_shim.py (plain JSON over "
        "HTTP, not MCP); no LLM is called (its LLM points at a closed port)",
        "ranks by cosine only: its BM25 and entity scoring need fastembed and spaCy models, "
        "which download from a hub",
        "qdrant local mode is not safe for concurrent use: the shim serialises the Memory calls "
        "(HTTP and JSON around them run in parallel threads)",
    ]
    user = "peers"

    def version(self):
        return "2.2.1"

    def start(self, data_dir, size, stub_url, log_dir):
        port = free_port()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(data_dir),
               "MEM0_TELEMETRY": "False", "MEM0_DIR": f"{data_dir}/mem0-home"}
        argv = [sys.executable, str(HERE / "mem0_shim.py"), str(data_dir), stub_url, str(port)]
        return Process(self.key, argv, env, port, "/health", log_dir)

    def remember(self, conn, text, memory_type=None, seeding=False):
        status, payload = conn.request("POST", "/add", {"text": text, "user_id": self.user})
        return status == 200, payload[:200].decode(errors="replace")

    def recall(self, conn, query, limit=None):
        status, payload = conn.request("POST", "/search", {"query": query, "user_id": self.user})
        return status == 200, payload[:200].decode(errors="replace")

    def count(self, proc, data_dir, size):
        conn = self.conn(proc, size)
        status, payload = conn.request("GET", f"/count?user_id={self.user}")
        conn.close()
        return json.loads(payload)["count"]


def systems(args):
    binary = os.environ.get("MCP_MEMORY_BINARY") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "mcp-memory")
    pg_url = os.environ.get("TEST_DATABASE_URL")
    every = {
        "mcp-memory-sqlite": Ours("sqlite", binary, pg_url),
        "mcp-memory-postgres": Ours("postgres", binary, pg_url),
        "mcp-memory-service": McpMemoryService(),
        "mem0": Mem0(),
    }
    chosen = []
    for key in args.systems.split(","):
        if key == "mcp-memory-postgres" and not pg_url:
            print("TEST_DATABASE_URL is not set: mcp-memory-postgres is skipped "
                  "(run under scripts/with-postgres.sh)", file=sys.stderr)
            continue
        chosen.append(every[key])
    return chosen


# --- the machine lock: only the timed parts hold it ---

@contextlib.contextmanager
def machine_lock(path):
    if not path:
        yield 0.0
        return
    with open(path, "a") as f:
        began = time.perf_counter()
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield time.perf_counter() - began
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- seeding ---

def seed_marker(system, size):
    return system.store_dir(size) / "seeded.json"


def seed_one(system, size, stub, log_dir, writers):
    """Writes seed.rs's `size` texts through the system's write call, `writers` at a time,
    then checks it holds exactly `size`. Cached stores that hold it already are kept."""
    marker = seed_marker(system, size)
    if system.cached and marker.exists():
        kept = json.loads(marker.read_text())
        # A store seeded by another version is seeded again (its format may differ).
        if kept.get("version") == system.version() and kept.get("count") == size:
            print(f"{system.key} {size}: seeded store kept ({marker.parent})", flush=True)
            return kept
    # PostgreSQL keeps nothing in a folder: its logs go to the scratch one.
    data_dir = system.store_dir(size) if system.cached else Path(log_dir) / f"{system.key}-{size}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    proc = system.start(data_dir, size, stub.base_url, log_dir)
    try:
        held = system.count(proc, data_dir, size)
        if not system.cached and held >= size:
            print(f"{system.key} {size} (round {system.round}): holds {held} already", flush=True)
            return {"count": held, "seconds": None}
        if held:
            raise RuntimeError(f"{system.key} {size}: a fresh store holds {held} memories")
        texts = seed_texts(size)
        began = time.perf_counter()
        failures = []
        next_index = itertools.count()
        lock = threading.Lock()

        def writer():
            conn = system.conn(proc, size)
            while True:
                with lock:
                    i = next(next_index)
                if i >= len(texts):
                    break
                content, _age, memory_type, _uses = texts[i]
                ok, said = system.remember(conn, content, memory_type, seeding=True)
                if not ok:
                    failures.append(said)
                if i % 1000 == 999:
                    print(f"  {system.key} {size}: {i + 1} written, "
                          f"{time.perf_counter() - began:.0f} s", flush=True)
            conn.close()

        threads = [threading.Thread(target=writer) for _ in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - began
        held = system.count(proc, data_dir, size)
    finally:
        proc.stop()
    if failures or held != size:
        raise RuntimeError(f"{system.key} {size}: {len(failures)} writes failed "
                           f"({failures[:1]}), {held} held of {size}")
    done = {"system": system.key, "version": system.version(), "count": held,
            "seconds": seconds, "writers": writers, "at": now_iso()}
    if system.cached:
        marker.write_text(json.dumps(done, indent=2) + "\n")
    print(f"{system.key} {size}: seeded {held} in {seconds:.0f} s", flush=True)
    return done


def seed(args):
    scratch = Path(tempfile.mkdtemp(prefix="peers-seed-"))
    stub = Stub(scratch)
    try:
        for system in systems(args):
            for size in sizes(args):
                for r in range(1 if system.cached else args.rounds):
                    system.round = r
                    seed_one(system, size, stub, scratch, args.writers)
    finally:
        stub.stop()
    shutil.rmtree(scratch, ignore_errors=True)


# --- measuring ---

def percentile(micros, p):
    """drive.rs's percentile: the sorted sample at round(p% of (n - 1)), in milliseconds."""
    if not micros:
        return None
    ordered = sorted(micros)
    return ordered[int(p / 100 * (len(ordered) - 1) + 0.5)] / 1000


def stats(micros):
    if not micros:
        return None
    return {"p50": percentile(micros, 50), "p95": percentile(micros, 95),
            "p99": percentile(micros, 99), "n": len(micros)}


def refused(said):
    """A remember answered as a near-duplicate of a held memory: each system's own rule (this
    server: cosine >= 0.92 and half the words; mcp-memory-service: cosine >= 0.85 within 24 h),
    so counted apart from failures."""
    return "[MEMORY] Already known" in said or "Duplicate content detected" in said


def tally(out, ok, said, tool):
    if ok:
        out["stored"] += tool == "remember"
    elif tool == "remember" and refused(said):
        out["refused"] += 1
    else:
        out["errors"].append(said)


def one_call(system, conn, tool, text):
    began = time.perf_counter_ns()
    try:
        if tool == "recall":
            ok, said = system.recall(conn, text)
        elif tool == "recall-10":
            ok, said = system.recall(conn, text, limit=10)
        else:
            ok, said = system.remember(conn, text)
    except (OSError, http.client.HTTPException) as e:
        ok, said = False, f"{tool}: {type(e).__name__}: {e}"
    return ok, said, (time.perf_counter_ns() - began) // 1000


def sequential(system, proc, size, seed, n, recall_heavy):
    """One client sends drive.rs's calls of run `seed`, worker 0, `n` of them."""
    conn = system.conn(proc, size)
    out = {"recall": [], "remember": [], "errors": [], "stored": 0, "refused": 0}
    began = time.perf_counter()
    for tool, text in itertools.islice(calls(seed, 0, recall_heavy), n):
        ok, said, micros = one_call(system, conn, tool, text)
        out[tool].append(micros)
        tally(out, ok, said, tool)
    out["seconds"] = time.perf_counter() - began
    conn.close()
    return out


def concurrent(system, proc, size, seed, clients, warmup, duration):
    """drive.rs's run: `clients` workers, each one call at a time on its own connection, the
    recall-heavy mix, `warmup` unmeasured then `duration` measured seconds."""
    start = time.perf_counter()
    measure_from, end = start + warmup, start + warmup + duration
    results = []

    def worker(w):
        conn = system.conn(proc, size)
        mine = {"recall": [], "remember": [], "errors": [], "stored": 0, "refused": 0}
        for tool, text in calls(seed, w, True):
            if time.perf_counter() >= end:
                break
            sent = time.perf_counter()
            ok, said, micros = one_call(system, conn, tool, text)
            tally(mine, ok, said, tool)
            if sent >= measure_from:
                mine[tool].append(micros)
        conn.close()
        results.append(mine)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {"recall": [], "remember": [], "errors": [], "stored": 0, "refused": 0}
    for mine in results:
        for k in ("recall", "remember", "errors"):
            out[k].extend(mine[k])
        out["stored"] += mine["stored"]
        out["refused"] += mine["refused"]
    out["requests"] = len(out["recall"]) + len(out["remember"])
    out["throughput_per_s"] = out["requests"] / duration
    return out


class CpuWatch:
    """CPU time over a timed phase, per part: the driver (this process), the stub, the server
    (with PostgreSQL's processes), and the rest of the machine, in percent of one core. The
    driver and the stub share the two cores with the server; `other` shows whatever else ran."""

    HZ = os.sysconf("SC_CLK_TCK")

    def __init__(self, server, stub):
        self.server, self.stub = server, stub
        self.began, self.start = time.perf_counter(), self.sample()

    @staticmethod
    def ticks(pids):
        total = 0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except (OSError, IndexError):
                pass
        return total

    def sample(self):
        postgres = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if Path(f"/proc/{entry}/comm").read_text().strip() == "postgres":
                        postgres.append(int(entry))
                except OSError:
                    pass
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return {
            "driver": self.ticks([os.getpid()]),
            "stub": self.ticks(self.stub.pids()),
            "server": self.ticks(self.server.pids() + postgres),
            # user, nice and system: interrupt time (loopback traffic's softirqs among it)
            # belongs to no process, so it is left out.
            "machine": fields[0] + fields[1] + fields[2],
            # Time the hypervisor gave to other guests: a noisy neighbour on a shared host.
            "steal": fields[7],
        }

    def stop(self):
        seconds = time.perf_counter() - self.began
        end = self.sample()
        used = {k: (end[k] - self.start[k]) / self.HZ / seconds * 100 for k in end}
        used["other"] = max(used.pop("machine") - used["driver"] - used["stub"] - used["server"], 0)
        used["steal"] = used.pop("steal")
        return {"seconds": seconds, **{f"{k}_cpu_percent": v for k, v in used.items()}}


class RssSampler:
    """The server's resident memory every 100 ms while a timed phase runs: the peak."""

    def __init__(self, proc):
        self.proc, self.peak, self.running = proc, proc.rss_mib(), True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            self.peak = max(self.peak, self.proc.rss_mib())
            time.sleep(0.1)

    def stop(self):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.proc.rss_mib())
        return self.peak


def stub_floor(stub, n=300):
    """What one embedding call to the stub costs from a kept-alive client: every system pays
    it once or more per call."""
    conn = Conn(stub.port, {})
    corpus, rng, micros = Corpus(), Rng(11), []
    for _ in range(n):
        body = {"input": corpus.question(rng), "model": f"stub-{WIDTH}"}
        began = time.perf_counter_ns()
        status, _ = conn.request("POST", "/v1/embeddings", body)
        micros.append((time.perf_counter_ns() - began) // 1000)
        assert status == 200
    conn.close()
    return stats(micros)


def measure_running(system, proc, stub, data_dir, size, args):
    # drive.rs's run seeds (1 for the warm-up, then 2, 3, 4) in round 0; later rounds send
    # other calls of the same mix, so that no round repeats an earlier one's memories.
    base = 10 * system.round
    row = {}
    held_before = system.count(proc, data_dir, size)
    if held_before < size:
        raise RuntimeError(f"{system.key} {size}: holds {held_before}, not {size}")
    # The first recall: this server builds the tenant's in-memory index here.
    conn = system.conn(proc, size)
    ok, said, micros = one_call(system, conn, "recall", Corpus().question(Rng(3)))
    conn.close()
    if not ok:
        raise RuntimeError(f"{system.key} {size}: the first recall failed: {said[:120]}")
    row["first_recall_ms"] = micros / 1000
    warm = sequential(system, proc, size, base + 1, 50, True)
    if warm["errors"]:
        raise RuntimeError(f"{system.key} {size}: warm-up failed: {warm['errors'][0][:120]}")
    held = system.count(proc, data_dir, size)
    row["held_at_start"] = held
    row["rss_mib_idle"] = proc.rss_mib()
    sampler, cpu = RssSampler(proc), CpuWatch(proc, stub)
    recall_1 = sequential(system, proc, size, base + 2, args.recalls, True)
    remember_1 = sequential(system, proc, size, base + 3, args.remembers, False)
    limit_10 = []
    if isinstance(system, Ours):
        # The peers return up to 10; this server's recall returns up to 5 by default
        # (balanced). The same questions again with limit 10, for the comparison.
        conn = system.conn(proc, size)
        for tool, text in itertools.islice(calls(base + 2, 0, True), args.recalls):
            if tool == "recall":
                ok, said, micros = one_call(system, conn, "recall-10", text)
                limit_10.append(micros)
                if not ok:
                    recall_1["errors"].append(said)
        conn.close()
    cpu_8 = CpuWatch(proc, stub)
    many = concurrent(system, proc, size, base + 4, args.clients, args.warmup, args.seconds)
    row["cpu_8_clients"] = cpu_8.stop()
    row["rss_mib_peak"] = sampler.stop()
    row["cpu"] = cpu.stop()
    row["rss_mib_end"] = proc.rss_mib()
    stored = recall_1["stored"] + remember_1["stored"] + many["stored"]
    held_after = system.count(proc, data_dir, size)
    errors = recall_1["errors"] + remember_1["errors"] + many["errors"]
    row.update({
        "recall_1": stats(recall_1["recall"]),
        "recall_1_limit_10": stats(limit_10),
        "remember_1": stats(remember_1["remember"]),
        "recall_8": stats(many["recall"]),
        "remember_8": stats(many["remember"]),
        "throughput_8_per_s": many["throughput_per_s"],
        "requests_8": many["requests"],
        "phase_seconds": {"recall_1": recall_1["seconds"], "remember_1": remember_1["seconds"]},
        "errors": len(errors),
        "refused_as_duplicates": recall_1["refused"] + remember_1["refused"] + many["refused"],
        # The start of each message only: enough to tell a refusal from a failure.
        "first_errors": [e[:100] for e in errors[:3]],
        "stored": stored, "held_at_end": held_after,
        "lost_writes": held + stored - held_after,
    })
    return row


def measure_one(system, size, stub, scratch, args):
    seeded = None
    if system.cached:
        marker = seed_marker(system, size)
        if not marker.exists():
            raise RuntimeError(f"{system.key} {size}: not seeded (run `run.py seed` first)")
        seeded = json.loads(marker.read_text())
        data_dir = scratch / f"{system.key}-{size}-r{system.round}"
        shutil.copytree(system.store_dir(size), data_dir)
    else:
        data_dir = scratch / f"{system.key}-{size}-r{system.round}"
        data_dir.mkdir()
    row = {"system": system.key, "label": system.label, "version": system.version(),
           "memories": size, "seeding": seeded}
    # Everything from the start to the stop is timed, so all of it holds the machine lock.
    with machine_lock(args.lock) as waited:
        row["lock_wait_s"] = waited
        # Another load on the machine would show here (1-, 5- and 15-minute averages).
        row["loadavg_at_start"] = Path("/proc/loadavg").read_text().split()[:3]
        proc = system.start(data_dir, size, stub.base_url, scratch)
        try:
            row["startup_s"] = proc.startup_s
            row.update(measure_running(system, proc, stub, data_dir, size, args))
        finally:
            proc.stop()
    if system.cached:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{system.key} {size}: recall p50 {fmt(row['recall_1'], 'p50')} ms, remember p50 "
          f"{fmt(row['remember_1'], 'p50')} ms, {row['throughput_8_per_s']:.0f} req/s at "
          f"{args.clients}, peak RSS {row['rss_mib_peak']:.0f} MiB, errors {row['errors']}, "
          f"refused {row['refused_as_duplicates']}, other CPU {row['cpu']['other_cpu_percent']:.0f} %, "
          f"held {row['held_at_end']} (lost {row['lost_writes']})", flush=True)
    return row


def machine():
    cpu = Path("/proc/cpuinfo").read_text()
    field = lambda name: next((l.split(":", 1)[1].strip() for l in cpu.splitlines()
                               if l.startswith(name)), None)
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {"cpu": field("model name"), "flags": field("flags"), "cores": os.cpu_count(),
            "memory_gib": round(int(mem) / 1024 / 1024, 1), "kernel": platform.release(),
            "python": platform.python_version()}


# The figures a round gives that the report takes the median of, across rounds.
MEDIANS = [("recall_1", "p50"), ("recall_1", "p95"), ("recall_1", "p99"),
           ("recall_1_limit_10", "p50"), ("recall_1_limit_10", "p95"),
           ("remember_1", "p50"), ("remember_1", "p95"), ("remember_1", "p99"),
           ("recall_8", "p50"), ("recall_8", "p95"), ("remember_8", "p50"), ("remember_8", "p95"),
           ("throughput_8_per_s",), ("rss_mib_idle",), ("rss_mib_peak",), ("first_recall_ms",),
           ("startup_s",)]


def median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def aggregate(rounds):
    """One row per system and size: each figure of MEDIANS the median over the rounds (their
    values kept in `per_round`), errors, refusals and lost writes summed."""
    out = []
    for key in dict.fromkeys((r["system"], r["memories"]) for r in rounds):
        mine = [r for r in rounds if (r["system"], r["memories"]) == key]
        row = json.loads(json.dumps(mine[0]))
        row["rounds"], row["per_round"] = len(mine), {}
        for path in MEDIANS:
            values = []
            for r in mine:
                v = r
                for p in path:
                    v = v.get(p) if isinstance(v, dict) else None
                values.append(v)
            target = row
            for p in path[:-1]:
                target = target.get(p) or {}
            if isinstance(target, dict) and (len(path) == 1 or row.get(path[0])):
                target[path[-1]] = median(values)
            row["per_round"][".".join(path)] = values
        for k in ("errors", "refused_as_duplicates", "lost_writes", "stored"):
            row[k] = sum(r[k] for r in mine)
        row["first_errors"] = [e for r in mine for e in r["first_errors"]][:3]
        for k in ("round", "cpu", "cpu_8_clients", "loadavg_at_start", "lock_wait_s",
                  "held_at_start", "held_at_end", "rss_mib_end", "phase_seconds", "requests_8"):
            row.pop(k, None)
        out.append(row)
    return out


def measure(args):
    scratch = Path(tempfile.mkdtemp(prefix="peers-measure-"))
    stub = Stub(scratch)
    report = {"issue": "21, item 1", "date": now_iso(), "machine": machine(),
              "plan": {"sizes": sizes(args), "width": WIDTH, "rounds": args.rounds,
                       "sequential_recall_heavy_calls": args.recalls,
                       "sequential_remember_calls": args.remembers, "clients": args.clients,
                       "warmup_s": args.warmup, "measured_s": args.seconds},
              "notes": {}, "stub_floor_ms_per_round": [], "rounds": []}
    chosen = systems(args)
    try:
        # Rounds one after the other, every system in each, so that a slow spell of a shared
        # machine lands on all of them; the report takes each figure's median.
        for r in range(args.rounds):
            with machine_lock(args.lock):
                report["stub_floor_ms_per_round"].append(stub_floor(stub))
            for system in chosen:
                system.round = r
                report["notes"][system.key] = system.notes
                for size in sizes(args):
                    row = measure_one(system, size, stub, scratch, args)
                    row["round"] = r
                    report["rounds"].append(row)
    finally:
        stub.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report["stub_floor_ms"] = {k: median([f[k] for f in report["stub_floor_ms_per_round"]])
                               for k in ("p50", "p95", "p99")}
    report["runs"] = aggregate(report["rounds"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(tables(report))
    print(f"\nwrote {out}")
    failed = [r for r in report["runs"] if r["errors"] or r["lost_writes"]]
    return 1 if failed else 0


# --- the tables ---

def fmt(s, key="p50"):
    if not s or s.get(key) is None:
        return "—"
    v = s[key]
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def ratio(peer, ours):
    if peer is None or ours in (None, 0):
        return "—"
    r = peer / ours
    return f"{r:.0f}×" if r >= 10 else f"{r:.1f}×"


def tables(report):
    runs = {(r["system"], r["memories"]): r for r in report["runs"]}
    names = list(dict.fromkeys(r["system"] for r in report["runs"]))
    label = {r["system"]: r["label"] for r in report["runs"]}
    sizes_ = sorted({r["memories"] for r in report["runs"]})
    k = lambda n: f"{n // 1000}k" if n % 1000 == 0 else str(n)
    lines = ["\n## Side by side (median of %d rounds; ms; req/s at %d clients; resident MiB at peak)\n"
             % (report["plan"].get("rounds", 1), report["plan"]["clients"])]
    head = ["system"]
    for n in sizes_:
        head += [f"recall p50 / p95 @{k(n)}", f"remember p50 / p95 @{k(n)}", f"req/s @{k(n)}",
                 f"RSS @{k(n)}"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for name in names:
        cells = [label[name]]
        for n in sizes_:
            r = runs.get((name, n))
            if not r:
                cells += ["—"] * 4
                continue
            cells += [f"{fmt(r['recall_1'])} / {fmt(r['recall_1'], 'p95')}",
                      f"{fmt(r['remember_1'])} / {fmt(r['remember_1'], 'p95')}",
                      f"{r['throughput_8_per_s']:.0f}", f"{r['rss_mib_peak']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    base = "mcp-memory-sqlite"
    lines.append(f"\n## Ratios: each system against {label.get(base, base)} "
                 "(latency and RSS: system ÷ this server; req/s: this server ÷ system)\n")
    head = ["system"]
    for n in sizes_:
        head += [f"recall p50 @{k(n)}", f"remember p50 @{k(n)}", f"recall p95 @{k(n)}",
                 f"remember p95 @{k(n)}", f"req/s @{k(n)}", f"RSS @{k(n)}"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for name in names:
        if name == base:
            continue
        cells = [label[name]]
        for n in sizes_:
            r, o = runs.get((name, n)), runs.get((base, n))
            if not r or not o:
                cells += ["—"] * 6
                continue
            g = lambda run, s, key: (run[s] or {}).get(key)
            cells += [ratio(g(r, "recall_1", "p50"), g(o, "recall_1", "p50")),
                      ratio(g(r, "remember_1", "p50"), g(o, "remember_1", "p50")),
                      ratio(g(r, "recall_1", "p95"), g(o, "recall_1", "p95")),
                      ratio(g(r, "remember_1", "p95"), g(o, "remember_1", "p95")),
                      ratio(o["throughput_8_per_s"], r["throughput_8_per_s"]),
                      ratio(r["rss_mib_peak"], o["rss_mib_peak"])]
        lines.append("| " + " | ".join(cells) + " |")
    floor = report.get("stub_floor_ms")
    if floor:
        lines.append(f"\nOne stub embedding call from a kept-alive client: p50 {floor['p50']:.3f} ms, "
                     f"p95 {floor['p95']:.3f} ms (every system pays it at least once per call).")
    return "\n".join(lines)


def sizes(args):
    return [int(s) for s in args.sizes.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["seed", "measure", "all", "table"])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--lock", default=os.environ.get("PEERS_LOCK"),
                        help="a file to flock around each timed phase (e.g. /tmp/machine.lock)")
    parser.add_argument("--writers", type=int, default=4, help="concurrent writers when seeding")
    parser.add_argument("--recalls", type=int, default=300,
                        help="recall-heavy calls from one client (about 90%% recalls)")
    parser.add_argument("--remembers", type=int, default=200, help="remember calls from one client")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every system; the report takes each figure's median")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", default=str(ROOT / "bench/results/peers.json"))
    args = parser.parse_args()
    if args.command == "table":
        print(tables(json.loads(Path(args.out).read_text())))
        return 0
    if args.command in ("seed", "all"):
        seed(args)
    if args.command in ("measure", "all"):
        return measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
