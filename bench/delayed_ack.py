#!/usr/bin/env python3
"""The embedding call's latency floor against a server that keeps Nagle's algorithm on
(BENCHMARKS.md, "The embedding call's latency floor").

An HTTP/1.1 server that writes a response's headers and body in two sends, without
TCP_NODELAY, holds the body until the client acknowledges the headers; the client's kernel
delays that acknowledgement (up to 40 ms on Linux) because it has nothing to send back. This
script serves an OpenAI-shaped embedding answer from Python's http.server both ways, and calls
it as a client can: on one kept-alive connection, on a new connection per call, and on a
kept-alive connection with TCP_QUICKACK set after each request is sent (Linux).

    python3 bench/delayed_ack.py [CALLS]        (stdlib only; loopback)
"""
import http.client
import http.server
import json
import socket
import statistics
import sys
import threading
import time

BODY = json.dumps({"data": [{"embedding": [0.1] * 384}]}).encode()
REQUEST = json.dumps({"input": "hello", "model": "m"}).encode()


class Nagle(http.server.BaseHTTPRequestHandler):
    """http.server as a stub writes it: headers flushed by end_headers, then the body."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class NoDelay(Nagle):
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve(handler) -> int:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def calls(port: int, n: int, pooled: bool, quickack: bool) -> list[float]:
    times, conn = [], None
    for _ in range(n):
        started = time.perf_counter()
        if conn is None or not pooled:
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.request("POST", "/v1/embeddings", body=REQUEST,
                     headers={"Content-Type": "application/json"})
        if quickack:
            # Reset by the kernel as it goes, so set after every request, before the answer.
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        conn.getresponse().read()
        if not pooled:
            conn.close()
        times.append((time.perf_counter() - started) * 1e3)
    return times


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(f"{n} calls each; milliseconds per call")
    print("| server | client | p50 | p95 |")
    print("|---|---|---|---|")
    for name, handler in (("Nagle on (http.server)", Nagle), ("TCP_NODELAY", NoDelay)):
        port = serve(handler)
        for client, pooled, quickack in (("kept-alive connection", True, False),
                                         ("new connection per call", False, False),
                                         ("kept-alive + TCP_QUICKACK after send", True, True)):
            t = sorted(calls(port, n, pooled, quickack))
            print(f"| {name} | {client} | {statistics.median(t):.2f} | {t[int(len(t) * 0.95)]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
