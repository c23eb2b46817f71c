// What waits for someone: temporary status displays (until the request's next output),
// questions every client may answer (requestInteraction / respondToInteraction) and private
// choices for this client only (requestChoice / respondToChoice). Called by live.js and
// render.js.
import { conn, dispatcherOf } from "./api.js";
import { button, el } from "./dom.js";
import { addEphemeral, addLocal, insertNode, scrollToEnd } from "./log.js";
import { contentNode } from "./render.js";
import { isCurrent } from "./state.js";
import { errText, requestIdOf } from "./util.js";

// ---- temporary displays (not logged) -------------------------------------------------

export function showTemporary(view, message) {
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

export function clearTemporary(view, rid) {
  const node = view.temporary.get(rid);
  if (node) {
    node.remove();
    view.temporary.delete(rid);
  }
}

// ---- interactions (requestInteraction / respondToInteraction) -------------------------

export function interactionNode(view, entry) {
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

export function updateInteraction(view, id) {
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

export function addChoice(view, args) {
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

export function closeChoice(view, choiceId, text) {
  const c = view.choices.get(choiceId);
  if (!c) return;
  view.choices.delete(choiceId);
  for (const b of c.node.querySelectorAll("button")) b.disabled = true;
  c.node.querySelector(".outcome").textContent = text;
  c.node.classList.add("done");
}
