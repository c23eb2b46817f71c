// Browser tests of the built-in web client: each test starts the real `roundtable` binary on a
// free loopback port with a fresh instance directory and drives the page in real Chromium.
//
//   ROUNDTABLE_BIN=target/debug/roundtable node --test --test-concurrency=1 web.test.mjs
//
// (tests/web/run.sh does exactly that.) Screenshots go to tests/web/artifacts/; with
// UPDATE_DOC_SCREENSHOT=1 the suite also refreshes docs/web-client.png, the README's screenshot.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import http from "node:http";
import { mkdtemp, mkdir, rm, copyFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { fixtureEntry, writeBigConversation } from "./fixtures.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const ARTIFACTS = path.join(HERE, "artifacts");
const DOC_SCREENSHOT = path.join(REPO, "docs", "web-client.png");
const BIN = path.resolve(REPO, process.env.ROUNDTABLE_BIN || "target/debug/roundtable");
const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const WAIT_MS = 15000;

let browser;

before(async () => {
  assert.ok(existsSync(BIN), `roundtable binary not found at ${BIN} (set ROUNDTABLE_BIN)`);
  await mkdir(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
});

// ---------------------------------------------------------------------------------------
// The server

/** Starts `roundtable serve` and resolves once it printed its listening line. */
async function startServer({ port = 0, dir, env = {}, extraArgs = [] } = {}) {
  const instanceDir = dir ?? (await mkdtemp(path.join(tmpdir(), "roundtable-web-")));
  const args = ["serve", "--port", String(port), "--host", "127.0.0.1", "--instance-dir", instanceDir, ...extraArgs];
  const proc = spawn(BIN, args, {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG || "info", ...env },
  });
  let log = "";
  const exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
  proc.stderr.setEncoding("utf8");
  const bound = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start within 20 s:\n${log}`)), 20000);
    proc.stderr.on("data", (chunk) => {
      log = (log + chunk).slice(-200000);
      const m = /listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code ?? signal}) before listening:\n${log}`));
    });
  });
  const server = {
    proc,
    port: bound,
    dir: instanceDir,
    url: `http://127.0.0.1:${bound}/`,
    exited,
    log: () => log,
    /** SIGTERM, then wait for the exit (SIGKILL after 10 s). */
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        const timer = setTimeout(() => proc.kill("SIGKILL"), 10000);
        const r = await exited;
        clearTimeout(timer);
        return r;
      }
      return exited;
    },
  };
  return server;
}

/** Waits until the server's log (stderr) matches `re`. */
async function waitLog(server, re) {
  const timeout = Date.now() + WAIT_MS * 4;
  while (!re.test(server.log())) {
    assert.ok(Date.now() < timeout, `server log never matched ${re}:\n${server.log().slice(-2000)}`);
    await new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        server.proc.stderr.off("data", done);
        resolve();
      };
      const timer = setTimeout(done, 1000);
      server.proc.stderr.on("data", done);
    });
  }
}

/** A fresh server, stopped and removed after the test. */
async function serverFor(t, options) {
  const server = await startServer(options);
  const servers = [server];
  t.after(async () => {
    for (const s of servers) await s.stop();
    await rm(server.dir, { recursive: true, force: true });
  });
  return { server, track: (s) => servers.push(s) };
}

// ---------------------------------------------------------------------------------------
// Pages

// Expected noise: failed reconnect attempts while a server restarts, and Chromium's report of
// the <script> that the sandboxed html frame was not allowed to run.
const IGNORED_CONSOLE = [
  /WebSocket connection to .* failed/i,
  /ERR_CONNECTION_REFUSED/i,
  /Blocked script execution in 'about:srcdoc' because the document's frame is sandboxed/,
];

/**
 * A new browser context on the web client; fails the test on page errors or JS dialogs.
 * `init`: [fn, arg] run in the page before its scripts (Playwright's addInitScript).
 */
async function openClient(t, server, { viewport, colorScheme = "light", wait = true, init } = {}) {
  const context = await browser.newContext({
    viewport: viewport ?? { width: 1280, height: 820 },
    colorScheme,
  });
  if (init) await context.addInitScript(...init);
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => {
    problems.push(`dialog: ${d.type()} ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  page.on("console", (m) => {
    if (m.type() === "error" && !IGNORED_CONSOLE.some((re) => re.test(m.text()))) {
      problems.push(`console error: ${m.text()}`);
    }
  });
  t.after(async () => {
    await context.close();
    assert.deepEqual(problems, [], "no page errors, dialogs or console errors (CSP violations show up here)");
  });
  // Every RPC method name the page sends, in order (to check it subscribes and never polls).
  const sentMethods = [];
  page.on("websocket", (ws) =>
    ws.on("framesent", (f) => {
      try {
        const name = JSON.parse(String(f.payload))?.message?.name;
        if (name) sentMethods.push(name);
      } catch {
        /* not JSON: not ours */
      }
    }),
  );
  await page.goto(server.url);
  if (wait) await waitReady(page);
  return { context, page, problems, sentMethods };
}

async function waitReady(page, name) {
  await page.waitForFunction(
    (n) => {
      const m = document.querySelector("#messages");
      const title = document.querySelector("#chat-title");
      return (
        document.querySelector("#connection")?.dataset.state === "connected" &&
        m?.dataset.ready === "true" &&
        m.dataset.conversationId === title?.dataset.conversationId &&
        (n === undefined || title.textContent === n)
      );
    },
    name,
    { timeout: WAIT_MS },
  );
}

const title = (page) => page.locator("#chat-title").textContent();
const currentId = (page) => page.locator("#chat-title").getAttribute("data-conversation-id");

async function send(page, text) {
  await page.locator("#input").fill(text);
  await page.locator("#input").press("Enter");
}

async function waitIdle(page) {
  await page.locator('#queue-state[data-state="idle"]').waitFor({ state: "attached" });
}

/** Waits until every log entry up to the last one is on screen with its seq. */
async function waitSynced(page, count) {
  await page.waitForFunction(
    (n) => document.querySelector("#messages")?.dataset.lastSeq === String(n - 1),
    count,
  );
}

const renderedSeqs = (page) =>
  page.$$eval("#messages [data-seq]", (nodes) => nodes.map((n) => Number(n.dataset.seq)));

const userTexts = (page) => page.$$eval("#messages .msg.user .user-text", (n) => n.map((x) => x.textContent));
const agentTexts = (page) =>
  page.$$eval("#messages .msg.agent:not(.tool) .msg-body", (n) => n.map((x) => x.textContent.trim()));

/** The sidebar row of a conversation, by exact name. */
function row(page, name) {
  return page.locator("#conversation-list li.conv").filter({
    has: page.locator(".conv-name").getByText(name, { exact: true }),
  });
}

const sidebarNames = (page) => page.$$eval("#conversation-list .conv-name", (n) => n.map((x) => x.textContent));

async function createFromSidebar(page, name) {
  const before = await currentId(page);
  await page.getByRole("button", { name: "New conversation" }).click();
  const dialog = page.locator("#name-dialog");
  await dialog.waitFor();
  await dialog.locator("#name-input").fill(name);
  await dialog.getByRole("button", { name: "Create" }).click();
  await dialog.waitFor({ state: "hidden" });
  await page.waitForFunction((id) => document.querySelector("#chat-title").dataset.conversationId !== id, before);
  await waitReady(page, name.trim() || undefined);
}

async function shot(page, name, opts = {}) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), animations: "disabled", ...opts });
}

/**
 * A plain same-origin page (GET /health) with a minimal protocol client, to read the log or
 * act as another client without going through the web client's code.
 */
async function rpcPage(t, server) {
  const context = await browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  await page.goto(`${server.url}health`);
  const run = (fn, arg) =>
    page.evaluate(
      async ({ src, arg }) => {
        const ws = new WebSocket(`ws://${location.host}/`);
        await new Promise((resolve, reject) => {
          ws.onopen = resolve;
          ws.onerror = () => reject(new Error("WebSocket failed"));
        });
        const counters = {};
        const pending = new Map();
        const calls = [];
        ws.onmessage = (ev) => {
          const env = JSON.parse(ev.data);
          const m = env.message;
          if (m.type === "invokeResult" || m.type === "invokeError") {
            const p = pending.get(`${env.name}#${m.callId}`);
            pending.delete(`${env.name}#${m.callId}`);
            if (m.type === "invokeResult") p?.resolve(m.result);
            else p?.reject(new Error(m.error));
          } else if (m.type === "call") calls.push({ channel: env.name, name: m.name, args: m.args });
        };
        const invoke = (channel, name, args) =>
          new Promise((resolve, reject) => {
            const callId = (counters[channel] = (counters[channel] ?? -1) + 1);
            pending.set(`${channel}#${callId}`, { resolve, reject });
            ws.send(JSON.stringify({ name: channel, message: { type: "invoke", callId, name, args } }));
          });
        const waitCall = async (pred) => {
          const t0 = Date.now();
          while (Date.now() - t0 < 10000) {
            const c = calls.find(pred);
            if (c) return c;
            await new Promise((r) => setTimeout(r, 20));
          }
          throw new Error("timed out waiting for a call");
        };
        // eslint-disable-next-line no-new-func
        const body = new Function(`return (${src});`)();
        try {
          return await body({ invoke, waitCall, calls }, arg);
        } finally {
          ws.close();
        }
      },
      { src: fn.toString(), arg },
    );
  return {
    run,
    history: (id) =>
      run(
        async ({ invoke }, id) => {
          await invoke("agent-server", "joinConversation", [{ conversationId: id }]);
          return invoke(`dispatcher:${id}`, "getDisplayHistory", []);
        },
        id,
      ),
    list: () => run(({ invoke }) => invoke("agent-server", "listConversations", [null])),
    /** Joins, submits `text`, waits for its commandComplete. */
    submit: (id, text) =>
      run(
        async ({ invoke, waitCall }, { id, text }) => {
          await invoke("agent-server", "joinConversation", [{ conversationId: id }]);
          const ack = await invoke(`dispatcher:${id}`, "submitCommand", [text, null, null, "rpc-1", null]);
          const rid = ack.entry.requestId;
          await waitCall((c) => c.name === "notify" && c.args[1] === "commandComplete" && c.args[0]?.requestId === rid);
          return rid;
        },
        { id, text },
      ),
  };
}

