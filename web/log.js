// The display log on screen: which entries are shown, in seq order, exactly once.
//
// Rendering and dedupe model
// - Every display-log entry (getDisplayHistory) becomes one DOM node carrying data-seq; the
//   types without a visible form (command-result, set-display-info, interaction answers…)
//   become hidden marker nodes, so the rendered seq list is exactly the log.
// - Live clientio calls carry no seq. The ones the server logs are rendered at once as
//   "provisional" nodes, keyed by what they contain (request id + payload). After each
//   commandComplete and after a reconnect the client fetches getDisplayHistory(lastSeq) and
//   reconciles: provisional nodes matching the fetched entries get their seq, missing entries
//   are rendered, and a live call whose entry was already rendered from history is dropped.
// - Opening a conversation buffers live calls until join + history replay are done.
// - Only a window of the log is on screen (pages.js): the newest page at first, older pages
//   as the reader scrolls up, at most MAX_RENDERED log entries. When the window does not
//   reach the newest entry ("detached"), live logged calls are not rendered and reconcile
//   only moves lastSeq on: those entries come as pages when the reader scrolls down.
// - Calls the server does not log (system notices, temporary displays, requestChoice,
//   queue events…) and the client's own notices are "ephemeral" nodes without a seq.
//
// Who calls it: live.js (addLogged, scheduleSync, notices), navigation.js (reconcile after a
// join or reconnect, resetMessages), and every module that prints a notice (addLocal).
import { conn, history } from "./api.js";
import { FIRST_SEQ, MAX_RENDERED, openingPage, showOpening, trimWindow } from "./pages.js";
import { localNode, renderEntry } from "./render.js";
import { isCurrent, state } from "./state.js";
import { refreshList } from "./sidebar.js";
import { ui } from "./ui.js";
import { forgetStreams, takeStream } from "./streaming.js";
import { requestIdOf, stableStringify } from "./util.js";

const SYNC_DELAY_MS = 150;

export function entryKey(e) {
  const rid = requestIdOf(e.requestId);
  switch (e.type) {
    case "user-request":
      return `u|${rid}|${e.command}`;
    case "append-display":
      return `a|${e.mode ?? "block"}|${stableStringify(e.message)}`;
    case "set-display":
      return `s|${stableStringify(e.message)}`;
    case "set-display-info":
      return `i|${rid}|${e.source}|${e.actionIndex ?? ""}`;
    case "notify":
      return `n|${e.event}|${stableStringify(e.notificationId ?? null)}|${stableStringify(e.data ?? null)}`;
    case "pending-interaction":
      return `p|${e.interactionId}`;
    case "interaction-resolved":
      return `r|${e.interactionId}`;
    case "interaction-cancelled":
      return `c|${e.interactionId}`;
    case "command-result":
      return `x|${rid}`;
    default:
      return `?|${e.type}|${e.seq}`;
  }
}

/** A live call that the server also logs: render now, get its seq at the next sync. */
export function addLogged(view, entry) {
  const key = entryKey(entry);
  if (view.renderedKeys.has(key)) return; // already rendered from the history
  if (view.detached) return; // the newest entries are not on screen: it comes with its page
  const node = renderEntry(view, entry);
  node.dataset.key = key;
  view.provisional.push({ key, node });
  insertNode(node, null);
  afterInsert(node);
  trimWindow(view);
}

/**
 * Merges log entries (seq-ordered, all after view.lastSeq) into the view: provisional
 * nodes with the same key get the seq; the others are rendered in place.
 */
export function reconcile(view, entries) {
  let pi = 0;
  for (const entry of entries) {
    if (!entry || typeof entry !== "object" || !Number.isInteger(entry.seq)) continue;
    if (view.lastSeq != null && entry.seq <= view.lastSeq) continue;
    if (view.detached) {
      view.lastSeq = entry.seq; // not on screen: its page is fetched when scrolled to
      continue;
    }
    if (view.topSeq == null) {
      view.topSeq = entry.seq;
      view.hasOlder = !view.cleared && entry.seq > FIRST_SEQ;
    }
    const key = entryKey(entry);
    let j = -1;
    for (let t = pi; t < view.provisional.length; t++) {
      if (view.provisional[t].key === key) {
        j = t;
        break;
      }
    }
    let node;
    if (j >= 0) {
      // Unmatched provisional nodes before the match are not in the log: drop them.
      for (let t = pi; t < j; t++) view.provisional[t].node.remove();
      node = view.provisional[j].node;
      pi = j + 1;
    } else {
      node = renderEntry(view, entry);
      // A streamed answer's whole text takes the place of the node it grew in.
      const grew = takeStream(view, entry);
      if (grew) grew.replaceWith(node);
      else {
        const before = view.provisional.slice(pi).find((p) => p.node.isConnected);
        insertNode(node, before ? before.node : null);
      }
    }
    node.dataset.seq = String(entry.seq);
    node.dataset.key = key;
    rememberKey(view, key);
    view.lastSeq = entry.seq;
    if (j < 0) markContinuation(node);
  }
  view.provisional = view.provisional.slice(pi);
  showWindow(view);
  updateEmptyState();
  trimWindow(view);
  scrollToEnd(false);
}

