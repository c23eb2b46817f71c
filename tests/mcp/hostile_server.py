"""A hostile (or just buggy) MCP server, on the standard library only, for the hardening tests
of tests/integration/mcp_hostile.rs: each MODE is one way a server can hurt its client.

    python hostile_server.py MODE [key=value ...]          # stdio
    python hostile_server.py MODE --http [key=value ...]   # Streamable HTTP on 127.0.0.1:0

Over HTTP it prints `listening on port N` on stderr once it listens. Every mode offers the
tools `echo` (answers `echo: <text>`) and `env` (answers its environment's variable names as a
JSON list), and `stats` (answers how many tools/list requests it got and how many of its
elicitations were answered, by action). The modes:

- `pages`: tools/list answers page after page without end (`per_page` tools a page, each with
  a description of `description_bytes`), every page with a next cursor.
- `changed_pages`: tools/list answers normally until the tool `change` is called; `change`
  sends notifications/tools/list_changed, and from then on tools/list answers endless pages
  (`hang=1`: never answers).
- `changed_flood`: the tool `flood` sends `count` notifications/tools/list_changed at once.
- `stderr`: writes `stderr_bytes` to stderr without a newline (`cr=1`: as a progress bar, a `\r`
  every 64 bytes) before it answers `initialize`.
- `elicit_flood`: the tool `flood` sends `count` elicitation requests of `message_bytes` each,
  without waiting, then waits for ever.
- `elicit_hang`: the tool `ask` sends one small elicitation per second (`count` of them, one
  by default) and never answers the call.
- `progress`: the tool `progress` sends `count` progress notifications for its call, then
  answers `done`.
- `images`: the tool `images` answers `count` PNG images of `image_bytes` of base64 each.
- `schemas`: tools/list holds a tool `deep` whose input schema nests `depth` levels of
  properties, the tools `dup` (twice), `` (empty name), a tool whose input schema is not an
  object, and `ok`.
- `big`: the tool `big` answers `result_bytes` of text (over HTTP: `sse=1` as an SSE event).
"""

import json
import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "plain"
HTTP = "--http" in sys.argv
PARAMS = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)


def param(name, default):
    return int(PARAMS.get(name, default))


# One PNG's header, then filler: what the client takes for a PNG image.
PNG = "iVBORw0KGgo"

state = {"lists": 0, "changed": False, "answers": {}}
lock = threading.Lock()


def tool(name, description="", schema=None):
    return {
        "name": name,
        "description": description,
        "inputSchema": schema if schema is not None else {"type": "object"},
    }


BASE_TOOLS = [
    tool("echo", "Echoes `text`.", {"type": "object", "properties": {"text": {"type": "string"}}}),
    tool("env", "Names the server's environment variables."),
    tool("stats", "Counts what the server saw."),
]

MODE_TOOLS = {
    "changed_pages": [tool("change", "Changes the tool list.")],
    "changed_flood": [tool("flood", "Floods list_changed.")],
    "elicit_flood": [tool("flood", "Floods elicitations.")],
    "elicit_hang": [tool("ask", "Asks and never answers.")],
    "progress": [tool("progress", "Floods progress.")],
    "images": [tool("images", "Answers large images.")],
    "big": [tool("big", "Answers a large result.")],
}


def deep_schema(depth):
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def page_of_tools(cursor):
    """An endless page: `per_page` tools with long descriptions."""
    n = int(cursor or 0)
    per_page = param("per_page", 100)
    filler = "d" * param("description_bytes", 8192)
    tools = [tool(f"t{n + i}", filler) for i in range(per_page)]
    return {"tools": tools, "nextCursor": str(n + per_page)}


def list_tools(params):
    with lock:
        state["lists"] += 1
        changed = state["changed"]
    if MODE == "pages" or (MODE == "changed_pages" and changed):
        if MODE == "changed_pages" and param("hang", 0):
            return None
        return page_of_tools((params or {}).get("cursor"))
    tools = BASE_TOOLS + MODE_TOOLS.get(MODE, [])
    if MODE == "schemas":
        tools = tools + [
            tool("deep", "Too deep.", deep_schema(param("depth", 120))),
            tool("dup", "The first dup."),
            tool("dup", "The second dup."),
            tool("", "No name."),
            tool("notobject", "A schema that is a string.", "string"),
            tool("ok", "Fine."),
        ]
    return {"tools": tools}


