// The window of the display log on screen, so that a conversation of any length opens as
// fast as a new one and the page stays small.
//
// - Opening fetches only the newest page: getDisplayHistory(null, {limit: OPEN_PAGE}) (the
//   paged form is a Roundtable extension; TypeAgent's clients never send it).
// - Scrolling near the top fetches the page before the first rendered entry
//   ({limit: PAGE, beforeSeq: topSeq}) and inserts it above, keeping what the reader sees
//   where it is on screen. Seqs are contiguous from FIRST_SEQ, so a page that is short or
//   starts there is the first.
// - At most MAX_RENDERED log entries stay in the DOM: past that, entries at the end farther
//   from the viewport are dropped. Dropping the newest ones "detaches" the window: live
//   logged calls are then not rendered and reconcile (log.js) only moves lastSeq on; scrolling
//   down fetches the pages after the last rendered entry ({limit: PAGE, beforeSeq:
//   bottomSeq + PAGE + 1} after bottomSeq) until the window reaches lastSeq again. Sending a
//   message jumps back to the newest page first.
// - A search hit with a seq opens its conversation at that turn: the page ending a little
//   after it, detached when newer entries exist.
//
// Page fetches run on the view's syncChain with the tail syncs of log.js, so the two never
// interleave. Who calls it: navigation.js (opening), log.js (trimming after live entries),
// composer.js (back to the newest page), sidebar.js (search hits), app.js (scroll events).
import { conn, history } from "./api.js";
import { entryKey, markContinuation, reconcile, rememberKey, showWindow, stickToEnd, scrollToEnd, updateEmptyState } from "./log.js";
import { renderEntry } from "./render.js";
import { isCurrent, state } from "./state.js";
import { ui } from "./ui.js";

/** Entries fetched to open a conversation: a screenful and some. */
export const OPEN_PAGE = 100;
/** Entries per page fetched while scrolling. */
export const PAGE = 200;
/** Log entries the DOM holds at most. */
export const MAX_RENDERED = 1000;
/** The first seq of every display log (display_log.rs numbers entries from 0). */
export const FIRST_SEQ = 0;
/** Entries shown after a search hit's own, when a search opens the conversation there. */
const AFTER_HIT = 20;

const valid = (entries) =>
  (Array.isArray(entries) ? entries : []).filter((e) => e && typeof e === "object" && Number.isInteger(e.seq));

/**
 * The page a conversation opens with: the newest one, or the one around `atSeq`; `tail` is
 * then the log's newest seq (null when the page is the newest).
 */
export async function openingPage(id, atSeq) {
  if (atSeq == null) return { entries: valid(await history(id, null, { limit: OPEN_PAGE })), tail: null };
  const [page, newest] = await Promise.all([
    history(id, null, { limit: OPEN_PAGE, beforeSeq: atSeq + AFTER_HIT + 1 }),
    history(id, null, { limit: 1 }),
  ]);
  return { entries: valid(page), tail: valid(newest).at(-1)?.seq ?? null };
}

/** Renders an opening page into the (empty) view; detached when the log goes on after it. */
export function showOpening(view, { entries, tail }) {
  reconcile(view, entries);
  if (tail != null && view.lastSeq != null && tail > view.lastSeq) {
    view.detached = true;
    view.bottomSeq = view.lastSeq;
    view.lastSeq = tail;
    showWindow(view);
  }
}

// ---- scrolling ----------------------------------------------------------------------------

let edgeCheck = 0;

/** The messages pane scrolled (or its content changed): fetch a page if an edge is near. */
export function watchScroll() {
  if (!edgeCheck) edgeCheck = requestAnimationFrame(checkEdges);
}

function checkEdges() {
  edgeCheck = 0;
  const view = state.current;
  if (!view || !view.live || view.paging || !conn.isOpen) return;
  const m = ui.messages;
  const near = Math.max(1.5 * m.clientHeight, 600);
  if (view.hasOlder && view.topSeq != null && m.scrollTop < near) page(view, fetchOlder);
  else if (view.detached && m.scrollHeight - m.scrollTop - m.clientHeight < near) page(view, fetchNewer);
}

/** Runs one page fetch on the view's chain; looks at the edges again when it rendered one. */
function page(view, fetch) {
  view.paging = true;
  view.syncChain = view.syncChain
    .then(() => fetch(view))
    .then(
      (rendered) => {
        view.paging = false;
        if (rendered) watchScroll();
      },
      () => {
        view.paging = false; // the next scroll tries again
      },
    );
}