/** The window's bounds on #messages, for tests and the curious. */
export function showWindow(view) {
  const d = ui.messages.dataset;
  d.lastSeq = view.lastSeq == null ? "" : String(view.lastSeq);
  d.firstSeq = view.topSeq == null ? "" : String(view.topSeq);
  d.window = view.detached ? "detached" : "tail";
}

/** Keys of rendered log entries, for dropping live duplicates; only the recent ones matter. */
export function rememberKey(view, key) {
  view.renderedKeys.delete(key);
  view.renderedKeys.add(key);
  if (view.renderedKeys.size > 4000) {
    let drop = view.renderedKeys.size - 2000;
    for (const k of view.renderedKeys) {
      if (drop-- <= 0) break;
      view.renderedKeys.delete(k);
    }
  }
}

export function scheduleSync(view) {
  clearTimeout(view.syncTimer);
  view.syncTimer = setTimeout(() => {
    view.syncChain = view.syncChain.then(() => syncTail(view)).catch(() => {});
  }, SYNC_DELAY_MS);
}

/** Fetches the log entries after lastSeq and reconciles them with what is on screen. */
async function syncTail(view) {
  if (!isCurrent(view) || !view.live || !conn.isOpen) return;
  const epoch = view.epoch;
  const after = view.lastSeq;
  const entries = await history(view.id, after, { limit: MAX_RENDERED });
  if (!isCurrent(view) || !view.live || view.epoch !== epoch || view.lastSeq !== after) return;
  if (after != null && entries.length > 0 && entries[0].seq !== after + 1 && !view.detached) {
    // A gap: entries were lost, or more came than a page holds. Show the newest page.
    resetMessages();
    if (entries.length < MAX_RENDERED) addLocal(view, "warning", "Some messages were missing; reloaded the history.");
    const opening = await openingPage(view.id, null);
    if (isCurrent(view) && view.epoch === epoch + 1) showOpening(view, opening);
    return;
  }
  reconcile(view, entries);
  refreshList(); // message counts changed
}

export function insertNode(node, before) {
  if (before && before.parentNode === ui.messages) ui.messages.insertBefore(node, before);
  else ui.messages.append(node);
}

function afterInsert(node) {
  markContinuation(node);
  updateEmptyState();
  scrollToEnd(false);
}

/** Consecutive agent output of one request shows the source label once. */
export function markContinuation(node) {
  if (!node.classList.contains("agent")) return;
  const prev = previousVisible(node);
  if (prev && prev.classList.contains("agent") && prev.dataset.requestId === node.dataset.requestId) {
    node.classList.add("continued");
  }
}

function previousVisible(node) {
  let p = node.previousElementSibling;
  while (p && p.hidden) p = p.previousElementSibling;
  return p;
}

export function addEphemeral(view, node) {
  if (!isCurrent(view)) return;
  insertNode(node, null);
  updateEmptyState();
  scrollToEnd(false);
}

export function addLocal(view, kind, text) {
  addEphemeral(view, localNode(kind, text));
}

export function updateEmptyState() {
  ui.emptyState.hidden = !!ui.messages.querySelector(":scope > .msg:not([hidden])");
}

export function resetMessages() {
  const view = state.current;
  if (view) {
    view.epoch += 1;
    view.lastSeq = null;
    view.topSeq = null;
    view.hasOlder = false;
    view.detached = false;
    view.bottomSeq = null;
    view.cleared = false;
    view.renderedKeys = new Set();
    view.provisional = [];
    forgetStreams(view);
    view.interactions = new Map();
    view.outcomes = new Map();
    view.choices = new Map();
    view.temporary = new Map();
  }
  ui.messages.replaceChildren(ui.emptyState);
  ui.messages.dataset.lastSeq = "";
  ui.messages.dataset.firstSeq = "";
  ui.messages.dataset.window = "tail";
  updateEmptyState();
}

/** "Clear view": clears the screen only; the conversation and its log are untouched. */
export function clearView() {
  const view = state.current;
  for (const node of [...ui.messages.children]) if (node !== ui.emptyState) node.remove();
  if (view) {
    view.temporary = new Map();
    view.choices = new Map();
    forgetStreams(view);
    // Nothing comes back by scrolling: new entries are shown from here on.
    view.topSeq = null;
    view.hasOlder = false;
    view.detached = false;
    view.bottomSeq = null;
    view.cleared = true;
    showWindow(view);
  }
  updateEmptyState();
}

/** Whether new entries scroll the view: only while the reader is at (or near) the bottom. */
let stickToBottom = true;

/**
 * A scroll to the end is scheduled for the next frame. Scroll events are dispatched before
 * animation frame callbacks, so one caused by our own change (new entries below, old ones
 * trimmed above) can arrive while the pane is momentarily short of the bottom: it must not
 * end the following, or the next entry would not be scrolled to.
 */
let scrollPending = false;

/** The messages pane scrolled (app.js wires it): follow new entries only near the bottom. */
export function followScroll() {
  if (scrollPending) return;
  const m = ui.messages;
  stickToBottom = m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

/** The user sent a message: show what follows it. */
export function stickToEnd() {
  stickToBottom = true;
}

export function scrollToEnd(force) {
  if (!(force || stickToBottom) || scrollPending) return;
  scrollPending = true;
  requestAnimationFrame(() => {
    scrollPending = false;
    ui.messages.scrollTop = ui.messages.scrollHeight;
  });
}