/** Rendered seqs equal the log's seqs (no duplicate, no gap) and user bubbles match it. */
async function assertMatchesLog(page, rpc) {
  const id = await currentId(page);
  const log = await rpc.history(id);
  await waitSynced(page, log.length);
  assert.deepEqual(await renderedSeqs(page), log.map((e) => e.seq), "rendered seqs = log seqs");
  assert.deepEqual(
    await userTexts(page),
    log.filter((e) => e.type === "user-request").map((e) => e.command),
    "one user bubble per user-request entry",
  );
  return log;
}

/**
 * A fake OpenAI-compatible model on loopback, for `--provider openai`: it answers in markdown
 * at once, except that requests whose last user message contains "slow" wait for release().
 * With `reportUsage`, an answer to a message naming `usage IN/OUT` reports that usage (as
 * model `fake-q4`).
 */
async function fakeModel(t, { reportUsage = false } = {}) {
  const held = [];
  const server = http.createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    const request = JSON.parse(body || "{}");
    const last = [...(request.messages || [])].reverse().find((m) => m.role === "user");
    const text = typeof last?.content === "string" ? last.content : JSON.stringify(last?.content ?? "");
    const reported = reportUsage ? /usage (\d+)\/(\d+)/.exec(text) : null;
    const answer = () => {
      res.writeHead(200, { "content-type": "application/json" });
      const body = {
        id: "fake",
        object: "chat.completion",
        choices: [{ index: 0, message: { role: "assistant", content: `**Answer** to _${text}_` }, finish_reason: "stop" }],
      };
      if (reported) {
        const [prompt, completion] = [Number(reported[1]), Number(reported[2])];
        body.model = "fake-q4";
        body.usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
      }
      res.end(JSON.stringify(body));
    };
    // A request to stream a story is answered as the real APIs stream: server-sent events,
    // the thinking first, then the words; the end waits until the test releases it.
    if (request.stream && text.includes("stream")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const event = (delta) =>
        res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`);
      event({ reasoning_content: "Pondering the plot." });
      event({ content: "**Once** upon " });
      held.push(() => {
        event({ content: "a time." });
        res.write(`data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`);
        res.end("data: [DONE]\n\n");
      });
      return;
    }
    if (text.includes("slow")) held.push(answer);
    else answer();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    held: () => held.length,
    release: () => held.splice(0).forEach((answer) => answer()),
  };
}

// ---------------------------------------------------------------------------------------
// Tests

test("create a conversation from the sidebar and get 5 for 2+3 (tool call, result)", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  assert.equal(await title(page), "Web", "a fresh page opens the conversation named Web");
  await shot(page, "01-empty");

  await createFromSidebar(page, "Math");
  assert.equal(await page.evaluate(() => localStorage.getItem("roundtable.lastConversationId")), await currentId(page));
  await send(page, "what is 2+3");
  await page.locator(".msg.user .user-text", { hasText: "what is 2+3" }).waitFor();
  const call = page.locator(".msg.tool-call");
  await call.waitFor();
  assert.match(await call.textContent(), /calculate/);
  assert.match(await call.textContent(), /"expression":"2\+3"/);
  assert.equal((await page.locator(".msg.tool-result .tool-body").textContent()).trim(), "5");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^5$/ }).waitFor();
  await waitIdle(page);
  assert.ok(await page.locator("#cancel").isHidden(), "no Cancel button when nothing of mine runs");

  // The sidebar lists both, newest first, with counts; the input was cleared.
  await page.waitForFunction(() => document.querySelector('#conversation-list li.current')?.dataset.messages === "1");
  const names = await sidebarNames(page);
  assert.deepEqual(names.slice(0, 2), ["Math", "Web"]);
  assert.match(await row(page, "Math").locator(".conv-meta").textContent(), /1 client · 1 message · just now/);
  assert.equal(await page.locator("#input").inputValue(), "");

  // A name collision is reported by the server and shown in the dialog.
  await page.getByRole("button", { name: "New conversation" }).click();
  await page.locator("#name-input").fill("math");
  await page.locator("#name-ok").click();
  await page.locator("#name-error").waitFor();
  assert.match(await page.locator("#name-error").textContent(), /A conversation named "Math" already exists/);
  await shot(page, "02-name-collision");
  await page.locator("#name-cancel").click();

  // No name: an automatic "Conversation YYYY-MM-DD HH:MM" one.
  await createFromSidebar(page, "");
  assert.match(await title(page), /^Conversation \d{4}-\d\d-\d\d \d\d:\d\d$/);
  await page.locator("#conversation-list li.conv").nth(2).waitFor();

  // The filter box narrows the list client-side.
  await page.locator("#filter").fill("MAT");
  await page.waitForFunction(() => document.querySelectorAll("#conversation-list li.conv").length === 1);
  assert.deepEqual(await sidebarNames(page), ["Math"]);
  await page.locator("#filter").fill("");

  // Shift+Enter is a new line, not a send.
  await page.locator("#input").fill("line one");
  await page.locator("#input").press("Shift+Enter");
  await page.locator("#input").pressSequentially("line two");
  assert.equal(await page.locator("#input").inputValue(), "line one\nline two");
  await page.locator("#input").press("Enter");
  await page.locator(".msg.user .user-text", { hasText: "line two" }).waitFor();
  assert.equal(await page.locator(".msg.user .user-text").last().textContent(), "line one\nline two");
});

test("the sidebar counts this page among the clients of the conversation it has open", async (t) => {
  const { server } = await serverFor(t);
  // Every time the open conversation's row is drawn, what it said: the list answer and the
  // pushed changes can predate the page's own join (the count it pushes comes later), and the
  // row must count the page from the moment it is current.
  const watch = () => {
    window.__zeroCounts = [];
    new MutationObserver(() => {
      const li = document.querySelector("#conversation-list li.conv.current");
      if (li && li.dataset.clients === "0") window.__zeroCounts.push(li.querySelector(".conv-meta")?.textContent);
    }).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
  };
  const { page } = await openClient(t, server, { init: [watch] });
  const clientsOf = (name) => row(page, name).getAttribute("data-clients");
  await page.locator('#conversation-list li.conv.current[data-clients="1"]').waitFor();
  assert.match(await row(page, "Web").locator(".conv-meta").textContent(), /^1 client · 0 messages/);
  // Switching moves the count with the page: the new one has it, the one left does not.
  await createFromSidebar(page, "Elsewhere");
  await page.locator('#conversation-list li.conv.current[data-clients="1"]').waitFor();
  await page.waitForFunction(() =>
    [...document.querySelectorAll("#conversation-list li.conv")].some(
      (li) => li.querySelector(".conv-name")?.textContent === "Web" && li.dataset.clients === "0",
    ),
  );
  assert.equal(await clientsOf("Elsewhere"), "1");
  // A second page in the same conversation: both count two, also after a reload (a new socket).
  const b = await openClient(t, server, { init: [watch] });
  await b.page.locator("#filter").fill("elsewhere");
  await row(b.page, "Elsewhere").locator(".conv-open").click();
  await waitReady(b.page, "Elsewhere");
  await b.page.locator('#conversation-list li.conv.current[data-clients="2"]').waitFor();
  await page.locator('#conversation-list li.conv.current[data-clients="2"]').waitFor();
  await b.page.reload();
  await waitReady(b.page, "Elsewhere");
  await b.page.locator('#conversation-list li.conv.current[data-clients="2"]').waitFor();
  assert.deepEqual(await page.evaluate(() => window.__zeroCounts), [], "the open conversation never showed 0 clients");
  assert.deepEqual(await b.page.evaluate(() => window.__zeroCounts), [], "the open conversation never showed 0 clients");
});

test("the conversation header lists the MCP servers: connected with their tools, or failed", async (t) => {
  const mcp = path.join(HERE, "..", "mcp");
  const python = path.join(mcp, "venv", "bin", "python");
  const configDir = await mkdtemp(path.join(tmpdir(), "roundtable-web-mcp-"));
  t.after(() => rm(configDir, { recursive: true, force: true }));
  const config = path.join(configDir, "mcp.json");
  await writeFile(
    config,
    JSON.stringify({
      mcpServers: {
        fixture: { command: python, args: [path.join(mcp, "fixture_server.py")] },
        broken: { command: "/nonexistent/mcp-server" },
      },
    }),
  );
  const { server } = await serverFor(t, { extraArgs: ["--mcp-config", config] });
  const deadline = Date.now() + 20000;
  while (!server.log().includes("MCP server fixture: connected (")) {
    assert.ok(Date.now() < deadline, `the fixture MCP server did not connect:\n${server.log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const { page } = await openClient(t, server);
  const mcpState = page.locator("#mcp-state");
  await page.waitForFunction(() => document.querySelector("#mcp-state")?.dataset.count === "2");
  assert.equal(await mcpState.textContent(), "MCP: broken failed (0 tools) · fixture connected (3 tools)");
  const details = await mcpState.getAttribute("title");
  assert.match(details, /^broken: failed: cannot start `\/nonexistent\/mcp-server`: No such file or directory/);
  assert.match(details, /\nfixture: connected \(pid \d+\); stdio: .*fixture_server\.py$/);
});

test("the search box filters names and finds what was said, with the matched words marked", async (t) => {
  const { server } = await serverFor(t);
  const { page, sentMethods } = await openClient(t, server);
  await createFromSidebar(page, "Trip");
  await send(page, "Weather in Zürich tomorrow?");
  await page.locator(".msg.user .user-text", { hasText: "Zürich" }).waitFor();
  await waitIdle(page);
  await createFromSidebar(page, "Groceries");
  assert.equal(await title(page), "Groceries");

  // No name has the word, so the list is empty; "In messages" has Trip, with "Zürich" marked
  // (typed without its accent).
  await page.locator("#filter").fill("zurich");
  await page.waitForFunction(() => document.querySelectorAll("#conversation-list li.conv").length === 0);
  const hit = page.locator("#content-list .content-hit").first();
  await hit.waitFor();
  assert.equal(await hit.locator(".conv-name").textContent(), "Trip");
  assert.equal(await hit.locator("mark").first().textContent(), "Zürich");
  assert.match(await hit.locator(".snippet").first().textContent(), /^user: Weather in Zürich tomorrow\?/);
  assert.ok(sentMethods.includes("searchConversationContent"), sentMethods.join(" "));
  await shot(page, "search-content");

  // Nothing said matches: a plain line, no hits; clearing the box hides the section.
  await page.locator("#filter").fill("xylophone");
  await page.locator("#content-status", { hasText: "Nothing said matches “xylophone”." }).waitFor();
  assert.equal(await page.locator("#content-list .content-hit").count(), 0);
  await page.locator("#filter").fill("zurich");
  await hit.waitFor();

  // A hit opens its conversation, at the matched turn (the hit names its seq).
  await hit.locator(".conv-open").click();
  await waitReady(page, "Trip");
  await page.locator("#messages > .entry.hit .user-text", { hasText: "Weather in Zürich tomorrow?" }).waitFor();
  await page.locator("#filter").fill("");
  await page.locator("#content-results").waitFor({ state: "hidden" });
});

test("a second browser sees new messages live, in both directions", async (t) => {
  const { server } = await serverFor(t);
  const rpc = await rpcPage(t, server);
  const a = await openClient(t, server);
  await createFromSidebar(a.page, "Shared");
  const b = await openClient(t, server);
  await b.page.locator("#filter").fill("shared");
  await row(b.page, "Shared").locator(".conv-open").click();
  await waitReady(b.page, "Shared");
  // Both are connected: the header shows it (from listConversations' clientCount).
  await a.page.locator('#presence[data-count="2"]').waitFor();
  await b.page.locator('#presence[data-count="2"]').waitFor();
  assert.equal(await a.page.locator("#presence").textContent(), "2 clients connected");

  await send(a.page, "what is 2+3");
  await b.page.locator(".msg.user .user-text", { hasText: "what is 2+3" }).waitFor();
  await b.page.locator(".msg.tool-call").waitFor();
  await b.page.locator(".msg.tool-result .tool-body", { hasText: /^5$/ }).waitFor();
  assert.match(await b.page.locator(".msg.user .meta").first().textContent(), /Another client/);
  assert.match(await a.page.locator(".msg.user .meta").first().textContent(), /You/);

  await send(b.page, "hello from **B**");
  await a.page.locator(".msg.agent .markdown strong", { hasText: "B" }).waitFor();
  await waitIdle(a.page);
  await waitIdle(b.page);
  await shot(b.page, "03-second-client");
  const log = await assertMatchesLog(a.page, rpc);
  await assertMatchesLog(b.page, rpc);
  assert.equal(log.filter((e) => e.type === "user-request").length, 2);
  // The builtin shows a tool's result once, as the result (issue 50 (b)): no answer repeats it.
  assert.deepEqual(await agentTexts(b.page), ["echo: hello from B"]);

  // A question asked in A is answerable in B (live) and in C, which joins while it is pending
  // (JoinConversationResult.pendingInteractions); C's answer updates everyone in place.
  await send(a.page, "ask me is it sunny?");
  await b.page.locator(".msg.interaction").getByRole("button", { name: "Yes" }).waitFor();
  assert.ok(await b.page.locator(".msg.interaction").getByRole("button", { name: "Yes" }).isEnabled());
  const c = await openClient(t, server);
  await row(c.page, "Shared").locator(".conv-open").click();
  await waitReady(c.page, "Shared");
  const cYes = c.page.locator(".msg.interaction").getByRole("button", { name: "Yes" });
  assert.ok(await cYes.isEnabled(), "a pending question from the join result can be answered");
  await cYes.click();
  for (const p of [a.page, b.page, c.page]) {
    await p.locator(".msg.interaction .outcome", { hasText: "Answered: Yes" }).waitFor();
    await p.locator(".msg.agent .msg-body", { hasText: "You answered Yes." }).waitFor();
    assert.ok(await p.locator(".msg.interaction").getByRole("button", { name: "No" }).isDisabled());
  }
  await waitIdle(c.page);
  await assertMatchesLog(c.page, rpc);
  await assertMatchesLog(a.page, rpc);
});

test("rename and delete from the sidebar; the other browser's list follows", async (t) => {
  const { server } = await serverFor(t);
  const a = await openClient(t, server);
  await createFromSidebar(a.page, "Alpha");
  await createFromSidebar(a.page, "Beta");
  const b = await openClient(t, server);
  await row(b.page, "Beta").locator(".conv-open").click();
  await waitReady(b.page, "Beta");

  // b subscribed to the live list and follows a's changes without asking again (no polling).
  assert.ok(b.sentMethods.includes("subscribeConversations"), b.sentMethods.join(" "));
  const listedBefore = b.sentMethods.filter((m) => m === "listConversations").length;

  // Rename Alpha → Gamma (pencil button, dialog prefilled with the old name).
  await row(a.page, "Alpha").getByRole("button", { name: "Rename Alpha" }).click();
  assert.equal(await a.page.locator("#name-input").inputValue(), "Alpha");
  await a.page.locator("#name-input").fill("Beta");
  await a.page.locator("#name-ok").click();
  await a.page.locator("#name-error", { hasText: 'A conversation named "Beta" already exists' }).waitFor();
  await a.page.locator("#name-input").fill("Gamma");
  await a.page.locator("#name-ok").click();
  await a.page.locator("#name-dialog").waitFor({ state: "hidden" });
  await row(a.page, "Gamma").waitFor();
  await row(b.page, "Gamma").waitFor();
  await row(b.page, "Alpha").waitFor({ state: "detached" });
  assert.equal(b.sentMethods.filter((m) => m === "listConversations").length, listedBefore, "pushed, not polled");

  // Delete asks first; Cancel keeps it.
  await row(a.page, "Gamma").getByRole("button", { name: "Delete Gamma" }).click();
  await a.page.locator("#confirm-dialog").waitFor();
  assert.match(await a.page.locator("#confirm-text").textContent(), /Delete “Gamma”/);
  await a.page.locator("#confirm-cancel").click();
  await a.page.locator("#confirm-dialog").waitFor({ state: "hidden" });
  await row(a.page, "Gamma").waitFor();
  await row(a.page, "Gamma").getByRole("button", { name: "Delete Gamma" }).click();
  await shot(a.page, "04-confirm-delete");
  await a.page.locator("#confirm-ok").click();
  await row(a.page, "Gamma").waitFor({ state: "detached" });
  await row(b.page, "Gamma").waitFor({ state: "detached" });

  // Deleting the open conversation (Beta, open in both) moves both elsewhere: the newest
  // remaining one, which is Web.
  await row(a.page, "Beta").getByRole("button", { name: "Delete Beta" }).click();
  await a.page.locator("#confirm-ok").click();
  await waitReady(a.page, "Web");
  await a.page.locator(".notice", { hasText: "Deleted “Beta”." }).waitFor();
  await waitReady(b.page, "Web");
  await b.page.locator(".notice", { hasText: "This conversation was deleted." }).waitFor();
  await row(b.page, "Beta").waitFor({ state: "detached" });
  assert.deepEqual((await sidebarNames(b.page)).sort(), ["Web", "default"]);
});

test("reload restores the open conversation (localStorage)", async (t) => {
  const { server } = await serverFor(t);
  const rpc = await rpcPage(t, server);
  const { page } = await openClient(t, server);
  await createFromSidebar(page, "Reload me");
  const id = await currentId(page);
  await send(page, "what is 2+3");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^5$/ }).waitFor();
  await waitIdle(page);
  await page.reload();
  await waitReady(page, "Reload me");
  assert.equal(await currentId(page), id);
  assert.equal(await page.evaluate(() => localStorage.getItem("roundtable.lastConversationId")), id);
  await assertMatchesLog(page, rpc);
  assert.deepEqual(await userTexts(page), ["what is 2+3"]);
  // "Clear view" only clears the screen: a reload brings the messages back.
  await page.getByRole("button", { name: "Clear view" }).click();
  assert.equal(await page.locator("#messages .msg").count(), 0);
  await page.reload();
  await waitReady(page, "Reload me");
  await assertMatchesLog(page, rpc);
});

