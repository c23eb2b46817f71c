// Proves, with TypeAgent's real client library (@typeagent/agent-server-client, built from
// vendor/ by setup.sh), that Roundtable's streamed model answers reach a TypeAgent client as
// appendDisplay(message, "inline") pieces. The client connects exactly as TypeAgent's
// agent-cli does (commands/connect.ts: connectAgentServer, findOrCreateNamedConversation,
// joinConversation; enhancedConsole.ts: dispatcher.submitCommand + entry.completion).
//
//   node stream-check.mjs [--scenario stream|late-join] [--one-chunk] [--roundtable BIN]
//                         [--build DIR] [--delay MS] [--join-after N] [--keep]
//
// Scenarios:
//   stream     one client submits a request; the scripted model endpoint answers 10 words,
//              --delay ms apart. The answer must arrive as >= 3 inline appends before the
//              request completes, concatenating to the whole answer.
//   late-join  the same, and a second client (its own connection, as a second agent-cli)
//              joins the conversation after the endpoint has written --join-after words
//              (default 3). It must get the words so far (one or more inline appends), then
//              the rest live; everything it got for the request concatenates to the whole
//              answer.
// --one-chunk makes the endpoint send the whole answer as one chunk: the stream scenario
// must then FAIL (run.sh checks that it does).
//
// Strict by default: any warning or error the TypeAgent library logs (its `debug`
// namespaces typeagent:*:warn / typeagent:*:error, e.g. "Invalid channel name ..." for a
// frame it drops, or console.warn/console.error) fails the check. STRICT_LIB_LOG=0 reports
// them without failing.
//
// Exit 0 = pass, 1 = a check failed, 2 = harness error (server did not start, timeout, ...).
//
// ROUNDTABLE_BIN (or --roundtable) is the server binary, default <repo>/target/release/roundtable.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";
import { startFakeOpenAI } from "./fake-openai.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "../..");
const argv = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : dflt;
};
const ROUNDTABLE = path.resolve(
    opt("--roundtable", process.env.ROUNDTABLE_BIN || path.join(REPO, "target/release/roundtable")),
);
const BUILD = path.resolve(opt("--build", process.env.TA_BUILD || path.join(HERE, ".build")));
const SCENARIO = opt("--scenario", "stream");
const DELAY_MS = Number(opt("--delay", "100"));
const JOIN_AFTER = Number(opt("--join-after", "3"));
const ONE_CHUNK = argv.includes("--one-chunk") || process.env.FAKE_ONE_CHUNK === "1";
const KEEP = argv.includes("--keep");
const STRICT = process.env.STRICT_LIB_LOG !== "0";
const MIN_INLINE = 3;
const OVERALL_TIMEOUT_MS = 60_000;
const CONVERSATION = `ta-${SCENARIO}-check`;

// Our own output goes straight to the streams: console.warn/console.error are the library's.
const say = (s = "") => process.stdout.write(s + "\n");
const sayErr = (s) => process.stderr.write(s + "\n");

if (!["stream", "late-join"].includes(SCENARIO)) {
    sayErr(`HARNESS ERROR: unknown --scenario ${SCENARIO} (stream | late-join)`);
    process.exit(2);
}
if (!existsSync(ROUNDTABLE)) {
    sayErr(`HARNESS ERROR: no roundtable binary at ${ROUNDTABLE} (cargo build --release --bin roundtable, or set ROUNDTABLE_BIN)`);
    process.exit(2);
}

// ---- load TypeAgent's client library from the setup.sh build ---------------------------
const clientDir = path.join(BUILD, "ts/packages/agentServer/client");
const req = createRequire(path.join(clientDir, "package.json"));
const load = (spec) => import(pathToFileURL(req.resolve(spec)).href);
let client, conv, debugLib;
try {
    client = await load("@typeagent/agent-server-client");
    conv = await load("@typeagent/agent-server-client/conversation");
    ({ default: debugLib } = await load("debug")); // the instance the library logs through
} catch (e) {
    sayErr(`HARNESS ERROR: cannot load TypeAgent's client library from ${clientDir} (run setup.sh): ${e.message}`);
    process.exit(2);
}

