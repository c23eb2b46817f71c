// What waits for someone: temporary status displays (until the request's next output),
// questions every client may answer (requestInteraction / respondToInteraction: a question,
// a form, a proposed action) and private choices for this client only (requestChoice with
// yesNo / multiChoice / pickRemember, requestForm; answered with respondToChoice). Called by
// live.js and render.js.
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
  const choices = el("div", "choices");
  choices.setAttribute("role", "group");
  choices.setAttribute("aria-label", "Answers");
  const outcome = el("p", "outcome");
  outcome.setAttribute("role", "status");
  const type = entry.interactionType ?? "question";
  const respond = (value, hasValue = true) =>
    answerInteraction(view, entry.interactionId, { interactionId: entry.interactionId, type, ...(hasValue ? { value } : {}) });
  if (type === "question") {
    const question = el("p", "question", typeof entry.message === "string" ? entry.message : JSON.stringify(entry.message));
    node.append(head, question, choices, outcome);
    const list = Array.isArray(entry.choices) ? entry.choices : [];
    list.forEach((label, index) => {
      const b = button(String(label), index === entry.defaultId ? "choice default" : "choice", () => respond(index));
      b.dataset.index = String(index);
      choices.append(b);
    });
  } else if (type === "form" && entry.form && typeof entry.form === "object") {
    node.setAttribute("aria-label", "Form");
    const form = formNode(entry.form);
    node.append(head, form.node, choices, outcome);
    choices.append(
      button("Submit", "choice", () => respond(form.answers())),
      button("Dismiss", "choice", () => respond({ answers: {}, cancelled: true })),
    );
  } else if (type === "proposeAction") {
    node.setAttribute("aria-label", "Proposed action");
    const data = entry.actionTemplates?.templateData;
    const action = (Array.isArray(data) ? data[0] : data)?.data ?? {};
    node.append(head, el("p", "question", `Run ${String(action.actionName ?? "this action")}?`));
    node.append(el("pre", "tool-body", JSON.stringify(action.parameters ?? {}, null, 2)), choices, outcome);
    choices.append(
      button("Run", "choice", () => respond(undefined, false)),
      button("Cancel", "choice", () => respond(null)),
    );
  } else {
    node.append(head, choices, outcome);
    outcome.textContent = `This ${String(type)} can be answered in another client.`;
  }
  view.interactions.set(entry.interactionId, { node, entry, outcome: view.outcomes.get(entry.interactionId) ?? null });
  queueMicrotask(() => updateInteraction(view, entry.interactionId));
  return node;
}

/** The interaction types this client can answer. */
const KNOWN_TYPES = new Set(["question", "form", "proposeAction"]);

/** A QuestionForm's fields as inputs; `answers()` reads them as a QuestionFormResponse. */
function formNode(form) {
  const node = el("div", "form-fields");
  if (typeof form.message === "string") node.append(el("p", "question", form.message));
  const readers = [];
  const fields = Array.isArray(form.fields) ? form.fields : [];
  fields.forEach((field, n) => {
    if (!field || typeof field.id !== "string") return;
    const set = el("fieldset", "form-field");
    set.append(el("legend", null, String(field.prompt ?? "")));
    const name = `f${n}-${Math.random().toString(36).slice(2)}`;
    const option = (label, kind, checked) => {
      const wrap = el("label", "form-option");
      const input = el("input");
      input.type = kind;
      input.name = name;
      input.checked = !!checked;
      wrap.append(input, ` ${String(label)}`);
      set.append(wrap);
      return input;
    };
    const choices = Array.isArray(field.choices) ? field.choices : [];
    let other = null;
    const otherText = () => {
      const text = el("input", "form-other");
      text.type = "text";
      text.setAttribute("aria-label", `${String(field.prompt ?? "")} (other)`);
      text.placeholder = String(field.freeTextPlaceholder ?? "Other");
      set.append(text);
      return text;
    };
    if (field.kind === "yesNo") {
      const yes = option("Yes", "radio", field.defaultValue === true);
      const no = option("No", "radio", field.defaultValue === false);
      readers.push(() => (yes.checked || no.checked ? [field.id, { kind: "yesNo", value: yes.checked }] : null));
    } else if (field.kind === "multiChoice") {
      const defaults = Array.isArray(field.defaultIds) ? field.defaultIds : [];
      const boxes = choices.map((c, i) => option(c, "checkbox", defaults.includes(i)));
      if (field.allowFreeText) other = otherText();
      readers.push(() => {
        const answer = { kind: "multiChoice", selected: boxes.flatMap((b, i) => (b.checked ? [i] : [])) };
        if (other?.value.trim()) answer.text = other.value.trim();
        return [field.id, answer];
      });
    } else {
      const radios = choices.map((c, i) => option(c, "radio", field.defaultId === i));
      if (field.allowFreeText) other = otherText();
      readers.push(() => {
        if (other?.value.trim()) return [field.id, { kind: "pick", selected: -1, text: other.value.trim() }];
        const i = radios.findIndex((r) => r.checked);
        return i >= 0 ? [field.id, { kind: "pick", selected: i }] : null;
      });
    }
    node.append(set);
  });
  return { node, answers: () => ({ answers: Object.fromEntries(readers.map((r) => r()).filter(Boolean)) }) };
}