test("a server with a token: ?token= is taken once and kept; a browser without it is asked", async (t) => {
  const secrets = await mkdtemp(path.join(tmpdir(), "roundtable-token-"));
  t.after(() => rm(secrets, { recursive: true, force: true }));
  const tokenFile = path.join(secrets, "token");
  await writeFile(tokenFile, "web-secret\n", { mode: 0o600 });
  const { server } = await serverFor(t, { extraArgs: ["--token-file", tokenFile] });

  const first = await browser.newContext();
  t.after(() => first.close());
  const page = await first.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on("dialog", (d) => d.dismiss().catch(() => {}));
  await page.goto(`${server.url}?token=web-secret`);
  await waitReady(page);
  assert.equal(new URL(page.url()).search, "", "the token left the address bar");
  await page.reload();
  await waitReady(page);

  const second = await browser.newContext();
  t.after(() => second.close());
  const asking = await second.newPage();
  asking.setDefaultTimeout(WAIT_MS);
  const asked = [];
  asking.on("dialog", (d) => {
    asked.push(d.message());
    d.accept("web-secret").catch(() => {});
  });
  await asking.goto(server.url);
  await waitReady(asking);
  assert.equal(asked.length, 1, `asked once: ${asked}`);
  assert.match(asked[0], /access token/);
  assert.equal(await asking.evaluate(() => localStorage.getItem("roundtable.token")), "web-secret");
});