// Everything the library reports as a warning or an error.
const libLog = [];
debugLib.enable(process.env.TA_DEBUG ?? "typeagent:*:warn,typeagent:*:error");
debugLib.log = (...args) => {
    libLog.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
};
for (const level of ["warn", "error"]) {
    console[level] = (...args) => {
        libLog.push(`console.${level}: ` + args.map((a) => (typeof a === "string" ? a : a?.stack ?? JSON.stringify(a))).join(" "));
    };
}

const t0 = performance.now();
const ms = (t) => (t - t0).toFixed(1).padStart(8);
let serverProc;
let endpoint;
let instanceDir;
const serverLog = [];
const cleanup = async () => {
    if (serverProc && serverProc.exitCode === null) {
        serverProc.kill("SIGTERM");
        await new Promise((r) => {
            const k = setTimeout(() => { serverProc.kill("SIGKILL"); r(); }, 5000);
            serverProc.once("exit", () => { clearTimeout(k); r(); });
        });
    }
    await endpoint?.close();
    if (instanceDir && !KEEP) rmSync(instanceDir, { recursive: true, force: true });
};
const harnessFail = async (msg) => {
    sayErr(`HARNESS ERROR: ${msg}`);
    if (serverLog.length) sayErr("--- roundtable output (tail)\n" + serverLog.slice(-30).join("\n"));
    for (const l of libLog) sayErr(`   lib: ${l.slice(0, 300)}`);
    await cleanup();
    process.exit(2);
};
process.on("unhandledRejection", (e) => void harnessFail(`unhandled: ${e?.stack ?? e}`));
const watchdog = setTimeout(() => void harnessFail(`timed out after ${OVERALL_TIMEOUT_MS} ms`), OVERALL_TIMEOUT_MS);
const sleep = (n) => new Promise((r) => setTimeout(r, n));

// ---- helpers -------------------------------------------------------------------------
const rid = (r) => (r && typeof r === "object" ? r.requestId : r);
const textOf = (content) => {
    if (content === undefined || content === null) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map(textOf).join("\n");
    if (typeof content === "object" && "content" in content) return textOf(content.content);
    return JSON.stringify(content);
};

// A ClientIO that records every call with its arrival time.
function recordingClientIO() {
    const calls = []; // {t, method, args}
    const rec = (method) => (...args) => {
        calls.push({ t: performance.now(), method, args });
    };
    const io = {
        clear: rec("clear"),
        exit: rec("exit"),
        shutdown: rec("shutdown"),
        setUserRequest: rec("setUserRequest"),
        setDisplayInfo: rec("setDisplayInfo"),
        setDisplay: rec("setDisplay"),
        appendDisplay: rec("appendDisplay"),
        appendDiagnosticData: rec("appendDiagnosticData"),
        setDynamicDisplay: rec("setDynamicDisplay"),
        async question(...args) { rec("question")(...args); return 0; },
        async proposeAction(...args) { rec("proposeAction")(...args); return undefined; },
        notify: rec("notify"),
        async openLocalView(...args) { rec("openLocalView")(...args); },
        async closeLocalView(...args) { rec("closeLocalView")(...args); },
        requestChoice: rec("requestChoice"),
        requestForm: rec("requestForm"),
        requestInteraction: rec("requestInteraction"),
        interactionResolved: rec("interactionResolved"),
        interactionCancelled: rec("interactionCancelled"),
        takeAction: rec("takeAction"),
        onUserFeedback: rec("onUserFeedback"),
        onUserHide: rec("onUserHide"),
        requestQueued: rec("requestQueued"),
        requestStarted: rec("requestStarted"),
        requestCancelled: rec("requestCancelled"),
        queueStateChanged: rec("queueStateChanged"),
    };
    return { io, calls };
}

