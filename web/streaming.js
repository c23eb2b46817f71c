// A model's answer as it is written: the server sends its pieces as appendDisplay(…, "inline")
// (at most 20 frames a second) and logs the whole answer once its model call ends, marked
// `streamed`. Pieces grow one node per request and kind (the answer's text, rendered as
// markdown as it grows; the model's thinking, collapsed); when the logged entry arrives
// (reconcile, after commandComplete or a reconnect) it takes the growing node's place.
//
// Who calls it: live.js (pieces), log.js (the logged entry replaces the growing node),
// log.js's resets (forget every growing node).
import { agentNode, contentNode } from "./render.js";
import { requestIdOf } from "./util.js";

/** The key of a growing node: its request and kind. */
const keyOf = (message) => `${requestIdOf(message.requestId)}|${message.thinking === true ? "t" : "a"}`;

/**
 * Adds a piece to its request's growing node, creating it on the first piece and putting it
 * on the page with `insert` (log.js's addEphemeral: it is no log entry).
 */
export function streamPiece(view, message, insert) {
  const piece = typeof message.message === "object" && message.message ? String(message.message.content ?? "") : String(message.message ?? "");
  const key = keyOf(message);
  let growing = view.streams.get(key);
  if (!growing) {
    const type = message.thinking === true ? "text" : "markdown";
    const node = agentNode(view, { type: "append-display", message: { ...message, message: { type, content: "" } } });
    node.classList.add("streaming");
    node.dataset.stream = key;
    node.dataset.requestId = requestIdOf(message.requestId);
    growing = { node, text: "", frame: 0 };
    view.streams.set(key, growing);
    insert(view, node);
  }
  growing.text += piece;
  // One re-render per animation frame, however many pieces came in it.
  if (!growing.frame) {
    growing.frame = requestAnimationFrame(() => {
      growing.frame = 0;
      render(growing, message.thinking === true);
    });
  }
}

/** Puts the text so far into the growing node's body. */
function render(growing, thinking) {
  const body = growing.node.querySelector(".msg-body");
  if (!body) return;
  const type = thinking ? "text" : "markdown";
  body.replaceChildren(contentNode({ type, content: growing.text, kind: thinking ? "info" : undefined }));
  growing.node.dataset.length = String(growing.text.length);
}

/**
 * The growing node a logged entry of a streamed answer replaces (removed from the map), or
 * null when it was not seen growing here (a reload, a page that joined after it ended).
 */
export function takeStream(view, entry) {
  const message = entry?.message;
  if (entry?.type !== "append-display" || !message || message.streamed !== true) return null;
  const key = keyOf(message);
  const growing = view.streams.get(key);
  if (!growing) return null;
  view.streams.delete(key);
  if (growing.frame) cancelAnimationFrame(growing.frame);
  return growing.node.isConnected ? growing.node : null;
}

/** Forgets every growing node (the view was reset or cleared). */
export function forgetStreams(view) {
  for (const growing of view.streams.values()) if (growing.frame) cancelAnimationFrame(growing.frame);
  view.streams = new Map();
}
