// The conversation list, kept live: subscribeConversations answers the list once per
// connection and the server then pushes each change (conversationsChanged, applied by
// applyListChange); one row per conversation (open, rename, delete), the search box (names
// filter the list as one types; a pause also searches what was said, shown under the list
// with the passages that matched), the phone-sized drawer, and the create / rename / delete dialogs started from it. app.js wires
// its buttons; modules call refreshList() after their own changes (a cheap re-read).
import {
  conn,
  createConversation,
  deleteConversation,
  listConversations,
  renameConversation,
  searchConversationContent,
  subscribeConversations,
} from "./api.js";
import { askName, confirmDialog } from "./dialogs.js";
import { button, el, icon } from "./dom.js";
import { addLocal } from "./log.js";
import { moveAway, switchTo } from "./navigation.js";
import { jumpTo } from "./pages.js";
import { navigate, state } from "./state.js";
import { renderHeader } from "./status.js";
import { ui } from "./ui.js";
import { age, autoConversationName, errText, isNotFound, sortNewest } from "./util.js";

/** The list has been loaded once (before that, an empty list is not "no conversations"). */
let listLoaded = false;
/** The list call under way, shared by everyone who asks meanwhile. */
let listInFlight = null;

/** The server pushes changes on this connection: re-reading would only race them. */
let live = false;

/** Subscribes to the live list on a fresh connection (the answer is the list itself). */
export function subscribeList() {
  listInFlight = null;
  live = false;
  return refreshList(async () => {
    const list = await subscribeConversations();
    live = true;
    return list;
  });
}

/** Re-reads the list with listConversations, until the live list is subscribed. */
export async function refreshList(read = () => listConversations(null)) {
  if (!conn.isOpen) return;
  if (live && !listInFlight) return;
  if (listInFlight) return listInFlight;
  listInFlight = (async () => {
    try {
      const list = await read();
      state.conversations = Array.isArray(list) ? list : [];
      listLoaded = true;
      ui.listError.hidden = true;
      renderSidebar();
      renderHeader();
    } catch (e) {
      if (conn.isOpen) {
        ui.listError.textContent = `Could not load the list: ${errText(e)}`;
        ui.listError.hidden = false;
      }
    } finally {
      listInFlight = null;
    }
  })();
  return listInFlight;
}

/** One pushed change {kind: created|renamed|updated|deleted, conversation}: applied in place. */
export function applyListChange(change) {
  const info = change?.conversation;
  const id = info?.conversationId;
  if (!id) return;
  const rest = state.conversations.filter((c) => c.conversationId !== id);
  state.conversations = change.kind === "deleted" ? rest : [...rest, info];
  renderSidebar();
  renderHeader();
}

const rows = new Map(); // conversationId → {li, name, meta, open, rename, del}

/**
 * The clients a row shows. The list's clientCount is the server's count when the list (or the
 * pushed change) was made, which can predate this page's own join of the conversation it has
 * open: the server pushes the new count up to 250 ms later (coalesced). The page is itself one
 * of that conversation's clients from the moment its join succeeded, so it counts at least 1.
 */
function clientsShown(info, current) {
  const counted = Number(info.clientCount) || 0;
  return current && state.connected ? Math.max(counted, 1) : counted;
}

export function renderSidebar() {
  const filter = ui.filter.value.trim().toLowerCase();
  const list = sortNewest(state.conversations).filter((c) => !filter || String(c.name).toLowerCase().includes(filter));
  const seen = new Set();
  list.forEach((c, index) => {
    seen.add(c.conversationId);
    let row = rows.get(c.conversationId);
    if (!row) {
      row = makeRow(c.conversationId);
      rows.set(c.conversationId, row);
    }
    row.info = c;
    const name = String(c.name);
    if (row.name.textContent !== name) row.name.textContent = name;
    const current = state.current?.id === c.conversationId;
    const clients = clientsShown(c, current);
    const msgs = Number(c.messageCount) || 0;
    const meta = `${clients} ${clients === 1 ? "client" : "clients"} · ${msgs} ${msgs === 1 ? "message" : "messages"} · ${age(c.createdAt)}`;
    if (row.meta.textContent !== meta) row.meta.textContent = meta;
    row.li.dataset.clients = String(clients);
    row.li.dataset.messages = String(msgs);
    row.li.classList.toggle("current", current);
    if (current) row.open.setAttribute("aria-current", "true");
    else row.open.removeAttribute("aria-current");
    row.open.setAttribute("aria-label", `Open ${name} (${meta})`);
    row.rename.setAttribute("aria-label", `Rename ${name}`);
    row.del.setAttribute("aria-label", `Delete ${name}`);
    if (ui.list.children[index] !== row.li) ui.list.insertBefore(row.li, ui.list.children[index] || null);
  });
  for (const [id, row] of rows) {
    if (!seen.has(id)) {
      row.li.remove();
      if (!state.conversations.some((c) => c.conversationId === id)) rows.delete(id);
    }
  }
  ui.listEmpty.hidden = !(listLoaded && list.length === 0);
  ui.listEmpty.textContent = filter ? "No conversation name matches." : "No conversations yet.";
}

/** Pause after the last keystroke before the content search runs. */
const CONTENT_SEARCH_DELAY_MS = 250;
/** Most conversations shown under "In messages". */
const CONTENT_MATCHES = 8;
let contentTimer = null;
/** Bumped per search: an answer to an older query is dropped. */
let contentGeneration = 0;