// Connects and joins the named conversation as agent-cli does (commands/connect.ts).
async function connectAsAgentCli(wsUrl, label) {
    const { io, calls } = recordingClientIO();
    const state = { label, calls, disconnected: false };
    state.connection = await client.connectAgentServer(wsUrl, () => { state.disconnected = true; });
    const target = await conv.findOrCreateNamedConversation(state.connection, CONVERSATION);
    state.tJoinStart = performance.now();
    state.conversation = await state.connection.joinConversation(io, { conversationId: target.conversationId });
    state.tJoined = performance.now();
    say(`${label}: joined conversation "${state.conversation.name}" (${state.conversation.conversationId}), connectionId ${state.conversation.connectionId}, at ${ms(state.tJoined).trim()} ms`);
    return state;
}

function printCalls(state) {
    say(`\n${state.label}: ClientIO calls (ms since start):`);
    for (const c of state.calls) {
        let what;
        if (c.method === "appendDisplay" || c.method === "setDisplay") {
            const m = c.args[0];
            what = `${JSON.stringify(textOf(m?.message))} mode=${c.args[1] ?? "-"} source=${m?.source} kind=${m?.kind ?? "-"} shape=${typeof m?.message === "object" ? JSON.stringify(Object.keys(m.message)) : typeof m?.message}`;
        } else if (c.method === "notify") {
            what = `${c.args[1]} ${JSON.stringify(c.args[2]).slice(0, 140)}`;
        } else {
            what = JSON.stringify(c.args).slice(0, 140);
        }
        say(`${ms(c.t)}  ${c.method.padEnd(18)} ${what}`);
    }
}

// What a client got for one request.
function forRequest(state, requestId) {
    const complete = state.calls.find(
        (c) => c.method === "notify" && c.args[1] === "commandComplete" && rid(c.args[0]) === requestId,
    );
    const displays = state.calls.filter(
        (c) => (c.method === "appendDisplay" || c.method === "setDisplay") && rid(c.args[0]?.requestId) === requestId,
    );
    const inline = displays.filter((c) => c.method === "appendDisplay" && c.args[1] === "inline");
    return { complete, displays, inline, text: inline.map((c) => textOf(c.args[0].message)).join("") };
}

const failures = [];
const check = (ok, msg) => {
    say(`${ok ? "PASS" : "FAIL"}  ${msg}`);
    if (!ok) failures.push(msg);
};