test("a page served from another loopback port cannot open a WebSocket to the server (403)", async (t) => {
  const { server } = await serverFor(t);
  // Another program's page on 127.0.0.1: it tries what a hostile page would, listing the
  // conversations, and reports what happened.
  const hostile = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(`<!doctype html><title>other page</title><script>
      const ws = new WebSocket("ws://127.0.0.1:${server.port}/");
      ws.onopen = () => {
        ws.send(JSON.stringify({name: "agent-server", message: {type: "invoke", callId: 0, name: "listConversations", args: [null]}}));
        ws.onmessage = (e) => { document.title = "read: " + e.data.slice(0, 40); };
      };
      ws.onerror = () => { document.title = "refused"; };
      ws.onclose = (e) => { if (document.title === "other page") document.title = "closed " + e.code; };
    </script>`);
  });
  await new Promise((resolve) => hostile.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => hostile.close(resolve)));
  const context = await browser.newContext();
  t.after(() => context.close());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  await page.goto(`http://127.0.0.1:${hostile.address().port}/`);
  await page.waitForFunction(() => document.title !== "other page");
  assert.equal(await page.title(), "refused");
  const origin = `http://127.0.0.1:${hostile.address().port}`;
  // The browser reports no status to the page; the server's log says it answered 403.
  const deadline = Date.now() + WAIT_MS;
  while (!server.log().includes(`Origin "${origin}" is not this server's own origin`)) {
    assert.ok(Date.now() < deadline, `no refusal logged:\n${server.log()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  // The built-in web client, on the server's own origin, keeps working.
  const { page: own } = await openClient(t, server);
  await own.locator("#conversation-list li.conv").first().waitFor();
});

test("markdown renders in linear time: 10x the crafted input costs at most ~20x the time", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  // "**a " repeated: every "**" opens an emphasis that never closes. The old renderer searched
  // the rest of the text again from every position (quadratic: 15 s for 200,000 characters).
  const timings = await page.evaluate(() => {
    const md = window.RoundtableMarkdown;
    const cost = (n) => {
      const input = "**a ".repeat(n);
      let best = Infinity;
      for (let run = 0; run < 3; run++) {
        const start = performance.now();
        md.renderMarkdown(input);
        best = Math.min(best, performance.now() - start);
      }
      return best;
    };
    cost(500); // warm-up (JIT)
    return { small: cost(5000), large: cost(50000) };
  });
  const ratio = timings.large / Math.max(timings.small, 1);
  assert.ok(ratio <= 20, `5,000 → 50,000 repetitions: ${timings.small.toFixed(1)} ms → ${timings.large.toFixed(1)} ms (${ratio.toFixed(1)}x)`);
});

test("a server restart on the same port is survived without duplicated or lost entries", async (t) => {
  const { server, track } = await serverFor(t);
  const rpc = await rpcPage(t, server);
  const { page } = await openClient(t, server);
  await createFromSidebar(page, "Durable");
  const id = await currentId(page);
  await send(page, "what is 2+3");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^5$/ }).waitFor();
  await send(page, "Remember **this** line");
  await page.locator(".markdown strong", { hasText: "this" }).waitFor();
  await waitIdle(page);
  const before = await assertMatchesLog(page, rpc);
  // Mark the nodes on screen: after the reconnect they must still be the same nodes (only the
  // entries after the last seq are fetched, nothing is re-rendered).
  await page.$$eval("#messages [data-seq]", (nodes) => nodes.forEach((n) => n.setAttribute("data-before", "")));

  const stopped = await server.stop();
  assert.equal(stopped.code, 0, "clean exit on SIGTERM");
  await page.locator("#banner").waitFor();
  await page.locator('#connection[data-state="offline"]').waitFor();
  // Let the backoff grow (0.5, 1, 2, 4 s) so the next attempt is a few seconds away, then
  // restart and add a turn from another client while the page is still disconnected.
  await page.waitForFunction(() => Number(document.querySelector("#banner").dataset.attempt) >= 4);
  await shot(page, "05-reconnecting");
  const again = await startServer({ port: server.port, dir: server.dir });
  track(again);
  assert.equal(again.port, server.port);
  await rpc.submit(id, "what is 6*7");
  assert.equal(
    await page.locator("#connection").getAttribute("data-state"),
    "offline",
    "the turn happened while the page was disconnected",
  );
  await page.locator("#banner").waitFor({ state: "hidden", timeout: 20000 });
  await waitReady(page, "Durable");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^42$/ }).waitFor();
  await waitIdle(page);
  const log = await assertMatchesLog(page, rpc);
  assert.ok(log.length > before.length);
  const kept = await page.$$eval("#messages [data-seq][data-before]", (n) => n.map((x) => Number(x.dataset.seq)));
  assert.deepEqual(kept, before.map((e) => e.seq), "entries from before the restart were kept, not re-rendered");
  assert.deepEqual(await userTexts(page), ["what is 2+3", "Remember **this** line", "what is 6*7"]);
  await page.locator("#messages .notice", { hasText: "missing" }).waitFor({ state: "detached" });

  // And it keeps working live after the reconnect.
  await send(page, "what is 1+1");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^2$/ }).waitFor();
  await waitIdle(page);
  await assertMatchesLog(page, rpc);
  await shot(page, "06-after-restart");
});

test("a conversation of 25,000 entries opens at its newest page, scrolls back to its first entry, at most 1,000 rendered", async (t) => {
  const ENTRIES = 25000;
  const MAX_RENDERED = 1000;
  const dir = await mkdtemp(path.join(tmpdir(), "roundtable-web-"));
  const conv = await writeBigConversation(dir, { name: "Long", entries: ENTRIES });
  const { server } = await serverFor(t, { dir });
  const rpc = await rpcPage(t, server);
  // The server reads the fixture: its count, and the newest page of its log.
  const listed = (await rpc.list()).find((c) => c.conversationId === conv.id);
  assert.equal(listed?.messageCount, conv.messageCount);
  const newestPage = await rpc.run(
    async ({ invoke }, id) => {
      await invoke("agent-server", "joinConversation", [{ conversationId: id }]);
      return invoke(`dispatcher:${id}`, "getDisplayHistory", [null, { limit: 3 }]);
    },
    conv.id,
  );
  assert.deepEqual(
    newestPage.map((e) => [e.seq, e.type]),
    [ENTRIES - 3, ENTRIES - 2, ENTRIES - 1].map((s) => [s, fixtureEntry(s).type]),
  );
  const request = newestPage.find((e) => e.type === "user-request");
  assert.equal(request.command, fixtureEntry(request.seq).text);

  // The page opens the conversation at load (remembered). Before its scripts run: when the
  // newest shown entry is first on screen (a requestAnimationFrame poll), and the most log
  // entries ever in #messages (a MutationObserver: it sees every change).
  let newest = ENTRIES - 1;
  while (fixtureEntry(newest).type === "command-result") newest--;
  const { page } = await openClient(t, server, {
    init: [
      ({ id, newest }) => {
        localStorage.setItem("roundtable.lastConversationId", id);
        window.__maxRendered = 0;
        new MutationObserver(() => {
          const n = document.querySelectorAll("#messages > [data-seq]").length;
          if (n > window.__maxRendered) window.__maxRendered = n;
        }).observe(document, { childList: true, subtree: true });
        const poll = () => {
          const node = document.querySelector(`#messages > [data-seq="${newest}"]`);
          const pane = document.querySelector("#messages");
          if (node && !node.hidden) {
            const a = node.getBoundingClientRect();
            const b = pane.getBoundingClientRect();
            if (a.height > 0 && a.bottom > b.top && a.top < b.bottom) {
              window.__newestVisibleAt = performance.now();
              return;
            }
          }
          requestAnimationFrame(poll);
        };
        requestAnimationFrame(poll);
      },
      { id: conv.id, newest },
    ],
  });
  await waitReady(page, "Long");
  await page.waitForFunction(() => window.__newestVisibleAt !== undefined);
  const visibleAt = await page.evaluate(() => window.__newestVisibleAt);
  t.diagnostic(`${ENTRIES} entries: navigation to newest entry on screen ${visibleAt.toFixed(0)} ms`);
  console.log(`# ${ENTRIES} entries: navigation to newest entry on screen ${visibleAt.toFixed(0)} ms`);
  const onScreen = (seq) =>
    page.evaluate((seq) => {
      const node = document.querySelector(`#messages > [data-seq="${seq}"]`);
      if (!node || node.hidden) return false;
      const a = node.getBoundingClientRect();
      const b = document.querySelector("#messages").getBoundingClientRect();
      return a.height > 0 && a.bottom > b.top && a.top < b.bottom;
    }, seq);
  assert.ok(await onScreen(newest), "the newest entry is on screen");
  assert.equal(await page.locator("#messages .msg.user .user-text").last().textContent(), fixtureEntry(newest - (newest % 3)).text);
  const opened = await renderedSeqs(page);
  assert.ok(opened.length <= 200, `only the newest page is rendered (${opened.length})`);
  assert.equal(opened.at(-1), ENTRIES - 1);

  const contiguous = (seqs) => seqs.every((s, i) => i === 0 || s === seqs[i - 1] + 1);
  const windowState = () =>
    page.evaluate(() => {
      const d = document.querySelector("#messages").dataset;
      return { first: Number(d.firstSeq), last: Number(d.lastSeq), window: d.window };
    });

  // Scrolling to the top: each time near the top, the page before comes in above, and what
  // was on screen stays there; down to the first entry.
  let pages = 0;
  for (let w = await windowState(); w.first > 0; w = await windowState()) {
    assert.ok(++pages < 400, "pages keep coming");
    const anchor = await page.evaluate((seq) => {
      const node = document.querySelector(`#messages > [data-seq="${seq}"]`);
      const m = document.querySelector("#messages");
      m.scrollTop = 0;
      return node.getBoundingClientRect().top;
    }, w.first);
    await page.waitForFunction((f) => Number(document.querySelector("#messages").dataset.firstSeq) < f, w.first);
    if (pages === 1) {
      // The entry that was at the top is where it was on screen.
      const now = await page.evaluate(
        (seq) => document.querySelector(`#messages > [data-seq="${seq}"]`).getBoundingClientRect().top,
        w.first,
      );
      assert.ok(Math.abs(now - anchor) < 2, `scroll position kept (${anchor} -> ${now})`);
    }
  }
  await page.evaluate(() => (document.querySelector("#messages").scrollTop = 0));
  assert.ok(await onScreen(0), "the first entry is on screen");
  assert.equal(await page.locator("#messages > [data-seq='0'] .user-text").textContent(), "turn 0");
  let seqs = await renderedSeqs(page);
  assert.equal(seqs[0], 0);
  assert.ok(contiguous(seqs), "the rendered entries are contiguous");
  assert.ok(seqs.length <= MAX_RENDERED, `${seqs.length} entries rendered`);
  assert.equal((await windowState()).window, "detached", "the newest entries were dropped");
  t.diagnostic(`${pages} pages to the top`);

  // Scrolling down again fetches the entries that were dropped.
  const bottom = seqs.at(-1);
  await page.evaluate(() => {
    const m = document.querySelector("#messages");
    m.scrollTop = m.scrollHeight;
  });
  await page.waitForFunction((b) => {
    const n = document.querySelectorAll("#messages > [data-seq]");
    return Number(n[n.length - 1].dataset.seq) > b;
  }, bottom);
  seqs = await renderedSeqs(page);
  assert.ok(contiguous(seqs) && seqs.length <= MAX_RENDERED && seqs.at(-1) > bottom);

  // Live output still arrives at the bottom: sending shows the newest page, then the turn.
  await send(page, "back at the bottom");
  await page.locator(".msg.agent .msg-body", { hasText: "echo: back at the bottom" }).waitFor();
  await waitIdle(page);
  await rpc.submit(conv.id, "from another client");
  await page.locator(".msg.agent .msg-body", { hasText: "echo: from another client" }).waitFor();
  const log = await rpc.run(
    async ({ invoke }, { id, after }) => {
      await invoke("agent-server", "joinConversation", [{ conversationId: id }]);
      return invoke(`dispatcher:${id}`, "getDisplayHistory", [after]);
    },
    { id: conv.id, after: ENTRIES - 1 },
  );
  await waitSynced(page, log.at(-1).seq + 1);
  seqs = await renderedSeqs(page);
  assert.ok(contiguous(seqs) && seqs.length <= MAX_RENDERED, "contiguous and bounded after live turns");
  assert.equal(seqs.at(-1), log.at(-1).seq);
  assert.equal((await windowState()).window, "tail");
  assert.deepEqual((await userTexts(page)).slice(-2), ["back at the bottom", "from another client"]);
  // The page scrolls to new entries in its next animation frame (web/log.js `scrollToEnd`):
  // wait for that frame instead of reading the position between the two.
  assert.ok(
    await page
      .waitForFunction(
        () => {
          const m = document.querySelector("#messages");
          return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
        },
        null,
        { timeout: 10_000 },
      )
      .then(
        () => true,
        () => false,
      ),
    "scrolled to the bottom",
  );
  await shot(page, "long-conversation");

  // A search hit in the middle opens the conversation at that turn (once the index has read
  // the fixture's log), with the newer entries fetched again when scrolled to.
  await waitLog(server, /search index: caught up/);
  const turn = 4321;
  await page.locator("#filter").fill(String(turn));
  const hit = page.locator("#content-list .content-hit").first();
  await hit.waitFor();
  await hit.locator(".conv-open").click();
  const found = page.locator("#messages > .entry.hit");
  await found.waitFor();
  assert.match(await found.locator(".user-text, .msg-body").textContent(), new RegExp(`^(echo: )?turn ${turn}$`));
  const hitSeq = Number(await found.getAttribute("data-seq"));
  assert.ok(hitSeq >= 3 * turn && hitSeq < 3 * turn + 3, `hit at seq ${hitSeq}`);
  assert.ok(await onScreen(hitSeq), "the matched turn is on screen");
  await shot(page, "long-conversation-search-hit");
  assert.equal((await windowState()).window, "detached");
  seqs = await renderedSeqs(page);
  assert.ok(contiguous(seqs) && seqs.length <= MAX_RENDERED);
  await page.evaluate(() => {
    const m = document.querySelector("#messages");
    m.scrollTop = m.scrollHeight;
  });
  await page.waitForFunction((b) => {
    const n = document.querySelectorAll("#messages > [data-seq]");
    return Number(n[n.length - 1].dataset.seq) > b;
  }, seqs.at(-1));
  assert.ok(contiguous(await renderedSeqs(page)));

  const most = await page.evaluate(() => window.__maxRendered);
  assert.ok(most <= MAX_RENDERED, `at most ${MAX_RENDERED} entries rendered at any time (${most})`);
});

