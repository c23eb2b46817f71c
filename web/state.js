// The state the client's modules share: the open conversation's View, the conversation
// list, whether the socket is up, and the queue that serializes navigation. State that only
// one module needs lives in that module.

export const state = {
  connected: false, // the socket is open (connection.js sets it)
  conversations: [], // the last listConversations answer (sidebar.js refreshes it)
  current: null, // View of the open conversation
  views: new Map(), // conversationId → View (current and one being joined)
  nav: Promise.resolve(), // the last navigation queued by navigate()
  deleting: new Set(), // ids this page is deleting (it moves away itself)
};

/** One joined (or joining) conversation as this page sees it. */

export class View {
  constructor(id) {
    this.id = id;
    this.name = "";
    this.connectionId = null;
    this.live = false; // false: buffer live calls (join + history replay in progress)
    this.buffer = [];
    this.lastSeq = null; // seq of the last log entry seen (rendered, unless detached)
    // The window of the log on screen (pages.js): log entries topSeq.. are rendered, and more
    // exist before it when hasOlder; when detached, only up to bottomSeq (the newest ones,
    // up to lastSeq, are not on screen). cleared: "Clear view" emptied it (no older pages).
    this.topSeq = null;
    this.hasOlder = false;
    this.detached = false;
    this.bottomSeq = null;
    this.cleared = false;
    this.paging = false; // a page fetch is queued or in flight
    this.outcomes = new Map(); // interactionId → outcome seen in the log (for older pages)
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
    this.streams = new Map(); // requestId|kind → {node, text, frame}: answers being written (streaming.js)
    this.meter = null; // the context meter: {contextTokens, contextWindow, model} or null
    this.model = null; // getStatus's model: {provider, model, default, providers} (status.js)
    this.meterVersion = 0; // bumped by each contextMeter notification (status.js)
  }
}

export const isCurrent = (view) => state.current === view;

/** Serializes navigation (open / switch / rejoin / manage commands). */
export function navigate(fn) {
  const run = state.nav.then(fn, fn);
  state.nav = run.catch(() => {});
  return run;
}
