#!/usr/bin/env python3
"""A gateway in front of the server, as a platform's is: every request is forwarded with
`X-Tenant-Id` stamped, so that clients that send no header of their own (the conformance
suite) reach one tenant's memories (docs/protocol.md#interop-and-conformance).

Usage: stamp_tenant.py UPSTREAM_ORIGIN TENANT   (prints the port it listens on)
"""

import http.client
import http.server
import sys
import urllib.parse

UPSTREAM = urllib.parse.urlsplit(sys.argv[1])
TENANT = sys.argv[2]
HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class Gateway(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["X-Tenant-Id"] = TENANT
        upstream = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port, timeout=60)
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = forward

    def log_message(self, *args) -> None:
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
print(server.server_address[1], flush=True)
server.serve_forever()