test("scrolled far up (the newest entries dropped), the page still follows: live turns and a restart are caught up when scrolled back down", async (t) => {
  const ENTRIES = 1500;
  const dir = await mkdtemp(path.join(tmpdir(), "roundtable-web-"));
  const conv = await writeBigConversation(dir, { name: "Scrolled", entries: ENTRIES });
  const { server, track } = await serverFor(t, { dir });
  const rpc = await rpcPage(t, server);
  const { page } = await openClient(t, server, {
    init: [(id) => localStorage.setItem("roundtable.lastConversationId", id), conv.id],
  });
  await waitReady(page, "Scrolled");
  const windowState = () =>
    page.evaluate(() => {
      const d = document.querySelector("#messages").dataset;
      return { first: Number(d.firstSeq), last: Number(d.lastSeq), window: d.window };
    });
  const lastRendered = async () => (await renderedSeqs(page)).at(-1);

  // Up until more than 1,000 entries were fetched: the newest ones are dropped.
  for (let w = await windowState(); w.window !== "detached"; w = await windowState()) {
    assert.ok(w.first > 0, "detached before the first entry");
    await page.evaluate(() => (document.querySelector("#messages").scrollTop = 0));
    await page.waitForFunction((f) => Number(document.querySelector("#messages").dataset.firstSeq) < f, w.first);
  }
  const bottom = await lastRendered();
  assert.ok(bottom < ENTRIES - 1);

  // Another client's turn meanwhile: lastSeq follows, nothing is rendered down there.
  await rpc.submit(conv.id, "while you were reading");
  await waitSynced(page, (await rpc.history(conv.id)).length);
  assert.equal(await lastRendered(), bottom);
  assert.equal(await page.locator(".msg.user .user-text", { hasText: "while you were reading" }).count(), 0);

  // A restart while detached: the page rejoins and reads only what came after lastSeq.
  assert.equal((await server.stop()).code, 0);
  await page.locator('#connection[data-state="offline"]').waitFor();
  const again = await startServer({ port: server.port, dir: server.dir });
  track(again);
  await rpc.submit(conv.id, "while you were away");
  await waitReady(page, "Scrolled");
  const log = await rpc.history(conv.id);
  await waitSynced(page, log.length);
  assert.equal((await windowState()).window, "detached");
  assert.equal(await lastRendered(), bottom);

  // Scrolling down fetches the dropped entries and the new ones, up to the newest.
  for (let w = await windowState(); w.window === "detached"; w = await windowState()) {
    const last = await lastRendered();
    await page.evaluate(() => {
      const m = document.querySelector("#messages");
      m.scrollTop = m.scrollHeight;
    });
    await page.waitForFunction(
      (b) => {
        const n = document.querySelectorAll("#messages > [data-seq]");
        return Number(n[n.length - 1].dataset.seq) > b;
      },
      last,
    );
  }
  const seqs = await renderedSeqs(page);
  assert.ok(seqs.every((s, i) => i === 0 || s === seqs[i - 1] + 1), "contiguous");
  assert.ok(seqs.length <= 1000, `${seqs.length} rendered`);
  assert.equal(seqs.at(-1), log.at(-1).seq);
  assert.deepEqual((await userTexts(page)).slice(-2), ["while you were reading", "while you were away"]);

  // At the tail again: live turns render as they come.
  await send(page, "and now live");
  await page.locator(".msg.agent .msg-body", { hasText: "echo: and now live" }).waitFor();
  await waitIdle(page);
  await waitSynced(page, (await rpc.history(conv.id)).length);
  assert.equal((await userTexts(page)).at(-1), "and now live");
});

