// Opening and switching conversations: the first one at page load (remembered, else
// `Web`), join-before-leave switches, the history replay that takes a view live, the rejoin
// after a reconnect and moving away from a deleted conversation. Callers run these through
// navigate() (state.js) so that two never interleave.
import { conn, createConversation, dropChannels, history, joinConversation, leaveConversation, listConversations } from "./api.js";
import { handleLive } from "./live.js";
import { addLocal, reconcile, resetMessages, scrollToEnd } from "./log.js";
import { MAX_RENDERED, openingPage, revealSeq, showOpening, watchScroll } from "./pages.js";
import { localNode } from "./render.js";
import { refreshList, renderSidebar } from "./sidebar.js";
import { state, isCurrent, View } from "./state.js";
import { refreshStatus, renderHeader, setQueue } from "./status.js";
import { ui } from "./ui.js";
import { errText, isNotFound, normName, sortNewest } from "./util.js";

const STORAGE_KEY = "roundtable.lastConversationId";
const FALLBACK_NAME = "Web";

/** Page load: the remembered conversation, else `Web` (find-or-create). */
export async function openInitial() {
  let saved = null;
  try {
    saved = localStorage.getItem(STORAGE_KEY);
  } catch {
    /* storage disabled */
  }
  if (saved) {
    const r = await switchTo(saved);
    if (r.kind === "switched" || !conn.isOpen) return; // (disconnected: the reconnect retries)
    if (!isNotFound(r.error)) {
      showFatal(`Could not open the last conversation: ${errText(r.error)}`);
      return;
    }
    await openFallback(
      `The conversation you had open is gone (${errText(r.error)}). Opened “${FALLBACK_NAME}” instead.`,
    );
    return;
  }
  await openFallback(null);
}

function showFatal(text) {
  if (state.current) addLocal(state.current, "error", text);
  else {
    ui.title.textContent = "No conversation open";
    ui.messages.append(localNode("error", text));
  }
}

/** Find-or-create a conversation by name (TypeAgent's findOrCreateNamedConversation). */
async function findOrCreate(name) {
  const trimmed = String(name).trim();
  const list = await listConversations(trimmed);
  const hit = (list || []).find((c) => normName(c.name) === normName(trimmed));
  if (hit) return hit;
  try {
    return await createConversation(trimmed);
  } catch (e) {
    const all = await listConversations(null);
    const again = (all || []).find((c) => normName(c.name) === normName(trimmed));
    if (again) return again;
    throw e;
  }
}

/** Join `Web` (find-or-create), retrying once if it vanished between list and join. */
async function openFallback(notice) {
  let lastError = null;
  for (let attempt = 0; attempt < 2; attempt++) {
    let target;
    try {
      target = await findOrCreate(FALLBACK_NAME);
    } catch (e) {
      if (conn.isOpen) showFatal(`Could not open “${FALLBACK_NAME}”: ${errText(e)}`);
      return { kind: "join-failed", error: e };
    }
    const r = await switchTo(target.conversationId, { notice });
    if (r.kind !== "join-failed") return r;
    lastError = r.error;
    if (!isNotFound(r.error)) break;
  }
  if (conn.isOpen) showFatal(`Could not open “${FALLBACK_NAME}”: ${errText(lastError)}`);
  return { kind: "join-failed", error: lastError };
}

/**
 * Join-before-leave switch (TypeAgent's switchConversationSafe): join the target, rebind
 * the UI to it, replay its history, then leave the old one. A failed join leaves the page
 * where it was. `opts.atSeq`: open at that entry (a search hit) instead of the newest.
 */
export async function switchTo(targetId, opts = {}) {
  const old = state.current;
  if (old && old.id === targetId && !opts.force) return { kind: "already-on", conversation: old };
  const view = new View(targetId);
  state.views.set(targetId, view);
  let joined;
  try {
    joined = await joinConversation(view);
  } catch (e) {
    if (state.views.get(targetId) === view) state.views.delete(targetId);
    if (old && isCurrent(old) && !opts.quiet) {
      addLocal(old, "error", `Could not open the conversation: ${errText(e)}`);
    }
    return { kind: "join-failed", error: e };
  }
  // Rebind the UI.
  state.current = view;
  try {
    localStorage.setItem(STORAGE_KEY, view.id);
  } catch {
    /* storage disabled */
  }
  resetMessages();
  renderHeader();
  renderSidebar();
  if (opts.notice) addLocal(view, opts.noticeKind || "warning", opts.notice);
  await replayHistory(view, null, joined, opts.atSeq ?? null);
  refreshStatus(view);
  // Leave the old conversation (best effort).
  if (old && old.id !== view.id) {
    state.views.delete(old.id);
    clearTimeout(old.syncTimer);
    await leaveConversation(old.id);
  }
  refreshList();
  return { kind: "switched", conversation: view };
}

