// Command completion in the message box. While the text starts with "@" (and the caret is at
// its end), the server's getCommandCompletion fills a list under the messages: TypeAgent's
// contract, where text[0..startIndex] is what the server resolved, the items are what may
// follow it, and a group's separatorMode says whether a space must be typed before its items
// show. What is typed after the anchor filters them. Tab (or a click) takes the highlighted
// item, the arrow keys move, Escape closes; Enter still sends.
import { conn, dispatcherOf } from "./api.js";
import { el } from "./dom.js";
import { state } from "./state.js";
import { ui } from "./ui.js";

/** Most items the list shows. */
const MAX_SHOWN = 50;

/** Number of the latest request: an older answer is dropped. */
let asked = 0;
/** What the list shows: where the taken item goes, the items, the highlighted one. */
let shown = { start: 0, items: [], active: -1 };

/** Whether a group with this separatorMode shows with (spaced) or without a separator typed. */
function shows(mode, spaced) {
  switch (mode ?? "space") {
    case "none":
      return !spaced;
    case "optionalSpace":
    case "optionalSpacePunctuation":
      return true;
    case "space":
    case "spacePunctuation":
    case "autoSpacePunctuation":
      return spaced;
    default:
      return false;
  }
}

/**
 * The items of a getCommandCompletion result for `input`: where they replace the text
 * (after the anchor and any separator typed), and the replacements. An item attached right
 * after a word (`@system` → `help`) gets the space that was not typed.
 */
export function candidates(input, result) {
  const anchor = result?.startIndex;
  if (!Number.isInteger(anchor) || anchor < 0 || anchor > input.length) return { start: input.length, items: [] };
  const after = input.slice(anchor);
  const typed = after.trimStart();
  const spaced = typed.length < after.length;
  const start = input.length - typed.length;
  const needsSpace = !spaced && /[\p{L}\p{N}_-]$/u.test(input.slice(0, anchor));
  const wanted = typed.toLowerCase();
  const items = new Set();
  for (const group of Array.isArray(result.completions) ? result.completions : []) {
    if (!shows(group?.separatorMode, spaced) || !Array.isArray(group.completions)) continue;
    for (const item of group.completions) {
      if (typeof item === "string" && item.toLowerCase().startsWith(wanted)) {
        items.add(needsSpace ? ` ${item}` : item);
      }
    }
  }
  return { start, items: [...items].sort() };
}

function render() {
  ui.completions.replaceChildren();
  shown.items.forEach((item, i) => {
    const option = el("li", "completion", item.trimStart());
    option.id = `completion-${i}`;
    option.setAttribute("role", "option");
    option.setAttribute("aria-selected", String(i === shown.active));
    // mousedown, not click: the box keeps its focus.
    option.addEventListener("mousedown", (ev) => {
      ev.preventDefault();
      accept(i);
    });
    ui.completions.append(option);
  });
  const open = shown.items.length > 0;
  ui.completions.hidden = !open;
  ui.input.setAttribute("aria-expanded", String(open));
  if (open && shown.active >= 0) ui.input.setAttribute("aria-activedescendant", `completion-${shown.active}`);
  else ui.input.removeAttribute("aria-activedescendant");
}

/** Closes the list (and drops answers still on their way). */
export function hideCompletions() {
  asked++;
  shown = { start: 0, items: [], active: -1 };
  render();
}

/** Asks the server about the box's text and shows what may follow. */
export async function updateCompletions() {
  const view = state.current;
  const text = ui.input.value;
  const atEnd = ui.input.selectionStart === text.length && ui.input.selectionEnd === text.length;
  if (!view || !state.connected || !atEnd || !text.trimStart().startsWith("@")) {
    hideCompletions();
    return;
  }
  const n = ++asked;
  let result;
  try {
    result = await conn.invoke(dispatcherOf(view.id), "getCommandCompletion", [text, "forward"]);
  } catch {
    if (n === asked) hideCompletions();
    return;
  }
  if (n !== asked || ui.input.value !== text || state.current !== view) return;
  const { start, items } = candidates(text, result);
  // Nothing to offer, or only exactly what is typed.
  if (items.length === 0 || (items.length === 1 && text.slice(start) === items[0])) {
    hideCompletions();
    return;
  }
  shown = { start, items: items.slice(0, MAX_SHOWN), active: 0 };
  render();
}

/** Takes item `i` into the box, then asks what follows it. */
function accept(i) {
  const item = shown.items[i];
  if (item === undefined) return;
  ui.input.value = ui.input.value.slice(0, shown.start) + item;
  ui.input.dispatchEvent(new Event("input")); // the box grows, the next items come
}

/** Keys while the list is open: Tab takes, arrows move, Escape closes. True when used. */
export function completionKey(ev) {
  if (ui.completions.hidden || ev.altKey || ev.ctrlKey || ev.metaKey) return false;
  if (ev.key === "Tab" && !ev.shiftKey) {
    accept(Math.max(shown.active, 0));
    return true;
  }
  if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
    const n = shown.items.length;
    shown.active = (shown.active + (ev.key === "ArrowDown" ? 1 : n - 1)) % n;
    render();
    return true;
  }
  if (ev.key === "Escape") {
    hideCompletions();
    return true;
  }
  return false;
}