test("HTML in names and messages is shown as text, never run", async (t) => {
  const { server } = await serverFor(t);
  const { page, problems } = await openClient(t, server);
  const evil = "<img src=x onerror=alert(1)>";
  await createFromSidebar(page, evil);
  assert.equal(await title(page), evil);
  await row(page, evil).waitFor();
  assert.equal(await row(page, evil).locator(".conv-name").textContent(), evil);
  assert.ok(await page.getByText(evil, { exact: true }).first().isVisible());

  // (No digits in parentheses: the builtin agent would take them for arithmetic.)
  const message =
    "<img src=y onerror=alert(document.domain)> <script>alert(document.cookie)</script> [click](javascript:alert(document.domain)) **ok**";
  await send(page, message);
  await page.locator(".msg.user .user-text", { hasText: "<script>" }).waitFor();
  assert.equal(await page.locator(".msg.user .user-text").textContent(), message);
  const answer = page.locator(".msg.agent .markdown").last();
  await answer.locator("strong", { hasText: "ok" }).waitFor();
  assert.match(
    await answer.textContent(),
    /^echo: <img src=y onerror=alert\(document\.domain\)> <script>alert\(document\.cookie\)<\/script> click ok$/,
  );
  assert.equal(await answer.locator("a").count(), 0, "no javascript: link");
  await waitIdle(page);

  // The rename dialog and the delete confirmation show the literal name too.
  await row(page, evil).getByRole("button", { name: `Rename ${evil}` }).click();
  assert.equal(await page.locator("#name-input").inputValue(), evil);
  await page.locator("#name-cancel").click();
  await row(page, evil).getByRole("button", { name: `Delete ${evil}` }).click();
  assert.match(await page.locator("#confirm-text").textContent(), /<img src=x onerror=alert\(1\)>/);
  await page.locator("#confirm-cancel").click();

  // The markdown renderer on its own: only its safe elements, only http(s) links.
  const rendered = await page.evaluate(() => {
    const div = document.createElement("div");
    div.append(
      window.RoundtableMarkdown.renderMarkdown(
        [
          "<b>x</b> <iframe src=//evil></iframe> [a](javascript:alert(5)) [b](data:text/html,x)",
          "[c](https://example.com/ok) ![i](https://example.com/i.png) <https://example.com/auto>",
          "```html\n<script>alert(6)</script>\n```",
          "- *it* and `<code>`\n  - nested",
          "| h1 | h2 |\n| -- | -- |\n| <u>c</u> | d |",
        ].join("\n\n"),
      ),
    );
    return {
      tags: [...new Set([...div.querySelectorAll("*")].map((n) => n.tagName.toLowerCase()))].sort(),
      hrefs: [...div.querySelectorAll("a")].map((a) => [a.getAttribute("href"), a.rel]),
      text: div.textContent,
    };
  });
  for (const tag of rendered.tags) {
    assert.ok(
      ["a", "code", "div", "em", "li", "p", "pre", "table", "tbody", "td", "th", "thead", "tr", "ul"].includes(tag),
      `unexpected element <${tag}>`,
    );
  }
  assert.deepEqual(rendered.hrefs, [
    ["https://example.com/ok", "noopener noreferrer"],
    ["https://example.com/i.png", "noopener noreferrer"],
    ["https://example.com/auto", "noopener noreferrer"],
  ]);
  assert.match(rendered.text, /<b>x<\/b> <iframe src=\/\/evil><\/iframe> a b/);
  assert.match(rendered.text, /<script>alert\(6\)<\/script>/);

  // Every DisplayContent kind: html goes to a sandboxed srcdoc frame (no scripts, opaque
  // origin), string[] is lines, string[][] a table, kinds become classes.
  const kinds = await page.evaluate(async () => {
    const { contentNode } = window.RoundtableRender;
    const box = document.createElement("div");
    document.body.append(box);
    const html = contentNode({ type: "html", content: "<p>hi</p><script>parent.postMessage('script ran', '*')</script>" });
    const iframe = contentNode({ type: "iframe", content: "<b>x</b>" });
    const loaded = new Promise((resolve) => html.addEventListener("load", resolve, { once: true }));
    box.append(html, iframe);
    await loaded;
    // What keeps the frame's script from running: its empty sandbox (below) and, under it,
    // the page's CSP, which srcdoc frames inherit: no inline script anywhere.
    const csp = (await fetch(location.href)).headers.get("content-security-policy") ?? "";
    const out = {
      scriptsForbidden: /script-src [^;]*'self'/.test(csp) && !csp.includes("'unsafe-inline'"),
      html: [html.tagName, html.getAttribute("sandbox"), html.srcdoc.includes("<script>"), html.contentDocument === null],
      iframe: [iframe.tagName, iframe.getAttribute("sandbox")],
      text: contentNode("plain <b>text</b>").outerHTML,
      lines: contentNode(["one", "two"]).textContent,
      table: contentNode([["h1", "h2"], ["<i>a</i>", "b"]]).querySelectorAll("th, td").length,
      tableText: contentNode([["h1", "h2"], ["<i>a</i>", "b"]]).textContent,
      kind: contentNode({ type: "text", content: "bad", kind: "error" }).className,
      markdown: contentNode({ type: "markdown", content: "**b** <i>x</i>" }).innerHTML,
    };
    box.remove();
    return out;
  });
  assert.deepEqual(kinds.html, ["IFRAME", "", true, true]);
  assert.deepEqual(kinds.iframe, ["IFRAME", ""]);
  assert.equal(kinds.text, '<div class="text">plain &lt;b&gt;text&lt;/b&gt;</div>');
  assert.equal(kinds.lines, "one\ntwo");
  assert.equal(kinds.table, 4);
  assert.equal(kinds.tableText, "h1h2<i>a</i>b");
  assert.equal(kinds.kind, "text kind-error");
  assert.equal(kinds.markdown, "<p><strong>b</strong> &lt;i&gt;x&lt;/i&gt;</p>");
  assert.equal(kinds.scriptsForbidden, true, "the page's CSP allows no inline script, which the sandboxed frame inherits");

  assert.equal(await page.locator("img").count(), 0, "no <img> element was created");
  assert.equal(await page.locator("#messages script, #messages iframe").count(), 0);
  assert.deepEqual(problems, [], "no alert() dialog fired");
  await shot(page, "07-html-is-text");
});

test("a remembered conversation that is gone falls back to Web, with a notice", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  await createFromSidebar(page, "Elsewhere");
  // Delete Web too, so the fallback has to create it again (find-or-create).
  await row(page, "Web").getByRole("button", { name: "Delete Web" }).click();
  await page.locator("#confirm-ok").click();
  await row(page, "Web").waitFor({ state: "detached" });
  const missing = "3f0f6f2e-8d7a-4c1e-9b1a-2d4b5e6f7a8b";
  await page.evaluate((id) => localStorage.setItem("roundtable.lastConversationId", id), missing);
  await page.reload();
  await waitReady(page, "Web");
  const notice = page.locator("#messages .notice", { hasText: "Conversation not found" });
  await notice.waitFor();
  assert.match(await notice.textContent(), new RegExp(`Conversation not found: ${missing}.*Opened “Web” instead`));
  const id = await currentId(page);
  assert.notEqual(id, missing);
  assert.equal(await page.evaluate(() => localStorage.getItem("roundtable.lastConversationId")), id);
  await row(page, "Web").waitFor();
  await shot(page, "08-fallback-to-web");
});

test("@conversation commands, questions answered in place, and Cancel", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  const result = (text) => page.locator("#messages .manage", { hasText: text });

  await send(page, "@conversation new Research");
  await waitReady(page, "Research");
  await result("Created “Research” and switched to it.").waitFor();
  await send(page, "@conversation list");
  const table = result("Research (current)");
  await table.waitFor();
  assert.match(await table.textContent(), /Web/);
  await send(page, "@conversation switch web");
  await waitReady(page, "Web");
  await result("Switched to “Web”.").waitFor();
  await send(page, "@conversation switch resarch"); // fuzzy: findConversations, score ≥ 0.6
  await waitReady(page, "Research");
  await send(page, "@conversation delete Research");
  await result("is the active conversation").waitFor();
  await send(page, "@conversation info");
  await result("Current conversation: Research").waitFor();
  await send(page, "@conversation rename Notes");
  await result("Renamed “Research” to “Notes”.").waitFor();
  await waitReady(page, "Notes");
  await send(page, "@conversation");
  await result("@conversation switch <name>").waitFor();
  await send(page, "@conversation find note");
  await result("Notes — score").waitFor();

  // A question (ask_user → requestInteraction) answered with a button in place.
  await send(page, "ask me is it sunny?");
  const card = page.locator(".msg.interaction").last();
  await card.getByRole("button", { name: "No" }).waitFor();
  await page.locator("#cancel").waitFor(); // my command is running
  await card.getByRole("button", { name: "No" }).click();
  await page.locator(".msg.agent .msg-body", { hasText: "You answered No." }).waitFor();
  assert.equal((await card.locator(".outcome").textContent()).trim(), "Answered: No");
  assert.ok(await card.getByRole("button", { name: "Yes" }).isDisabled());
  await waitIdle(page);
  await page.locator("#cancel").waitFor({ state: "hidden" });

  // A private question (requestChoice → respondToChoice).
  await send(page, "ask me privately is it raining?");
  const choice = page.locator(".msg.interaction.choice").last();
  await choice.getByRole("button", { name: "Yes" }).click();
  await page.locator(".msg.agent .msg-body", { hasText: "You answered Yes." }).waitFor();
  await waitIdle(page);

  // Cancel while a question waits.
  await send(page, "ask me shall we stop?");
  await page.locator(".msg.interaction").last().getByRole("button", { name: "Yes" }).waitFor();
  await page.locator("#queue-state", { hasText: "Running" }).waitFor();
  await page.locator("#cancel").click();
  await page.locator(".notice", { hasText: "Your request was cancelled" }).waitFor();
  await waitIdle(page);
  assert.ok(await page.locator(".msg.interaction").last().getByRole("button", { name: "Yes" }).isDisabled());
  await shot(page, "09-commands-and-questions", { fullPage: true });
});

