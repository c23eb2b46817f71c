// Display-log entries and DisplayContent → DOM nodes: user messages, agent output, tool
// calls and results, notices, tables, markdown and sandboxed HTML. Builds nodes only; log.js
// decides where they go. Called by log.js, live.js, interactions.js and manage.js.
//
// Safety: names, messages and errors only ever reach the page through textContent / text
// nodes; markdown goes through markdown.js (DOM-built, http(s) links only); "html" and
// "iframe" content go into <iframe sandbox=""> via srcdoc (no scripts, opaque origin).
import { interactionNode, updateInteraction } from "./interactions.js";
import { el } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { ui } from "./ui.js";
import { clock, KINDS, requestIdOf, stripAnsi } from "./util.js";

export function localNode(kind, text) {
  const node = el("div", `notice local kind-${KINDS.has(kind) ? kind : "info"}`);
  node.setAttribute("role", kind === "error" ? "alert" : "status");
  node.append(el("span", "notice-text", text));
  return node;
}

function marker(entry) {
  const node = el("div", "marker");
  node.hidden = true;
  node.dataset.type = entry.type;
  return node;
}

/**
 * A log entry's node. `paged`: it belongs to a page inserted as a whole (pages.js), which
 * applies set-display's hiding itself once the page is in place.
 */
export function renderEntry(view, entry, { paged = false } = {}) {
  let node;
  switch (entry.type) {
    case "user-request":
      node = userNode(view, entry);
      break;
    case "append-display":
    case "set-display":
      node = agentNode(view, entry, { paged });
      break;
    case "pending-interaction":
      node = interactionNode(view, entry);
      break;
    case "interaction-resolved":
    case "interaction-cancelled": {
      node = marker(entry);
      const outcome = entry.type === "interaction-resolved" ? { value: entry.response } : { cancelled: true };
      view.outcomes.set(entry.interactionId, outcome); // for its question, if an older page brings it
      const i = view.interactions.get(entry.interactionId);
      if (i) i.outcome = outcome;
      view.active.delete(entry.interactionId);
      updateInteraction(view, entry.interactionId);
      break;
    }
    case "notify": {
      node = localNode(entry.event === "error" || entry.event === "warning" ? entry.event : "info", "");
      node.classList.remove("local");
      node.querySelector(".notice-text").replaceChildren(contentNode(entry.data));
      break;
    }
    default:
      node = marker(entry); // command-result, set-display-info, feedback…
  }
  node.classList.add("entry");
  const rid = requestIdOf(entry.requestId ?? entry.message?.requestId);
  if (rid) node.dataset.requestId = rid;
  if (Number.isFinite(entry.timestamp)) node.title = new Date(entry.timestamp).toLocaleString();
  return node;
}

function userNode(view, entry) {
  const node = el("article", "msg user");
  node.setAttribute("aria-label", "User message");
  const bubble = el("div", "bubble");
  bubble.append(el("p", "user-text", entry.command));
  node.append(bubble);
  // Live entries (no timestamp) are ours when they carry our connection id; history entries
  // only when this page submitted them (connection ids are not stable across joins).
  const live = !Number.isFinite(entry.timestamp);
  const rid = requestIdOf(entry.requestId);
  const mine = view.mine.has(rid) || (live && view.connectionId != null && entry.requestId?.connectionId === view.connectionId);
  const who = mine ? "You" : live ? "Another client" : "";
  node.append(el("div", "meta", `${who ? `${who} · ` : ""}${clock(entry.timestamp)}`));
  return node;
}

