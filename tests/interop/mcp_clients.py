#!/usr/bin/env python3
"""Drive a running mcp-memory server with the real Python MCP client (PyPI `mcp==2.3.0`).

Usage: python mcp_clients.py TARGET MODE      (MODE: legacy | auto)

TARGET is the server's URL (Streamable HTTP), or `stdio:<path of the binary>`: each client
then starts `mcp-memory stdio` itself, with the identity the HTTP headers would carry as
MEMORY_TENANT / MEMORY_CONVERSATION and the server's configuration from this process's
DATABASE_URL, EMBEDDING_* and RECALL_* variables.

Over HTTP, MCP_TOKEN (when set) is sent as the bearer token.

Each MODE (and transport) uses its own tenant, so every run can share one database. The client is used exactly as in docs/protocol.md#interop-and-conformance; the texts
asserted are the user-visible ones fixed by docs/tools.md#tools (labels and fragments the
spec says tests may rely on). Prints one line per passed check; on the first failed
check prints what was expected and what came back, and exits 1.
"""

import asyncio
import os
import re
import sys
import traceback
from contextlib import asynccontextmanager

import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

EXPECTED_TOOLS = ["recall", "remember", "list_memories", "forget", "memory_stats"]
EXPECTED_VERSION = {"auto": "2026-07-28", "legacy": "2025-11-25"}

FACT = "The deploy pipeline uses blue-green releases on EKS"
# A note for one conversation only; unrelated to FACT so dedup cannot merge them.
NOTE = "In this chat we call the staging cluster blue lagoon until renamed"
# Stored memory ids are ULIDs (Crockford base32, 26 characters).
ULID = r"[0-9A-HJKMNP-TV-Z]{26}"


class CheckFailed(Exception):
    pass


class Checks:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.passed = 0
        self.last = None

    def structured(self) -> dict:
        """The last tool result's structuredContent, as the SDK read it (and checked it
        against the tool's outputSchema)."""
        res = self.last
        data = getattr(res, "structured_content", None) or getattr(res, "structuredContent", None)
        return data or {}

    def ok(self, name: str, cond: bool, got: object = None) -> None:
        if not cond:
            raise CheckFailed(f"{name}\n  got: {got!r}")
        self.passed += 1
        print(f"ok   [{self.mode}] {name}", flush=True)


def text_of(res) -> str:
    return "\n".join(c.text for c in res.content if getattr(c, "type", None) == "text")


# The server configuration a stdio client passes on to the process it starts.
SERVER_VARIABLES = ("DATABASE_URL", "EMBEDDING_PROVIDER", "EMBEDDING_BASE_URL", "EMBEDDING_API_KEY",
                    "EMBEDDING_MODEL", "EMBEDDING_DIM", "RECALL_MIN_SIMILARITY")
# What each identity header becomes for a stdio process.
IDENTITY_VARIABLES = {"X-Memory-Tenant": "MEMORY_TENANT", "X-Conversation-Id": "MEMORY_CONVERSATION"}