test("conversations in words: a switch asked in words, and a handoff shown in the page", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  const result = (text) => page.locator("#messages .manage", { hasText: text });

  await send(page, "@conversation new Research");
  await waitReady(page, "Research");
  await send(page, "remember the number 42");
  await page.locator(".msg.agent .msg-body", { hasText: "echo: remember the number 42" }).waitFor();
  await waitIdle(page);
  // The builtin provider calls manage_conversation; its takeAction switches this page.
  await send(page, "switch to my web conversation");
  await waitReady(page, "Web");
  await result("Switched to “Web”.").waitFor();
  await send(page, "hand off my research conversation here");
  const packet = page.locator(".msg .msg-body", { hasText: 'Handoff from "Research"' });
  await packet.waitFor();
  assert.match(await packet.textContent(), /remember the number 42/);
  await waitIdle(page);
  // Completion offers the subcommand, and the help names it.
  await send(page, "@conversation");
  await result("@conversation handoff <name or id>").waitFor();
  await shot(page, "09b-conversations-in-words", { fullPage: true });
});

test("forms, proposed actions and pick-and-remember are answered in the page; feedback and hides in the history do no harm", async (t) => {
  const { server } = await serverFor(t);
  const { page } = await openClient(t, server);
  const agentSaid = (text) => page.locator(".msg.agent .msg-body", { hasText: text });
  // A tool's result is its answer, shown once as the result (issue 50 (b)).
  const toolSaid = (text) => page.locator(".msg.tool-result .tool-body", { hasText: text });

  // A form to everyone (requestInteraction of type form): one fieldset per question.
  await send(page, "ask me a form Pizza: Size? S|M|…; Toppings? ham, olives; Deliver?");
  const form = page.locator('.msg.interaction[aria-label="Form"]').last();
  await form.getByRole("button", { name: "Submit" }).waitFor();
  assert.equal(await form.locator("fieldset").count(), 3);
  assert.deepEqual(await form.locator("legend").allTextContents(), ["Size?", "Toppings?", "Deliver?"]);
  await form.getByRole("textbox", { name: "Size? (other)" }).fill("XL");
  await form.getByRole("checkbox", { name: "olives" }).check();
  await form.getByRole("radio", { name: "Yes" }).check();
  await form.getByRole("button", { name: "Submit" }).click();
  const answers = toolSaid("The user submitted the form");
  await answers.waitFor();
  // One line per question.
  const lines = (await answers.textContent()).split("\n").slice(1);
  assert.deepEqual(lines, ['- Size? => "XL" (free text)', "- Toppings? => olives", "- Deliver? => Yes"]);
  await form.locator(".outcome", { hasText: "Answered: submitted" }).waitFor();
  assert.ok(await form.getByRole("button", { name: "Submit" }).isDisabled());
  await waitIdle(page);

  // A private form (requestForm → respondToChoice), dismissed.
  await send(page, "ask me privately a form: Deliver?");
  const mine = page.locator('.msg.interaction.choice[aria-label="Form for you"]').last();
  await mine.getByRole("button", { name: "Dismiss" }).click();
  await toolSaid("The user dismissed the form without answering.").waitFor();
  await mine.locator(".outcome", { hasText: "Dismissed" }).waitFor();
  await waitIdle(page);

  // A proposed action, run as proposed.
  await send(page, 'propose calculate {"expression": "6*7"}');
  const proposal = page.locator('.msg.interaction[aria-label="Proposed action"]').last();
  await proposal.getByText("Run calculate?").waitFor();
  await proposal.getByRole("button", { name: "Run" }).click();
  await toolSaid("42").waitFor();
  await proposal.locator(".outcome", { hasText: "Answered: run" }).waitFor();
  await waitIdle(page);

  // Pick and remember: the checkbox goes with the answer, and the next time nobody is asked.
  await send(page, "ask me and remember Take the shortcut?");
  const pickCard = page.locator(".msg.interaction.choice").last();
  await pickCard.getByRole("checkbox", { name: "Don't ask me this again" }).check();
  await pickCard.getByRole("button", { name: "No" }).click();
  await agentSaid("You answered No; I will not ask again.").waitFor();
  await waitIdle(page);
  await send(page, "ask me and remember Take the shortcut?");
  await agentSaid("You answered No before and asked me not to ask again.").waitFor();
  await waitIdle(page);

  // Feedback and a hide from another client, then a reload: the history replays every entry
  // (the new kinds as hidden markers) and the answered form again, without page errors.
  const rpc = await rpcPage(t, server);
  const id = await currentId(page);
  await rpc.run(
    async ({ invoke }, id) => {
      await invoke("agent-server", "joinConversation", [{ conversationId: id }]);
      const d = `dispatcher:${id}`;
      const log = await invoke(d, "getDisplayHistory", []);
      const rid = log.find((e) => e.type === "user-request").requestId.requestId;
      await invoke(d, "recordUserFeedback", [{ requestId: rid }, "up", null, "nice"]);
      await invoke(d, "recordUserHide", [{ requestId: rid }, true, "agent"]);
    },
    id,
  );
  await page.reload();
  await waitReady(page);
  const log = await assertMatchesLog(page, rpc);
  assert.ok(log.some((e) => e.type === "user-feedback") && log.some((e) => e.type === "user-message-hidden"));
  await page.locator('#messages .marker[data-type="user-feedback"]').waitFor({ state: "attached" });
  const replayed = page.locator('.msg.interaction[aria-label="Form"]').first();
  await replayed.locator(".outcome", { hasText: "Answered: submitted" }).waitFor();
  await shot(page, "10-forms-and-proposals", { fullPage: true });
});

test("Tab completes @ commands from getCommandCompletion, level by level", async (t) => {
  const { server } = await serverFor(t);
  const { page, sentMethods } = await openClient(t, server);
  const input = page.locator("#input");
  const options = page.locator("#completions [role=option]");
  const shownItems = () => options.allTextContents();

  await input.pressSequentially("@sys");
  // (The answer for "@" alone may show first, when the machine is slow: wait for the last.)
  await page.waitForFunction(
    () => [...document.querySelectorAll("#completions [role=option]")].map((o) => o.textContent).join() === "system",
  );
  assert.deepEqual(await shownItems(), ["system"]);
  assert.equal(await input.getAttribute("aria-expanded"), "true");
  await input.press("Tab");
  assert.equal(await input.inputValue(), "@system");
  // The next level comes by itself: @system's sub-commands (sorted), the first highlighted.
  await page.waitForFunction(() => document.querySelectorAll("#completions [role=option]").length === 9);
  assert.deepEqual(await shownItems(), ["clear", "config", "exit", "help", "history", "meter", "model", "session", "trace"]);
  await input.press("ArrowDown");
  await input.press("ArrowDown");
  await input.press("ArrowUp");
  assert.equal(await page.locator('#completions [aria-selected="true"]').textContent(), "config");
  await input.press("Tab");
  assert.equal(await input.inputValue(), "@system config");
  await page.locator("#completions [role=option]", { hasText: "agents" }).waitFor();
  await input.pressSequentially(" a");
  await page.waitForFunction(() => document.querySelectorAll("#completions [role=option]").length === 1);
  await input.press("Tab");
  assert.equal(await input.inputValue(), "@system config agents");
  await page.locator("#completions").waitFor({ state: "hidden" });
  await input.press("Enter");
  await page.locator(".msg.agent .msg-body", { hasText: "Agents and tools of this conversation" }).waitFor();
  // Escape closes the list; plain text asks nothing.
  await input.pressSequentially("@h");
  await options.first().waitFor();
  await input.press("Escape");
  await page.locator("#completions").waitFor({ state: "hidden" });
  assert.equal(await input.inputValue(), "@h");
  await input.fill("");
  const asked = sentMethods.filter((m) => m === "getCommandCompletion").length;
  await input.pressSequentially("hello");
  assert.equal(sentMethods.filter((m) => m === "getCommandCompletion").length, asked);
});

test("queue state and Cancel while a slow model runs (OpenAI-compatible provider)", async (t) => {
  const model = await fakeModel(t);
  const { server } = await serverFor(t, {
    env: { ROUNDTABLE_PROVIDER: "openai", ROUNDTABLE_OPENAI_BASE_URL: model.url, ROUNDTABLE_OPENAI_MODEL: "fake" },
  });
  const rpc = await rpcPage(t, server);
  const { page } = await openClient(t, server);
  const other = await openClient(t, server);
  await send(page, "a slow question");
  await page.locator('#queue-state[data-state="running"]', { hasText: "Running: “a slow question”" }).waitFor();
  await page.locator("#cancel").waitFor();
  await send(page, "second");
  await send(page, "third");
  await page.locator('#queue-state[data-queued="2"]', { hasText: "Running: “a slow question” · 2 queued" }).waitFor();
  // The other client sees the queue too, but has nothing of its own to cancel.
  await other.page.locator('#queue-state[data-queued="2"]').waitFor();
  assert.ok(await other.page.locator("#cancel").isHidden());
  assert.equal(model.held(), 1);
  await shot(page, "15-queue");

  await page.locator("#cancel").click();
  // requestCancelled's reason is "user" (TypeAgent's): a cancel someone asked for says no more.
  await page.locator(".notice", { hasText: /^Your request was cancelled\.$/ }).waitFor();
  await other.page.locator(".notice", { hasText: /^A request was cancelled\.$/ }).waitFor();
  for (const p of [page, other.page]) {
    await p.locator(".markdown", { hasText: "Answer to second" }).waitFor();
    await p.locator(".markdown", { hasText: "Answer to third" }).waitFor();
    await waitIdle(p);
  }
  await page.locator("#cancel").waitFor({ state: "hidden" });
  assert.equal(await page.locator(".markdown em", { hasText: "third" }).count(), 1);
  await assertMatchesLog(page, rpc);
  await assertMatchesLog(other.page, rpc);
  model.release();
});

