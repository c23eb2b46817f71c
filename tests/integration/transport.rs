//! The WebSocket transport: framing, close codes, heartbeat, security checks, HTTP endpoints,
//! backpressure and graceful shutdown.

use std::time::Duration;

use serde_json::{json, Value};
use tungstenite::protocol::frame::coding::{Data, OpCode};
use tungstenite::protocol::frame::Frame;
use tungstenite::Message;

use crate::harness::*;

/// Malformed frames are dropped (there is no callId to answer) while the same socket and
/// everyone else carry on; binary frames carrying JSON are accepted.
#[test]
fn malformed_frames_do_not_disturb_anyone() {
    let server = Server::start(&[]);
    let mut bad = server.connect();
    let mut good = server.connect();
    for junk in [
        "not json",
        "[1,2,3]",
        "{\"name\":\"agent-server\"}",
        "{\"name\":5,\"message\":{}}",
        "null",
        "",
    ] {
        bad.send_text(junk);
    }
    assert!(good.agent("listConversations", json!([])).is_ok());
    assert!(bad.agent("listConversations", json!([])).is_ok());
    bad.ws
        .send(Message::binary(
            json!({"name":"agent-server","message":{"type":"invoke","callId":99,"name":"getUserIdentity","args":[]}})
                .to_string()
                .into_bytes(),
        ))
        .unwrap();
    assert!(bad.wait_answer(AGENT_SERVER, 99).is_ok());
    assert!(server.metric("roundtable_frames_dropped_total") >= 5.0);
}

/// Continuation frames are reassembled, including a UTF-8 character split across fragments.
#[test]
fn fragmented_messages_are_reassembled() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let text = json!({"name":"agent-server","message":{"type":"invoke","callId":7,"name":"createConversation","args":["Grüße 😀"]}})
        .to_string();
    let bytes = text.as_bytes();
    let split = text.find('😀').unwrap() + 2; // inside the emoji
    c.ws.send(Message::Frame(Frame::message(
        bytes[..10].to_vec(),
        OpCode::Data(Data::Text),
        false,
    )))
    .unwrap();
    c.ws.send(Message::Frame(Frame::message(
        bytes[10..split].to_vec(),
        OpCode::Data(Data::Continue),
        false,
    )))
    .unwrap();
    c.ws.send(Message::Frame(Frame::message(
        bytes[split..].to_vec(),
        OpCode::Data(Data::Continue),
        true,
    )))
    .unwrap();
    let info = c.wait_answer(AGENT_SERVER, 7).unwrap();
    assert_eq!(info["name"], "Grüße 😀");
}

/// Invalid UTF-8 closes with 1007, an oversized message with 1009; other sockets are fine.
#[test]
fn invalid_utf8_and_oversized_messages_close_properly() {
    let server = Server::start(&["--max-frame-bytes", "65536"]);
    let mut other = server.connect();
    let mut c = server.connect();
    c.ws.send(Message::Frame(Frame::message(
        vec![b'{', 0xff, 0xfe, b'}'],
        OpCode::Data(Data::Text),
        true,
    )))
    .unwrap();
    assert_eq!(c.wait_close(), 1007);

    let mut c = server.connect();
    c.ws.send(Message::Frame(Frame::message(
        b"{\"a\":\"\xce".to_vec(),
        OpCode::Data(Data::Text),
        false,
    )))
    .unwrap();
    c.ws.send(Message::Frame(Frame::message(
        b"\xff\"}".to_vec(),
        OpCode::Data(Data::Continue),
        true,
    )))
    .unwrap();
    assert_eq!(c.wait_close(), 1007);

    let mut c = server.connect();
    c.send_text(&format!(
        "{{\"name\":\"agent-server\",\"pad\":\"{}\"}}",
        "x".repeat(100_000)
    ));
    assert_eq!(c.wait_close(), 1009);

    let mut c = server.connect();
    // Each fragment is small; together they pass the limit.
    c.ws.send(Message::Frame(Frame::message(
        vec![b'x'; 30_000],
        OpCode::Data(Data::Text),
        false,
    )))
    .unwrap();
    for _ in 0..3 {
        c.ws.send(Message::Frame(Frame::message(
            vec![b'x'; 30_000],
            OpCode::Data(Data::Continue),
            false,
        )))
        .unwrap();
    }
    assert_eq!(c.wait_close(), 1009);

    // A large message under the limit is fine.
    let mut c = server.connect();
    let big = "y".repeat(60_000);
    assert_eq!(
        c.agent("listConversations", json!([big])).unwrap(),
        json!([]),
        "a 60 KB filter matches nothing"
    );
    assert!(other.agent("listConversations", json!([])).is_ok());
}

