// Drive mcp-memory with the TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// node_clients.sh): every tool, over Streamable HTTP or over stdio.
//
//   node ts_client.mjs http URL       the running server, identity in headers (and
//                                     MCP_TOKEN, when set, as the bearer token; with
//                                     MCP_OAUTH_ISSUER, the SDK gets its own token)
//   node ts_client.mjs stdio BINARY   each client starts `BINARY stdio`, identity in
//                                     MEMORY_TENANT / MEMORY_CONVERSATION, the server's
//                                     configuration from this process's DATABASE_URL,
//                                     EMBEDDING_* and RECALL_* variables
//
// Prints one line per passed check; the first failed check prints what came back and
// exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";

const [how, target] = process.argv.slice(2);
if (!["http", "stdio"].includes(how) || !target) {
  console.error("usage: node ts_client.mjs http URL | stdio BINARY");
  process.exit(2);
}
const TENANT = process.env.INTEROP_TENANT ?? `interop-ts-${how}`;
const FACT = "Integration tests need docker compose up before they run";
const NOTE = "In this chat the release branch is called orchid";
const EXPECTED_TOOLS = ["recall", "remember", "list_memories", "forget", "memory_stats"];
const SERVER_VARIABLES = ["DATABASE_URL", "EMBEDDING_PROVIDER", "EMBEDDING_BASE_URL",
  "EMBEDDING_API_KEY", "EMBEDDING_MODEL", "EMBEDDING_DIM", "RECALL_MIN_SIMILARITY", "PATH"];
let passed = 0;

function ok(name, cond, got) {
  if (!cond) {
    console.error(`FAIL [ts ${how}] ${name}\n  got: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  passed += 1;
  console.log(`ok   [ts ${how}] ${name}`);
}

async function connect(conversation) {
  let transport;
  if (how === "http") {
    const headers = { "X-Memory-Tenant": TENANT };
    if (conversation) headers["X-Conversation-Id"] = conversation;
    // An access token an authorization server issued (run.sh's OAuth server), when given.
    if (process.env.MCP_TOKEN) headers.Authorization = `Bearer ${process.env.MCP_TOKEN}`;
    const options = { requestInit: { headers } };
    // Or the SDK's own OAuth: from the server's 401 to its RFC 9728 metadata, the
    // authorization server's metadata and a client-credentials token for this resource.
    if (process.env.MCP_OAUTH_ISSUER) {
      // The SDK asks for the client's configured scope with client credentials (not the
      // challenge's), as an operator would configure it.
      options.authProvider = new ClientCredentialsProvider({
        clientId: "interop-ts", clientSecret: "interop-ts-secret",
        expectedIssuer: process.env.MCP_OAUTH_ISSUER, scope: "memory:read memory:write",
      });
    }
    transport = new StreamableHTTPClientTransport(new URL(target), options);
  } else {
    const env = Object.fromEntries(SERVER_VARIABLES.filter((k) => k in process.env)
      .map((k) => [k, process.env[k]]));
    env.MEMORY_TENANT = TENANT;
    if (conversation) env.MEMORY_CONVERSATION = conversation;
    transport = new StdioClientTransport({ command: target, args: ["stdio"], env, stderr: "ignore" });
  }
  const client = new Client({ name: "interop-ts", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

async function call(client, name, args, { error = false } = {}) {
  const result = await client.callTool({ name, arguments: args });
  const text = (result.content ?? []).map((c) => c.text ?? "").join("\n");
  ok(`${name} ${JSON.stringify(args)} -> isError=${error}`, Boolean(result.isError) === error, result);
  return { text, data: result.structuredContent };
}

const project = await connect();
ok("serverInfo names mcp-memory", project.getServerVersion()?.name === "mcp-memory",
  project.getServerVersion());
const listed = (await project.listTools()).tools;
const names = listed.map((t) => t.name);
ok(`tools/list is exactly ${EXPECTED_TOOLS}`, JSON.stringify(names) === JSON.stringify(EXPECTED_TOOLS), names);
// The annotations a client reads to skip confirming reads and to warn before a deletion.
const hints = Object.fromEntries(listed.map((t) => [t.name, t.annotations ?? {}]));
ok("recall, list_memories and memory_stats are read-only",
  ["recall", "list_memories", "memory_stats"].every((n) => hints[n].readOnlyHint === true), hints);
ok("forget is destructive and idempotent; remember may destroy (replaces) and is not idempotent",
  hints.forget.destructiveHint === true && hints.forget.idempotentHint === true
    && hints.remember.readOnlyHint === false && hints.remember.destructiveHint === true
    && hints.remember.idempotentHint === false, hints);
ok("every tool has a title", listed.every((t) => typeof t.title === "string" && t.title.length > 0), listed);

let r = await call(project, "remember", { content: FACT, tags: ["ci"] });
const id = /^\[MEMORY\] Stored as ([0-9A-HJKMNP-TV-Z]{26})\./.exec(r.text)?.[1];
ok("remember: stored, with its id", id !== undefined && r.data?.outcome === "stored", r);
r = await call(project, "remember", { content: FACT, tags: ["ci"] });
ok("remember again: Already known", r.text.includes("Already known") && r.text.includes(id), r);
r = await call(project, "recall", { query: "docker compose before integration tests" });
ok("recall: finds it, with the confidence", r.text.includes(FACT) && r.data?.results?.[0]?.id === id, r);
r = await call(project, "list_memories", {});
ok("list_memories: 1 memory, newest first", r.text.includes("1 memory, newest first"), r);
r = await call(project, "memory_stats", {});
ok("memory_stats: 1 memory for this project", r.text.includes("1 memory for this project"), r);
// The memory as a resource, and the prompt that recalls for a task.
const resources = (await project.listResources()).resources.map((x) => x.uri);
ok("resources/list: the statistics and the memory", resources.includes("memory://stats")
  && resources.includes(`memory://${id}`), resources);
const read = await project.readResource({ uri: `memory://${id}` });
ok("resources/read: the memory as text and as JSON", read.contents[0].text.includes(FACT)
  && JSON.parse(read.contents[1].text).id === id, read);
const prompt = await project.getPrompt({ name: "recall-for-task",
  arguments: { task: "run the integration tests" } });
ok("prompts/get recall-for-task: the memory, quoted as data",
  prompt.messages[0].content.text.includes(FACT), prompt);
r = await call(project, "recall", { query: 42 }, { error: true });
ok("recall with a number: Input validation error", r.text.includes("Input validation error"), r);

const chat = await connect("chat:interop-ts");
r = await call(chat, "remember", { content: NOTE, scope: "conversation" });
ok("conversation remember: this conversation only", r.text.includes("this conversation only"), r);
r = await call(chat, "list_memories", {});
ok("conversation list: the project memory and its note", r.text.includes("2 memories"), r);
r = await call(project, "list_memories", {});
ok("project list: not the conversation's note", !r.text.includes(NOTE), r);
await chat.close();

r = await call(project, "forget", { id });
ok("forget: Deleted", r.text === `[MEMORY] Deleted ${id}.`, r);
await project.close();
console.log(`ts-sdk ${how}: all ${passed} checks passed`);
