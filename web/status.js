// What the chat header and the composer's buttons show: the conversation's name, who is
// here, the request queue (running, N queued), the MCP servers, the model and the context
// meter, and whether Cancel applies to a request of this page. Called whenever the queue, the list or
// the connection changes.
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
  renderMeter(view);
  renderModel(view);
}

export function updateComposer() {
  const view = state.current;
  const ready = state.connected && !!view;
  ui.send.disabled = !ready;
  const mine = view && state.connected ? myActiveRequest(view) : null;
  ui.cancel.hidden = !mine;
  ui.cancel.dataset.requestId = mine || "";
}

// getStatus's Roundtable extensions, read on opening a conversation and after each finished
// request: the MCP servers (`mcpServers`: one short entry each in the header, the transport
// and the reason of a failure in the tooltip; a server may have restarted or changed its
// tools) and the context meter (`contextMeter`). A contextMeter notification that arrived
// while getStatus was on its way is newer than its answer: the answer's meter is then dropped.
export async function refreshStatus(view) {
  const meterVersion = view.meterVersion;
  let status;
  try {
    status = await getStatus(view.id);
  } catch {
    return;
  }
  view.mcp = Array.isArray(status?.mcpServers) ? status.mcpServers : [];
  if (view.meterVersion === meterVersion) view.meter = meterOf(status?.contextMeter);
  if (status?.model && typeof status.model === "object") view.model = status.model;
  if (isCurrent(view)) {
    renderMcp(view);
    renderMeter(view);
    renderModel(view);
  }
}

/** A `conversationModel` notification: the conversation now uses another provider. */
export function setModel(view, data) {
  if (!data || typeof data.provider !== "string") return;
  view.model = { ...(view.model ?? { providers: [data.provider] }), provider: data.provider, model: data.model ?? null };
  if (isCurrent(view)) renderModel(view);
}

// The model picker: the provider this conversation uses (getStatus's `model`, kept current by
// conversationModel notifications), among those the server offers; picking one sends
// `@system model NAME`, which every client of the conversation then follows. Hidden while the
// server offers only one.
export function renderModel(view) {
  const model = view.model;
  const providers = Array.isArray(model?.providers) ? model.providers.filter((p) => typeof p === "string") : [];
  ui.modelPicker.hidden = !model || providers.length < 2 || !state.connected;
  if (ui.modelPicker.hidden) return;
  const options = providers.map((name) => {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name === model.provider && model.model ? `${name} · ${model.model}` : name;
    return option;
  });
  ui.modelPicker.replaceChildren(...options);
  ui.modelPicker.value = model.provider;
  ui.modelPicker.dataset.provider = model.provider;
}

/** A `contextMeter` notification: the meter after a request changed it (null: cleared). */
export function setMeter(view, meter) {
  view.meterVersion += 1;
  view.meter = meterOf(meter);
  if (isCurrent(view)) renderMeter(view);
}

/** The meter if `value` is one ({contextTokens, contextWindow?, model?}), else null. */
function meterOf(value) {
  if (!value || typeof value !== "object" || !Number.isFinite(value.contextTokens)) return null;
  const window = Number.isFinite(value.contextWindow) && value.contextWindow > 0 ? value.contextWindow : null;
  return { tokens: value.contextTokens, window, model: typeof value.model === "string" ? value.model : "" };
}

/** 950, 1.2k, 12k, 1.5M: a token count for the header. */
function compact(n) {
  if (n < 1000) return String(n);
  const [unit, suffix] = n < 1e6 ? [1000, "k"] : [1e6, "M"];
  return n < 10 * unit ? `${Math.floor((n / unit) * 10) / 10}${suffix}` : `${Math.floor(n / unit)}${suffix}`;
}

// The context meter: a small bar (a <meter> element: no inline style, so the page's CSP
// holds) and "Context 15% · 1.2k / 8.1k"; without a window only the count, without a meter
// nothing. The tooltip has the exact numbers and the model.
function renderMeter(view) {
  const meter = view.meter;
  ui.contextMeter.hidden = !meter || !state.connected;
  if (!meter) {
    delete ui.contextMeter.dataset.tokens;
    return;
  }
  const { tokens, window, model } = meter;
  const percent = window ? Math.floor((tokens * 100) / window) : null;
  ui.contextMeterBar.hidden = !window;
  ui.contextMeterBar.max = window ?? 1;
  ui.contextMeterBar.value = window ? Math.min(tokens, window) : 0;
  ui.contextMeterBar.low = window ? window * 0.6 : 0;
  ui.contextMeterBar.high = window ? window * 0.85 : 0;
  ui.contextMeterBar.optimum = 0;
  ui.contextMeterText.textContent = window
    ? `Context ${percent}% · ${compact(tokens)} / ${compact(window)}`
    : `Context ${compact(tokens)} tokens`;
  ui.contextMeter.title =
    `${tokens.toLocaleString("en-US")}${window ? ` of ${window.toLocaleString("en-US")}` : ""} tokens of context in use` +
    (model ? ` (model ${model})` : "");
  ui.contextMeter.dataset.tokens = String(tokens);
  ui.contextMeter.dataset.window = window ? String(window) : "";
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
