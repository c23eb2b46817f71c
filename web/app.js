// Roundtable web client: a chat client served by the server itself, speaking the same
// TypeAgent agent-server protocol as every other client (see rpc.js for the wire layer).
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
// - Calls the server does not log (system notices, temporary displays, requestChoice,
//   queue events…) and the client's own notices are "ephemeral" nodes without a seq.
//
// Safety: names, messages and errors only ever reach the page through textContent / text
// nodes; markdown goes through markdown.js (DOM-built, http(s) links only); "html" and
// "iframe" content go into <iframe sandbox=""> via srcdoc (no scripts, opaque origin).
"use strict";

(function () {
  const { Connection, DISCONNECTED } = window.RoundtableRpc;
  const { renderMarkdown } = window.RoundtableMarkdown;

  const STORAGE_KEY = "roundtable.lastConversationId";
  const FALLBACK_NAME = "Web";
  const POLL_MS = 2000;
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 10000;
  const SYNC_DELAY_MS = 150;
  const AGENT = "agent-server";
  const KINDS = new Set(["info", "status", "warning", "error", "success"]);

  const $ = (id) => document.getElementById(id);
  const ui = {
    app: $("app"),
    sidebar: $("sidebar"),
    scrim: $("scrim"),
    menu: $("menu"),
    newConversation: $("new-conversation"),
    filter: $("filter"),
    list: $("conversation-list"),
    listEmpty: $("list-empty"),
    listError: $("list-error"),
    title: $("chat-title"),
    presence: $("presence"),
    queueState: $("queue-state"),
    connection: $("connection"),
    clearView: $("clear-view"),
    banner: $("banner"),
    messages: $("messages"),
    emptyState: $("empty-state"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    cancel: $("cancel"),
    nameDialog: $("name-dialog"),
    nameForm: $("name-form"),
    nameTitle: $("name-dialog-title"),
    nameLabel: $("name-label"),
    nameInput: $("name-input"),
    nameError: $("name-error"),
    nameOk: $("name-ok"),
    nameCancel: $("name-cancel"),
    confirmDialog: $("confirm-dialog"),
    confirmForm: $("confirm-form"),
    confirmTitle: $("confirm-title"),
    confirmText: $("confirm-text"),
    confirmError: $("confirm-error"),
    confirmOk: $("confirm-ok"),
    confirmCancel: $("confirm-cancel"),
  };

  // ---------------------------------------------------------------------------------------
  // Small helpers

  function errText(e) {
    if (e == null) return "Unknown error";
    return String(e.message ?? e);
  }
  const isNotFound = (e) => errText(e).trimStart().startsWith("Conversation not found");
  const normName = (n) => String(n ?? "").trim().toLowerCase();
  const dispatcherOf = (id) => `dispatcher:${id}`;
  const clientioOf = (id) => `clientio:${id}`;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function button(label, className, onClick, ariaLabel) {
    const b = el("button", className ? `btn ${className}` : "btn", label);
    b.type = "button";
    if (ariaLabel) b.setAttribute("aria-label", ariaLabel);
    if (onClick) b.addEventListener("click", onClick);
    return b;
  }

  // Simple stroked icons (drawn here, no icon font or image request).
  const ICONS = {
    pencil: ["M4 20l1.2-4.8L15.5 4.9a1.6 1.6 0 0 1 2.3 0l1.3 1.3a1.6 1.6 0 0 1 0 2.3L8.8 18.8z", "M13.5 7l3.5 3.5"],
    trash: ["M4 7h16", "M9.5 7V4.5h5V7", "M6.5 7l1 13h9l1-13", "M10 11v5.5", "M14 11v5.5"],
  };
  function icon(name) {
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("width", "16");
    svg.setAttribute("height", "16");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    svg.setAttribute("class", "icon-svg");
    for (const d of ICONS[name]) {
      const path = document.createElementNS(NS, "path");
      path.setAttribute("d", d);
      svg.append(path);
    }
    return svg;
  }

  function stableStringify(value) {
    if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
    if (Array.isArray(value)) return `[${value.map(stableStringify).join(",")}]`;
    const keys = Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${stableStringify(value[k])}`).join(",")}}`;
  }

  const pad = (n) => String(n).padStart(2, "0");
  function autoConversationName(d = new Date()) {
    return `Conversation ${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  function age(iso) {
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return "";
    const s = Math.max(0, (Date.now() - t) / 1000);
    if (s < 45) return "just now";
    if (s < 3600) return `${Math.max(1, Math.round(s / 60))} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    if (s < 86400 * 30) return `${Math.round(s / 86400)} d ago`;
    return new Date(t).toLocaleDateString();
  }

  function clock(ts) {
    const d = new Date(Number.isFinite(ts) ? ts : Date.now());
    return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  const sortNewest = (list) =>
    [...list].sort((a, b) => (Date.parse(b.createdAt) || 0) - (Date.parse(a.createdAt) || 0));

  // eslint-disable-next-line no-control-regex
  const stripAnsi = (s) => String(s).replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, "");

  function requestIdOf(rid) {
    if (typeof rid === "string") return rid;
    if (rid && typeof rid === "object" && typeof rid.requestId === "string") return rid.requestId;
    return "";
  }

  // ---------------------------------------------------------------------------------------
  // State

  // Access token (servers started with --token / --token-file): taken once from ?token= in
  // the address the page was opened with (then removed from the address bar and history), or
  // asked for when the server says it needs one; kept in this origin's localStorage.
  const TOKEN_KEY = "roundtable.token";
  function takeTokenFromAddress() {
    const params = new URLSearchParams(location.search);
    const given = params.get("token");
    if (given === null) return;
    saveToken(given);
    params.delete("token");
    const rest = params.toString();
    window.history.replaceState(null, "", location.pathname + (rest ? `?${rest}` : "") + location.hash);
  }
  /** The token for this origin; with storage disabled it lives for this page only. */
  let sessionToken = null;
  function saveToken(token) {
    try {
      localStorage.setItem(TOKEN_KEY, token);
    } catch {
      sessionToken = token;
    }
  }
  function currentToken() {
    try {
      return localStorage.getItem(TOKEN_KEY) ?? sessionToken;
    } catch {
      return sessionToken;
    }
  }
  function socketUrl() {
    const base = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
    const token = currentToken();
    return token ? `${base}?token=${encodeURIComponent(token)}` : base;
  }
  /** After a refused connection: if the server needs a token, ask for it once per failure. */
  async function askForTokenIfNeeded() {
    let needed = false;
    try {
      const health = await (await fetch("/health", { cache: "no-store" })).json();
      needed = health.tokenRequired === true;
    } catch {
      return false;
    }
    if (!needed) return false;
    const token = window.prompt(
      currentToken()
        ? "The server refused this access token. Enter the server's access token:"
        : "This Roundtable server needs its access token (see the server's --token-file):",
    );
    if (!token) return false;
    saveToken(token);
    return true;
  }
  takeTokenFromAddress();
  const conn = new Connection(socketUrl(), { onCall, onInvoke, onClose });
  const state = {
    connected: false,
    everConnected: false,
    backoff: BACKOFF_MIN_MS,
    attempt: 0,
    reconnectTimer: null,
    conversations: [],
    listLoaded: false,
    current: null, // View of the open conversation
    views: new Map(), // conversationId → View (current and one being joined)
    nav: Promise.resolve(),
    requestCounter: 0,
    listInFlight: null,
    connecting: false,
    nameSubmit: null,
    deleting: new Set(), // ids this page is deleting (it moves away itself)
  };

  class View {
    constructor(id) {
      this.id = id;
      this.name = "";
      this.connectionId = null;
      this.live = false; // false: buffer live calls (join + history replay in progress)
      this.buffer = [];
      this.lastSeq = null; // seq of the last log entry rendered
      this.renderedKeys = new Set(); // keys of entries rendered with a seq
      this.provisional = []; // [{key, node}] live-rendered logged entries awaiting a seq
      this.interactions = new Map(); // interactionId → {node, entry, outcome}
      this.active = new Set(); // interactionIds still waiting for an answer
      this.choices = new Map(); // choiceId → {node, requestId}
      this.queue = { running: null, queued: [], version: -1 };
      this.mine = new Set(); // requestIds this page submitted
      this.epoch = 0; // bumped when the view is reset; stale async work checks it
      this.syncChain = Promise.resolve();
      this.syncTimer = null;
      this.temporary = new Map(); // requestId → temporary status node
    }
  }

  const isCurrent = (view) => state.current === view;

  /** Serializes navigation (open / switch / rejoin / manage commands). */
  function navigate(fn) {
    const run = state.nav.then(fn, fn);
    state.nav = run.catch(() => {});
    return run;
  }

  // ---------------------------------------------------------------------------------------
  // RPC wrappers (absent arguments are JSON null)

  const agent = (name, args) => conn.invoke(AGENT, name, args);
  const listConversations = (filter = null) => agent("listConversations", [filter]);
  const createConversation = (name) => agent("createConversation", [name, null]);
  const renameConversation = (id, name) => agent("renameConversation", [id, name, null]);
  const deleteConversation = (id) => agent("deleteConversation", [id]);
  const findConversations = (q) => agent("findConversations", [q, null]);
  const searchConversationContent = (q) => agent("searchConversationContent", [q, null]);
  const history = (id, afterSeq) =>
    conn.invoke(dispatcherOf(id), "getDisplayHistory", afterSeq == null ? [] : [afterSeq], 60000);

  async function joinConversation(view) {
    const result = await agent("joinConversation", [{ conversationId: view.id }]);
    conn.createChannel(clientioOf(view.id));
    conn.createChannel(dispatcherOf(view.id));
    view.connectionId = result?.connectionId ?? null;
    view.name = result?.name ?? view.name;
    return result;
  }

  function dropChannels(id) {
    conn.deleteChannel(clientioOf(id));
    conn.deleteChannel(dispatcherOf(id));
  }

  async function leaveConversation(id) {
    dropChannels(id);
    try {
      await agent("leaveConversation", [id]);
    } catch {
      /* best effort (deleted, or never joined on this socket) */
    }
  }

  // ---------------------------------------------------------------------------------------
  // Connection lifecycle

  function setConnection(stateName, text) {
    ui.connection.dataset.state = stateName;
    ui.connection.textContent = text;
  }

  async function connect() {
    if (state.connecting || conn.isOpen) return;
    clearTimeout(state.reconnectTimer);
    state.reconnectTimer = null;
    state.connecting = true;
    setConnection("connecting", state.everConnected ? "Reconnecting…" : "Connecting…");
    conn.url = socketUrl();
    try {
      await conn.open();
    } catch {
      state.connecting = false;
      if (!state.everConnected && (await askForTokenIfNeeded())) {
        connect();
        return;
      }
      scheduleReconnect();
      return;
    }
    state.connecting = false;
    state.connected = true;
    state.backoff = BACKOFF_MIN_MS;
    state.attempt = 0;
    const wasConnected = state.everConnected;
    state.everConnected = true;
    setConnection("connected", "Connected");
    hideBanner();
    updateComposer();
    refreshList();
    if (wasConnected && state.current) {
      const view = state.current;
      navigate(() => rejoin(view));
    } else if (!state.current) {
      navigate(openInitial);
    }
  }

  function onClose() {
    state.connected = false;
    for (const view of state.views.values()) {
      view.live = false;
      view.buffer = [];
      clearTimeout(view.syncTimer);
    }
    if (state.current) {
      state.views = new Map([[state.current.id, state.current]]);
      setQueue(state.current, { running: null, queued: [], version: -1 }, true);
    }
    ui.messages.dataset.ready = "false";
    renderHeader();
    setConnection("offline", "Offline");
    updateComposer();
    scheduleReconnect();
  }

  function scheduleReconnect() {
    state.attempt += 1;
    const delay = state.backoff;
    state.backoff = Math.min(state.backoff * 2, BACKOFF_MAX_MS);
    const secs = delay < 1000 ? (delay / 1000).toFixed(1) : String(Math.round(delay / 1000));
    showBanner(
      state.everConnected
        ? `Connection to the server lost. Reconnecting in ${secs} s (attempt ${state.attempt})…`
        : `Cannot reach the server. Retrying in ${secs} s (attempt ${state.attempt})…`,
      state.attempt,
      delay,
    );
    setConnection("offline", state.everConnected ? "Offline" : "Connecting…");
    state.reconnectTimer = setTimeout(connect, delay);
  }

  function showBanner(text, attempt, delay) {
    ui.banner.textContent = text;
    ui.banner.dataset.attempt = String(attempt);
    ui.banner.dataset.delay = String(delay);
    const retry = button("Retry now", "small", () => connect());
    ui.banner.append(" ", retry);
    ui.banner.hidden = false;
  }

  function hideBanner() {
    ui.banner.hidden = true;
    ui.banner.textContent = "";
    delete ui.banner.dataset.attempt;
  }

  // ---------------------------------------------------------------------------------------
  // Opening and switching conversations

  /** Page load: the remembered conversation, else `Web` (find-or-create). */
  async function openInitial() {
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
   * where it was.
   */
  async function switchTo(targetId, opts = {}) {
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
    await replayHistory(view, null, joined);
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

  /** Fetches history after `afterSeq` (all when null), renders it, then goes live. */
  async function replayHistory(view, afterSeq, joinResult) {
    view.live = false;
    ui.messages.dataset.ready = "false";
    const epoch = view.epoch;
    let entries;
    try {
      entries = await history(view.id, afterSeq);
    } catch (e) {
      if (!conn.isOpen) return; // the socket closed: the reconnect rejoins and replays
      if (isCurrent(view)) addLocal(view, "error", `Could not load the history: ${errText(e)}`);
      entries = [];
    }
    if (!isCurrent(view) || view.epoch !== epoch) return;
    if (joinResult !== undefined) applyJoin(view, joinResult);
    if (afterSeq != null && entries.length > 0 && entries[0].seq !== afterSeq + 1) {
      const missing = `Some messages were missing after the reconnect (expected #${afterSeq + 1}, got #${entries[0].seq}); reloaded the whole history.`;
      resetMessages();
      addLocal(view, "warning", missing);
      try {
        entries = await history(view.id, null);
      } catch (e) {
        addLocal(view, "error", `Could not load the history: ${errText(e)}`);
        entries = [];
      }
      if (!isCurrent(view) || view.epoch !== epoch + 1) return;
    }
    reconcile(view, entries);
    // Go live: the buffered calls, minus those the history already covered.
    const buffered = view.buffer;
    view.buffer = [];
    view.live = true;
    for (const [name, args] of buffered) handleLive(view, name, args);
    ui.messages.dataset.ready = "true";
    ui.messages.dataset.conversationId = view.id;
    renderHeader();
    scrollToEnd(true);
  }

  /** After a reconnect: rejoin the open conversation and fetch only what was missed. */
  async function rejoin(view) {
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
  async function moveAway(deletedId, reason) {
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

  // ---------------------------------------------------------------------------------------
  // Live calls on clientio:<id>

  function onCall(channel, name, args) {
    if (!channel.startsWith("clientio:")) return;
    const view = state.views.get(channel.slice("clientio:".length));
    if (!view) return;
    if (!view.live) {
      view.buffer.push([name, args]);
      return;
    }
    if (isCurrent(view)) handleLive(view, name, args);
  }

  function onInvoke(channel, name) {
    // Server → client invokes (agent-server mode does not use question/proposeAction here).
    if (name === "getUserContext") return null;
    throw new Error(`Unsupported client RPC method: ${name}`);
  }

  function handleLive(view, name, args) {
    switch (name) {
      case "setUserRequest":
        addLogged(view, { type: "user-request", requestId: args[0], command: String(args[1] ?? "") });
        break;
      case "appendDisplay":
      case "setDisplay": {
        const message = args[0];
        const mode = name === "appendDisplay" ? args[1] ?? "block" : undefined;
        if (!message || typeof message !== "object") break;
        clearTemporary(view, requestIdOf(message.requestId));
        if (requestIdOf(message.requestId) === "system") {
          addEphemeral(view, systemNode(message));
        } else if (mode === "temporary") {
          showTemporary(view, message);
        } else if (message.kind === "toast" || message.kind === "inline") {
          addEphemeral(view, agentNode(view, { type: "append-display", message, mode: "block" }));
        } else if (name === "setDisplay") {
          addLogged(view, { type: "set-display", message });
        } else {
          addLogged(view, { type: "append-display", message, mode });
        }
        break;
      }
      case "setDisplayInfo":
        addLogged(view, {
          type: "set-display-info",
          requestId: args[0],
          source: args[1],
          actionIndex: args[2] ?? undefined,
          action: args[3] ?? undefined,
        });
        break;
      case "notify":
        handleNotify(view, args);
        break;
      case "requestInteraction": {
        const p = args[0];
        if (!p || typeof p.interactionId !== "string") break;
        view.active.add(p.interactionId);
        addLogged(view, {
          type: "pending-interaction",
          interactionId: p.interactionId,
          interactionType: p.type,
          source: p.source,
          requestId: p.requestId,
          message: p.message,
          choices: p.choices,
          defaultId: p.defaultId,
        });
        updateInteraction(view, p.interactionId);
        break;
      }
      case "interactionResolved":
        view.active.delete(args[0]);
        addLogged(view, { type: "interaction-resolved", interactionId: args[0], response: args[1] });
        updateInteraction(view, args[0]);
        break;
      case "interactionCancelled":
        view.active.delete(args[0]);
        addLogged(view, { type: "interaction-cancelled", interactionId: args[0] });
        updateInteraction(view, args[0]);
        break;
      case "requestChoice":
        addChoice(view, args);
        break;
      case "takeAction":
        if (args[1] === "manage-conversation") {
          const payload = args[2];
          navigate(() => manageConversation(view, payload));
        } else {
          addLocal(view, "warning", `This client cannot perform the action “${String(args[1])}”.`);
        }
        break;
      case "requestQueued": {
        const entry = args[0];
        if (!entry?.requestId) break;
        const queued = view.queue.queued.filter((q) => q.requestId !== entry.requestId);
        queued.push(entry);
        setQueue(view, { ...view.queue, queued, version: args[1] ?? view.queue.version });
        break;
      }
      case "requestStarted": {
        const entry = args[0];
        if (!entry?.requestId) break;
        setQueue(view, {
          ...view.queue,
          running: entry,
          queued: view.queue.queued.filter((q) => q.requestId !== entry.requestId),
          version: args[1] ?? view.queue.version,
        });
        break;
      }
      case "requestCancelled": {
        const rid = String(args[0] ?? "");
        const wasMine = isMine(view, rid);
        setQueue(view, {
          ...view.queue,
          running: view.queue.running?.requestId === rid ? null : view.queue.running,
          queued: view.queue.queued.filter((q) => q.requestId !== rid),
          version: args[2] ?? view.queue.version,
        });
        for (const [choiceId, c] of view.choices) {
          if (c.requestId === rid) closeChoice(view, choiceId, "Cancelled");
        }
        clearTemporary(view, rid);
        const reason = args[1] && args[1] !== "cancelled" ? ` (${String(args[1]).replace(/_/g, " ")})` : "";
        addLocal(view, "warning", `${wasMine ? "Your request was" : "A request was"} cancelled${reason}.`);
        scheduleSync(view);
        break;
      }
      case "queueStateChanged":
        if (args[0] && typeof args[0] === "object") setQueue(view, args[0]);
        break;
      case "clear":
        clearView();
        break;
      default:
        break; // exit, shutdown, dynamic displays… have no meaning in a web page
    }
  }

  function handleNotify(view, args) {
    const [notificationId, event, data, source, , options] = args;
    if (event === "commandComplete") {
      const rid = requestIdOf(notificationId);
      clearTemporary(view, rid);
      if (view.queue.running?.requestId === rid) setQueue(view, { ...view.queue, running: null });
      addLogged(view, { type: "command-result", requestId: notificationId });
      scheduleSync(view);
      return;
    }
    if (event === "conversationDeleted") {
      const id = data?.conversationId;
      if (id === view.id && !state.deleting.has(id)) {
        dropChannels(id);
        navigate(() => moveAway(id, "This conversation was deleted."));
        refreshList();
      }
      return;
    }
    if (options && options.persist === true) {
      addLogged(view, { type: "notify", notificationId, event, data, source });
      return;
    }
    if (event === "statusNotice") {
      if (!data || data.dismiss) return;
      const text = [data.title, data.message].filter(Boolean).join(": ");
      if (text) addLocal(view, KINDS.has(data.level) ? data.level : "info", text);
      return;
    }
    if (["error", "warning", "info", "inline", "toast", "explained"].includes(event)) {
      const kind = event === "error" || event === "warning" ? event : "info";
      const node = localNode(kind, "");
      node.querySelector(".notice-text").replaceChildren(contentNode(data));
      addEphemeral(view, node);
    }
  }

  // ---------------------------------------------------------------------------------------
  // Entries: keys, rendering, reconciliation

  function entryKey(e) {
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
  function addLogged(view, entry) {
    const key = entryKey(entry);
    if (view.renderedKeys.has(key)) return; // already rendered from the history
    const node = renderEntry(view, entry);
    node.dataset.key = key;
    view.provisional.push({ key, node });
    insertNode(node, null);
    afterInsert(node);
  }

  /**
   * Merges log entries (seq-ordered, all after view.lastSeq) into the view: provisional
   * nodes with the same key get the seq; the others are rendered in place.
   */
  function reconcile(view, entries) {
    let pi = 0;
    for (const entry of entries) {
      if (!entry || typeof entry !== "object" || !Number.isInteger(entry.seq)) continue;
      if (view.lastSeq != null && entry.seq <= view.lastSeq) continue;
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
        const before = view.provisional.slice(pi).find((p) => p.node.isConnected);
        insertNode(node, before ? before.node : null);
      }
      node.dataset.seq = String(entry.seq);
      node.dataset.key = key;
      rememberKey(view, key);
      view.lastSeq = entry.seq;
      if (j < 0) markContinuation(node);
    }
    view.provisional = view.provisional.slice(pi);
    ui.messages.dataset.lastSeq = view.lastSeq == null ? "" : String(view.lastSeq);
    updateEmptyState();
    scrollToEnd(false);
  }

  /** Keys of rendered log entries, for dropping live duplicates; only the recent ones matter. */
  function rememberKey(view, key) {
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

  function scheduleSync(view) {
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
    const entries = await history(view.id, after);
    if (!isCurrent(view) || !view.live || view.epoch !== epoch || view.lastSeq !== after) return;
    if (after != null && entries.length > 0 && entries[0].seq !== after + 1) {
      resetMessages();
      addLocal(view, "warning", "Some messages were missing; reloaded the whole history.");
      reconcile(view, await history(view.id, null));
      return;
    }
    reconcile(view, entries);
    refreshList(); // message counts changed
  }

  function insertNode(node, before) {
    if (before && before.parentNode === ui.messages) ui.messages.insertBefore(node, before);
    else ui.messages.append(node);
  }

  function afterInsert(node) {
    markContinuation(node);
    updateEmptyState();
    scrollToEnd(false);
  }

  /** Consecutive agent output of one request shows the source label once. */
  function markContinuation(node) {
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

  function addEphemeral(view, node) {
    if (!isCurrent(view)) return;
    insertNode(node, null);
    updateEmptyState();
    scrollToEnd(false);
  }

  function addLocal(view, kind, text) {
    addEphemeral(view, localNode(kind, text));
  }

  function localNode(kind, text) {
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

  function renderEntry(view, entry) {
    let node;
    switch (entry.type) {
      case "user-request":
        node = userNode(view, entry);
        break;
      case "append-display":
      case "set-display":
        node = agentNode(view, entry);
        break;
      case "pending-interaction":
        node = interactionNode(view, entry);
        break;
      case "interaction-resolved":
      case "interaction-cancelled": {
        node = marker(entry);
        const i = view.interactions.get(entry.interactionId);
        if (i) i.outcome = entry.type === "interaction-resolved" ? { value: entry.response } : { cancelled: true };
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

  function agentNode(view, entry) {
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
    node.append(body);
    if (entry.type === "set-display") {
      // setDisplay replaces the request's previous display.
      const rid = requestIdOf(message.requestId);
      const prev = [...ui.messages.querySelectorAll(".msg.agent:not(.tool)")].reverse().find((n) => n.dataset.requestId === rid);
      if (prev) prev.hidden = true;
    }
    if (entry.mode === "inline") node.classList.add("inline-mode");
    return node;
  }

  function systemNode(message) {
    const node = el("div", "notice system kind-status");
    node.setAttribute("role", "status");
    const content = message.message;
    node.append(el("span", "notice-text", typeof content === "object" && content ? content.content : content));
    return node;
  }

  /** DisplayContent → DOM: string, string[], string[][], {type, content, kind}. */
  function contentNode(content, depth = 0) {
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

  function tableNode(rows) {
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

  // ---- temporary displays (not logged) -------------------------------------------------

  function showTemporary(view, message) {
    const rid = requestIdOf(message.requestId);
    clearTemporary(view, rid);
    if (!isCurrent(view)) return;
    const node = el("div", "notice temporary kind-status");
    node.setAttribute("role", "status");
    node.append(contentNode(message.message));
    view.temporary.set(rid, node);
    insertNode(node, null);
    scrollToEnd(false);
  }

  function clearTemporary(view, rid) {
    const node = view.temporary.get(rid);
    if (node) {
      node.remove();
      view.temporary.delete(rid);
    }
  }

  // ---- interactions (requestInteraction / respondToInteraction) -------------------------

  function interactionNode(view, entry) {
    const node = el("article", "msg interaction");
    node.setAttribute("aria-label", "Question");
    node.dataset.interactionId = entry.interactionId;
    const head = el("div", "msg-source", `${String(entry.source ?? "agent")} asks`);
    const question = el("p", "question", typeof entry.message === "string" ? entry.message : JSON.stringify(entry.message));
    const choices = el("div", "choices");
    choices.setAttribute("role", "group");
    choices.setAttribute("aria-label", "Answers");
    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    node.append(head, question, choices, outcome);
    const list = Array.isArray(entry.choices) ? entry.choices : [];
    if (entry.interactionType === "question" || entry.interactionType === undefined) {
      list.forEach((label, index) => {
        const b = button(String(label), index === entry.defaultId ? "choice default" : "choice", () =>
          answerInteraction(view, entry.interactionId, index),
        );
        b.dataset.index = String(index);
        choices.append(b);
      });
    } else {
      outcome.textContent = `This ${entry.interactionType} can be answered in another client.`;
    }
    view.interactions.set(entry.interactionId, { node, entry, outcome: null });
    queueMicrotask(() => updateInteraction(view, entry.interactionId));
    return node;
  }

  function updateInteraction(view, id) {
    const i = view.interactions.get(id);
    if (!i) return;
    const active = view.active.has(id) && !i.outcome;
    const buttons = i.node.querySelectorAll(".choices button");
    for (const b of buttons) b.disabled = !active || i.busy;
    const out = i.node.querySelector(".outcome");
    if (i.outcome && "value" in i.outcome) {
      const v = i.outcome.value;
      const label = Array.isArray(i.entry.choices) && Number.isInteger(v) ? i.entry.choices[v] : JSON.stringify(v);
      out.textContent = `Answered: ${label}`;
      for (const b of buttons) b.classList.toggle("chosen", Number(b.dataset.index) === v);
      i.node.classList.add("done");
    } else if (i.outcome && i.outcome.cancelled) {
      out.textContent = "Cancelled";
      i.node.classList.add("done");
    } else if (!active && i.entry.interactionType === "question") {
      out.textContent = "No longer waiting for an answer";
      i.node.classList.add("done");
    } else if (active) {
      out.textContent = "";
      i.node.classList.remove("done");
    }
  }

  async function answerInteraction(view, id, index) {
    const i = view.interactions.get(id);
    if (!i) return;
    i.busy = true;
    updateInteraction(view, id);
    try {
      await conn.invoke(dispatcherOf(view.id), "respondToInteraction", [{ interactionId: id, type: "question", value: index }]);
      // interactionResolved (broadcast) updates the card.
    } catch (e) {
      addLocal(view, "error", `Could not send the answer: ${errText(e)}`);
    } finally {
      i.busy = false;
      updateInteraction(view, id);
    }
  }

  // ---- private choices (requestChoice / respondToChoice) -------------------------------

  function addChoice(view, args) {
    const [requestId, choiceId, kind, message, choices, source] = args;
    if (typeof choiceId !== "string") return;
    const node = el("article", "msg interaction choice");
    node.setAttribute("aria-label", "Question for you");
    node.append(el("div", "msg-source", `${String(source ?? "agent")} asks you (only you see this)`));
    node.append(el("p", "question", typeof message === "string" ? message : JSON.stringify(message)));
    const group = el("div", "choices");
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", "Answers");
    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    const labels = Array.isArray(choices) && choices.length ? choices : ["Yes", "No"];
    labels.forEach((label, index) => {
      let response;
      if (kind === "yesNo") response = index === 0;
      else if (kind === "pickRemember") response = { selected: index, remember: false };
      else response = [index];
      const b = button(String(label), "choice", async () => {
        for (const x of group.querySelectorAll("button")) x.disabled = true;
        try {
          await conn.invoke(dispatcherOf(view.id), "respondToChoice", [choiceId, response]);
          b.classList.add("chosen");
          closeChoice(view, choiceId, `Answered: ${String(label)}`);
        } catch (e) {
          closeChoice(view, choiceId, `Could not answer: ${errText(e)}`);
        }
      });
      group.append(b);
    });
    node.append(group, outcome);
    view.choices.set(choiceId, { node, requestId: requestIdOf(requestId) });
    addEphemeral(view, node);
  }

  function closeChoice(view, choiceId, text) {
    const c = view.choices.get(choiceId);
    if (!c) return;
    view.choices.delete(choiceId);
    for (const b of c.node.querySelectorAll("button")) b.disabled = true;
    c.node.querySelector(".outcome").textContent = text;
    c.node.classList.add("done");
  }

  // ---------------------------------------------------------------------------------------
  // Queue state, header, composer

  function setQueue(view, snapshot, force = false) {
    const version = Number.isFinite(snapshot.version) ? snapshot.version : -1;
    if (!force && version >= 0 && view.queue.version > version) return;
    view.queue = {
      running: snapshot.running ?? null,
      queued: Array.isArray(snapshot.queued) ? snapshot.queued : [],
      version: Math.max(version, force ? -1 : view.queue.version),
    };
    if (isCurrent(view)) renderQueue(view);
  }

  function isMine(view, rid) {
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

  function renderHeader() {
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

  function updateComposer() {
    const view = state.current;
    const ready = state.connected && !!view;
    ui.send.disabled = !ready;
    const mine = view && state.connected ? myActiveRequest(view) : null;
    ui.cancel.hidden = !mine;
    ui.cancel.dataset.requestId = mine || "";
  }

  function updateEmptyState() {
    ui.emptyState.hidden = !!ui.messages.querySelector(":scope > .msg:not([hidden])");
  }

  function resetMessages() {
    const view = state.current;
    if (view) {
      view.epoch += 1;
      view.lastSeq = null;
      view.renderedKeys = new Set();
      view.provisional = [];
      view.interactions = new Map();
      view.choices = new Map();
      view.temporary = new Map();
    }
    ui.messages.replaceChildren(ui.emptyState);
    ui.messages.dataset.lastSeq = "";
    updateEmptyState();
  }

  /** "Clear view": clears the screen only; the conversation and its log are untouched. */
  function clearView() {
    const view = state.current;
    for (const node of [...ui.messages.children]) if (node !== ui.emptyState) node.remove();
    if (view) {
      view.temporary = new Map();
      view.choices = new Map();
    }
    updateEmptyState();
  }

  let stickToBottom = true;
  ui.messages.addEventListener("scroll", () => {
    const m = ui.messages;
    stickToBottom = m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  });
  function scrollToEnd(force) {
    if (force || stickToBottom) {
      requestAnimationFrame(() => {
        ui.messages.scrollTop = ui.messages.scrollHeight;
      });
    }
  }

  // ---------------------------------------------------------------------------------------
  // Sending

  async function sendMessage() {
    const view = state.current;
    const text = ui.input.value;
    if (!text.trim()) return;
    if (!view || !state.connected) {
      addLocal(view, "error", "Not connected: the message was not sent.");
      return;
    }
    const clientRequestId = `web-${Date.now().toString(36)}-${++state.requestCounter}`;
    ui.input.value = "";
    autosize();
    stickToBottom = true;
    try {
      const r = await conn.invoke(dispatcherOf(view.id), "submitCommand", [text, null, null, clientRequestId, null]);
      if (r && r.ok) {
        if (r.entry?.requestId) view.mine.add(r.entry.requestId);
        updateComposer();
      } else if (r && r.error === "queue_full") {
        addLocal(view, "error", `The queue is full (at most ${r.maxDepth ?? 100} requests); try again later.`);
      } else if (r && r.error === "server_stopping") {
        addLocal(view, "error", "The server is stopping; the message was not sent.");
      } else {
        addLocal(view, "error", `The message was not accepted: ${String(r?.error ?? "unknown reason")}`);
      }
    } catch (e) {
      addLocal(view, "error", `Could not send: ${errText(e)}`);
      if (!ui.input.value) {
        ui.input.value = text;
        autosize();
      }
    }
  }

  async function cancelMine() {
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

  function autosize() {
    ui.input.style.height = "auto";
    ui.input.style.height = `${Math.min(ui.input.scrollHeight, 200)}px`;
  }

  // ---------------------------------------------------------------------------------------
  // Sidebar

  async function refreshList() {
    if (!conn.isOpen) return;
    if (state.listInFlight) return state.listInFlight;
    state.listInFlight = (async () => {
      try {
        const list = await listConversations(null);
        state.conversations = Array.isArray(list) ? list : [];
        state.listLoaded = true;
        ui.listError.hidden = true;
        renderSidebar();
        renderHeader();
      } catch (e) {
        if (conn.isOpen) {
          ui.listError.textContent = `Could not load the list: ${errText(e)}`;
          ui.listError.hidden = false;
        }
      } finally {
        state.listInFlight = null;
      }
    })();
    return state.listInFlight;
  }

  const rows = new Map(); // conversationId → {li, name, meta, open, rename, del}

  function renderSidebar() {
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
      const clients = Number(c.clientCount) || 0;
      const msgs = Number(c.messageCount) || 0;
      const meta = `${clients} ${clients === 1 ? "client" : "clients"} · ${msgs} ${msgs === 1 ? "message" : "messages"} · ${age(c.createdAt)}`;
      if (row.meta.textContent !== meta) row.meta.textContent = meta;
      row.li.dataset.clients = String(clients);
      row.li.dataset.messages = String(msgs);
      const current = state.current?.id === c.conversationId;
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
    ui.listEmpty.hidden = !(state.listLoaded && list.length === 0);
    ui.listEmpty.textContent = filter ? "No conversation matches the filter." : "No conversations yet.";
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

  function openSidebar() {
    ui.app.classList.add("sidebar-open");
    ui.menu.setAttribute("aria-expanded", "true");
    ui.scrim.hidden = false;
    (ui.list.querySelector(".current .conv-open") || ui.filter).focus();
  }

  function closeSidebar() {
    if (!ui.app.classList.contains("sidebar-open")) return;
    ui.app.classList.remove("sidebar-open");
    ui.menu.setAttribute("aria-expanded", "false");
    ui.scrim.hidden = true;
  }

  // ---- dialogs --------------------------------------------------------------------------

  /** Name dialog; `submit(value)` returns an error text to keep it open, or null. */
  function askName({ title, label, ok, value, required, submit }) {
    ui.nameTitle.textContent = title;
    ui.nameLabel.textContent = label;
    ui.nameOk.textContent = ok;
    ui.nameInput.value = value || "";
    ui.nameInput.required = !!required;
    ui.nameError.hidden = true;
    ui.nameError.textContent = "";
    ui.nameDialog.dataset.purpose = title;
    state.nameSubmit = submit;
    ui.nameDialog.showModal();
    ui.nameInput.focus();
    ui.nameInput.select();
  }

  ui.nameForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const submit = state.nameSubmit;
    if (!submit) return;
    ui.nameOk.disabled = true;
    ui.nameError.hidden = true;
    try {
      const error = await submit(ui.nameInput.value);
      if (error) {
        ui.nameError.textContent = error;
        ui.nameError.hidden = false;
        ui.nameInput.focus();
      } else {
        state.nameSubmit = null;
        ui.nameDialog.close();
      }
    } finally {
      ui.nameOk.disabled = false;
    }
  });
  ui.nameCancel.addEventListener("click", () => ui.nameDialog.close());

  /** Confirmation dialog; resolves true (confirmed) or false. */
  function confirmDialog({ title, text, ok }) {
    ui.confirmTitle.textContent = title;
    ui.confirmText.textContent = text;
    ui.confirmOk.textContent = ok;
    ui.confirmError.hidden = true;
    return new Promise((resolve) => {
      const done = (v) => {
        ui.confirmForm.removeEventListener("submit", onSubmit);
        ui.confirmDialog.removeEventListener("close", onClose);
        resolve(v);
      };
      const onSubmit = (ev) => {
        ev.preventDefault();
        ui.confirmDialog.dataset.result = "ok";
        ui.confirmDialog.close();
      };
      const onClose = () => done(ui.confirmDialog.dataset.result === "ok");
      ui.confirmDialog.dataset.result = "";
      ui.confirmForm.addEventListener("submit", onSubmit);
      ui.confirmDialog.addEventListener("close", onClose);
      ui.confirmDialog.showModal();
      ui.confirmCancel.focus();
    });
  }
  ui.confirmCancel.addEventListener("click", () => ui.confirmDialog.close());

  function newFromSidebar() {
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

  // ---------------------------------------------------------------------------------------
  // @conversation … (takeAction "manage-conversation"), like TypeAgent's manage.ts

  async function manageConversation(origin, payload) {
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

  async function runManage(p) {
    const current = state.current;
    switch (p.subcommand) {
      case "new": {
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
      case "list": {
        const list = sortNewest((await listConversations(p.name ?? null)) || []);
        if (!list.length) return { kind: "warning", message: "No conversations found." };
        return { kind: "list", conversations: list, currentConversationId: current?.id };
      }
      case "info":
        if (!current) return { kind: "warning", message: "No conversation is open." };
        return { kind: "info", conversationId: current.id, name: current.name };
      case "switch": {
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
      case "prev":
      case "next": {
        const all = await allConversations();
        if (all.length < 2) return { kind: "warning", message: "There is no other conversation to switch to." };
        const at = all.findIndex((c) => c.conversationId === current?.id);
        const step = p.subcommand === "next" ? 1 : -1;
        const target = all[(((at < 0 ? 0 : at) + step) % all.length + all.length) % all.length];
        return switchResult(target, `Switched to “${target.name}”.`);
      }
      case "rename": {
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
      case "delete": {
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
      case "find":
      case "search": {
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
      case "help":
      default:
        return { kind: "help" };
    }
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

  // ---------------------------------------------------------------------------------------
  // Wiring

  ui.composer.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sendMessage();
  });
  ui.input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
      ev.preventDefault();
      sendMessage();
    }
  });
  ui.input.addEventListener("input", autosize);
  document.querySelector(".skip-link").addEventListener("click", (ev) => {
    ev.preventDefault();
    ui.input.focus();
  });
  ui.cancel.addEventListener("click", cancelMine);
  ui.clearView.addEventListener("click", clearView);
  ui.newConversation.addEventListener("click", newFromSidebar);
  ui.filter.addEventListener("input", renderSidebar);
  ui.menu.addEventListener("click", () => (ui.app.classList.contains("sidebar-open") ? closeSidebar() : openSidebar()));
  ui.scrim.addEventListener("click", closeSidebar);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && ui.app.classList.contains("sidebar-open") && !document.querySelector("dialog[open]")) {
      closeSidebar();
      ui.menu.focus();
    }
  });

  setInterval(() => {
    refreshList();
  }, POLL_MS);

  // The DisplayContent renderer, for checks from the browser console or tests.
  window.RoundtableRender = Object.freeze({ contentNode: (c) => contentNode(c) });

  connect();
})();
