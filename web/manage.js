// `@conversation …`: the server answers it with takeAction "manage-conversation" and this
// client does the work, like TypeAgent's manage.ts (new, list, info, switch, prev / next,
// rename, delete, find, search, help), then shows the result. The same payload comes when a
// request in words asks for it ("switch to my work conversation"), just before that request
// completes. `@conversation handoff` is the server's own: it never comes here. live.js calls
// manageConversation through navigate().
import { createConversation, deleteConversation, findConversations, listConversations, renameConversation, searchConversationContent } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { el } from "./dom.js";
import { addEphemeral } from "./log.js";
import { switchTo } from "./navigation.js";
import { tableNode } from "./render.js";
import { refreshList } from "./sidebar.js";
import { state } from "./state.js";
import { age, autoConversationName, errText, isNotFound, normName, sortNewest } from "./util.js";

export async function manageConversation(origin, payload) {
  let result;
  try {
    result = await runManage(payload || {});
  } catch (e) {
    result = { kind: "error", message: errText(e) };
  }
  const view = state.current || origin;
  addEphemeral(view, manageNode(result));
}

async function allConversations() {
  return sortNewest((await listConversations(null)) || []);
}

async function switchResult(target, message) {
  const r = await switchTo(target.conversationId, { quiet: true });
  if (r.kind === "already-on") return { kind: "warning", message: `Already on “${target.name}”.` };
  if (r.kind === "join-failed") return { kind: "error", message: `Could not switch to “${target.name}”: ${errText(r.error)}` };
  return { kind: "ok", message, switched: true, conversation: target };
}

/** new [name]: switch to the conversation with that name, else create it and switch. */
async function manageNew(p, current) {
  const chosen = String(p.name ?? "").trim() || autoConversationName();
  const existing = ((await listConversations(chosen)) || []).find((c) => normName(c.name) === normName(chosen));
  if (existing) return switchResult(existing, `A conversation named “${existing.name}” already exists — switched to it.`);
  let created;
  try {
    created = await createConversation(chosen);
  } catch (e) {
    const again = (await allConversations()).find((c) => normName(c.name) === normName(chosen));
    if (!again) return { kind: "error", message: `Could not create “${chosen}”: ${errText(e)}` };
    created = again;
  }
  return switchResult(created, `Created “${created.name}” and switched to it.`);
}

/** list [filter]: the conversations, newest first. */
async function manageList(p, current) {
  const list = sortNewest((await listConversations(p.name ?? null)) || []);
  if (!list.length) return { kind: "warning", message: "No conversations found." };
  return { kind: "list", conversations: list, currentConversationId: current?.id };
}

/** info: the current conversation. */
async function manageInfo(p, current) {
  if (!current) return { kind: "warning", message: "No conversation is open." };
  return { kind: "info", conversationId: current.id, name: current.name };
}

/** switch <name>: by exact name, else the best fuzzy match, else a content match. */
async function manageSwitch(p, current) {
  const name = String(p.name ?? "").trim();
  if (!name) return { kind: "warning", message: "Usage: @conversation switch <name>" };
  const all = await allConversations();
  let target = all.find((c) => normName(c.name) === normName(name));
  if (!target) {
    const matches = (await findConversations(name)) || [];
    const top = matches.find((m) => m && m.conversation && typeof m.score === "number");
    if (top && top.score >= 0.6) target = top.conversation;
  }
  if (!target) {
    try {
      const content = (await searchConversationContent(name)) || [];
      if (content[0]?.conversation) target = content[0].conversation;
    } catch {
      /* no content search: treated as no match */
    }
  }
  if (!target) return { kind: "warning", message: `No conversation named or matching “${name}”.` };
  if (current && target.conversationId === current.id) return { kind: "warning", message: `Already on “${target.name}”.` };
  return switchResult(target, `Switched to “${target.name}”.`);
}

/** prev / next: the neighbour in the newest-first list, wrapping around. */
async function manageCycle(p, current) {
  const all = await allConversations();
  if (all.length < 2) return { kind: "warning", message: "There is no other conversation to switch to." };
  const at = all.findIndex((c) => c.conversationId === current?.id);
  const step = p.subcommand === "next" ? 1 : -1;
  const target = all[(((at < 0 ? 0 : at) + step) % all.length + all.length) % all.length];
  return switchResult(target, `Switched to “${target.name}”.`);
}

/** rename [name] <new name>: the named conversation, else the current one. */
async function manageRename(p, current) {
  const newName = String(p.newName ?? "").trim();
  if (!newName) return { kind: "warning", message: "Usage: @conversation rename [name] <new name>" };
  const all = await allConversations();
  let target;
  if (p.name != null && String(p.name).trim()) {
    target = all.find((c) => normName(c.name) === normName(p.name));
    if (!target) return { kind: "warning", message: `No conversation named “${String(p.name).trim()}”.` };
  } else {
    target = all.find((c) => c.conversationId === current?.id) || (current && { conversationId: current.id, name: current.name });
    if (!target) return { kind: "warning", message: "No conversation is open." };
  }
  const clash = all.find((c) => c.conversationId !== target.conversationId && normName(c.name) === normName(newName));
  if (clash) return { kind: "error", message: `A conversation named “${clash.name}” already exists. Pick a different name.` };
  await renameConversation(target.conversationId, newName);
  refreshList();
  return { kind: "ok", message: `Renamed “${target.name}” to “${newName}”.` };
}