/** The page before the window, inserted above it. Resolves true when it rendered one. */
async function fetchOlder(view) {
  const epoch = view.epoch;
  const before = view.topSeq;
  if (!isCurrent(view) || !view.hasOlder || before == null) return false;
  const got = await history(view.id, null, { limit: PAGE, beforeSeq: before });
  if (!isCurrent(view) || view.epoch !== epoch || view.topSeq !== before) return false;
  const entries = valid(got).filter((e) => e.seq < before);
  view.hasOlder = entries.length >= PAGE && entries[0].seq > FIRST_SEQ;
  if (entries.length === 0) {
    showWindow(view);
    return false;
  }
  const nodes = entries.map((e) => pageNode(view, e));
  const next = ui.messages.querySelector(`:scope > [data-seq="${before}"]`) ?? ui.emptyState.nextSibling;
  keepPosition(() => {
    const fragment = document.createDocumentFragment();
    fragment.append(...nodes);
    ui.messages.insertBefore(fragment, next);
    afterPage(nodes, next);
    view.topSeq = entries[0].seq;
    trim(view);
  });
  showWindow(view);
  return true;
}

/** The page after the window while detached, inserted below it; attached again at lastSeq. */
async function fetchNewer(view) {
  const epoch = view.epoch;
  const from = view.bottomSeq;
  if (!isCurrent(view) || !view.detached || from == null) return false;
  const got = await history(view.id, from, { limit: PAGE, beforeSeq: from + PAGE + 1 });
  if (!isCurrent(view) || view.epoch !== epoch || !view.detached || view.bottomSeq !== from) return false;
  // Entries past lastSeq are the tail sync's to reconcile.
  const entries = valid(got).filter((e) => e.seq > from && e.seq <= view.lastSeq);
  const nodes = entries.map((e) => pageNode(view, e));
  const last = ui.messages.querySelector(`:scope > [data-seq="${from}"]`);
  const next = last ? last.nextSibling : null;
  keepPosition(() => {
    const fragment = document.createDocumentFragment();
    fragment.append(...nodes);
    ui.messages.insertBefore(fragment, next);
    afterPage(nodes, next);
    for (const e of entries) rememberKey(view, entryKey(e));
    if (entries.length > 0) view.bottomSeq = entries.at(-1).seq;
    if (view.bottomSeq >= view.lastSeq || entries.length === 0) {
      view.detached = false;
      view.bottomSeq = null;
    }
    trim(view);
  });
  showWindow(view);
  return entries.length > 0;
}

function pageNode(view, entry) {
  const node = renderEntry(view, entry, { paged: true });
  node.dataset.seq = String(entry.seq);
  node.dataset.key = entryKey(entry);
  return node;
}

/** A page is in place: source labels once per request, set-display's hiding, empty state. */
function afterPage(nodes, next) {
  for (const node of nodes) markContinuation(node);
  if (next && next.classList) {
    next.classList.remove("continued");
    markContinuation(next);
  }
  applySetDisplays(new Set(nodes));
  updateEmptyState();
}

/** A set-display hides its request's previous display, where the pair touches the page. */
function applySetDisplays(page) {
  const last = new Map();
  for (const node of ui.messages.querySelectorAll(":scope > .msg.agent:not(.tool)")) {
    const rid = node.dataset.requestId;
    if (!rid) continue;
    const prev = last.get(rid);
    if (prev && node.dataset.display === "set" && (page.has(node) || page.has(prev))) prev.hidden = true;
    last.set(rid, node);
  }
}

/**
 * Runs `fn`, which adds or removes nodes, keeping the first node in view where it was on
 * screen (Chromium's scroll anchoring does not act at scrollTop 0, nor for every change).
 */
function keepPosition(fn) {
  const m = ui.messages;
  const top = m.getBoundingClientRect().top;
  let anchor = null;
  let offset = 0;
  for (const node of m.children) {
    if (node.hidden || node === ui.emptyState) continue;
    const r = node.getBoundingClientRect();
    if (r.height > 0 && r.bottom > top) {
      anchor = node;
      offset = r.top;
      break;
    }
  }
  fn();
  if (anchor && anchor.isConnected) m.scrollTop += anchor.getBoundingClientRect().top - offset;
}

// ---- the bound ----------------------------------------------------------------------------

