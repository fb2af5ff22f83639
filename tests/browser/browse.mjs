// The memory browser as a person uses it, in headless Chromium (tests/browser/run.sh):
//
//   node browse.mjs BASE_URL WRITER_KEY READER_KEY OTHER_TENANT_KEY ARTIFACTS_DIR
//
// The writer's and the reader's keys are bound to the tenant "browser", the other key to
// "other". Every check throws on failure; the process exits 1 at the first.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";

const [base, writer, reader, other, artifacts] = process.argv.slice(2);
const APP_URI = "ui://mcp-memory/browser";
const step = (name) => console.log(`browser: ${name}`);

// ---- the server, as an MCP client reaches it ------------------------------------------
let ids = 0;
async function rpc(key, method, params, modern) {
  const headers = {
    "Content-Type": "application/json",
    Accept: "application/json",
    Authorization: `Bearer ${key}`,
    "MCP-Protocol-Version": modern ? "2026-07-28" : "2025-11-25",
  };
  if (modern) headers["Mcp-Method"] = method;
  const response = await fetch(`${base}/mcp`, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: ++ids, method, params }),
  });
  const body = await response.json();
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result;
}
const callTool = (key, name, args) => rpc(key, "tools/call", { name, arguments: args });
async function listed(key) {
  const result = await callTool(key, "list_memories", { limit: 50 });
  return result.structuredContent.memories;
}

// ---- what the tenant holds ---------------------------------------------------------------
const MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> broke the old dashboard';
const SEEDS = [
  { content: "Production runs on PostgreSQL 18 with pgvector; staging uses SQLite.", type: "project" },
  { content: "배포는 매주 목요일 오후 3시에 한다. 금요일에는 배포하지 않는다.", type: "project" },
  { content: "Reports are always written in bullet points, never in long paragraphs.", type: "pattern", tags: ["reports"] },
  { content: MARKUP, type: "reference" },
  { content: "The release branch is cut on the first Monday of each month.", expires_in_days: 10, tags: ["release"] },
];
step("seeding five memories");
for (const seed of SEEDS) {
  const result = await callTool(writer, "remember", seed);
  assert.equal(result.structuredContent.outcome, "stored", JSON.stringify(result));
}

// ---- without a credential: the login challenge, never data --------------------------------
step("a request without a credential is challenged");
for (const [path, method] of [["/ui/", "GET"], ["/ui/browser.js", "GET"], ["/ui/access", "GET"], ["/ui/mcp", "POST"]]) {
  const response = await fetch(`${base}${path}`, { method, headers: { "Content-Type": "application/json" }, body: method === "POST" ? "{}" : undefined });
  assert.equal(response.status, 401, path);
  assert.match(response.headers.get("www-authenticate") || "", /^Basic realm="mcp-memory"/, path);
  const text = await response.text();
  assert.ok(!text.includes("PostgreSQL") && !text.includes("목요일"), `${path} answered data`);
}
const wrong = await fetch(`${base}/ui/`, { headers: { Authorization: `Basic ${Buffer.from("me:not-a-key").toString("base64")}` } });
assert.equal(wrong.status, 401);

step("the page's policy allows only its own files");
const served = await fetch(`${base}/ui/`, { headers: { Authorization: `Bearer ${writer}` } });
assert.equal(served.status, 200);
const policy = served.headers.get("content-security-policy");
assert.match(policy, /script-src 'self'/);
assert.match(policy, /frame-ancestors 'none'/);
assert.ok(!policy.includes("unsafe-inline") && !policy.includes("*"), policy);
assert.equal(served.headers.get("x-content-type-options"), "nosniff");

