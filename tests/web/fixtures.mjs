// Instance directories written straight to disk before a server starts, in the server's own
// formats — the same as benches/load/fixtures.rs (`write_registry`, `write_display_log`),
// which follow actors/src/storage/registry_file.rs and display_log.rs: the registry
// `conversations/conversations.json` plus the clean-shutdown marker, and a display log
// `conversations/<id>/displayLog.jsonl` of N entries, one line per entry
// `{"s":<seq>,"u":<user requests so far>,"e":<entry>}`, seqs from 0.
//
// Entries come in echo-shaped turns of three: `user-request` ("turn N"), `append-display`
// ("echo: turn N") and `command-result` (a hidden marker in the web client). 250,000 entries
// take about a second to write; submitting them through the protocol would take minutes.
// Used by web.test.mjs and history-bench.mjs.
import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";

/** What the fixture's entry `seq` says: `{type, turn, text}` (text: what the page shows). */
export function fixtureEntry(seq) {
  const turn = Math.floor(seq / 3);
  const kind = seq % 3;
  if (kind === 0) return { type: "user-request", turn, text: `turn ${turn}` };
  if (kind === 1) return { type: "append-display", turn, text: `echo: turn ${turn}` };
  return { type: "command-result", turn, text: "" };
}

/**
 * Writes a registry holding one conversation `name` whose display log has `entries` entries;
 * returns `{id, name, entries, messageCount}`.
 */
export async function writeBigConversation(instanceDir, { name = "Long", entries }) {
  const id = randomUUID();
  const dir = path.join(instanceDir, "conversations");
  await mkdir(path.join(dir, id), { recursive: true });
  const messageCount = await writeDisplayLog(path.join(dir, id, "displayLog.jsonl"), entries);
  const registry =
    `{\n  "sessions": [\n    {"conversationId": ${JSON.stringify(id)}, "name": ${JSON.stringify(name)}, ` +
    `"createdAt": "2026-11-01T00:00:00.000Z", "messageCount": ${messageCount}}\n  ]\n}\n`;
  await writeFile(path.join(dir, "conversations.json"), registry);
  await writeFile(path.join(dir, ".clean-shutdown"), "clean\n");
  return { id, name, entries, messageCount };
}

async function writeDisplayLog(file, entries) {
  const out = createWriteStream(file);
  const base = 1_793_000_000_000;
  let users = 0;
  let chunk = "";
  for (let seq = 0; seq < entries; seq++) {
    const turn = Math.floor(seq / 3);
    const ts = base + seq;
    const rid = `{"clientRequestId":"lt${turn}","connectionId":"0","requestId":"00000000-0000-4000-8000-${String(turn).padStart(12, "0")}"}`;
    let e;
    switch (seq % 3) {
      case 0:
        users++;
        e = `{"command":"turn ${turn}","requestId":${rid},"seq":${seq},"timestamp":${ts},"type":"user-request"}`;
        break;
      case 1:
        e = `{"message":{"message":{"content":"echo: turn ${turn}","type":"markdown"},"requestId":${rid},"source":"chat"},"mode":"block","seq":${seq},"timestamp":${ts},"type":"append-display"}`;
        break;
      default:
        e = `{"requestId":${rid},"seq":${seq},"timestamp":${ts},"type":"command-result"}`;
    }
    chunk += `{"s":${seq},"u":${users},"e":${e}}\n`;
    if (chunk.length > 1 << 20) {
      if (!out.write(chunk)) await new Promise((r) => out.once("drain", r));
      chunk = "";
    }
  }
  await new Promise((resolve, reject) => {
    out.on("error", reject);
    out.end(chunk, resolve);
  });
  return users;
}
