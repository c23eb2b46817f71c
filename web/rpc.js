// The agent-server wire protocol over one WebSocket (reference sections 2 and 3).
//
// Every frame is an envelope {name: <channel>, message: <rpc message>}. Messages are
// {type:"invoke", callId, name, args} answered by {type:"invokeResult", callId, result} or
// {type:"invokeError", callId, error}, and {type:"call", callId, name, args} (never answered).
// callId counters are kept per channel; a channel exists on this side only once created here,
// and envelopes for other channels are dropped, as agent-rpc does.
//
// api.js creates the page's one Connection; connection.js opens it and sets its handlers.

export const DISCONNECTED = "Agent channel disconnected";

export class RpcError extends Error {
  constructor(message, extra = {}) {
    super(message);
    this.name = extra.cancelled ? "AbortError" : "RpcError";
    this.cancelled = !!extra.cancelled;
    this.errorMarkdown = extra.errorMarkdown;
  }
}

export class Connection {
  /**
   * @param {string} url ws:// or wss:// URL
   * @param {{onCall?: Function, onInvoke?: Function, onClose?: Function}} handlers
   *   onCall(channel, name, args); onInvoke(channel, name, args) → result (may throw);
   *   onClose(event) after an open socket closed.
   */
  constructor(url, handlers = {}) {
    this.url = url;
    this.handlers = handlers;
    this.ws = null;
    this.counters = new Map();
    this.pending = new Map();
    this.channels = new Set(["agent-server"]);
  }

  get isOpen() {
    return !!this.ws && this.ws.readyState === WebSocket.OPEN;
  }

  /** Opens the socket; resolves once it is open, rejects if it closes first. */
  open() {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new WebSocket(this.url);
      } catch (e) {
        reject(e);
        return;
      }
      this.ws = ws;
      let opened = false;
      ws.onopen = () => {
        opened = true;
        resolve();
      };
      ws.onmessage = (ev) => {
        if (this.ws === ws) this.receive(ev.data);
      };
      ws.onerror = () => {
        /* a close event follows */
      };
      ws.onclose = (ev) => {
        if (this.ws !== ws) return;
        this.ws = null;
        this.failPending(() => true);
        this.channels = new Set(["agent-server"]);
        if (opened) this.handlers.onClose?.(ev);
        else reject(new Error(`Could not connect to ${this.url}`));
      };
    });
  }

  close() {
    const ws = this.ws;
    if (ws) ws.close();
  }

  hasChannel(name) {
    return this.channels.has(name);
  }

  /** Creates a channel on this side (after the server created its end). */
  createChannel(name) {
    this.channels.add(name);
    this.counters.set(name, 0);
  }

  /** Deletes a channel: its pending invokes fail with "Agent channel disconnected". */
  deleteChannel(name) {
    this.channels.delete(name);
    this.failPending((p) => p.channel === name);
  }

  failPending(match) {
    for (const [key, p] of [...this.pending]) {
      if (match(p)) {
        this.pending.delete(key);
        clearTimeout(p.timer);
        p.reject(new RpcError(DISCONNECTED));
      }
    }
  }

  nextCallId(channel) {
    const id = this.counters.get(channel) ?? 0;
    this.counters.set(channel, id + 1);
    return id;
  }

  send(channel, message) {
    if (!this.isOpen) throw new RpcError(DISCONNECTED);
    this.ws.send(JSON.stringify({ name: channel, message }));
  }

  /**
   * Invokes `name` on `channel`; resolves with the result or rejects with the server's error
   * text. `args` is a positional array in which absent arguments are JSON null.
   */
  invoke(channel, name, args = [], timeoutMs = 30000) {
    if (!this.isOpen || !this.channels.has(channel)) {
      return Promise.reject(new RpcError(DISCONNECTED));
    }
    const callId = this.nextCallId(channel);
    return new Promise((resolve, reject) => {
      const key = `${channel}\n${callId}`;
      const timer = setTimeout(() => {
        if (this.pending.delete(key)) reject(new RpcError(`No answer to ${name} within ${Math.round(timeoutMs / 1000)} s`));
      }, timeoutMs);
      this.pending.set(key, { channel, resolve, reject, timer });
      try {
        this.send(channel, { type: "invoke", callId, name, args });
      } catch (e) {
        this.pending.delete(key);
        clearTimeout(timer);
        reject(e);
      }
    });
  }

  /** A call (fire-and-forget). */
  call(channel, name, args = []) {
    if (!this.channels.has(channel)) return;
    this.send(channel, { type: "call", callId: this.nextCallId(channel), name, args });
  }

  receive(data) {
    let env;
    try {
      env = JSON.parse(typeof data === "string" ? data : "");
    } catch {
      return; // never JSON-parse-crash on a bad frame
    }
    if (!env || typeof env !== "object" || typeof env.name !== "string") return;
    const msg = env.message;
    if (!msg || typeof msg !== "object" || !this.channels.has(env.name)) return;
    const channel = env.name;
    if (msg.type === "invokeResult" || msg.type === "invokeError") {
      const key = `${channel}\n${msg.callId}`;
      const p = this.pending.get(key);
      if (!p) return;
      this.pending.delete(key);
      clearTimeout(p.timer);
      if (msg.type === "invokeResult") p.resolve(msg.result);
      else p.reject(new RpcError(String(msg.error ?? "Unknown error"), msg));
    } else if (msg.type === "call") {
      if (typeof msg.name !== "string") return;
      try {
        this.handlers.onCall?.(channel, msg.name, Array.isArray(msg.args) ? msg.args : []);
      } catch (e) {
        console.error(`handling ${channel} ${msg.name}:`, e);
      }
    } else if (msg.type === "invoke") {
      if (!Number.isSafeInteger(msg.callId) || msg.callId < 0) return;
      Promise.resolve()
        .then(() => {
          if (!this.handlers.onInvoke) throw new Error(`No invoke handler ${msg.name}`);
          return this.handlers.onInvoke(channel, msg.name, Array.isArray(msg.args) ? msg.args : []);
        })
        .then(
          (result) => this.safeSend(channel, { type: "invokeResult", callId: msg.callId, result: result ?? null }),
          (e) => this.safeSend(channel, { type: "invokeError", callId: msg.callId, error: String(e?.message ?? e) }),
        );
    }
  }

  safeSend(channel, message) {
    try {
      this.send(channel, message);
    } catch {
      /* socket gone */
    }
  }
}