async function main() {
    // ---- scripted model endpoint + Roundtable -------------------------------------------
    endpoint = await startFakeOpenAI({ delayMs: DELAY_MS, oneChunk: ONE_CHUNK });
    instanceDir = mkdtempSync(path.join(os.tmpdir(), "ta-check-rt-"));
    serverProc = spawn(
        ROUNDTABLE,
        ["serve", "--instance-dir", instanceDir, "--host", "127.0.0.1", "--port", "0", "--provider", "openai"],
        {
            env: {
                ...process.env,
                ROUNDTABLE_OPENAI_BASE_URL: endpoint.baseUrl,
                ROUNDTABLE_OPENAI_MODEL: "test",
                ROUNDTABLE_OPENAI_API_KEY: "sk-test",
                RUST_LOG: process.env.RUST_LOG ?? "info",
            },
            stdio: ["ignore", "pipe", "pipe"],
        },
    );
    serverProc.on("error", (e) => void harnessFail(`cannot start ${ROUNDTABLE}: ${e.message}`));
    const wsUrl = await new Promise((resolve, reject) => {
        let buf = "";
        const onData = (d) => {
            buf += d.toString();
            let nl;
            while ((nl = buf.indexOf("\n")) >= 0) {
                const line = buf.slice(0, nl);
                buf = buf.slice(nl + 1);
                serverLog.push(line);
                const m = line.match(/listening on (ws:\/\/\S+?)\/? \(/);
                if (m) resolve(m[1]);
            }
        };
        serverProc.stdout.on("data", onData);
        serverProc.stderr.on("data", onData);
        serverProc.once("exit", (code) => reject(new Error(`roundtable exited (${code}) before listening`)));
    }).catch((e) => harnessFail(e.message));
    const n = endpoint.words.length;
    say(`scenario: ${SCENARIO}   roundtable: ${ROUNDTABLE} at ${wsUrl}   model endpoint: ${endpoint.baseUrl}`);
    say(`mode: ${ONE_CHUNK ? "ONE CHUNK (the stream checks must FAIL)" : `${n} words, ${DELAY_MS} ms apart`}${SCENARIO === "late-join" ? `; second client joins after word ${JOIN_AFTER}` : ""}   strict library log: ${STRICT ? "yes" : "no (STRICT_LIB_LOG=0)"}`);

    // ---- first client: join, submit (enhancedConsole.ts's non-blocking path) ------------
    const a = await connectAsAgentCli(wsUrl, "client A");
    const prompt = "Tell me how streaming works, in ten words.";
    const tSubmit = performance.now();
    const submitted = await a.conversation.dispatcher.submitCommand(
        prompt, undefined, { workingDirectory: process.cwd() }, randomUUID(),
    );
    const tAck = performance.now();
    if (!submitted.ok) await harnessFail(`submitCommand refused: ${JSON.stringify(submitted)}`);
    const requestId = submitted.entry.requestId;

    // ---- second client joins while the answer is being written -------------------------
    let b;
    let joinWindow;
    if (SCENARIO === "late-join") {
        await endpoint.waitSent(JOIN_AFTER);
        const before = endpoint.sent.length;
        b = await connectAsAgentCli(wsUrl, "client B");
        joinWindow = { before, after: endpoint.sent.length };
    }

    const result = await submitted.entry.completion;
    const tCompletion = performance.now();
    if (b) {
        // B is not the request's originator: give its copy of the end of the turn time to land.
        const deadline = performance.now() + 3000;
        while (performance.now() < deadline) {
            const got = forRequest(b, requestId);
            if (got.complete && got.text.length >= endpoint.text.length) break;
            await sleep(20);
        }
    }
    await sleep(300); // anything late (a duplicate, an append after completion) shows up too

    // ---- report --------------------------------------------------------------------------
    printCalls(a);
    if (b) printCalls(b);
    say(`\nmodel endpoint: ${endpoint.requests.length} request(s); content chunks written at ms: ${endpoint.sent.map((s) => ms(s.t).trim()).join(", ")}`);
    for (const r of endpoint.requests) {
        const body = r.body ?? {};
        say(`  ${r.method} ${r.url} model=${body.model} stream=${body.stream} stream_options=${JSON.stringify(body.stream_options)} messages=${body.messages?.length} tools=${body.tools?.length ?? 0}`);
    }
    say(`submit ${ms(tSubmit).trim()} ms, ack ${ms(tAck).trim()} ms, entry.completion resolved ${ms(tCompletion).trim()} ms`);
    say(`CommandResult: ${JSON.stringify(result)}`);
    const lastWordSent = endpoint.sent.length ? endpoint.sent[endpoint.sent.length - 1].t : Infinity;
    say("");

    // ---- client A: the streamed answer ----------------------------------------------------
    const ga = forRequest(a, requestId);
    const tComplete = ga.complete ? ga.complete.t : tCompletion;
    const before = ga.inline.filter((c) => c.t < tComplete);
    check(ga.complete !== undefined, `A: notify("commandComplete") for request ${requestId} reached the ClientIO`);
    check(before.length >= MIN_INLINE, `A: >= ${MIN_INLINE} appendDisplay(…, "inline") calls before completion (got ${before.length}; ${ga.inline.length} in all)`);
    check(ga.inline.length === before.length, `A: no inline append after completion (${ga.inline.length - before.length} after)`);
    check(ga.displays.length === ga.inline.length, `A: every display of the request is an inline append (${ga.displays.length - ga.inline.length} other)`);
    check(ga.text === endpoint.text, `A: concatenated inline text equals the endpoint's words: ${JSON.stringify(ga.text)} vs ${JSON.stringify(endpoint.text)}`);
    check(before.length > 0 && before[0].t < lastWordSent, `A: first inline piece arrived before the endpoint wrote its last word (${before.length ? ms(before[0].t).trim() : "-"} < ${ms(lastWordSent).trim()} ms)`);
    check(!result?.lastError, `A: no lastError in CommandResult`);
    check(!a.disconnected, `A: connection stayed up through the turn`);

    // ---- client B: joined mid-answer --------------------------------------------------------
    if (b) {
        const gb = forRequest(b, requestId);
        // Live: some of the words written after the join reached B before the endpoint
        // wrote its last word (pieces may be coalesced, so no per-word count).
        const live = gb.inline.slice(1).filter((c) => c.t < lastWordSent);
        check(
            joinWindow.before >= 1 && joinWindow.after <= n - 2,
            `B: joined while the answer was being written, with >= 2 words to go (endpoint had written ${joinWindow.before} word(s) when B started joining, ${joinWindow.after} of ${n} when the join returned, at ${ms(b.tJoined).trim()} ms)`,
        );
        check(gb.inline.length >= 2, `B: got the request's answer as inline appends, catch-up then more (${gb.inline.length})`);
        check(gb.displays.length === gb.inline.length, `B: every display of the request is an inline append (${gb.displays.length - gb.inline.length} other)`);
        check(gb.text === endpoint.text, `B: everything it got for the request concatenates to the whole answer: ${JSON.stringify(gb.text)} vs ${JSON.stringify(endpoint.text)}`);
        const soFar = endpoint.words.slice(0, joinWindow.before).join("");
        check(gb.inline.length > 0 && gb.text.startsWith(soFar), `B: the words written before it joined came first (${JSON.stringify(soFar)}; its first piece: ${JSON.stringify(gb.inline.length ? textOf(gb.inline[0].args[0].message) : null)})`);
        check(
            live.length >= 1,
            `B: the rest arrived live (${live.length} piece(s) after its first arrived before the endpoint wrote its last word; ${gb.inline.length} piece(s) in all)`,
        );
        if (gb.complete) {
            check(gb.inline.every((c) => c.t <= gb.complete.t), `B: no inline append after its commandComplete`);
        } else {
            say(`NOTE  B: no commandComplete for the request (it did not originate it)`);
        }
        check(!b.disconnected, `B: connection stayed up through the turn`);
    }

    // ---- the library's own complaints ------------------------------------------------------
    const libProblems = libLog;
    if (STRICT) {
        check(libProblems.length === 0, `TypeAgent library logged no warnings/errors (${libProblems.length})`);
    } else {
        say(`${libProblems.length === 0 ? "PASS" : "WARN"}  TypeAgent library logged ${libProblems.length} warning(s)/error(s) (not fatal: STRICT_LIB_LOG=0)`);
    }
    for (const l of libLog) say(`   lib: ${l.slice(0, 300)}`);

    if (b) {
        await b.conversation.dispatcher.close(); // leaveConversation
        await b.connection.close();
    }
    await a.conversation.dispatcher.close();
    await a.connection.close();
    clearTimeout(watchdog);
    await cleanup();
    say(failures.length === 0 ? "\nRESULT: PASS" : `\nRESULT: FAIL (${failures.length})`);
    process.exit(failures.length === 0 ? 0 : 1);
}

main().catch((e) => harnessFail(`unexpected: ${e?.stack ?? e}`));
