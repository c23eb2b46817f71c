// The WebSocket's lifecycle: the access token, connecting, the reconnect backoff and its
// banner, the connection badge; after a reconnect it rejoins the open conversation, which
// replays only what was missed (navigation.js). app.js calls start() once.
import { conn } from "./api.js";
import { button } from "./dom.js";
import { navigate, state } from "./state.js";
import { openInitial, rejoin } from "./navigation.js";
import { subscribeList } from "./sidebar.js";
import { renderHeader, setQueue, updateComposer } from "./status.js";
import { ui } from "./ui.js";

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 10000;

/** The reconnect loop's state (only this module uses it). */
const link = {
  everConnected: false,
  backoff: BACKOFF_MIN_MS,
  attempt: 0,
  reconnectTimer: null,
  connecting: false,
};

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

/** Takes the token from the address, routes the socket's calls to `handlers`, connects. */
export function start(handlers) {
  takeTokenFromAddress();
  conn.handlers = { ...handlers, onClose };
  connect();
}

function setConnection(stateName, text) {
  ui.connection.dataset.state = stateName;
  ui.connection.textContent = text;
}

async function connect() {
  if (link.connecting || conn.isOpen) return;
  clearTimeout(link.reconnectTimer);
  link.reconnectTimer = null;
  link.connecting = true;
  setConnection("connecting", link.everConnected ? "Reconnecting…" : "Connecting…");
  conn.url = socketUrl();
  try {
    await conn.open();
  } catch {
    link.connecting = false;
    if (!link.everConnected && (await askForTokenIfNeeded())) {
      connect();
      return;
    }
    scheduleReconnect();
    return;
  }
  link.connecting = false;
  state.connected = true;
  link.backoff = BACKOFF_MIN_MS;
  link.attempt = 0;
  const wasConnected = link.everConnected;
  link.everConnected = true;
  setConnection("connected", "Connected");
  hideBanner();
  updateComposer();
  subscribeList();
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
  link.attempt += 1;
  const delay = link.backoff;
  link.backoff = Math.min(link.backoff * 2, BACKOFF_MAX_MS);
  const secs = delay < 1000 ? (delay / 1000).toFixed(1) : String(Math.round(delay / 1000));
  showBanner(
    link.everConnected
      ? `Connection to the server lost. Reconnecting in ${secs} s (attempt ${link.attempt})…`
      : `Cannot reach the server. Retrying in ${secs} s (attempt ${link.attempt})…`,
    link.attempt,
    delay,
  );
  setConnection("offline", link.everConnected ? "Offline" : "Connecting…");
  link.reconnectTimer = setTimeout(connect, delay);
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
