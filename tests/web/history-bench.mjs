// Opening a long conversation in the web client: time to the newest entry on screen and the
// page's JS heap, for display logs of several sizes. Not part of the test suite.
//
//   node tests/web/history-bench.mjs target/debug/roundtable [sizes] [runs]
//   e.g. node tests/web/history-bench.mjs target/debug/roundtable 1000,25000,250000 3
//
// For each size: a fresh instance directory with one conversation of that many entries
// (fixtures.mjs, written on disk before the server starts), `roundtable serve` on it, a wait
// for the search index to catch up (its first scan of the log would otherwise share the CPU
// with the page), then `runs` page loads, each in a fresh browser context that remembers the
// conversation (localStorage), so the page opens it at load. Per load:
// - first paint: from navigation start (performance.timeOrigin) to the first animation frame
//   in which the log's newest entry is in the DOM and inside the messages pane's viewport
//   (a requestAnimationFrame poll installed before the page's scripts run);
// - ready: to `#messages[data-ready="true"]` (the history is rendered and the view is live);
// - heap: V8's used heap after a forced garbage collection (DevTools protocol
//   HeapProfiler.collectGarbage, then Runtime.getHeapUsage), once ready. DOM nodes live in
//   Blink's heap, not V8's, so also:
// - DOM nodes (Memory.getDOMCounters) and the renderer process's resident memory (VmRSS of
//   the largest `--type=renderer` Chromium process: one page is open at a time);
// - rendered: `[data-seq]` nodes in the page;
// - older page: with the client that pages (not the baseline), scrolled to the top
//   OLDER_PAGES times: from setting scrollTop = 0 to the page before being in the DOM
//   (#messages' data-first-seq changed), median.
// The first load of each size is also the server's cold join of that conversation.
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { fixtureEntry, writeBigConversation } from "./fixtures.mjs";

const bin = path.resolve(process.argv[2] || "target/debug/roundtable");
const sizes = (process.argv[3] || "1000,25000,250000").split(",").map(Number);
const runs = Number(process.argv[4] || 3);
const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const OLDER_PAGES = 10;