@asynccontextmanager
async def connect(target: str, mode: str, headers: dict[str, str], elicitation_callback=None):
    if target.startswith("stdio:"):
        env = {k: os.environ[k] for k in SERVER_VARIABLES if k in os.environ}
        env |= {IDENTITY_VARIABLES[k]: v for k, v in headers.items()}
        server = StdioServerParameters(command=target[len("stdio:"):], args=["stdio"], env=env)
        async with Client(server, mode=mode, read_timeout_seconds=60,
                          elicitation_callback=elicitation_callback) as client:
            yield client
        return
    # An access token an authorization server issued (run.sh's OAuth server), when given.
    if os.environ.get("MCP_TOKEN"):
        headers = headers | {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"}
    # trust_env=False: the server is on loopback; an inherited HTTP(S)_PROXY must not
    # capture the traffic.
    async with httpx2.AsyncClient(headers=headers, trust_env=False,
                                  timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(target, http_client=http), mode=mode,
                          elicitation_callback=elicitation_callback) as client:
            yield client


async def call(c: Checks, client, tool: str, args: dict, *, error: bool = False) -> str:
    """Call a tool, check the result shape (docs/protocol.md#tool-call-results: one text block,
    then under 2026-07-28 a resource_link to each memory recall found) and whether it is an error
    as expected; return the text."""
    res = await client.call_tool(tool, args)
    c.last = res
    text = text_of(res)
    first, links = res.content[:1], res.content[1:]
    linking = tool == "recall" and not res.is_error and client.protocol_version == "2026-07-28"
    data = getattr(res, "structured_content", None) or getattr(res, "structuredContent", None) or {}
    found = [m["id"] for m in data.get("results", [])] if linking else []
    c.ok(f"{tool} {args} -> is_error={error}, one text block"
         + (", a resource_link to each memory found" if linking else ""),
         res.is_error is error and len(first) == 1 and getattr(first[0], "type", None) == "text"
         and text != "" and [str(getattr(l, "uri", "")) for l in links] == [f"memory://{i}" for i in found]
         and all(getattr(l, "type", None) == "resource_link" for l in links),
         {"is_error": res.is_error, "content": res.content})
    return text


async def handshake(c: Checks, client, mode: str, what: str) -> None:
    c.ok(f"{what}: negotiated protocol {EXPECTED_VERSION[mode]}",
         client.protocol_version == EXPECTED_VERSION[mode], client.protocol_version)
    if mode == "legacy" or client.server_info is not None:
        # serverInfo is required by initialize; under 2026-07-28 it is a SHOULD in _meta.
        name = client.server_info.name if client.server_info else None
        c.ok(f"{what}: server identifies as mcp-memory", name == "mcp-memory", client.server_info)
    tools = (await client.list_tools()).tools
    names = [t.name for t in tools]
    hints = {t.name: t.annotations for t in tools}
    c.ok(f"{what}: recall is read-only, forget destructive and idempotent, remember not idempotent",
         hints["recall"] is not None and hints["recall"].read_only_hint is True
         and hints["forget"].destructive_hint is True and hints["forget"].idempotent_hint is True
         and hints["remember"].idempotent_hint is False, hints)
    c.ok(f"{what}: tools/list is exactly {EXPECTED_TOOLS}", names == EXPECTED_TOOLS, names)


async def run(url: str, mode: str, c: Checks) -> None:
    stdio = url.startswith("stdio:")
    tenant = f"interop-{mode}" + ("-stdio" if stdio else "")

    # --- A: a plain project client (tenant, no conversation) -----------------------------
    async with connect(url, mode, {"X-Memory-Tenant": tenant}) as a:
        await handshake(c, a, mode, "tenant client")

        t = await call(c, a, "remember", {"content": FACT, "tags": ["deploy"]})
        m = re.match(rf"\[MEMORY\] Stored as ({ULID})\.", t)
        c.ok("remember: text starts '[MEMORY] Stored as <ulid>.'", m is not None, t)
        mem_id = m.group(1)
        c.ok("remember: renders the memory with [id:<id>], content and tags",
             f"[id:{mem_id}]" in t and FACT in t and "tags: deploy" in t, t)
        d = c.structured()
        c.ok("remember: structuredContent says stored, with the id and the memory",
             d.get("outcome") == "stored" and d.get("id") == mem_id
             and d.get("memory", {}).get("tags") == ["deploy"], d)

        t = await call(c, a, "remember", {"content": FACT, "tags": ["deploy"]})
        c.ok("remember again: 'Already known', showing the existing memory",
             "Already known" in t and f"[id:{mem_id}]" in t, t)

        t = await call(c, a, "recall", {"query": "deploy pipeline blue-green releases"})
        c.ok("recall: '1 memory matched', the content and its standing",
             "1 memory matched" in t and FACT in t and "100% of the top result" in t, t)
        d = c.structured()
        results = d.get("results") or [{}]
        c.ok("recall: structuredContent has the result, its standing and the confidence",
             results[0].get("id") == mem_id and results[0].get("standing") == 1.0
             and d.get("confidence") in ("high", "medium"), d)

        t = await call(c, a, "recall", {"query": "zebra migration patterns in antarctica"})
        c.ok("recall unrelated: NO MATCH FOUND / NO CONFIDENT MATCH",
             "NO MATCH FOUND" in t or "NO CONFIDENT MATCH" in t, t)

        t = await call(c, a, "list_memories", {})
        c.ok("list_memories: '1 memory, newest first'",
             "1 memory, newest first" in t and FACT in t, t)
        d = c.structured()
        c.ok("list_memories: structuredContent lists the memory, no next cursor",
             [m.get("id") for m in d.get("memories", [])] == [mem_id]
             and d.get("nextCursor", "absent") is None, d)

        # The memory as a resource, and the prompt that recalls for a task.
        listed = [str(r.uri) for r in (await a.list_resources()).resources]
        c.ok("resources/list: the statistics and the memory",
             "memory://stats" in listed and f"memory://{mem_id}" in listed, listed)
        read = await a.read_resource(f"memory://{mem_id}")
        c.ok("resources/read: the memory as text", FACT in read.contents[0].text, read)
        prompt = await a.get_prompt("recall-for-task", {"task": "how do we release"})
        c.ok("prompts/get recall-for-task: the memory, quoted as data",
             FACT in prompt.messages[0].content.text, prompt)

        t = await call(c, a, "memory_stats", {})
        c.ok("memory_stats: '1 memory for this project (project: 1)'",
             "1 memory for this project (project: 1)" in t, t)
        d = c.structured()
        c.ok("memory_stats: structuredContent counts 1, exactly",
             d.get("total") == 1 and d.get("byType") == {"project": 1}
             and d.get("lowerBound") is False, d)

        t = await call(c, a, "recall", {"query": 42}, error=True)
        c.ok("recall with query 42: 'Input validation error' naming the tool",
             "Input validation error" in t and "recall" in t, t)

        t = await call(c, a, "remember", {"content": NOTE, "scope": "conversation"}, error=True)
        c.ok("remember scope=conversation without a conversation names X-Conversation-Id",
             "X-Conversation-Id" in t, t)

        # --- B: same tenant, inside a conversation --------------------------------------
        headers_b = {"X-Memory-Tenant": tenant, "X-Conversation-Id": "chat:interop"}
        async with connect(url, mode, headers_b) as b:
            await handshake(c, b, mode, "conversation client")

            t = await call(c, b, "remember", {"content": NOTE, "scope": "conversation"})
            m = re.match(rf"\[MEMORY\] Stored as ({ULID})\.", t)
            c.ok("conversation remember: stored, marked 'this conversation only'",
                 m is not None and "this conversation only" in t, t)
            note_id = m.group(1)

            t = await call(c, b, "recall", {"query": "staging cluster blue lagoon"})
            c.ok("conversation recall: finds its own note, marked 'this conversation only'",
                 NOTE in t and "this conversation only" in t, t)

            t = await call(c, b, "list_memories", {})
            c.ok("conversation list_memories: project memory + own note",
                 "2 memories, newest first" in t and FACT in t and NOTE in t, t)

            t = await call(c, b, "memory_stats", {})
            c.ok("conversation memory_stats: '2 memories for this project (project: 2)'",
                 "2 memories for this project (project: 2)" in t, t)

            # The project client must not see the conversation's note.
            t = await call(c, a, "list_memories", {})
            c.ok("project list_memories: still '1 memory', no conversation note",
                 "1 memory, newest first" in t and NOTE not in t, t)

            t = await call(c, a, "memory_stats", {})
            c.ok("project memory_stats: still '1 memory for this project (project: 1)'",
                 "1 memory for this project (project: 1)" in t, t)

            # docs/tools.md#forget: forget applies visibility.
            t = await call(c, a, "forget", {"id": note_id})
            c.ok("project forget of a conversation note: 'No memory with id'",
                 "No memory with id" in t, t)

            t = await call(c, b, "forget", {"id": note_id})
            c.ok("conversation forget of its own note: '[MEMORY] Deleted <id>.'",
                 t == f"[MEMORY] Deleted {note_id}.", t)

        t = await call(c, a, "forget", {"id": mem_id})
        c.ok("forget: '[MEMORY] Deleted <id>.'", t == f"[MEMORY] Deleted {mem_id}.", t)

        t = await call(c, a, "forget", {"id": mem_id})
        c.ok("forget again: 'No memory with id'", "No memory with id" in t, t)

    # --- D: under 2026-07-28 a client that can be asked is asked about a conflicting memory
    # (docs/tools.md#asking-before-a-conflicting-memory-stays); the SDK completes the call.
    if mode == "auto":
        asked = []

        async def choose_the_new_one(context, params):
            asked.append(params.message)
            return mcp_types.ElicitResult(action="accept", content={"choice": "replace"})

        old = "the admin api listens on port 8080 behind the internal load balancer"
        new = "the admin api listens on port 8443 behind the internal load balancer"
        async with connect(url, mode, {"X-Memory-Tenant": tenant + "-asked"},
                           elicitation_callback=choose_the_new_one) as d:
            t = await call(c, d, "remember", {"content": old})
            old_id = re.match(rf"\[MEMORY\] Stored as ({ULID})\.", t).group(1)
            t = await call(c, d, "remember", {"content": new})
            c.ok("a conflicting memory: the user was asked, with both values",
                 len(asked) == 1 and "8080" in asked[0] and "8443" in asked[0], asked)
            c.ok("the answer completed the call: the new one replaced the old",
                 "replacing " + old_id in t, t)
            t = await call(c, d, "list_memories", {})
            c.ok("only the new memory is kept", "1 memory" in t and "8443" in t, t)

    # --- C: no tenant header at all (a stdio process without one does not start) ----------
    if stdio:
        return
    async with connect(url, mode, {}) as anon:
        # docs/identity.md#identity-refusals: the handshake and the listing need no tenant.
        await handshake(c, anon, mode, "client without tenant")
        t = await call(c, anon, "recall", {"query": "anything"}, error=True)
        c.ok("recall without tenant: 'x-memory-tenant header is required'",
             "x-memory-tenant header is required" in t, t)


def leaves(exc: BaseException):
    """anyio wraps failures in ExceptionGroups; report the underlying errors."""
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            yield from leaves(e)
    else:
        yield exc


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[2] not in EXPECTED_VERSION:
        print(__doc__, file=sys.stderr)
        return 2
    url, mode = sys.argv[1], sys.argv[2]
    c = Checks(mode)
    try:
        asyncio.run(run(url, mode, c))
    except BaseException as exc:  # noqa: BLE001 - everything becomes one clear failure
        for e in leaves(exc):
            if isinstance(e, CheckFailed):
                print(f"FAIL [{mode}] {e}", file=sys.stderr)
            elif isinstance(e, MCPError):
                print(f"FAIL [{mode}] JSON-RPC error {e.code}: {e.message} (data={e.data!r})",
                      file=sys.stderr)
            else:
                print(f"FAIL [{mode}] unexpected {type(e).__name__}: {e}", file=sys.stderr)
                traceback.print_exception(e, file=sys.stderr)
        print(f"python-mcp {mode}: {c.passed} checks passed before the failure", file=sys.stderr)
        return 1
    over = " over stdio" if url.startswith("stdio:") else ""
    print(f"python-mcp {mode}{over}: all {c.passed} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