function applyJoin(view, result) {
  view.active = new Set();
  for (const p of result?.pendingInteractions || []) {
    if (p && typeof p.interactionId === "string") view.active.add(p.interactionId);
  }
  setQueue(view, result?.queueSnapshot || { running: null, queued: [], version: -1 }, true);
}

/**
 * Fetches the history, renders it, then goes live: with `afterSeq` null the opening page
 * (the newest, or the one around `atSeq`), else the entries after `afterSeq` (a rejoin).
 */
async function replayHistory(view, afterSeq, joinResult, atSeq = null) {
  view.live = false;
  ui.messages.dataset.ready = "false";
  const epoch = view.epoch;
  let opening = null; // a fresh page: {entries, tail}
  let entries = [];
  try {
    if (afterSeq == null) opening = await openingPage(view.id, atSeq);
    else entries = await history(view.id, afterSeq, { limit: MAX_RENDERED });
  } catch (e) {
    if (!conn.isOpen) return; // the socket closed: the reconnect rejoins and replays
    if (isCurrent(view)) addLocal(view, "error", `Could not load the history: ${errText(e)}`);
    opening = null;
    entries = [];
  }
  if (!isCurrent(view) || view.epoch !== epoch) return;
  if (joinResult !== undefined) applyJoin(view, joinResult);
  if (afterSeq != null && entries.length > 0 && entries[0].seq !== afterSeq + 1 && !view.detached) {
    // More was missed than a page holds (then the newest page is all one needs), or entries
    // were lost.
    const missing =
      entries.length < MAX_RENDERED
        ? `Some messages were missing after the reconnect (expected #${afterSeq + 1}, got #${entries[0].seq}); reloaded the history.`
        : null;
    resetMessages();
    if (missing) addLocal(view, "warning", missing);
    try {
      opening = await openingPage(view.id, null);
    } catch (e) {
      addLocal(view, "error", `Could not load the history: ${errText(e)}`);
      opening = { entries: [], tail: null };
    }
    if (!isCurrent(view) || view.epoch !== epoch + 1) return;
  }
  if (opening) showOpening(view, opening);
  else reconcile(view, entries);
  // Go live: the buffered calls, minus those the history already covered.
  const buffered = view.buffer;
  view.buffer = [];
  view.live = true;
  for (const [name, args] of buffered) handleLive(view, name, args);
  ui.messages.dataset.ready = "true";
  ui.messages.dataset.conversationId = view.id;
  renderHeader();
  if (atSeq != null && afterSeq == null) revealSeq(atSeq);
  else if (!view.detached) scrollToEnd(true); // (a rejoin while reading far up stays there)
  watchScroll();
}

/** After a reconnect: rejoin the open conversation and fetch only what was missed. */
export async function rejoin(view) {
  if (!isCurrent(view) || !conn.isOpen) return;
  view.live = false;
  view.buffer = [];
  state.views.set(view.id, view);
  let result;
  try {
    result = await joinConversation(view);
  } catch (e) {
    if (isNotFound(e)) {
      state.views.delete(view.id);
      await moveAway(view.id, `“${view.name}” no longer exists (${errText(e)}).`);
    } else if (isCurrent(view)) {
      addLocal(view, "error", `Could not rejoin the conversation: ${errText(e)}`);
    }
    return;
  }
  await replayHistory(view, view.lastSeq, result);
  refreshList();
}

/** Leaves a deleted conversation for the newest remaining one, or `Web`. */
export async function moveAway(deletedId, reason) {
  const view = state.current;
  if (!view || view.id !== deletedId) return;
  dropChannels(deletedId);
  let list = [];
  try {
    list = sortNewest((await listConversations(null)) || []).filter((c) => c.conversationId !== deletedId);
  } catch {
    /* fall through to Web */
  }
  const notice = reason ? `${reason} Opened another conversation.` : null;
  for (const c of list) {
    const r = await switchTo(c.conversationId, { notice, noticeKind: "info", quiet: true });
    if (r.kind === "switched") return;
  }
  await openFallback(reason ? `${reason} Opened “${FALLBACK_NAME}”.` : null);
}