/// Pings are answered with pongs carrying the payload; the server pings on its own and drops a
/// peer that does not answer; connect-then-close is fine.
#[test]
fn heartbeat() {
    let server = Server::start(&["--ping-interval", "0.2"]);
    let mut c = server.connect();
    c.ws.send(Message::Ping(b"hi".to_vec().into())).unwrap();
    let mut got_pong = false;
    let mut got_ping = false;
    let deadline = std::time::Instant::now() + WAIT;
    while !(got_pong && got_ping) && std::time::Instant::now() < deadline {
        match c.ws.read() {
            Ok(Message::Pong(p)) => {
                assert_eq!(&p[..], b"hi");
                got_pong = true;
            }
            // tungstenite answers the server's ping automatically.
            Ok(Message::Ping(_)) => got_ping = true,
            _ => {}
        }
    }
    assert!(got_pong && got_ping);
    // Still alive after several intervals because pongs were sent (tungstenite answers
    // pings while reading): the server pings only a peer that answered its previous ping
    // and drops the others, so five more pings mean four pongs were taken.
    let mut pings = 0;
    let deadline = std::time::Instant::now() + WAIT;
    while pings < 5 {
        assert!(std::time::Instant::now() < deadline, "{pings} pings only");
        match c.ws.read() {
            Ok(Message::Ping(_)) => pings += 1,
            Ok(Message::Close(frame)) => panic!("dropped after {pings} pings: {frame:?}"),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("dropped after {pings} pings: {e}"),
        }
    }
    assert!(c.agent("listConversations", json!([])).is_ok());

    // A peer that never reads never answers pings: it is dropped.
    let silent = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let (mut ws, _) =
        tungstenite::client(format!("ws://127.0.0.1:{}/", server.port), silent).unwrap();
    eventually("silent peer dropped", || {
        let _ = c.read_frame(Duration::from_millis(20)); // keeps answering pings
        server.metric("roundtable_sockets") <= 1.0
    });
    let _ = ws.close(None);

    // connect-then-close (the liveness probe): the server goes on serving. Asked on a new
    // socket: `c` answers pings only while it reads, and with 0.2 s between pings a loaded
    // machine can keep it from reading long enough to be dropped, as it should be.
    for _ in 0..5 {
        let mut p = server.connect();
        p.close();
    }
    assert!(server
        .connect()
        .agent("listConversations", json!([]))
        .is_ok());
}

