// A tiny scripted OpenAI-compatible endpoint: POST /v1/chat/completions.
// With "stream": true it answers text/event-stream, one `data:` chunk per word,
// `delayMs` apart, then a finish_reason "stop" chunk, a usage chunk and
// `data: [DONE]` (the shape of Roundtable's tests/integration/harness/sse.rs
// streamed_text and benches/load/scenarios/stream.rs serve). With oneChunk the
// whole answer goes as a single content chunk (to show the check can fail).
// Without "stream" it answers one chat.completion JSON body.
//
// Standalone: node fake-openai.mjs [--port N] [--one-chunk]   (prints its base URL)
import http from "node:http";
import { pathToFileURL } from "node:url";

export const DEFAULT_WORDS = [
    "Streaming ", "answers ", "reach ", "the ", "TypeAgent ",
    "client ", "one ", "piece ", "at ", "a time.",
];

export function startFakeOpenAI({
    words = DEFAULT_WORDS,
    delayMs = 100,
    oneChunk = false,
    port = 0,
} = {}) {
    const requests = []; // {t, method, url, body}
    const sent = []; // {t, text} for each content chunk written
    const waiters = []; // {n, resolve}: resolved once n content chunks are written
    const wake = () => {
        for (let i = waiters.length - 1; i >= 0; i--) {
            if (sent.length >= waiters[i].n) waiters.splice(i, 1)[0].resolve(sent.length);
        }
    };
    const chunk = (res, obj) =>
        res.write(`data: ${typeof obj === "string" ? obj : JSON.stringify(obj)}\n\n`);
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

    const server = http.createServer(async (req, res) => {
        let raw = "";
        for await (const c of req) raw += c;
        let body = null;
        try {
            body = raw ? JSON.parse(raw) : null;
        } catch {
            body = raw;
        }
        requests.push({ t: performance.now(), method: req.method, url: req.url, body });

        if (req.method === "GET" && req.url.startsWith("/v1/models")) {
            res.writeHead(200, { "content-type": "application/json" });
            res.end(JSON.stringify({ object: "list", data: [{ id: "test", object: "model" }] }));
            return;
        }
        if (req.method !== "POST" || !req.url.startsWith("/v1/chat/completions")) {
            res.writeHead(404, { "content-type": "application/json" });
            res.end(JSON.stringify({ error: { message: `no route ${req.method} ${req.url}` } }));
            return;
        }
        const text = words.join("");
        const usage = { prompt_tokens: 12, completion_tokens: words.length, total_tokens: 12 + words.length };
        if (!body?.stream) {
            res.writeHead(200, { "content-type": "application/json" });
            res.end(JSON.stringify({
                id: "chatcmpl-fake", object: "chat.completion", model: "test",
                choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
                usage,
            }));
            return;
        }
        res.writeHead(200, {
            "content-type": "text/event-stream",
            "cache-control": "no-cache",
            connection: "keep-alive",
        });
        res.flushHeaders();
        req.socket.setNoDelay(true);
        const pieces = oneChunk ? [text] : words;
        for (let i = 0; i < pieces.length; i++) {
            if (res.destroyed) return;
            chunk(res, {
                id: "chatcmpl-fake", object: "chat.completion.chunk", model: "test",
                choices: [{
                    index: 0,
                    delta: i === 0 ? { role: "assistant", content: pieces[i] } : { content: pieces[i] },
                    finish_reason: null,
                }],
            });
            sent.push({ t: performance.now(), text: pieces[i] });
            wake();
            if (i + 1 < pieces.length) await sleep(delayMs);
        }
        chunk(res, {
            id: "chatcmpl-fake", object: "chat.completion.chunk", model: "test",
            choices: [{ index: 0, delta: {}, finish_reason: "stop" }],
        });
        chunk(res, {
            id: "chatcmpl-fake", object: "chat.completion.chunk", model: "test",
            choices: [], usage,
        });
        chunk(res, "[DONE]");
        res.end();
    });

    return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, "127.0.0.1", () => {
            const { port } = server.address();
            resolve({
                port,
                baseUrl: `http://127.0.0.1:${port}/v1`,
                text: words.join(""),
                words,
                requests,
                sent,
                // Resolves (with the count) once n content chunks have been written.
                waitSent: (n) => new Promise((resolve) => { waiters.push({ n, resolve }); wake(); }),
                close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }),
            });
        });
    });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
    const args = process.argv.slice(2);
    const portArg = args.indexOf("--port");
    const ep = await startFakeOpenAI({
        oneChunk: args.includes("--one-chunk"),
        port: portArg >= 0 ? Number(args[portArg + 1]) : 0,
    });
    console.log(ep.baseUrl);
}