test("the header's context meter follows each turn, live in every browser, after a reload and a reset", async (t) => {
  const model = await fakeModel(t, { reportUsage: true });
  const { server } = await serverFor(t, {
    env: {
      ROUNDTABLE_PROVIDER: "openai",
      ROUNDTABLE_OPENAI_BASE_URL: model.url,
      ROUNDTABLE_OPENAI_MODEL: "fake",
      ROUNDTABLE_OPENAI_CONTEXT_WINDOW: "8192",
    },
  });
  const { page } = await openClient(t, server);
  const meter = (p) => p.locator("#context-meter");
  const shows = async (p, tokens, text) => {
    await p.locator(`#context-meter[data-tokens="${tokens}"]`).waitFor();
    assert.ok(await meter(p).isVisible(), "the meter is shown");
    assert.equal(await p.locator("#context-meter-text").textContent(), text);
    assert.equal(await p.locator("#context-meter-bar").evaluate((m) => [m.value, m.max].join("/")), `${tokens}/8192`);
  };
  await send(page, "hello");
  await page.locator(".markdown", { hasText: "Answer to hello" }).waitFor();
  await waitIdle(page);
  assert.ok(await meter(page).isHidden(), "no meter before a turn reports usage");

  await send(page, "usage 1000/234");
  await shows(page, 1234, "Context 15% · 1.2k / 8.1k");
  assert.equal(await meter(page).getAttribute("title"), "1,234 of 8,192 tokens of context in use (model fake-q4)");
  // A browser that opens the conversation now reads the meter with getStatus.
  const other = await openClient(t, server);
  await shows(other.page, 1234, "Context 15% · 1.2k / 8.1k");
  await shot(page, "16-context-meter");

  // A turn that under-reports keeps the baseline and adds only its output; both browsers
  // follow live (the contextMeter notification).
  await send(other.page, "usage 10/6");
  await shows(other.page, 1240, "Context 15% · 1.2k / 8.1k");
  await shows(page, 1240, "Context 15% · 1.2k / 8.1k");
  await send(page, "usage 7000/500");
  await shows(page, 7500, "Context 91% · 7.5k / 8.1k");
  await shows(other.page, 7500, "Context 91% · 7.5k / 8.1k");

  // A reload shows the same meter (the server keeps it beside the conversation's history).
  await page.reload();
  await waitReady(page);
  await shows(page, 7500, "Context 91% · 7.5k / 8.1k");

  // A reset clears it everywhere.
  await send(other.page, "@system meter reset");
  await other.page.locator(".markdown", { hasText: "Context meter reset" }).waitFor();
  for (const p of [page, other.page]) {
    await p.locator("#context-meter").waitFor({ state: "hidden" });
    assert.equal(await p.locator("#context-meter").getAttribute("data-tokens"), null);
  }
});

test("keyboard, phone-sized screen, dark theme; README screenshot", async (t) => {
  const { server } = await serverFor(t);
  const rpc = await rpcPage(t, server);
  const wide = await openClient(t, server, { viewport: { width: 1280, height: 960 } });
  for (const name of ["Trip to Lisbon", "Groceries", "Book club"]) await createFromSidebar(wide.page, name);
  await createFromSidebar(wide.page, "Math and weather");
  const { page } = wide;
  await send(page, "what is (2+3)*4");
  await page.locator(".msg.tool-result .tool-body", { hasText: /^20$/ }).waitFor();
  await send(page, "weather in Lisbon");
  await page.locator(".msg.tool-call", { hasText: "get_weather" }).waitFor();
  await waitIdle(page);
  await send(page, "@compact");
  await page.locator(".markdown strong", { hasText: "Conversation compacted" }).waitFor();
  await waitIdle(page);
  await page.waitForFunction(() => document.querySelector("#conversation-list li.current")?.dataset.messages === "3");
  await page.locator("#input").blur();
  await shot(page, "10-readme-light");
  if (process.env.UPDATE_DOC_SCREENSHOT === "1") {
    // Opt-in: the picture shows clock times, so every run would otherwise change the file.
    await mkdir(path.dirname(DOC_SCREENSHOT), { recursive: true });
    await copyFile(path.join(ARTIFACTS, "10-readme-light.png"), DOC_SCREENSHOT);
  }
  await assertMatchesLog(page, rpc);

  // Dark theme; keyboard: the skip link comes first, then the sidebar, with a visible focus
  // ring; the skip link leads to the message box.
  const dark = await openClient(t, server, { colorScheme: "dark" });
  const focused = () =>
    dark.page.evaluate(() => ({
      id: document.activeElement.id || document.activeElement.className,
      outline: getComputedStyle(document.activeElement).outlineStyle,
    }));
  await dark.page.keyboard.press("Tab");
  assert.equal((await focused()).id, "skip-link");
  await dark.page.keyboard.press("Tab");
  assert.deepEqual(await focused(), { id: "new-conversation", outline: "solid" });
  await dark.page.keyboard.press("Tab");
  assert.equal((await focused()).id, "filter");
  await dark.page.keyboard.press("Shift+Tab");
  await dark.page.keyboard.press("Shift+Tab");
  await dark.page.keyboard.press("Enter");
  assert.equal((await focused()).id, "input");
  await row(dark.page, "Math and weather").locator(".conv-open").click();
  await waitReady(dark.page, "Math and weather");
  await dark.page.locator(".markdown", { hasText: "Conversation compacted" }).waitFor();
  const bg = await dark.page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(bg, "rgb(15, 18, 23)", "dark background under prefers-color-scheme: dark");
  await shot(dark.page, "11-dark");

  // Phone: the sidebar hides behind the menu button.
  const phone = await openClient(t, server, { viewport: { width: 390, height: 780 } });
  const menu = phone.page.getByRole("button", { name: "Show conversations" });
  assert.ok(await menu.isVisible());
  assert.ok(!(await phone.page.locator("#sidebar").isVisible()), "sidebar hidden on a narrow screen");
  await shot(phone.page, "12-phone");
  await menu.click();
  assert.equal(await menu.getAttribute("aria-expanded"), "true");
  await row(phone.page, "Math and weather").locator(".conv-open").waitFor({ state: "visible" });
  await shot(phone.page, "13-phone-menu");
  await row(phone.page, "Math and weather").locator(".conv-open").click();
  await waitReady(phone.page, "Math and weather");
  await phone.page.locator("#sidebar").waitFor({ state: "hidden" });
  assert.equal(await menu.getAttribute("aria-expanded"), "false");
  await phone.page.locator(".markdown", { hasText: "Conversation compacted" }).waitFor();
  await shot(phone.page, "14-phone-chat");
});

test("an answer grows in every browser while the model writes it; the model is picked in the header", async (t) => {
  const model = await fakeModel(t);
  const { server } = await serverFor(t, {
    env: { ROUNDTABLE_PROVIDER: "openai", ROUNDTABLE_OPENAI_BASE_URL: model.url, ROUNDTABLE_OPENAI_MODEL: "fake" },
  });
  const rpc = await rpcPage(t, server);
  const { page } = await openClient(t, server);
  const other = await openClient(t, server);
  await send(page, "stream a story");
  // While the model holds the rest, both pages show the words so far, the request running.
  for (const p of [page, other.page]) {
    const growing = p.locator(".msg.agent.streaming .markdown", { hasText: "Once upon" });
    await growing.waitFor();
    assert.equal(await growing.locator("strong").textContent(), "Once");
    await p.locator('#queue-state[data-state="running"]').waitFor();
    // The thinking is there, collapsed.
    const thinking = p.locator(".msg.agent details.thinking");
    await thinking.waitFor();
    assert.equal(await thinking.evaluate((d) => d.open), false);
    assert.match(await thinking.locator(".msg-body").textContent(), /Pondering the plot\./);
  }
  assert.equal(model.held(), 1);
  await shot(page, "17-streaming");
  model.release();
  // The logged whole takes the growing node's place: one answer, complete, nothing growing.
  for (const p of [page, other.page]) {
    await p.locator(".msg.agent:not(.streaming) .markdown", { hasText: "Once upon a time." }).waitFor();
    await waitIdle(p);
    await p.locator(".msg.agent.streaming").waitFor({ state: "detached" });
    assert.equal(await p.locator(".markdown", { hasText: "Once upon" }).count(), 1);
    await assertMatchesLog(p, rpc);
  }

  // The model picker lists the server's providers; a pick is the conversation's, for everyone.
  const picker = page.locator("#model-picker");
  await picker.waitFor();
  assert.equal(await picker.inputValue(), "openai");
  assert.deepEqual(await picker.locator("option").evaluateAll((o) => o.map((x) => x.value)), ["builtin", "openai"]);
  await picker.selectOption("builtin");
  await other.page.locator('#model-picker[data-provider="builtin"]').waitFor();
  await page.locator('#model-picker[data-provider="builtin"]').waitFor();
  await waitIdle(page);
  await send(other.page, "hello there");
  await page.locator(".msg.agent .msg-body", { hasText: "echo: hello there" }).waitFor();
});