// ---- the page, as the writer ---------------------------------------------------------------
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const violations = [];
  async function open(key, url = `${base}/ui/`) {
    const context = await browser.newContext({
      httpCredentials: { username: "me", password: key },
      viewport: { width: 1000, height: 900 },
    });
    const page = await context.newPage();
    page.on("console", (m) => { if (/Content Security Policy|Refused to/.test(m.text())) violations.push(m.text()); });
    page.on("pageerror", (e) => violations.push(`page error: ${e.message}`));
    page.on("dialog", (d) => { violations.push(`a dialog opened: ${d.message()}`); d.dismiss(); });
    await page.goto(url);
    await page.waitForSelector('body[data-ready="true"]');
    return page;
  }
  const contents = (page) => page.locator(".memory .content").allTextContents();
  async function searchFor(page, query) {
    const before = await page.locator("#status").textContent();
    await page.fill("#query", query);
    await page.click('#search button[type="submit"]');
    await page.waitForFunction((b) => document.getElementById("status").textContent !== b, before);
    return page.locator("#status").textContent();
  }

  step("the writer's page lists the tenant's memories, newest first");
  const page = await open(writer);
  assert.deepEqual(await contents(page), SEEDS.map((s) => s.content).reverse());
  assert.equal(await page.locator("#memories script, #memories img").count(), 0, "markup in a memory became elements");
  assert.equal(await page.evaluate(() => window.__pwned), undefined, "a memory's script ran");
  assert.equal(await page.locator(".memory").first().locator(".author").textContent(), "key:browser-writer");
  assert.ok((await page.locator(".memory").first().locator(".expires").textContent()).length > 0);

  step("a search in English finds the English memory, with its confidence");
  let status = await searchFor(page, "which database does production use?");
  assert.match(status, /confidence|match/);
  assert.match((await contents(page))[0], /PostgreSQL 18/);

  step("a search in Korean finds the Korean memory");
  status = await searchFor(page, "배포는 무슨 요일에 하나요?");
  assert.match((await contents(page))[0], /목요일/, status);

  step("forget");
  await page.click("#newest");
  await page.waitForFunction(() => document.querySelectorAll(".memory").length === 5);
  const reports = page.locator(".memory", { hasText: "bullet points" });
  await reports.locator(".forget").click();
  await reports.locator(".forget").click(); // the second click confirms
  await page.waitForFunction(() => document.getElementById("status").textContent === "Forgotten.");
  assert.equal(await page.locator(".memory", { hasText: "bullet points" }).count(), 0);
  assert.ok(!(await listed(writer)).some((m) => m.content.includes("bullet points")), "forgotten, yet still listed");

  step("correct");
  const original = (await listed(writer)).find((m) => m.content.startsWith("Production runs"));
  const production = page.locator(".memory", { hasText: "Production runs" });
  await production.locator(".correct").click();
  const corrected = "Production runs on PostgreSQL 18 with pgvector; staging runs PostgreSQL 18 too.";
  await production.locator("textarea").fill(corrected);
  await production.locator('.correction button[type="submit"]').click();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Corrected.");
  assert.ok((await contents(page)).includes(corrected));
  const now = await listed(writer);
  assert.ok(!now.some((m) => m.id === original.id), "the corrected memory is still there");
  const replacement = now.find((m) => m.content === corrected);
  assert.equal(replacement.replaces, original.id);
  assert.equal(replacement.type, "project");

  step("extend expiry");
  const release = (await listed(writer)).find((m) => m.content.startsWith("The release branch"));
  const card = page.locator(".memory", { hasText: "The release branch" });
  await card.locator(".extend").click();
  await card.locator('input[name="days"]').fill("90");
  await card.locator('.extension button[type="submit"]').click();
  await page.waitForFunction(() => document.getElementById("status").textContent === "Expiry extended.");
  const extended = (await listed(writer)).find((m) => m.content.startsWith("The release branch"));
  const days = (Date.parse(extended.expires) - Date.parse(release.expires)) / 86400000;
  assert.ok(days > 75, `the expiry moved ${days} days`);
  assert.deepEqual(extended.tags, ["release"]);
  await page.screenshot({ path: `${artifacts}/ui.png`, fullPage: true });

  step("a read-only key sees the memories and no action");
  const readOnly = await open(reader);
  assert.equal(await readOnly.locator(".memory").count(), 4);
  assert.equal(await readOnly.locator(".memory .forget:visible, .memory .correct:visible").count(), 0);
  const refused = await fetch(`${base}/ui/mcp`, {
    method: "POST",
    headers: { Authorization: `Bearer ${reader}`, "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "forget", arguments: { id: extended.id } } }),
  });
  assert.equal(refused.status, 403);

  step("another tenant's key sees none of them, and cannot forget one");
  const stranger = await open(other);
  assert.equal(await stranger.locator(".memory").count(), 0);
  const forget = await callTool(other, "forget", { id: extended.id });
  assert.match(forget.content[0].text, /No memory with id/);
  assert.ok((await listed(writer)).some((m) => m.id === extended.id), "another tenant's forget deleted it");

  // ---- the MCP App, inside a minimal host --------------------------------------------------
  step("tools/list names the app only to a client that declares MCP Apps");
  const capabilities = (extensions) => ({
    _meta: {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientCapabilities": extensions ? { extensions } : {},
    },
  });
  const tool = (list) => list.tools.find((t) => t.name === "list_memories");
  const declared = await rpc(writer, "tools/list",
    capabilities({ "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } }), true);
  assert.equal(tool(declared)._meta.ui.resourceUri, APP_URI);
  const plain = await rpc(writer, "tools/list", capabilities(null), true);
  assert.equal(tool(plain)._meta, undefined);

  step("the app renders in a sandboxed frame under the hosts' default policy");
  const read = await rpc(writer, "resources/read", { uri: APP_URI });
  assert.equal(read.contents[0].mimeType, "text/html;profile=mcp-app");
  const appHtml = read.contents[0].text;
  const hostContext = await browser.newContext({ viewport: { width: 1000, height: 900 } });
  const host = await hostContext.newPage();
  host.on("pageerror", (e) => violations.push(`host page error: ${e.message}`));
  host.on("console", (m) => { if (/Content Security Policy|Refused to/.test(m.text())) violations.push(m.text()); });
  // The host proxies the app's tools/call to the server with its own credential.
  await host.exposeFunction("callServer", (params) => rpc(writer, "tools/call", params));
  // The policy MCP Apps hosts apply when a resource declares none: no network at all.
  await host.route("http://host.test/", (route) => route.fulfill({
    contentType: "text/html",
    headers: { "Content-Security-Policy": "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; media-src 'self' data:; connect-src 'none'" },
    body: '<!doctype html><iframe id="app" sandbox="allow-scripts allow-forms" style="width:960px;height:1400px;border:0"></iframe>',
  }));
  await host.goto("http://host.test/");
  await host.evaluate((html) => {
    const frame = document.getElementById("app");
    window.fromApp = [];
    window.addEventListener("message", async (event) => {
      if (event.source !== frame.contentWindow) return;
      const message = event.data;
      if (!message || message.jsonrpc !== "2.0") return;
      window.fromApp.push(message.method || "reply");
      if (message.id === undefined) return;
      let reply;
      if (message.method === "ui/initialize") {
        reply = { result: { protocolVersion: "2026-01-26", hostInfo: { name: "test host", version: "1" }, hostCapabilities: { serverTools: {} }, hostContext: { theme: "light" } } };
      } else if (message.method === "tools/call") {
        try {
          reply = { result: await window.callServer(message.params) };
        } catch (e) {
          reply = { error: { code: -32603, message: String(e.message) } };
        }
      } else {
        reply = { error: { code: -32601, message: `not in this host: ${message.method}` } };
      }
      frame.contentWindow.postMessage(Object.assign({ jsonrpc: "2.0", id: message.id }, reply), "*");
    });
    frame.srcdoc = html;
  }, appHtml);
  const app = host.frameLocator("#app");
  await app.locator('body[data-ready="true"]').waitFor();
  const handshake = await host.evaluate(() => window.fromApp.slice(0, 2));
  assert.deepEqual(handshake, ["ui/initialize", "ui/notifications/initialized"]);
  assert.equal(await app.locator(".memory").count(), 4);
  assert.ok(await app.locator("#tenant-field").isHidden(), "the app asks for a tenant");
  const found = await app.locator(".memory .content").allTextContents();
  assert.ok(found.includes(MARKUP));
  assert.equal(await app.locator("#memories script, #memories img").count(), 0);

  step("the app searches in Korean and forgets");
  await app.locator("#query").fill("금요일에 배포해도 되나요?");
  await app.locator('#search button[type="submit"]').click();
  await app.locator("#status", { hasText: "found for" }).waitFor();
  assert.match(await app.locator(".memory .content").first().textContent(), /금요일/);
  await app.locator("#newest").click();
  await app.locator("#status", { hasText: "newest first" }).waitFor();
  const markup = app.locator(".memory", { hasText: "broke the old dashboard" });
  await markup.locator(".forget").click();
  await markup.locator(".forget").click();
  await app.locator("#status", { hasText: "Forgotten." }).waitFor();
  assert.ok(!(await listed(writer)).some((m) => m.content === MARKUP));
  await host.screenshot({ path: `${artifacts}/app.png`, fullPage: true });
  assert.equal(await host.evaluate(() => window.__pwned), undefined);

  assert.deepEqual(violations, [], "the page broke its policy or failed");
  writeFileSync(`${artifacts}/browser.txt`, "every check passed\n");
  step(`every check passed; screenshots in ${artifacts}`);
} finally {
  await browser.close();
}
