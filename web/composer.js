// The message box: sending a message (submitCommand), cancelling this page's request
// (cancelCommand) and growing the box with its text. app.js wires its events.
import { conn, dispatcherOf } from "./api.js";
import { addLocal, stickToEnd } from "./log.js";
import { showNewest } from "./pages.js";
import { state } from "./state.js";
import { updateComposer } from "./status.js";
import { ui } from "./ui.js";
import { errText } from "./util.js";

/** Numbers this page's clientRequestIds. */
let requestCounter = 0;

export async function sendMessage() {
  const text = ui.input.value;
  if (!text.trim()) return;
  ui.input.value = "";
  autosize();
  await submitText(text, true);
}

/**
 * Submits `text` as this page's request (the message box's, or a command the page sends for
 * a control such as the model picker); `typed`: put it back in the box if it could not be
 * sent.
 */
export async function submitText(text, typed = false) {
  const view = state.current;
  if (!view || !state.connected) {
    addLocal(view, "error", "Not connected: the message was not sent.");
    if (typed && !ui.input.value) {
      ui.input.value = text;
      autosize();
    }
    return;
  }
  const clientRequestId = `web-${Date.now().toString(36)}-${++requestCounter}`;
  stickToEnd();
  await showNewest(view); // what one sends shows below the newest entries
  try {
    const r = await conn.invoke(dispatcherOf(view.id), "submitCommand", [text, null, null, clientRequestId, null]);
    if (r && r.ok) {
      if (r.entry?.requestId) view.mine.add(r.entry.requestId);
      updateComposer();
    } else if (r && r.error === "queue_full") {
      const limit = r.maxBytes ? `${Math.round(r.maxBytes / 1048576)} MiB of requests waiting` : `${r.maxDepth ?? 100} requests`;
      addLocal(view, "error", `The queue is full (at most ${limit}); try again later.`);
    } else if (r && r.error === "server_stopping") {
      addLocal(view, "error", "The server is stopping; the message was not sent.");
    } else {
      addLocal(view, "error", `The message was not accepted: ${String(r?.error ?? "unknown reason")}`);
    }
  } catch (e) {
    addLocal(view, "error", `Could not send: ${errText(e)}`);
    if (typed && !ui.input.value) {
      ui.input.value = text;
      autosize();
    }
  }
}

export async function cancelMine() {
  const view = state.current;
  const rid = ui.cancel.dataset.requestId;
  if (!view || !rid) return;
  ui.cancel.disabled = true;
  try {
    const r = await conn.invoke(dispatcherOf(view.id), "cancelCommand", [rid]);
    if (r?.kind === "not_found" || r?.kind === "already_completed") {
      addLocal(view, "info", "That request had already finished.");
    }
  } catch (e) {
    addLocal(view, "error", `Could not cancel: ${errText(e)}`);
  } finally {
    ui.cancel.disabled = false;
  }
}

export function autosize() {
  ui.input.style.height = "auto";
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 200)}px`;
}
