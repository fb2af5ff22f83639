"""A zero-latency OpenAI-compatible embedder (`POST /v1/embeddings`), producing exactly the
vectors of bench/load/stub.rs, so that every system here embeds the same way at next to no
cost and what is measured is the memory server. A text's vector is the normalised sum of one
pseudo-random vector per word (SplitMix64 seeded by the word's FNV-1a hash); the width comes
from the model name (`stub-384`, `stub-1536`; 384 otherwise).

Unlike the Rust stub it also takes `input` as a list (mcp-memory-service and mem0 send lists),
answering one `data` entry per text with its `index`.

    python stub.py [PORT]        # prints "stub listening on http://127.0.0.1:PORT/v1"
    python stub.py --check       # the vectorised word vectors against a step-by-step port

The arithmetic is float32 as in Rust, in the same order: the word vectors are added one by one,
the squared norm is summed left to right (numpy's cumulative sum is sequential, unlike its
pairwise `sum`), then each component is divided by the norm.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ beside the sources
from corpus import MASK, mix  # noqa: E402

_cache = {}
_cache_lock = threading.Lock()


def word_vector(word, width):
    state = 0xCBF2_9CE4_8422_2325
    for b in word.encode("utf-8"):
        state = ((state ^ b) * 0x100_0000_01B3) & MASK
    # The k-th SplitMix64 state is the seed plus (k + 1) golden gammas; numpy's uint64
    # arithmetic wraps as Rust's wrapping_add and wrapping_mul do.
    with np.errstate(over="ignore"):
        z = np.uint64(state) + np.arange(1, width + 1, dtype=np.uint64) * np.uint64(0x9E37_79B9_7F4A_7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58_476D_1CE4_E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D0_49BB_1331_11EB)
        z ^= z >> np.uint64(31)
    # A 24-bit integer over 2^24, minus 0.5: exact in float32.
    return (z >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24) - np.float32(0.5)


def word_vector_slow(word, width):
    """The same, one step at a time as stub.rs writes it: checks the vectorised version."""
    state = 0xCBF2_9CE4_8422_2325
    for b in word.encode("utf-8"):
        state = ((state ^ b) * 0x100_0000_01B3) & MASK
    out = np.empty(width, dtype=np.float32)
    for k in range(width):
        state = (state + 0x9E37_79B9_7F4A_7C15) & MASK
        out[k] = (mix(state) >> 40) / float(1 << 24) - 0.5
    return out


def cached_word_vector(word, width):
    key = (word, width)
    v = _cache.get(key)
    if v is None:
        v = word_vector(word, width)
        with _cache_lock:
            _cache[key] = v
    return v


def vector(text, width):
    total = np.zeros(width, dtype=np.float32)
    for word in text.split():
        total += cached_word_vector(word.lower(), width)
    squares = np.cumsum(total * total, dtype=np.float32)
    norm = max(np.sqrt(squares[-1]) if width else np.float32(0), np.float32(1e-9))
    return total / np.float32(norm)


def width_of(model):
    if isinstance(model, str) and model.startswith("stub-"):
        try:
            return int(model[len("stub-"):])
        except ValueError:
            pass
    return 384


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without it every answer on a kept-alive connection waits ~40 ms for a delayed ACK
    # (BENCHMARKS.md, issue 21 item 9): the headers and the body go out in two sends.
    disable_nagle_algorithm = True

    def do_GET(self):
        # Health, for the driver's wait: the stub is up when it answers.
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        width = width_of(body.get("model"))
        texts = body.get("input", "")
        if isinstance(texts, str):
            texts = [texts]
        # Nine significant digits give back every float32 exactly, at half json.dumps' cost.
        data = ",".join(
            '{"object":"embedding","index":%d,"embedding":[%s]}'
            % (i, ",".join(map("{:.9g}".format, vector(t, width).tolist())))
            for i, t in enumerate(texts)
        )
        answer = ('{"object":"list","data":[%s],"model":%s,"usage":{"prompt_tokens":0,"total_tokens":0}}'
                  % (data, json.dumps(body.get("model", "stub-384")))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # Eight benchmark clients, each server's own pool and mcp-memory-service's new connection
    # per call: the default backlog of 5 could refuse connections under a burst.
    request_queue_size = 128


def check():
    """The vectorised word vectors against the step-by-step port, on the whole vocabulary."""
    from corpus import Corpus
    words = Corpus().words + ["seed0x0", "load2w0n1", "Zürich", ""]
    bad = [w for w in words for width in (384, 1536)
           if not np.array_equal(word_vector(w, width), word_vector_slow(w, width))]
    print("stub word vectors:", "ok" if not bad else f"{len(bad)} differ, e.g. {bad[:3]}")
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--check"]:
        sys.exit(check())
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = Server(("127.0.0.1", port), Handler)
    print(f"stub listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
