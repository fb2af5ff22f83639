#!/usr/bin/env python3
"""OpenAI-compatible embeddings stub for the interop tests (standard library only).

POST /v1/embeddings with {"model": ..., "input": "<text>"} answers
{"data": [{"embedding": [...]}], ...} using the deterministic fake embedder of
docs/embeddings.md#test-embedder, so the server's similarity numbers are the ones the spec's
fixtures were measured with (9 of 10 shared words -> 0.93, unrelated -> ~0).

Usage: fake_embeddings.py [--port N]   (N = 0 picks a free port)
The bound port is printed on stdout as the first line; then it serves until killed.
"""

import argparse
import hashlib
import json
import math
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIM = 64
# Runs of characters outside [a-z0-9가-힣] separate tokens (applied after lowercasing).
SPLIT = re.compile(r"[^a-z0-9\uac00-\ud7a3]+")


def tokens(text: str) -> list[str]:
    toks = [t for t in SPLIT.split(text.lower()) if len(t) >= 2]
    # Leading space is deliberate: it cannot collide with any real token.
    return toks or [" empty"]


def token_vector(token: str) -> list[float]:
    out: list[float] = []
    block = 0
    while len(out) < DIM:
        digest = hashlib.sha256(f"{token}:{block}".encode("utf-8")).digest()
        out.extend(b / 255 - 0.5 for b in digest)
        block += 1
    return out[:DIM]


def embed(text: str) -> list[float]:
    vec = [0.0] * DIM
    for tok in tokens(text):  # repeated tokens count again
        for i, x in enumerate(token_vector(tok)):
            vec[i] += x
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without TCP_NODELAY, Nagle plus the
    # client's delayed ACK adds ~40 ms to every embedding call.
    disable_nagle_algorithm = True

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/embeddings":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
            text = body["input"]
            if not isinstance(text, str):
                raise TypeError("input must be a string")
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": {"message": f"bad request: {exc}"}})
            return
        self._send(200, {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": embed(text)}],
            "model": body.get("model", ""),
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        })

    def log_message(self, fmt: str, *args) -> None:
        # Keep stderr quiet: the test output is about the MCP server, not this stub.
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