class Peer:
    """Writes messages to the client: stdout lines, or (HTTP) the answer being built."""

    def __init__(self, write):
        self.write = write
        self.next_id = 1000

    def send(self, message):
        self.write(json.dumps(message, separators=(",", ":")))

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params):
        with lock:
            self.next_id += 1
            rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def text_result(text, is_error=False):
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def call_tool(peer, params):
    """The result of a tools/call, or None for a call never answered."""
    name = params.get("name")
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "echo":
        return text_result(f"echo: {args.get('text', '')}")
    if name == "env":
        return text_result(json.dumps(sorted(os.environ)))
    if name == "stats":
        with lock:
            return text_result(json.dumps({"lists": state["lists"], "answers": state["answers"]}))
    if name == "change":
        with lock:
            state["changed"] = True
        peer.notify("notifications/tools/list_changed", {})
        return text_result("changed")
    if name == "flood" and MODE == "changed_flood":
        for _ in range(param("count", 100000)):
            peer.notify("notifications/tools/list_changed", {})
        return text_result("flooded")
    if name == "flood" and MODE == "elicit_flood":
        message = "m" * param("message_bytes", 500000)
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        for _ in range(param("count", 3000)):
            peer.request("elicitation/create", {"mode": "form", "message": message, "requestedSchema": schema})
        time.sleep(3600)
        return None
    if name == "ask":
        schema = {"type": "object", "properties": {"ok": {"type": "boolean", "description": "OK?"}}}
        for i in range(param("count", 1)):
            peer.request("elicitation/create", {"mode": "form", "message": f"question {i + 1}", "requestedSchema": schema})
            time.sleep(1)
        time.sleep(3600)
        return None
    if name == "progress":
        count = param("count", 100000)
        for i in range(count):
            peer.notify("notifications/progress", {"progressToken": token, "progress": i + 1, "total": count, "message": f"step {i + 1}"})
        return text_result("done")
    if name == "images":
        data = PNG + "A" * (param("image_bytes", 4 * 1024 * 1024 - 1024) - len(PNG))
        images = [{"type": "image", "data": data, "mimeType": "image/png"} for _ in range(param("count", 3))]
        return {"content": [{"type": "text", "text": "pictures"}] + images}
    if name == "big":
        return text_result("b" * param("result_bytes", 20 * 1024 * 1024))
    return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}


INIT_RESULT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {"tools": {"listChanged": True}},
    "serverInfo": {"name": "hostile", "version": "1"},
}


def handle(peer, message, answer):
    """One message from the client; `answer(result)` answers its request."""
    method = message.get("method")
    if method is None:
        # An answer to one of our requests (an elicitation).
        action = (message.get("result") or {}).get("action", "error")
        with lock:
            state["answers"][action] = state["answers"].get(action, 0) + 1
        return
    if "id" not in message:
        return  # a notification
    if method == "initialize":
        if MODE == "stderr" and not HTTP:
            write_stderr()
        answer(INIT_RESULT)
    elif method == "tools/list":
        result = list_tools(message.get("params"))
        if result is not None:
            answer(result)
    elif method == "tools/call":
        result = call_tool(peer, message.get("params") or {})
        if result is not None:
            answer(result)
    elif method == "ping":
        answer({})
    else:
        peer.send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no such method"}})


def write_stderr():
    total = param("stderr_bytes", 400 * 1024 * 1024)
    chunk = ("x" * 63 + "\r") if param("cr", 0) else "x" * 64
    block = chunk * 16384
    written = 0
    while written < total:
        sys.stderr.write(block)
        written += len(block)
    sys.stderr.flush()


def serve_stdio():
    out = sys.stdout.buffer
    out_lock = threading.Lock()

    def write(line):
        data = line.encode() + b"\n"
        with out_lock:
            out.write(data)
            out.flush()

    peer = Peer(write)
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = json.loads(line)

        def answer(result, message=message):
            peer.send({"jsonrpc": "2.0", "id": message["id"], "result": result})

        if message.get("method") == "tools/call":
            threading.Thread(target=handle, args=(peer, message, answer), daemon=True).start()
        else:
            handle(peer, message, answer)


def serve_http():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sse = param("sse", 0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if "id" not in body or "method" not in body:
                handle(Peer(lambda line: None), body, lambda result: None)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            answers = []
            handle(Peer(lambda line: None), body, lambda result: answers.append(result))
            if not answers:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": answers[0]}).encode()
            if sse:
                data = b"event: message\ndata: " + data + b"\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if sse else "application/json")
            self.send_header("Mcp-Session-Id", "hostile-session")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sys.stderr.write(f"listening on port {server.server_address[1]}\n")
    sys.stderr.flush()
    server.serve_forever()


if __name__ == "__main__":
    if HTTP:
        serve_http()
    else:
        serve_stdio()
