//! The socket cap (issue 49, finding 8 of the third security review): with no cap, sockets
//! took the last file descriptors and a working conversation's next turn failed with
//! `storage_error: … Too many open files`. Now WebSocket upgrades past the cap
//! (`--max-sockets`, or the descriptor limit less a reserve for files) are answered 503 with
//! an exact text, while every joined client and every conversation keeps working.

use std::os::unix::process::CommandExt as _;
use std::time::Duration;

use serde_json::json;

use crate::harness::*;

/// What a refused upgrade's body says.
fn at_capacity(sockets: usize) -> String {
    format!(
        "Server is at its limit of {sockets} WebSocket connections (--max-sockets); try again \
         later"
    )
}

/// An open WebSocket, held and never read (the test ends before the first ping).
type Held = tungstenite::WebSocket<std::net::TcpStream>;

/// Opens a WebSocket to `server`: the socket, or the refusal's status and whole body, read
/// until the server closes (status 0: no HTTP answer).
fn try_connect(server: &Server) -> Result<Held, (u16, String)> {
    use std::io::Read as _;
    let request = format!("ws://127.0.0.1:{}/", server.port);
    let stream =
        std::net::TcpStream::connect(("127.0.0.1", server.port)).map_err(|e| (0, e.to_string()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut raw = stream.try_clone().unwrap();
    match tungstenite::client(request.as_str(), stream) {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            // The body may come after the head tungstenite read: read on to the close.
            let mut body = response.body().clone().unwrap_or_default();
            let _ = raw.read_to_end(&mut body);
            Err((
                response.status().as_u16(),
                String::from_utf8_lossy(&body).into_owned(),
            ))
        }
        Err(e) => Err((0, e.to_string())),
    }
}

/// `--max-sockets 4`: the fifth upgrade is answered 503 with the exact text (and counted),
/// the four clients go on working, and once one leaves a new one is served.
#[test]
fn upgrades_past_the_cap_are_refused_and_the_rest_keep_working() {
    let server = Server::start(&["--max-sockets", "4"]);
    let (mut a, id) = server.joined("capped");
    let mut others: Vec<Held> = (0..3).map(|_| try_connect(&server).unwrap()).collect();
    eventually("four sockets open", || {
        server.metric("roundtable_sockets") == 4.0
    });
    let (status, body) = match try_connect(&server) {
        Ok(_) => panic!("a fifth socket was served"),
        Err(refusal) => refusal,
    };
    assert_eq!((status, body), (503, at_capacity(4)));
    assert_eq!(server.metric("roundtable_sockets_refused_total"), 1.0);
    assert_eq!(server.metric("roundtable_max_sockets"), 4.0);
    // The joined client is served as before; /health still answers (the HTTP headroom).
    let calls = a.run_turn(&id, "what is 2+3");
    assert!(
        Client::texts(&calls).contains(&"5".to_string()),
        "{calls:?}"
    );
    assert_eq!(server.http_get("/health").0, 200);
    // One leaves: the next is served.
    others.pop();
    eventually("three sockets open", || {
        server.metric("roundtable_sockets") == 3.0
    });
    let mut d = server.connect();
    d.join(&id);
    assert!(d.agent("listConversations", json!([null])).is_ok());
}

/// Under a descriptor limit of 1,024 (the usual default soft limit), sockets are refused at
/// 448 — the limit less 512 descriptors kept for files and 64 for HTTP — and a conversation
/// created and written after that works: no `storage_error`. Without the cap the server
/// accepted sockets until it ran out of descriptors, and the turn failed.
#[test]
fn at_the_descriptor_limit_conversations_keep_their_files() {
    // This process opens some 450 sockets: make sure its own soft limit allows them.
    raise_own_descriptor_limit();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::try_start_with(dir.path(), &[], &[], |cmd| {
        // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 1024,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
    .unwrap_or_else(|log| panic!("{log}"));
    assert_eq!(server.metric("roundtable_descriptor_limit"), 1024.0);
    assert_eq!(server.metric("roundtable_max_sockets"), 448.0);
    let (mut a, _) = server.joined("before");
    let mut held = Vec::new();
    let refusal = loop {
        match try_connect(&server) {
            Ok(client) => held.push(client),
            Err(refusal) => break refusal,
        }
        assert!(held.len() < 1100, "no socket was ever refused");
    };
    assert_eq!(refusal, (503, at_capacity(448)));
    assert_eq!(held.len() + 1, 448, "the cap counts the joined client too");
    // New conversations, their files created and written, and a turn in each.
    for n in 0..5 {
        let id = a.create(&format!("after {n}"));
        a.join(&id);
        let calls = a.run_turn(&id, "what is 2+3");
        assert!(
            Client::texts(&calls).contains(&"5".to_string()),
            "turn {n} failed: {calls:?}"
        );
    }
    assert_eq!(server.metric("roundtable_storage_errors_total"), 0.0);
    let open = server.metric("roundtable_descriptors_open");
    assert!(open > 448.0 && open < 1024.0, "{open}");
}

/// Raises this test process's soft descriptor limit to its hard one.
fn raise_own_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}