/// Cross-site origins and foreign Host headers are refused before the upgrade; the server's
/// own origin, --allow-origin and clients without Origin are accepted.
#[test]
fn origin_and_host_checks() {
    let server = Server::start(&["--allow-origin", "chrome-extension://abcdef"]);
    assert_eq!(
        try_upgrade(server.port, "/", &[("Origin", "https://evil.example")]).err(),
        Some(403)
    );
    assert_eq!(
        try_upgrade(
            server.port,
            "/",
            &[("Origin", "http://localhost.evil.example")]
        )
        .err(),
        Some(403)
    );
    assert_eq!(
        try_upgrade(server.port, "/", &[("Origin", "null")]).err(),
        Some(403)
    );
    // Other loopback pages are other programs' pages; the server's own origin is served
    // (security_web.rs has the whole rule).
    assert_eq!(
        try_upgrade(server.port, "/", &[("Origin", "http://localhost:3000")]).err(),
        Some(403)
    );
    let own = format!("http://127.0.0.1:{}", server.port);
    assert!(try_upgrade(server.port, "/", &[("Origin", &own)]).is_ok());
    assert!(try_upgrade(
        server.port,
        "/any/path?x=1",
        &[("Origin", "chrome-extension://abcdef")]
    )
    .is_ok());
    assert!(try_upgrade(server.port, "/", &[]).is_ok());
    let (status, _) = http_request(
        server.port,
        "GET / HTTP/1.1\r\nHost: attacker.example:8999\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert_eq!(status, 403);
    let (status, _) = http_request(
        server.port,
        "GET /health HTTP/1.1\r\nHost: rebind.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 403);
}

/// With --token, a missing or wrong token is refused; the right one (bearer or query) works.
#[test]
fn token_required_when_configured() {
    let server = Server::start(&["--token", "s3cret"]);
    assert_eq!(try_upgrade(server.port, "/", &[]).err(), Some(401));
    assert_eq!(
        try_upgrade(server.port, "/", &[("Authorization", "Bearer wrong")]).err(),
        Some(401)
    );
    assert_eq!(
        try_upgrade(server.port, "/?token=s3cre", &[]).err(),
        Some(401)
    );
    let mut c = try_upgrade(server.port, "/", &[("Authorization", "Bearer s3cret")]).unwrap();
    assert!(c.agent("listConversations", json!([])).is_ok());
    let mut c = try_upgrade(server.port, "/?token=s3cret", &[]).unwrap();
    assert!(c.agent("listConversations", json!([])).is_ok());
}

/// /health and /metrics answer; a plain GET elsewhere is 404.
#[test]
fn health_and_metrics() {
    let before_start = std::time::Instant::now();
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.agent("joinConversation", json!([])).unwrap();
    let _ = c.agent("noSuchMethod", json!([]));
    let (status, body) = server.http_get("/health");
    assert_eq!(status, 200);
    let h: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(h["loadedConversations"], 1);
    assert_eq!(h["connectedSockets"], 1);
    // The server's age: more than nothing, less than this test has waited for it, and growing.
    let uptime = h["uptimeSeconds"].as_f64().unwrap();
    assert!(uptime > 0.0, "{uptime}");
    assert!(uptime <= before_start.elapsed().as_secs_f64(), "{uptime}");
    let (_, body) = server.http_get("/health");
    let later: Value = serde_json::from_str(&body).unwrap();
    assert!(later["uptimeSeconds"].as_f64().unwrap() > uptime, "{later}");
    let (status, body) = server.http_get("/metrics");
    assert_eq!(status, 200);
    for name in [
        "roundtable_sockets 1",
        "roundtable_joined_clients 1",
        "roundtable_loaded_conversations 1",
        "roundtable_slow_client_closes_total 0",
        "roundtable_evictions_total 0",
        // Unknown method names share one label: a client cannot grow the metrics.
        "roundtable_rpc_errors_total{method=\"other\"} 1",
    ] {
        assert!(body.contains(name), "missing {name:?} in\n{body}");
    }
    assert!(server.metric("roundtable_frames_in_total") >= 2.0);
    assert_eq!(server.http_get("/no-such-page").0, 404);
}

/// A client that stops reading while asking for big answers is closed with 1008 once its
/// bounded queue fills; the server's memory does not grow with it and others are unaffected.
#[test]
fn slow_reader_is_closed_not_buffered() {
    let server = Server::start(&["--max-queued-frames", "64", "--max-queued-bytes", "262144"]);
    let mut admin = server.connect();
    for i in 0..100 {
        admin.create(&format!(
            "conversation number {i:03} with a reasonably long name to make lists big"
        ));
    }
    let mut stuck = server.connect();
    // ~20 KB per answer, sent in batches until the server gives up on this reader: far
    // beyond socket buffers plus the bound. Stop sending then: data arriving after the
    // server has closed would make the kernel reset the connection (losing the close frame).
    'sending: for _ in 0..200 {
        for _ in 0..20 {
            let frame = json!({"name":"agent-server","message":{"type":"invoke","callId":fastrand_id(),"name":"listConversations","args":[]}});
            if stuck.ws.send(Message::text(frame.to_string())).is_err() {
                break 'sending;
            }
        }
        if server.metric("roundtable_slow_client_closes_total") >= 1.0 {
            break;
        }
    }
    eventually("slow client closed", || {
        server.metric("roundtable_slow_client_closes_total") >= 1.0
    });
    assert!(admin.agent("listConversations", json!([])).is_ok());
    // Draining what was buffered ends with the 1008 close.
    let code = stuck.wait_close();
    assert_eq!(code, 1008, "{:?}", stuck.closed);
    assert_eq!(
        stuck.closed.as_ref().unwrap().1,
        "slow consumer: outbound queue full"
    );
}

fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1000);
    N.fetch_add(1, Ordering::Relaxed)
}