/** What a resolved interaction's answer was, in words. */
function outcomeText(entry, value) {
  const type = entry.interactionType ?? "question";
  if (type === "question") {
    return Array.isArray(entry.choices) && Number.isInteger(value) ? entry.choices[value] : JSON.stringify(value);
  }
  if (type === "form") return value?.cancelled ? "dismissed" : "submitted";
  if (type === "proposeAction") return value === null ? "cancelled" : value === undefined ? "run" : "run edited";
  return JSON.stringify(value);
}

export function updateInteraction(view, id) {
  const i = view.interactions.get(id);
  if (!i) return;
  const active = view.active.has(id) && !i.outcome;
  const buttons = i.node.querySelectorAll(".choices button, .form-field input");
  for (const b of buttons) b.disabled = !active || i.busy;
  const out = i.node.querySelector(".outcome");
  if (i.outcome && "value" in i.outcome) {
    const v = i.outcome.value;
    out.textContent = `Answered: ${outcomeText(i.entry, v)}`;
    for (const b of buttons) b.classList.toggle("chosen", b.dataset.index !== undefined && Number(b.dataset.index) === v);
    i.node.classList.add("done");
  } else if (i.outcome && i.outcome.cancelled) {
    out.textContent = "Cancelled";
    i.node.classList.add("done");
  } else if (!KNOWN_TYPES.has(i.entry.interactionType ?? "question")) {
    // Answered elsewhere: the card says so.
  } else if (!active) {
    out.textContent = "No longer waiting for an answer";
    i.node.classList.add("done");
  } else if (active) {
    out.textContent = "";
    i.node.classList.remove("done");
  }
}

async function answerInteraction(view, id, response) {
  const i = view.interactions.get(id);
  if (!i) return;
  i.busy = true;
  updateInteraction(view, id);
  try {
    await conn.invoke(dispatcherOf(view.id), "respondToInteraction", [response]);
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
  const [requestId, choiceId, kind, message, choices, source, checkboxLabel] = args;
  if (typeof choiceId !== "string") return;
  const { node, group } = choiceCard(source);
  node.insertBefore(el("p", "question", typeof message === "string" ? message : JSON.stringify(message)), group);
  let remember = null;
  if (kind === "pickRemember") {
    const wrap = el("label", "form-option");
    remember = el("input");
    remember.type = "checkbox";
    wrap.append(remember, ` ${String(checkboxLabel ?? "Remember this for next time")}`);
    node.insertBefore(wrap, group.nextSibling);
  }
  const labels = Array.isArray(choices) && choices.length ? choices : ["Yes", "No"];
  labels.forEach((label, index) => {
    const b = button(String(label), "choice", () => {
      let response;
      if (kind === "yesNo") response = index === 0;
      else if (kind === "pickRemember") response = { selected: index, remember: !!remember?.checked };
      else response = [index];
      b.classList.add("chosen");
      answerChoice(view, choiceId, response, `Answered: ${String(label)}`);
    });
    group.append(b);
  });
  view.choices.set(choiceId, { node, requestId: requestIdOf(requestId) });
  addEphemeral(view, node);
}

/** requestForm: a private form for this client, answered with respondToChoice. */
export function addFormChoice(view, args) {
  const [requestId, choiceId, form, source] = args;
  if (typeof choiceId !== "string" || !form || typeof form !== "object") return;
  const { node, group } = choiceCard(source);
  node.setAttribute("aria-label", "Form for you");
  const fields = formNode(form);
  node.insertBefore(fields.node, group);
  group.append(
    button("Submit", "choice", () => answerChoice(view, choiceId, fields.answers(), "Submitted")),
    button("Dismiss", "choice", () => answerChoice(view, choiceId, { answers: {}, cancelled: true }, "Dismissed")),
  );
  view.choices.set(choiceId, { node, requestId: requestIdOf(requestId) });
  addEphemeral(view, node);
}

/** The frame of a private choice: who asks, the answer buttons, the outcome line. */
function choiceCard(source) {
  const node = el("article", "msg interaction choice");
  node.setAttribute("aria-label", "Question for you");
  node.append(el("div", "msg-source", `${String(source ?? "agent")} asks you (only you see this)`));
  const group = el("div", "choices");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Answers");
  const outcome = el("p", "outcome");
  outcome.setAttribute("role", "status");
  node.append(group, outcome);
  return { node, group };
}

/** respondToChoice; a refused answer (the server keeps the choice open) can be corrected. */
async function answerChoice(view, choiceId, response, answered) {
  const c = view.choices.get(choiceId);
  if (!c) return;
  const controls = c.node.querySelectorAll("button, input");
  for (const x of controls) x.disabled = true;
  try {
    const result = await conn.invoke(dispatcherOf(view.id), "respondToChoice", [choiceId, response]);
    closeChoice(view, choiceId, result?.lastError ? `Not taken: ${String(result.lastError)}` : answered);
  } catch (e) {
    const refused = /^Invalid argument/.test(errText(e));
    if (refused) {
      for (const x of controls) x.disabled = false;
      c.node.querySelector(".outcome").textContent = `Could not answer: ${errText(e)}`;
    } else {
      closeChoice(view, choiceId, `Could not answer: ${errText(e)}`);
    }
  }
}

export function closeChoice(view, choiceId, text) {
  const c = view.choices.get(choiceId);
  if (!c) return;
  view.choices.delete(choiceId);
  for (const b of c.node.querySelectorAll("button, input")) b.disabled = true;
  c.node.querySelector(".outcome").textContent = text;
  c.node.classList.add("done");
}