async function startServer(dir) {
  const proc = spawn(bin, ["serve", "--port", "0", "--host", "127.0.0.1", "--instance-dir", dir], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, RUST_LOG: "info" },
  });
  let log = "";
  proc.stderr.setEncoding("utf8");
  const waitLog = (re, ms) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${re} within ${ms} ms:\n${log.slice(-2000)}`)), ms);
      const check = () => {
        const m = re.exec(log);
        if (m) {
          clearTimeout(timer);
          proc.stderr.off("data", check);
          resolve(m);
        }
      };
      proc.stderr.on("data", check);
      check();
    });
  proc.stderr.on("data", (c) => (log = (log + c).slice(-100000)));
  const port = Number((await waitLog(/listening on ws:\/\/127\.0\.0\.1:(\d+)\//, 20000))[1]);
  return { proc, port, waitLog, stop: () => new Promise((r) => (proc.once("exit", r), proc.kill("SIGTERM"))) };
}

/** VmRSS (MiB) of the largest Chromium renderer process. */
async function rendererRssMiB() {
  let best = 0;
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cmd = await readFile(`/proc/${pid}/cmdline`, "utf8");
      if (!cmd.includes("--type=renderer") || cmd.includes("--extension-process")) continue;
      const m = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, "utf8"));
      if (m) best = Math.max(best, Number(m[1]) / 1024);
    } catch {
      /* gone */
    }
  }
  return best;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
const results = [];
try {
  for (const size of sizes) {
    const dir = await mkdtemp(path.join(tmpdir(), "roundtable-history-bench-"));
    const conv = await writeBigConversation(dir, { name: "Long", entries: size });
    const server = await startServer(dir);
    try {
      await server.waitLog(/search index: caught up/, 600000).catch(() => {});
      // The newest entry the page shows (a command-result is a hidden marker).
      let newest = size - 1;
      while (fixtureEntry(newest).type === "command-result") newest--;
      const loads = [];
      for (let r = 0; r < runs; r++) {
        const context = await browser.newContext({ viewport: { width: 1280, height: 820 } });
        await context.addInitScript(
          ({ id, newest }) => {
            localStorage.setItem("roundtable.lastConversationId", id);
            const poll = () => {
              const node = document.querySelector(`#messages [data-seq="${newest}"]`);
              const pane = document.querySelector("#messages");
              if (node && pane && !node.hidden) {
                const a = node.getBoundingClientRect();
                const b = pane.getBoundingClientRect();
                if (a.bottom > b.top && a.top < b.bottom && a.height > 0) {
                  window.__newestVisibleAt = performance.now();
                  return;
                }
              }
              requestAnimationFrame(poll);
            };
            requestAnimationFrame(poll);
          },
          { id: conv.id, newest },
        );
        const page = await context.newPage();
        page.setDefaultTimeout(300000);
        const cdp = await context.newCDPSession(page);
        await page.goto(`http://127.0.0.1:${server.port}/`);
        await page.waitForFunction(() => window.__newestVisibleAt !== undefined, null, { polling: 50 });
        await page.waitForFunction(() => document.querySelector("#messages")?.dataset.ready === "true", null, { polling: 50 });
        const firstPaint = await page.evaluate(() => window.__newestVisibleAt);
        const ready = await page.evaluate(() => performance.now());
        await cdp.send("HeapProfiler.collectGarbage");
        const heap = await cdp.send("Runtime.getHeapUsage");
        const { nodes } = await cdp.send("Memory.getDOMCounters");
        const rssMiB = await rendererRssMiB();
        const rendered = await page.evaluate(() => document.querySelectorAll("#messages [data-seq]").length);
        // Older pages, where the client pages (the baseline renders everything at once).
        const older = [];
        for (let p = 0; p < OLDER_PAGES; p++) {
          const ms = await page.evaluate(
            () =>
              new Promise((resolve) => {
                const m = document.querySelector("#messages");
                const first = m.dataset.firstSeq;
                if (first === undefined || first === "" || first === "0") return resolve(null);
                const t0 = performance.now();
                new MutationObserver((_, obs) => {
                  if (m.dataset.firstSeq !== first) {
                    obs.disconnect();
                    resolve(performance.now() - t0);
                  }
                }).observe(m, { attributes: true, attributeFilter: ["data-first-seq"] });
                m.scrollTop = 0;
              }),
          );
          if (ms === null) break;
          older.push(ms);
        }
        const olderMs = older.length ? median(older) : null;
        loads.push({ firstPaint, ready, heapMiB: heap.usedSize / 1048576, rendered, nodes, rssMiB, olderMs });
        console.log(
          `entries=${size} run=${r + 1}: newest visible ${firstPaint.toFixed(0)} ms, ready by ${ready.toFixed(0)} ms, ` +
            `JS heap ${(heap.usedSize / 1048576).toFixed(1)} MiB, renderer RSS ${rssMiB.toFixed(0)} MiB, ` +
            `${nodes} DOM nodes, ${rendered} [data-seq]` +
            (olderMs === null ? "" : `, older page ${olderMs.toFixed(0)} ms (median of ${older.length})`),
        );
        await context.close();
      }
      results.push({
        size,
        firstPaint: median(loads.map((l) => l.firstPaint)),
        firstPaintCold: loads[0].firstPaint,
        heapMiB: median(loads.map((l) => l.heapMiB)),
        rendered: median(loads.map((l) => l.rendered)),
        nodes: median(loads.map((l) => l.nodes)),
        rssMiB: median(loads.map((l) => l.rssMiB)),
        olderMs: loads.some((l) => l.olderMs !== null) ? median(loads.filter((l) => l.olderMs !== null).map((l) => l.olderMs)) : null,
      });
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }
} finally {
  await browser.close();
}
console.log(`\nbinary: ${bin}; ${runs} loads per size (median; cold = the first load, the server's cold join)`);
console.log("| entries | newest entry visible (median) | first load (cold join) | JS heap after GC | renderer RSS | DOM nodes | [data-seq] nodes | older page |");
console.log("|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const r of results) {
  console.log(
    `| ${r.size.toLocaleString("en")} | ${r.firstPaint.toFixed(0)} ms | ${r.firstPaintCold.toFixed(0)} ms | ${r.heapMiB.toFixed(1)} MiB | ${r.rssMiB.toFixed(0)} MiB | ${r.nodes.toLocaleString("en")} | ${r.rendered.toLocaleString("en")} | ${r.olderMs === null ? "—" : `${r.olderMs.toFixed(0)} ms`} |`,
  );
}
