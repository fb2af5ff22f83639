"""mem0ai's OSS `Memory` behind a small JSON-over-HTTP server, so that it runs in a process of
its own like the other systems: its resident memory is its own, and every call pays an HTTP
round trip on loopback as the MCP servers' calls do. (mem0's own REST server needs Docker and
PostgreSQL.)

    python mem0_shim.py DATA_DIR EMBEDDER_BASE_URL PORT

    POST /add     {"text": ..., "user_id": ...}   -> {"id": ...}     Memory.add(..., infer=False)
    POST /search  {"query": ..., "user_id": ...}  -> {"results": n}  Memory.search(top_k=10)
    GET  /count?user_id=...                       -> {"count": n}
    GET  /health                                  -> {"status": "ok"}

`Memory` stores in qdrant's local path mode (no server), embeds with mem0's `openai` embedder
at EMBEDDER_BASE_URL (the stub), and keeps its history in DATA_DIR/history.db. With
infer=False no LLM is called: the LLM is pointed at a closed port (127.0.0.1:9), so a call to
it would fail the request rather than go unnoticed.

qdrant's local mode is not made for concurrent use (one SQLite connection and numpy arrays
shared without a lock), so calls are serialised by one lock: 8 clients queue here. That is
what this peer allows; the driver reports it as such.
"""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

os.environ["MEM0_TELEMETRY"] = "False"

from mem0 import Memory  # noqa: E402  (telemetry must be off before the import)

WIDTH = 384


def memory(data_dir, base_url):
    return Memory.from_config({
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "bench",
                "path": os.path.join(data_dir, "qdrant"),
                "embedding_model_dims": WIDTH,
                # Persist, and do not wipe the path at start: the seeded store is reused.
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {"model": f"stub-{WIDTH}", "api_key": "bench", "openai_base_url": base_url},
        },
        "llm": {
            "provider": "openai",
            "config": {"model": "none", "api_key": "bench", "openai_base_url": "http://127.0.0.1:9/v1"},
        },
        "history_db_path": os.path.join(data_dir, "history.db"),
    })


def main():
    data_dir, base_url, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mem = memory(data_dir, base_url)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def answer(self, status, value):
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            url = urlparse(self.path)
            if url.path == "/health":
                return self.answer(200, {"status": "ok"})
            if url.path == "/count":
                user = parse_qs(url.query)["user_id"][0]
                with lock:
                    # get_all's limit is a cap on what it returns: set it above any size here.
                    n = len(mem.get_all(filters={"user_id": user}, top_k=10_000_000)["results"])
                return self.answer(200, {"count": n})
            self.answer(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            try:
                with lock:
                    if self.path == "/add":
                        added = mem.add(body["text"], user_id=body["user_id"], infer=False)
                        return self.answer(200, {"id": added["results"][0]["id"]})
                    if self.path == "/search":
                        found = mem.search(body["query"], filters={"user_id": body["user_id"]},
                                           top_k=10)
                        return self.answer(200, {"results": len(found["results"])})
                self.answer(404, {"error": "not found"})
            except Exception as e:  # the driver counts it as a failed call
                self.answer(500, {"error": f"{type(e).__name__}: {e}"})

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server(("127.0.0.1", port), Handler)
    # SIGTERM (the driver's stop) ends serve_forever through SystemExit, so the store closes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        # qdrant's local mode writes its store and releases its directory lock on close.
        mem.vector_store.client.close()


if __name__ == "__main__":
    main()
