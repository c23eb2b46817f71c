// Roundtable web client: a chat client served by the server itself, speaking the same
// TypeAgent agent-server protocol as every other client (see rpc.js for the wire layer).
//
// The page loads this module only (index.html); it wires the page's events to the modules
// below and starts the connection. One concern per module:
//   rpc.js          the agent-server wire protocol over one WebSocket (envelopes, callIds)
//   markdown.js     the safe markdown renderer
//   api.js          the one Connection and the RPCs made on it
//   connection.js   token, connect, reconnect backoff, banner
//   navigation.js   opening, switching, replaying history, rejoining, moving away
//   live.js         clientio calls → log entries, interactions, queue state
//   log.js          the display log on screen: provisional nodes, reconcile by seq, notices
//   pages.js        the window of the log on screen: newest page first, older pages on
//                   scrolling up, at most 1,000 entries, jumps to a search hit
//   render.js       entries and DisplayContent → DOM
//   interactions.js temporary displays, questions, private choices
//   status.js       the chat header (name, presence, queue) and Cancel
//   composer.js     sending and cancelling
//   completion.js   @ command completion in the message box (getCommandCompletion)
//   sidebar.js      the conversation list and its create / rename / delete
//   dialogs.js      the name and confirmation dialogs
//   manage.js       @conversation commands
//   state.js, ui.js, dom.js, util.js: shared state, the page's elements, element builders,
//                   pure helpers
//
// Safety: names, messages and errors only ever reach the page through textContent / text
// nodes; markdown goes through markdown.js (DOM-built, http(s) links only); "html" and
// "iframe" content go into <iframe sandbox=""> via srcdoc (no scripts, opaque origin).
import { completionKey, hideCompletions, updateCompletions } from "./completion.js";
import { cancelMine, autosize, sendMessage, submitText } from "./composer.js";
import { start } from "./connection.js";
import { submitName } from "./dialogs.js";
import { onCall, onInvoke } from "./live.js";
import { clearView, followScroll } from "./log.js";
import { watchScroll } from "./pages.js";
import { renderInline, renderMarkdown, safeHref } from "./markdown.js";
import { contentNode } from "./render.js";
import { closeSidebar, newFromSidebar, openSidebar, renderSidebar, scheduleContentSearch } from "./sidebar.js";
import { ui } from "./ui.js";

ui.composer.addEventListener("submit", (ev) => {
  ev.preventDefault();
  hideCompletions();
  sendMessage();
});
ui.input.addEventListener("keydown", (ev) => {
  if (!ev.isComposing && completionKey(ev)) {
    ev.preventDefault();
    return;
  }
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
    ev.preventDefault();
    hideCompletions();
    sendMessage();
  }
});
ui.input.addEventListener("input", autosize);
ui.input.addEventListener("input", updateCompletions);
ui.input.addEventListener("blur", hideCompletions);
document.querySelector(".skip-link").addEventListener("click", (ev) => {
  ev.preventDefault();
  ui.input.focus();
});
ui.cancel.addEventListener("click", cancelMine);
ui.clearView.addEventListener("click", clearView);
// Picking a model asks the server; the picker follows what the conversation then uses.
ui.modelPicker.addEventListener("change", () => {
  const picked = ui.modelPicker.value;
  if (picked && picked !== ui.modelPicker.dataset.provider) submitText(`@system model ${picked}`);
});
ui.newConversation.addEventListener("click", newFromSidebar);
ui.filter.addEventListener("input", () => {
  renderSidebar();
  scheduleContentSearch();
});
ui.menu.addEventListener("click", () => (ui.app.classList.contains("sidebar-open") ? closeSidebar() : openSidebar()));
ui.scrim.addEventListener("click", closeSidebar);
ui.nameForm.addEventListener("submit", submitName);
ui.nameCancel.addEventListener("click", () => ui.nameDialog.close());
ui.confirmCancel.addEventListener("click", () => ui.confirmDialog.close());
ui.messages.addEventListener("scroll", followScroll);
ui.messages.addEventListener("scroll", watchScroll, { passive: true });
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && ui.app.classList.contains("sidebar-open") && !document.querySelector("dialog[open]")) {
    closeSidebar();
    ui.menu.focus();
  }
});

// For checks from the browser console or tests: the markdown renderer and the DisplayContent
// renderer. (The only globals the client defines.)
window.RoundtableMarkdown = Object.freeze({ renderMarkdown, renderInline, safeHref });
window.RoundtableRender = Object.freeze({ contentNode: (c) => contentNode(c) });

start({ onCall, onInvoke });
