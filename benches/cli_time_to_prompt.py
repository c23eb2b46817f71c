#!/usr/bin/env python3
"""Time from starting `roundtable connect` to its prompt, for a conversation of N display
entries written on disk before the server starts (the harness's fixture format: turns of
user-request / append-display / command-result). Usage:
    time_to_prompt.py BINARY [SIZES] [RUNS]     e.g. target/release/roundtable 1000,25000,250000 5
The pty is 50 rows x 200 columns. Run 1 is a cold join (the server loads the conversation);
runs 2.. are warm. Prints one line per size: cold ms, warm median ms, bytes printed."""
import fcntl, json, os, pty, select, signal, struct, subprocess, sys, tempfile, termios, time, uuid

def write_fixture(root, n):
    cid = str(uuid.uuid4())
    conv = os.path.join(root, "conversations", cid)
    os.makedirs(conv)
    users = 0
    with open(os.path.join(conv, "displayLog.jsonl"), "w") as f:
        for seq in range(n):
            turn = seq // 3
            ts = 1_793_000_000_000 + seq
            rid = ('{"clientRequestId":"f%d","connectionId":"0","requestId":"00000000-0000-4000-8000-%012d"}' % (turn, turn))
            cmd = "fixture turn %d" % turn
            k = seq % 3
            if k == 0:
                users += 1
                e = '{"type":"user-request","seq":%d,"timestamp":%d,"command":"%s","requestId":%s}' % (seq, ts, cmd, rid)
            elif k == 1:
                e = ('{"type":"append-display","seq":%d,"timestamp":%d,"message":{"message":{"content":"echo: %s","type":"markdown"},"requestId":%s,"source":"chat"},"mode":"block"}' % (seq, ts, cmd, rid))
            else:
                e = '{"type":"command-result","seq":%d,"timestamp":%d,"requestId":%s}' % (seq, ts, rid)
            f.write('{"s":%d,"u":%d,"e":%s}\n' % (seq, users, e))
    reg = {"sessions": [{"conversationId": cid, "name": "CLI", "createdAt": "2026-11-01T00:00:00.000Z", "messageCount": users}]}
    with open(os.path.join(root, "conversations", "conversations.json"), "w") as f:
        json.dump(reg, f)
    with open(os.path.join(root, "conversations", ".clean-shutdown"), "w") as f:
        f.write("clean\n")

def start_server(binary, root):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUNDTABLE_")}
    env["RUST_LOG"] = "info"
    p = subprocess.Popen([binary, "serve", "--port", "0", "--host", "127.0.0.1", "--instance-dir", root],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    for line in p.stderr:
        if "listening on ws://127.0.0.1:" in line:
            port = int(line.split("listening on ws://127.0.0.1:")[1].split("/")[0])
            return p, port
    raise SystemExit("server did not start")

def connect_once(binary, port, home):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = dict(os.environ, ROUNDTABLE_HOME=home, RUST_LOG="warn", TERM="dumb")
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "connect", "--port", str(port)], stdin=slave, stdout=slave, stderr=slave,
                         env=env, start_new_session=True)
    os.close(slave)
    seen = b""
    total = 0
    elapsed = None
    while True:
        r, _, _ = select.select([master], [], [], 120)
        if not r:
            raise SystemExit("no prompt within 120 s")
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        total += len(chunk)
        seen = (seen + chunk)[-64:]
        if elapsed is None and b"CLI> " in seen:
            elapsed = time.monotonic() - t0
            os.write(master, b"\x04")  # Ctrl-D: leave
    p.wait()
    os.close(master)
    return elapsed * 1000.0, total

def main():
    binary = os.path.abspath(sys.argv[1])
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1000,25000,250000").split(",")]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    for n in sizes:
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as home:
            write_fixture(root, n)
            server, port = start_server(binary, root)
            try:
                times = []
                for _ in range(runs):
                    ms, printed = connect_once(binary, port, home)
                    times.append(ms)
                warm = sorted(times[1:])
                med = warm[len(warm) // 2] if warm else float("nan")
                print(f"{n:>8} entries: cold {times[0]:8.1f} ms, warm median {med:8.1f} ms "
                      f"(min {min(warm) if warm else 0:.1f}, max {max(warm) if warm else 0:.1f}), {printed} bytes printed", flush=True)
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait()

main()
