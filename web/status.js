// What the chat header and the composer's buttons show: the conversation's name, who is
// here, the request queue (running, N queued) and whether Cancel applies to a request of
// this page. Called whenever the queue, the list or the connection changes.
import { getStatus } from "./api.js";
import { isCurrent, state } from "./state.js";
import { ui } from "./ui.js";

export function setQueue(view, snapshot, force = false) {
  const version = Number.isFinite(snapshot.version) ? snapshot.version : -1;
  if (!force && version >= 0 && view.queue.version > version) return;
  view.queue = {
    running: snapshot.running ?? null,
    queued: Array.isArray(snapshot.queued) ? snapshot.queued : [],
    version: Math.max(version, force ? -1 : view.queue.version),
  };
  if (isCurrent(view)) renderQueue(view);
}

export function isMine(view, rid) {
  if (view.mine.has(rid)) return true;
  const all = [view.queue.running, ...view.queue.queued].filter(Boolean);
  const entry = all.find((e) => e.requestId === rid);
  return !!entry && entry.originatorConnectionId === view.connectionId;
}

function myActiveRequest(view) {
  const { running, queued } = view.queue;
  if (running && isMine(view, running.requestId)) return running.requestId;
  const mineQueued = queued.filter((q) => isMine(view, q.requestId));
  return mineQueued.length ? mineQueued[mineQueued.length - 1].requestId : null;
}

function renderQueue(view) {
  const { running, queued } = view.queue;
  const parts = [];
  if (running) {
    const full = String(running.text ?? "");
    let part = `Running: “${full.length > 40 ? `${full.slice(0, 40)}…` : full}”`;
    if (running.blockedOn === "interaction") part += " (waiting for an answer)";
    parts.push(part);
  }
  if (queued.length) parts.push(`${queued.length} queued`);
  ui.queueState.textContent = !state.connected ? "" : parts.length ? parts.join(" · ") : "Idle";
  ui.queueState.dataset.state = running ? "running" : queued.length ? "queued" : "idle";
  ui.queueState.dataset.queued = String(queued.length);
  updateComposer();
}

export function renderHeader() {
  const view = state.current;
  if (!view) return;
  const info = state.conversations.find((c) => c.conversationId === view.id);
  const name = info?.name ?? view.name ?? "";
  view.name = name;
  ui.title.textContent = name || "(unnamed)";
  ui.title.dataset.conversationId = view.id;
  document.title = `${name} · Roundtable`;
  const n = info?.clientCount;
  if (!state.connected) {
    ui.presence.textContent = "";
    delete ui.presence.dataset.count;
  } else if (Number.isFinite(n)) {
    ui.presence.textContent = n <= 1 ? "Only you are here" : `${n} clients connected`;
    ui.presence.dataset.count = String(n);
  } else {
    ui.presence.textContent = "";
    delete ui.presence.dataset.count;
  }
  renderQueue(view);
}

export function updateComposer() {
  const view = state.current;
  const ready = state.connected && !!view;
  ui.send.disabled = !ready;
  const mine = view && state.connected ? myActiveRequest(view) : null;
  ui.cancel.hidden = !mine;
  ui.cancel.dataset.requestId = mine || "";
}

// The MCP servers (getStatus's `mcpServers`): one short entry each in the header, the
// transport and the reason of a failure in the tooltip. Read on opening a conversation and
// after each finished request (a server may have restarted or changed its tools).
export async function refreshMcp(view) {
  let status;
  try {
    status = await getStatus(view.id);
  } catch {
    return;
  }
  view.mcp = Array.isArray(status?.mcpServers) ? status.mcpServers : [];
  if (isCurrent(view)) renderMcp(view);
}

function renderMcp(view) {
  const servers = view.mcp ?? [];
  ui.mcpState.textContent = servers.length
    ? `MCP: ${servers
        .map((s) => `${s.name} ${String(s.state).split(/[ :;(]/)[0]} (${s.tools} tools)`)
        .join(" · ")}`
    : "";
  ui.mcpState.title = servers.map((s) => `${s.name}: ${s.state}; ${s.transport}`).join("\n");
  ui.mcpState.dataset.count = String(servers.length);
}
