// Small pure helpers (error texts, names, times, request ids) used across the client.
// Nothing here touches the page or the connection.

/** The notice kinds the page has a style for (`kind-<kind>`). */

export const KINDS = new Set(["info", "status", "warning", "error", "success"]);

export function errText(e) {
  if (e == null) return "Unknown error";
  return String(e.message ?? e);
}
export const isNotFound = (e) => errText(e).trimStart().startsWith("Conversation not found");
export const normName = (n) => String(n ?? "").trim().toLowerCase();

export function stableStringify(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(",")}]`;
  const keys = Object.keys(value)
    .filter((k) => value[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${stableStringify(value[k])}`).join(",")}}`;
}

const pad = (n) => String(n).padStart(2, "0");
export function autoConversationName(d = new Date()) {
  return `Conversation ${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function age(iso) {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return "";
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 45) return "just now";
  if (s < 3600) return `${Math.max(1, Math.round(s / 60))} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  if (s < 86400 * 30) return `${Math.round(s / 86400)} d ago`;
  return new Date(t).toLocaleDateString();
}

export function clock(ts) {
  const d = new Date(Number.isFinite(ts) ? ts : Date.now());
  return `${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export const sortNewest = (list) =>
  [...list].sort((a, b) => (Date.parse(b.createdAt) || 0) - (Date.parse(a.createdAt) || 0));

// eslint-disable-next-line no-control-regex
export const stripAnsi = (s) => String(s).replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, "");

export function requestIdOf(rid) {
  if (typeof rid === "string") return rid;
  if (rid && typeof rid === "object" && typeof rid.requestId === "string") return rid.requestId;
  return "";
}