/** Runs the content search for the box's text after a pause in typing. */
export function scheduleContentSearch() {
  clearTimeout(contentTimer);
  contentGeneration++;
  const query = ui.filter.value.trim();
  if (!query) {
    ui.contentResults.hidden = true;
    ui.contentList.replaceChildren();
    return;
  }
  contentTimer = setTimeout(() => searchContent(query, contentGeneration), CONTENT_SEARCH_DELAY_MS);
}

async function searchContent(query, generation) {
  if (!conn.isOpen) return;
  ui.contentResults.hidden = false;
  ui.contentStatus.textContent = "Searching…";
  let matches;
  try {
    matches = await searchConversationContent(query, CONTENT_MATCHES);
  } catch (e) {
    if (generation !== contentGeneration) return;
    ui.contentList.replaceChildren();
    ui.contentStatus.textContent = `Search failed: ${errText(e)}`;
    return;
  }
  if (generation !== contentGeneration) return;
  const valid = (Array.isArray(matches) ? matches : []).filter((m) => m?.conversation?.conversationId);
  ui.contentList.replaceChildren(...valid.map(contentRow));
  ui.contentStatus.textContent = valid.length ? "" : `Nothing said matches “${query}”.`;
}

/** One content hit: the conversation's name and the passages that matched, opening it. */
function contentRow(match) {
  const li = el("li", "content-hit");
  const open = el("button", "conv-open");
  open.type = "button";
  open.dataset.id = match.conversation.conversationId;
  open.append(el("span", "conv-name", String(match.conversation.name)));
  for (const snippet of (Array.isArray(match.snippets) ? match.snippets : []).slice(0, 2)) {
    open.append(snippetNode(String(snippet)));
  }
  // A hit that names the seq of its best passage opens the conversation there.
  const id = match.conversation.conversationId;
  const seq = Number.isInteger(match.seq) ? match.seq : null;
  open.addEventListener("click", () => {
    closeSidebar();
    navigate(() => (seq != null && state.current?.id === id ? jumpTo(state.current, seq) : switchTo(id, { atSeq: seq })));
  });
  li.append(open);
  return li;
}

/** A snippet with its `**matched**` words as <mark> (text nodes only: nothing is parsed as HTML). */
function snippetNode(text) {
  const span = el("span", "snippet");
  text.split("**").forEach((part, i) => {
    if (part) span.append(i % 2 ? el("mark", null, part) : document.createTextNode(part));
  });
  return span;
}

function makeRow(id) {
  const li = el("li", "conv");
  li.dataset.id = id;
  const open = el("button", "conv-open");
  open.type = "button";
  const name = el("span", "conv-name");
  const meta = el("span", "conv-meta");
  open.append(name, meta);
  open.addEventListener("click", () => {
    closeSidebar();
    navigate(() => switchTo(id));
  });
  const actions = el("div", "conv-actions");
  const rename = button("", "icon small rename", () => renameFromSidebar(id));
  rename.append(icon("pencil"));
  rename.title = "Rename";
  const del = button("", "icon small delete", () => deleteFromSidebar(id));
  del.append(icon("trash"));
  del.title = "Delete";
  actions.append(rename, del);
  li.append(open, actions);
  return { li, name, meta, open, rename, del, info: null };
}

export function openSidebar() {
  ui.app.classList.add("sidebar-open");
  ui.menu.setAttribute("aria-expanded", "true");
  ui.scrim.hidden = false;
  (ui.list.querySelector(".current .conv-open") || ui.filter).focus();
}

export function closeSidebar() {
  if (!ui.app.classList.contains("sidebar-open")) return;
  ui.app.classList.remove("sidebar-open");
  ui.menu.setAttribute("aria-expanded", "false");
  ui.scrim.hidden = true;
}

export function newFromSidebar() {
  askName({
    title: "New conversation",
    label: "Name (optional)",
    ok: "Create",
    value: "",
    required: false,
    submit: async (value) => {
      const name = value.trim() || autoConversationName();
      let created;
      try {
        created = await createConversation(name);
      } catch (e) {
        return errText(e);
      }
      closeSidebar();
      refreshList();
      navigate(() => switchTo(created.conversationId));
      return null;
    },
  });
}

function renameFromSidebar(id) {
  const info = state.conversations.find((c) => c.conversationId === id);
  askName({
    title: "Rename conversation",
    label: "New name",
    ok: "Rename",
    value: info?.name ?? "",
    required: true,
    submit: async (value) => {
      const name = value.trim();
      if (!name) return "The name cannot be empty.";
      try {
        await renameConversation(id, name);
      } catch (e) {
        return errText(e);
      }
      await refreshList();
      return null;
    },
  });
}

async function deleteFromSidebar(id) {
  const info = state.conversations.find((c) => c.conversationId === id);
  const name = info?.name ?? id;
  const isOpen = state.current?.id === id;
  const ok = await confirmDialog({
    title: "Delete conversation?",
    text: `Delete “${name}” and all its messages, for every client?${isOpen ? " It is open here: you will be moved to another conversation." : ""}`,
    ok: "Delete",
  });
  if (!ok) return;
  state.deleting.add(id);
  try {
    try {
      await deleteConversation(id);
    } catch (e) {
      if (!isNotFound(e)) {
        if (state.current) addLocal(state.current, "error", `Could not delete “${name}”: ${errText(e)}`);
        return;
      }
    }
    if (state.current?.id === id) await navigate(() => moveAway(id, `Deleted “${name}”.`));
  } finally {
    state.deleting.delete(id);
  }
  refreshList();
}
