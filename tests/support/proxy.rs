//! A TCP proxy the test controls, put between a Roundtable node and a NATS server to cut the
//! node off from NATS and heal it again (the nemesis's network fault, without root or network
//! namespaces). While cut, every connection through it is shut down and new ones are closed
//! as soon as they are accepted: to the node it is as if the network to NATS were gone.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running proxy from its own loopback port to `target`.
pub struct CutProxy {
    /// Its listening port on 127.0.0.1.
    pub port: u16,
    /// Shared with the accepting and copying threads.
    state: Arc<State>,
}

struct State {
    /// While true, connections are refused and none is open.
    cut: AtomicBool,
    /// Set on drop: the accept loop ends.
    stopped: AtomicBool,
    /// Both sides of every connection open through it, to shut them down on a cut.
    open: Mutex<Vec<TcpStream>>,
}

impl CutProxy {
    /// Starts a proxy to `127.0.0.1:<target_port>`.
    pub fn start(target_port: u16) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State {
            cut: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = state.clone();
        std::thread::spawn(move || {
            for incoming in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = incoming else { continue };
                if accepting.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = accepting.open.lock().unwrap();
                    // Forget connections both sides have finished with.
                    open.retain(|s| s.peer_addr().is_ok());
                    open.push(client.try_clone().expect("clone"));
                    open.push(server.try_clone().expect("clone"));
                }
                // A cut that raced with this accept: it must not survive the cut.
                if accepting.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    continue;
                }
                copy_both_ways(client, server);
            }
        });
        CutProxy { port, state }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Cuts: every open connection is shut down, new ones are refused until [`CutProxy::heal`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        let open = std::mem::take(&mut *self.state.open.lock().unwrap());
        for stream in open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

/// Two threads copying until either side closes; then both are shut down.
fn copy_both_ways(a: TcpStream, b: TcpStream) {
    let (a2, b2) = (a.try_clone().expect("clone"), b.try_clone().expect("clone"));
    std::thread::spawn(move || copy(a, b));
    std::thread::spawn(move || copy(b2, a2));
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