export function agentNode(view, entry, { paged = false } = {}) {
  const message = entry.message || {};
  const content = message.message;
  const kind = content && typeof content === "object" && KINDS.has(content.kind) ? content.kind : null;
  if (message.toolCall && typeof message.toolCall === "object") {
    const tc = message.toolCall;
    const node = el("article", "msg agent tool tool-call");
    node.setAttribute("aria-label", `Tool call ${String(tc.name ?? "")}`);
    const head = el("div", "tool-head");
    head.append(el("span", "tool-badge", "Tool call"), el("code", "tool-name", String(tc.name ?? "?")));
    node.append(head);
    let input;
    try {
      input = JSON.stringify(tc.input ?? null);
      if (input.length > 100) input = JSON.stringify(tc.input, null, 2);
    } catch {
      input = String(tc.input);
    }
    node.append(el("pre", "tool-body", input));
    return node;
  }
  if (message.toolResult && typeof message.toolResult === "object") {
    const tr = message.toolResult;
    const node = el("article", `msg agent tool tool-result${tr.isError ? " error" : ""}`);
    node.setAttribute("aria-label", `Tool result ${String(tr.name ?? "")}`);
    const head = el("div", "tool-head");
    head.append(
      el("span", "tool-badge", tr.isError ? "Tool error" : "Tool result"),
      el("code", "tool-name", String(tr.name ?? "?")),
    );
    node.append(head);
    const body = typeof tr.content === "string" ? tr.content : JSON.stringify(tr.content, null, 2);
    node.append(el("pre", "tool-body", body));
    return node;
  }
  const node = el("article", `msg agent${kind ? ` kind-${kind}` : ""}`);
  node.setAttribute("aria-label", `Message from ${String(message.source ?? "agent")}`);
  const head = el("div", "msg-source");
  if (typeof message.sourceIcon === "string") head.append(el("span", "source-icon", message.sourceIcon), " ");
  head.append(String(message.source ?? "agent"));
  node.append(head);
  const body = el("div", "msg-body");
  body.append(contentNode(content));
  if (message.thinking === true) {
    // The model's thinking: there to look at, out of the way.
    const details = el("details", "thinking");
    details.append(el("summary", "", "Thinking"), body);
    node.append(details);
  } else {
    node.append(body);
  }
  // An answer that stopped before its end says so.
  const cut = ["cancelled", "interrupted", "incomplete"].find((flag) => message[flag] === true);
  if (cut) {
    const why = {
      cancelled: "Cancelled: the answer stopped here.",
      interrupted: "Interrupted: the server stopped while this answer was being written.",
      incomplete: "Incomplete: the answer stopped here.",
    }[cut];
    node.append(el("div", `answer-cut ${cut}`, why));
  }
  if (entry.type === "set-display") {
    // setDisplay replaces the request's previous display.
    node.dataset.display = "set";
  }
  if (entry.type === "set-display" && !paged) {
    const rid = requestIdOf(message.requestId);
    const prev = [...ui.messages.querySelectorAll(".msg.agent:not(.tool)")].reverse().find((n) => n.dataset.requestId === rid);
    if (prev) prev.hidden = true;
  }
  if (entry.mode === "inline") node.classList.add("inline-mode");
  return node;
}

export function systemNode(message) {
  const node = el("div", "notice system kind-status");
  node.setAttribute("role", "status");
  const content = message.message;
  node.append(el("span", "notice-text", typeof content === "object" && content ? content.content : content));
  return node;
}

/** DisplayContent → DOM: string, string[], string[][], {type, content, kind}. */
export function contentNode(content, depth = 0) {
  if (content == null) return document.createTextNode("");
  if (typeof content === "string") return textBlock(content);
  if (Array.isArray(content)) {
    if (content.length > 0 && content.every((r) => Array.isArray(r))) return tableNode(content);
    return textBlock(content.map((x) => (typeof x === "string" ? x : JSON.stringify(x))).join("\n"));
  }
  if (typeof content === "object" && depth < 4) {
    const type = content.type;
    let node;
    if (type === "markdown") {
      node = el("div", "markdown");
      const text = Array.isArray(content.content) ? content.content.join("\n") : String(content.content ?? "");
      node.append(renderMarkdown(text));
    } else if (type === "html" || type === "iframe") {
      node = sandboxFrame(Array.isArray(content.content) ? content.content.join("\n") : String(content.content ?? ""));
    } else if (type === "text" || type === undefined) {
      node = contentNode(content.content ?? "", depth + 1);
    } else {
      node = el("pre", "structured", JSON.stringify(content, null, 2));
    }
    if (KINDS.has(content.kind) && node.classList) node.classList.add(`kind-${content.kind}`);
    return node;
  }
  return textBlock(String(content));
}

function textBlock(text) {
  return el("div", "text", stripAnsi(text));
}

export function tableNode(rows) {
  const wrap = el("div", "table-wrap");
  const table = el("table");
  const [head, ...body] = rows;
  const thead = el("thead");
  const htr = el("tr");
  for (const c of head) htr.append(el("th", null, stripAnsi(c ?? "")));
  thead.append(htr);
  const tbody = el("tbody");
  for (const r of body) {
    const tr = el("tr");
    for (let i = 0; i < Math.max(head.length, r.length); i++) tr.append(el("td", null, stripAnsi(r[i] ?? "")));
    tbody.append(tr);
  }
  table.append(thead, tbody);
  wrap.append(table);
  return wrap;
}

function sandboxFrame(html) {
  const frame = document.createElement("iframe");
  frame.className = "html-frame";
  frame.setAttribute("sandbox", ""); // no scripts, no same-origin, no forms, no popups
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.setAttribute("title", "HTML content from the agent");
  frame.srcdoc = html;
  return frame;
}