/// `shutdown` answers, closes every socket with 1001, saves, and exits 0.
#[test]
fn graceful_shutdown() {
    let server = Server::start(&[]);
    let mut joined = server.connect();
    joined.agent("joinConversation", json!([])).unwrap();
    let mut idle = server.connect();
    let mut admin = server.connect();
    admin.create("saved");
    let dir = server.dir.clone();
    assert_eq!(admin.agent("shutdown", json!([])).unwrap(), Value::Null);
    assert_eq!(joined.wait_close(), 1001);
    assert_eq!(idle.wait_close(), 1001);
    let mut server = server;
    assert!(server.wait_exit().success());
    let reg = std::fs::read_to_string(dir.join("conversations/conversations.json")).unwrap();
    assert!(reg.contains("\"saved\""));
}

/// The echo endpoint (conformance) echoes text and binary through the same transport, and the
/// protocol still answers on other paths.
#[test]
fn echo_endpoint() {
    let server = Server::start(&["--echo-path", "/echo"]);
    let (mut ws, _) = tungstenite::connect(format!("ws://127.0.0.1:{}/echo", server.port)).unwrap();
    ws.send(Message::text("hello")).unwrap();
    ws.send(Message::binary(vec![0u8, 159, 146, 150])).unwrap();
    assert_eq!(ws.read().unwrap(), Message::text("hello"));
    assert_eq!(
        ws.read().unwrap(),
        Message::binary(vec![0u8, 159, 146, 150])
    );
    let mut c = server.connect();
    assert!(c.agent("listConversations", json!([])).is_ok());
}

/// The upgrade hand-over (actix-http's upgrade service gives the TCP stream to the transport):
/// frames a client sends in the same write as its handshake reach the socket's reader (they were
/// read into the HTTP parser's buffer), and a refused upgrade gets its whole answer, body
/// included, before the connection closes.
#[test]
fn upgrade_hand_over_keeps_pipelined_frames_and_refusal_bodies() {
    use std::io::{Read, Write};
    let server = Server::start(&["--echo-path", "/echo"]);
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n".to_vec();
    for text in ["one", "two"] {
        let mask = [0x11u8, 0x22, 0x33, 0x44];
        request.extend([0x81, 0x80 | text.len() as u8]);
        request.extend(mask);
        request.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    }
    tcp.write_all(&request).unwrap();
    let mut received = Vec::new();
    let expected_frames = b"\x81\x03one\x81\x03two";
    let head_end = loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "connection closed after {:?}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&chunk[..n]);
        if let Some(i) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            if received.len() >= i + 4 + expected_frames.len() {
                break i + 4;
            }
        }
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    assert_eq!(&received[head_end..], expected_frames);

    // Refused by the Host check (DNS rebinding) and by the handshake itself: status and body.
    let (status, body) = http_request(
        server.port,
        "GET / HTTP/1.1\r\nHost: attacker.example:8999\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert_eq!((status, body.as_str()), (403, "Host not allowed"));
    let (status, body) = http_request(
        server.port,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 12\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    // RFC 6455 section 4.4: an unsupported version is answered 426 Upgrade Required.
    assert_eq!(status, 426, "{body}");
    let mut c = server.connect();
    assert!(c.agent("listConversations", json!([])).is_ok());
}
