// The memory browser (docs/tools.md#the-memory-browser): one page, reached two ways.
// At /ui/ it calls the server's tools by POST to /ui/mcp; inside an MCP Apps host's frame it
// asks the host to call them (postMessage JSON-RPC). Everything a memory holds is written
// with textContent, never as HTML, so a memory that contains markup shows as text.
"use strict";

(() => {
  const PROTOCOL = "2025-11-25";
  const APPS_PROTOCOL = "2026-01-26";
  const PAGE = 50;
  const embedded = window.parent !== window;

  const $ = (id) => document.getElementById(id);
  let call; // (tool name, arguments) -> CallToolResult
  let writable = true;
  let cursor = null; // the next page of the newest-first listing
  let shown = []; // the memories of the current listing or search, as structured data
  let started = false; // the page's own first listing is shown

  // ---- reaching the tools -------------------------------------------------------------

  let rpcIds = 0;

  async function overHttp(name, args) {
    const headers = {
      "Content-Type": "application/json",
      Accept: "application/json",
      "MCP-Protocol-Version": PROTOCOL,
    };
    const tenant = $("tenant").value.trim();
    if (tenant) headers["X-Memory-Tenant"] = tenant;
    const response = await fetch("mcp", {
      method: "POST",
      headers,
      credentials: "same-origin",
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: ++rpcIds,
        method: "tools/call",
        params: { name, arguments: args },
      }),
    });
    const body = await response.json().catch(() => null);
    if (body && body.error) throw new Error(body.error.message);
    if (!body || !body.result) throw new Error(`the server answered ${response.status}`);
    return body.result;
  }

  // The host's side of MCP Apps: requests we sent, by id.
  const waiting = new Map();

  function toHost(message) {
    window.parent.postMessage(Object.assign({ jsonrpc: "2.0" }, message), "*");
  }

  function askHost(method, params) {
    return new Promise((resolve, reject) => {
      const id = ++rpcIds;
      waiting.set(id, { resolve, reject });
      toHost({ id, method, params });
    });
  }

  function fromHost(event) {
    if (event.source !== window.parent) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0") return;
    if (message.method === undefined) {
      const asked = waiting.get(message.id);
      if (!asked) return;
      waiting.delete(message.id);
      if (message.error) asked.reject(new Error(message.error.message));
      else asked.resolve(message.result);
      return;
    }
    if (message.id === undefined) {
      // The answer of the call the host opened us for: shown as the listing it is.
      const listed = message.method === "ui/notifications/tool-result" && message.params
        && message.params.structuredContent && message.params.structuredContent.memories;
      if (listed && started) {
        shown = listed;
        cursor = message.params.structuredContent.nextCursor || null;
        $("more").hidden = !cursor;
        render();
      }
      return;
    }
    if (message.method === "ui/resource-teardown" || message.method === "ping") {
      toHost({ id: message.id, result: {} });
    } else {
      toHost({ id: message.id, error: { code: -32601, message: `Method not found: ${message.method}` } });
    }
  }

  async function connectToHost() {
    window.addEventListener("message", fromHost);
    await askHost("ui/initialize", {
      protocolVersion: APPS_PROTOCOL,
      appInfo: { name: "mcp-memory browser", version: "1" },
      appCapabilities: {},
    });
    toHost({ method: "ui/notifications/initialized", params: {} });
    // The host sizes its frame to the page.
    new ResizeObserver(() => {
      const size = document.documentElement.getBoundingClientRect();
      toHost({ method: "ui/notifications/size-changed", params: { width: Math.ceil(size.width), height: Math.ceil(size.height) } });
    }).observe(document.documentElement);
    return (name, args) => askHost("tools/call", { name, arguments: args });
  }

  // A tool's answer as data, or its error as an Error the page shows.
  async function tool(name, args) {
    const result = await call(name, args);
    const text = (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
    if (result.isError) throw new Error(text.replace(/^Error: /, ""));
    return { data: result.structuredContent || {}, text };
  }

  // ---- showing memories ---------------------------------------------------------------

  function say(message, failed) {
    const status = $("status");
    status.textContent = message;
    status.classList.toggle("failed", Boolean(failed));
  }

  function when(iso) {
    if (!iso) return "";
    const at = new Date(iso);
    return Number.isNaN(at.getTime()) ? iso : at.toLocaleString();
  }

  function visible(memory) {
    const type = $("type").value;
    const tag = $("tag").value.trim().toLowerCase();
    const scope = $("scope").value;
    return (!type || memory.type === type)
      && (!tag || (memory.tags || []).some((t) => t.toLowerCase() === tag))
      && (!scope || memory.scope === scope);
  }

  function render() {
    const list = $("memories");
    list.replaceChildren(...shown.filter(visible).map(card));
  }

  function card(memory) {
    const item = $("memory").content.firstElementChild.cloneNode(true);
    const field = (name, value) => {
      const cell = item.querySelector(`.${name}`);
      cell.textContent = value;
      if (!value) {
        cell.previousElementSibling.hidden = true;
        cell.hidden = true;
      }
    };
    item.dataset.id = memory.id;
    item.querySelector(".content").textContent = memory.content;
    field("type", memory.type + (memory.category ? ` · ${memory.category}` : ""));
    field("tags", (memory.tags || []).join(", "));
    field("scope", memory.scope === "conversation" ? "this conversation" : "the project");
    field("created", when(memory.created));
    field("author", memory.author || "");
    field("expires", when(memory.expires));
    field("standing", memory.standing === undefined ? "" : memory.standing.toFixed(2));
    field("id", memory.id);

    const actions = item.querySelector(".actions");
    actions.hidden = !writable;
    item.querySelector(".extend").hidden = !memory.expires;
    const forget = item.querySelector(".forget");
    forget.addEventListener("click", () => {
      if (!forget.classList.contains("confirm")) {
        forget.classList.add("confirm");
        forget.textContent = "Forget it for good?";
        return;
      }
      act(async () => {
        await tool("forget", { id: memory.id });
        shown = shown.filter((m) => m.id !== memory.id);
        render();
        say("Forgotten.");
      });
    });
    const correction = item.querySelector(".correction");
    const extension = item.querySelector(".extension");
    const open = (form) => {
      correction.hidden = form !== correction;
      extension.hidden = form !== extension;
    };
    item.querySelector(".correct").addEventListener("click", () => {
      correction.elements.content.value = memory.content;
      open(correction);
      correction.elements.content.focus();
    });
    item.querySelector(".extend").addEventListener("click", () => open(extension));
    for (const cancel of item.querySelectorAll(".cancel")) {
      cancel.addEventListener("click", () => open(null));
    }
    correction.addEventListener("submit", (event) => {
      event.preventDefault();
      const content = correction.elements.content.value;
      act(() => replace(memory, content, keptExpiry(memory)));
    });
    extension.addEventListener("submit", (event) => {
      event.preventDefault();
      const days = Number(extension.elements.days.value);
      act(() => replace(memory, memory.content, { expires_in_days: days }));
    });
    return item;
  }

  // A correction keeps what it does not change: its expiry among them, while still ahead.
  function keptExpiry(memory) {
    return memory.expires && new Date(memory.expires) > new Date() ? { expires_at: memory.expires } : {};
  }

  // `remember` with `replaces`: the new memory takes the old one's place in the list.
  async function replace(memory, content, expiry) {
    const args = Object.assign({ content, replaces: memory.id, scope: memory.scope, type: memory.type }, expiry);
    if (memory.category) args.category = memory.category;
    if (memory.tags && memory.tags.length) args.tags = memory.tags;
    const { data, text } = await tool("remember", args);
    if (data.outcome !== "replaced" && data.outcome !== "stored") {
      say(text, true);
      return;
    }
    shown = shown.map((m) => (m.id === memory.id ? data.memory : m));
    render();
    say(expiry.expires_in_days ? "Expiry extended." : "Corrected.");
  }

  async function act(work) {
    try {
      await work();
    } catch (error) {
      say(error.message, true);
    }
  }

  // ---- listing and searching ----------------------------------------------------------

  async function newest(more) {
    const args = { limit: PAGE };
    const type = $("type").value;
    if (type) args.type = type;
    if (more && cursor) args.cursor = cursor;
    const { data } = await tool("list_memories", args);
    shown = more ? shown.concat(data.memories) : data.memories;
    cursor = data.nextCursor || null;
    $("more").hidden = !cursor;
    render();
    const count = $("memories").children.length;
    say(count ? `${count} memories, newest first.` : "No memories yet.");
  }

  const CONFIDENCE = {
    high: "high confidence",
    medium: "medium confidence",
    no_confident_match: "no confident match",
    no_match: "no match",
  };

  async function search(query) {
    const { data } = await tool("recall", { query });
    shown = data.results || [];
    cursor = null;
    $("more").hidden = true;
    render();
    const count = $("memories").children.length;
    say(`${count} found for “${query}”: ${CONFIDENCE[data.confidence] || data.confidence}.`);
  }

  function refresh() {
    const query = $("query").value.trim();
    return act(() => (query ? search(query) : newest(false)));
  }

  async function start() {
    const tenant = new URLSearchParams(window.location.search).get("tenant");
    if (tenant) $("tenant").value = tenant;
    try {
      if (embedded) {
        $("tenant-field").hidden = true;
        call = await connectToHost();
      } else {
        call = overHttp;
        const access = await fetch("access", { credentials: "same-origin" });
        writable = access.ok && (await access.json()).write === true;
      }
    } catch (error) {
      say(error.message, true);
      return;
    }
    $("search").addEventListener("submit", (event) => {
      event.preventDefault();
      refresh();
    });
    $("newest").addEventListener("click", () => {
      $("query").value = "";
      refresh();
    });
    $("more").addEventListener("click", () => act(() => newest(true)));
    $("type").addEventListener("change", () => ($("query").value.trim() ? render() : refresh()));
    $("tag").addEventListener("input", render);
    $("scope").addEventListener("change", render);
    $("tenant").addEventListener("change", refresh);
    await refresh();
    started = true;
    document.body.dataset.ready = "true";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