/** After live entries: at most MAX_RENDERED log entries, keeping the view where it is. */
export function trimWindow(view) {
  if (ui.messages.querySelectorAll(":scope > [data-seq]").length > MAX_RENDERED) keepPosition(() => trim(view));
}

/** Drops the log entries past MAX_RENDERED at the end farther from the viewport. */
function trim(view) {
  const seqNodes = ui.messages.querySelectorAll(":scope > [data-seq]");
  const excess = seqNodes.length - MAX_RENDERED;
  if (excess <= 0) return;
  const m = ui.messages;
  const above = m.scrollTop;
  const below = m.scrollHeight - m.scrollTop - m.clientHeight;
  if (above > below) {
    // The oldest go, with what lies among them.
    const keep = seqNodes[excess];
    let node = m.firstChild;
    while (node && node !== keep) {
      const next = node.nextSibling;
      if (node !== ui.emptyState) node.remove();
      node = next;
    }
    view.topSeq = Number(keep.dataset.seq);
    view.hasOlder = true;
  } else {
    // The newest go: the window is detached. What follows the last log entry (notices,
    // temporary displays, private choices) stays at the bottom; live entries awaiting their
    // seq go (they come back with their page).
    const lastKept = seqNodes[seqNodes.length - excess - 1];
    const lastGone = seqNodes[seqNodes.length - 1];
    let node = lastKept.nextSibling;
    while (node) {
      const next = node.nextSibling;
      node.remove();
      if (node === lastGone) break;
      node = next;
    }
    for (const p of view.provisional) p.node.remove();
    view.provisional = [];
    view.bottomSeq = Number(lastKept.dataset.seq);
    view.detached = true;
  }
  for (const [id, i] of view.interactions) if (!i.node.isConnected) view.interactions.delete(id);
  for (const [id, c] of view.choices) if (!c.node?.isConnected) view.choices.delete(id);
  for (const [rid, node] of view.temporary) if (!node.isConnected) view.temporary.delete(rid);
  showWindow(view);
}

// ---- jumps --------------------------------------------------------------------------------

/** Before sending: when the newest entries are not on screen, show the newest page. */
export function showNewest(view) {
  if (!view || !view.detached) return Promise.resolve();
  const run = view.syncChain.then(() => reopen(view, null));
  view.syncChain = run.catch(() => {});
  return view.syncChain;
}

/** A search hit in the open conversation: show the page around `seq`. */
export function jumpTo(view, seq) {
  const run = view.syncChain.then(() => reopen(view, seq));
  view.syncChain = run.catch(() => {});
  return view.syncChain;
}

/** Replaces the window by the newest page or the one around `atSeq`. */
async function reopen(view, atSeq) {
  const epoch = view.epoch;
  const opening = await openingPage(view.id, atSeq);
  if (!isCurrent(view) || view.epoch !== epoch) return;
  // Live state that is not part of the log stays: temporary displays and private choices.
  const live = new Set([...view.temporary.values(), ...[...view.choices.values()].map((c) => c.node)]);
  const keep = [...ui.messages.children].filter((n) => live.has(n));
  ui.messages.replaceChildren(ui.emptyState);
  view.epoch += 1;
  view.provisional = [];
  view.interactions = new Map();
  view.topSeq = null;
  view.hasOlder = false;
  view.detached = false;
  view.bottomSeq = null;
  view.cleared = false;
  const first = opening.entries[0]?.seq;
  if (first != null) view.lastSeq = first - 1;
  showOpening(view, opening);
  ui.messages.append(...keep);
  updateEmptyState();
  if (atSeq == null) {
    stickToEnd();
    scrollToEnd(true);
  } else revealSeq(atSeq);
  watchScroll();
}

/**
 * Brings the entry `seq` to the middle of the pane, marked. A hidden one (a search hit in
 * agent output names the turn's command-result) stands for the shown entry before it.
 */
export function revealSeq(seq) {
  requestAnimationFrame(() => {
    const at = ui.messages.querySelector(`:scope > [data-seq="${seq}"]`);
    let node = at;
    while (node && (node.hidden || !node.dataset.seq)) node = node.previousElementSibling;
    if (!node) for (node = at; node && (node.hidden || !node.dataset.seq); ) node = node.nextElementSibling;
    if (!node) return;
    node.scrollIntoView({ block: "center" });
    for (const old of ui.messages.querySelectorAll(":scope > .hit")) old.classList.remove("hit");
    node.classList.add("hit");
    ui.messages.dataset.hitSeq = node.dataset.seq;
    watchScroll();
  });
}