/** delete <name>: after a confirmation; never the current conversation. */
async function manageDelete(p, current) {
  const name = String(p.name ?? "").trim();
  if (!name) return { kind: "warning", message: "Usage: @conversation delete <name>" };
  const all = await allConversations();
  const target = all.find((c) => normName(c.name) === normName(name));
  if (!target) return { kind: "warning", message: `No conversation named “${name}”.` };
  if (current && target.conversationId === current.id) {
    return { kind: "error", message: `“${target.name}” is the active conversation; switch to another one before deleting it.` };
  }
  const ok = await confirmDialog({
    title: "Delete conversation?",
    text: `Delete “${target.name}” and all its messages, for every client?`,
    ok: "Delete",
  });
  if (!ok) return { kind: "cancelled", target: target.name };
  try {
    await deleteConversation(target.conversationId);
  } catch (e) {
    if (!isNotFound(e)) throw e;
  }
  refreshList();
  return { kind: "ok", message: `Deleted “${target.name}”.` };
}

/** find / search <query>: matches by name or by content. */
async function manageFind(p, current) {
  const query = String(p.query ?? "").trim();
  if (!query) return { kind: "warning", message: `Usage: @conversation ${p.subcommand} <query>` };
  const raw = p.subcommand === "find" ? await findConversations(query) : await searchConversationContent(query);
  const matches = (Array.isArray(raw) ? raw : []).filter(
    (m) => m && m.conversation && typeof m.conversation.name === "string" && typeof m.score === "number",
  );
  return {
    kind: p.subcommand === "find" ? "matches" : "contentMatches",
    query,
    matches,
    currentConversationId: current?.id,
  };
}

/** The subcommands: (payload, current view) → the result manageNode shows. */
const SUBCOMMANDS = {
  new: manageNew,
  list: manageList,
  info: manageInfo,
  switch: manageSwitch,
  prev: manageCycle,
  next: manageCycle,
  rename: manageRename,
  delete: manageDelete,
  find: manageFind,
  search: manageFind,
};

/** Runs one payload; an unknown subcommand (or `help`) shows the help. */
async function runManage(p) {
  const current = state.current;
  if (typeof p.subcommand !== "string" || !Object.hasOwn(SUBCOMMANDS, p.subcommand)) return { kind: "help" };
  return SUBCOMMANDS[p.subcommand](p, current);
}

function manageNode(result) {
  const kind = result.kind === "error" ? "error" : result.kind === "warning" || result.kind === "cancelled" ? "warning" : "info";
  const node = el("article", `msg local manage kind-${kind}`);
  node.setAttribute("aria-label", "Conversation command result");
  node.append(el("div", "msg-source", "@conversation"));
  const body = el("div", "msg-body");
  switch (result.kind) {
    case "ok":
    case "warning":
    case "error":
      body.append(el("p", null, result.message));
      break;
    case "cancelled":
      body.append(el("p", null, `Cancelled: “${result.target}” was not deleted.`));
      break;
    case "info": {
      const p = el("p");
      p.append("Current conversation: ", el("strong", null, result.name), " ", el("code", null, result.conversationId));
      body.append(p);
      break;
    }
    case "list": {
      body.append(
        tableNode([
          ["Name", "Clients", "Messages", "Created"],
          ...result.conversations.map((c) => [
            `${c.name}${c.conversationId === result.currentConversationId ? " (current)" : ""}`,
            String(c.clientCount ?? 0),
            String(c.messageCount ?? 0),
            age(c.createdAt),
          ]),
        ]),
      );
      break;
    }
    case "matches":
    case "contentMatches": {
      if (!result.matches.length) {
        body.append(el("p", null, `No conversation matches “${result.query}”.`));
        break;
      }
      const ul = el("ul");
      for (const m of result.matches) {
        const li = el("li");
        li.append(el("strong", null, m.conversation.name), ` — score ${m.score.toFixed(2)}`);
        if (m.conversation.conversationId === result.currentConversationId) li.append(" (current)");
        if (Array.isArray(m.snippets)) for (const s of m.snippets.slice(0, 3)) li.append(el("div", "snippet", String(s)));
        ul.append(li);
      }
      body.append(ul);
      break;
    }
    default: {
      body.append(el("p", null, "Manage conversations with @conversation <subcommand>:"));
      const ul = el("ul");
      for (const [cmd, what] of [
        ["new [name]", "create a conversation and switch to it"],
        ["list", "list conversations, newest first"],
        ["info", "show the current conversation"],
        ["switch <name>", "switch by exact name, else the best fuzzy match"],
        ["prev / next", "cycle through conversations"],
        ["rename [name] <new>", "rename one (default: the current one)"],
        ["delete <name>", "delete one (not the current one)"],
        ["find <query>", "find conversations by name"],
        ["search <query>", "search conversation content"],
        ["handoff <name or id>", "summarize another conversation into this one (done by the server)"],
      ]) {
        const li = el("li");
        li.append(el("code", null, `@conversation ${cmd}`), ` — ${what}`);
        ul.append(li);
      }
      body.append(ul);
    }
  }
  node.append(body);
  return node;
}
