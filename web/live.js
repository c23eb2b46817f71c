// Calls the server makes on `clientio:<id>`: buffered while a view replays its history,
// then turned into log entries (log.js), temporary displays, questions and choices
// (interactions.js), queue state (status.js) or navigation. rpc.js delivers them through the
// handlers app.js gives connection.js.
import { dropChannels } from "./api.js";
import { addEphemeral, addLocal, addLogged, clearView, scheduleSync } from "./log.js";
import { addChoice, addFormChoice, clearTemporary, closeChoice, showTemporary, updateInteraction } from "./interactions.js";
import { manageConversation } from "./manage.js";
import { streamPiece } from "./streaming.js";
import { moveAway } from "./navigation.js";
import { agentNode, contentNode, localNode, systemNode } from "./render.js";
import { applyListChange, refreshList } from "./sidebar.js";
import { isCurrent, navigate, state } from "./state.js";
import { isMine, refreshStatus, setMeter, setModel, setQueue } from "./status.js";
import { KINDS, requestIdOf } from "./util.js";

/** rpc.js's onCall: routes a clientio call to its view, or buffers it while the view replays. */
export function onCall(channel, name, args) {
  if (channel === "agent-server") {
    if (name === "conversationsChanged") applyListChange(args?.[0]);
    return;
  }
  if (!channel.startsWith("clientio:")) return;
  const view = state.views.get(channel.slice("clientio:".length));
  if (!view) return;
  if (!view.live) {
    view.buffer.push([name, args]);
    return;
  }
  if (isCurrent(view)) handleLive(view, name, args);
}

/** rpc.js's onInvoke: the server's invokes to this client. */
export function onInvoke(channel, name) {
  // Server → client invokes (agent-server mode does not use question/proposeAction here).
  if (name === "getUserContext") return null;
  throw new Error(`Unsupported client RPC method: ${name}`);
}

/** One live call on the view's clientio channel (the view is live and current). */
export function handleLive(view, name, args) {
  switch (name) {
    case "setUserRequest":
      addLogged(view, { type: "user-request", requestId: args[0], command: String(args[1] ?? "") });
      break;
    case "appendDisplay":
    case "setDisplay":
      display(view, name, args);
      break;
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
    case "requestInteraction":
      requestInteraction(view, args[0]);
      break;
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
    case "requestForm":
      addFormChoice(view, args);
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
    case "requestCancelled":
      requestCancelled(view, args);
      break;
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

/** appendDisplay / setDisplay: a system notice, a temporary display, or agent output. */
function display(view, name, args) {
  const message = args[0];
  const mode = name === "appendDisplay" ? args[1] ?? "block" : undefined;
  if (!message || typeof message !== "object") return;
  clearTemporary(view, requestIdOf(message.requestId));
  if (requestIdOf(message.requestId) === "system") {
    addEphemeral(view, systemNode(message));
  } else if (mode === "temporary") {
    showTemporary(view, message);
  } else if (mode === "inline" && name === "appendDisplay" && message.kind !== "toast" && message.kind !== "inline") {
    // A piece of an answer being written: it grows in place until the logged whole replaces it.
    streamPiece(view, message, addEphemeral);
  } else if (message.kind === "toast" || message.kind === "inline") {
    addEphemeral(view, agentNode(view, { type: "append-display", message, mode: "block" }));
  } else if (name === "setDisplay") {
    addLogged(view, { type: "set-display", message });
  } else {
    addLogged(view, { type: "append-display", message, mode });
  }
}

/** requestInteraction: a question every client of the conversation may answer. */
function requestInteraction(view, p) {
  if (!p || typeof p.interactionId !== "string") return;
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
    form: p.form,
    actionTemplates: p.actionTemplates,
  });
  updateInteraction(view, p.interactionId);
}

/** requestCancelled: out of the queue, its choices and temporary display closed, a notice. */
function requestCancelled(view, args) {
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
  // TypeAgent's QueueCancelReason: "user" for every cancel a client asked for; the others
  // (no_clients, server_stopping) are said.
  const reason = args[1] && args[1] !== "user" ? ` (${String(args[1]).replace(/_/g, " ")})` : "";
  addLocal(view, "warning", `${wasMine ? "Your request was" : "A request was"} cancelled${reason}.`);
  scheduleSync(view);
}

function handleNotify(view, args) {
  const [notificationId, event, data, source, , options] = args;
  if (event === "commandComplete") {
    const rid = requestIdOf(notificationId);
    clearTemporary(view, rid);
    if (view.queue.running?.requestId === rid) setQueue(view, { ...view.queue, running: null });
    addLogged(view, { type: "command-result", requestId: notificationId });
    scheduleSync(view);
    refreshStatus(view);
    return;
  }
  if (event === "contextMeter") {
    setMeter(view, data);
    return;
  }
  if (event === "conversationModel") {
    setModel(view, data);
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
