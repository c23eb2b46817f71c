//! Three real `nats-server -js` processes clustered with each other (routes on loopback,
//! JetStream clustered, so buckets and streams can have three replicas), for the nemesis test
//! and the load harness's `nemesis` scenario. Each server keeps its ports and its JetStream
//! store across [`NatsCluster::restart`], so a restart is the same server coming back.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a server may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One server of the cluster.
struct Member {
    /// Its process while it runs.
    child: Option<Child>,
    /// Client port on 127.0.0.1.
    port: u16,
    /// Route (cluster) port on 127.0.0.1.
    route_port: u16,
    /// HTTP monitoring port on 127.0.0.1 (`/jsz`: who is in JetStream's metadata group).
    monitor_port: u16,
    /// JetStream store, kept across restarts.
    store: PathBuf,
    /// Everything it logged, over all its lives.
    log: Arc<Mutex<String>>,
}

/// Three clustered NATS servers `n0`, `n1`, `n2`.
pub struct NatsCluster {
    members: Vec<Member>,
    _temp: tempfile::TempDir,
}

/// A port the kernel considers free now (bound and released: a server started right after
/// gets it unless something else races for it, which on a test machine's loopback it does not).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl NatsCluster {
    /// Starts three servers and waits until JetStream's cluster has elected its metadata
    /// leader (before that, creating a bucket fails) and all three are current members of
    /// its metadata group (before that, a bucket with three replicas has "no suitable peers
    /// for placement": a node of the CI nemesis once gave up after 30 s of that).
    pub fn start() -> NatsCluster {
        NatsCluster::start_but(None)
    }

    /// Starts all servers but `absent` (its ports and store are set aside: [`restart`](Self::restart)
    /// starts it later, as a server that joins a cluster already running) and waits for the
    /// metadata leader, which two of three elect.
    pub fn start_but(absent: Option<usize>) -> NatsCluster {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut members: Vec<Member> = (0..3)
            .map(|i| Member {
                child: None,
                port: free_port(),
                route_port: free_port(),
                monitor_port: free_port(),
                store: temp.path().join(format!("n{i}")),
                log: Arc::default(),
            })
            .collect();
        let routes: Vec<u16> = members.iter().map(|m| m.route_port).collect();
        let (leader_tx, leader_rx) = mpsc::channel();
        for (i, member) in members.iter_mut().enumerate() {
            if Some(i) != absent {
                spawn(i, member, &routes, Some(leader_tx.clone()));
            }
        }
        leader_rx
            .recv_timeout(START_TIMEOUT)
            .unwrap_or_else(|_| panic!("no JetStream metadata leader in the NATS cluster"));
        let cluster = NatsCluster {
            members,
            _temp: temp,
        };
        if absent.is_none() {
            cluster.wait_all_in_meta_group();
        }
        cluster
    }

    /// Waits until the metadata leader reports both other servers as current members of
    /// JetStream's metadata group, polling each server's `/jsz` (nats-server says nothing on
    /// its own when a peer becomes current); panics with every server's log after
    /// [`START_TIMEOUT`].
    fn wait_all_in_meta_group(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let current = self
                .members
                .iter()
                .filter_map(|m| current_meta_peers(m.monitor_port))
                .max()
                .unwrap_or(0);
            if current == self.members.len() {
                return;
            }
            if Instant::now() >= deadline {
                let logs: String = (0..self.members.len())
                    .map(|i| format!("--- n{i}\n{}", self.log(i)))
                    .collect();
                panic!(
                    "JetStream's metadata group has {current} current members of {} after {} s:\n{logs}",
                    self.members.len(),
                    START_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `nats://127.0.0.1:<port>` of server `i`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.members[i].port)
    }

    /// Client ports of all three servers.
    pub fn ports(&self) -> Vec<u16> {
        self.members.iter().map(|m| m.port).collect()
    }

    /// SIGKILL of server `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Server `i` again, same ports, same store; returns once it is ready.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let routes: Vec<u16> = self.members.iter().map(|m| m.route_port).collect();
        spawn(i, &mut self.members[i], &routes, None);
    }

    /// What server `i` logged over all its lives.
    pub fn log(&self, i: usize) -> String {
        self.members[i].log.lock().unwrap().clone()
    }
}

/// Starts member `i` and waits for its "Server is ready"; `leader` hears the first line that
/// says JetStream's metadata leader is known.
fn spawn(i: usize, member: &mut Member, routes: &[u16], leader: Option<mpsc::Sender<()>>) {
    let others: Vec<String> = routes
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, p)| format!("nats://127.0.0.1:{p}"))
        .collect();
    let mut child = Command::new(super::nats::binary())
        .args(["-js", "-a", "127.0.0.1", "-p", &member.port.to_string()])
        .args(["--server_name", &format!("n{i}"), "--cluster_name", "rtn"])
        .args([
            "--cluster",
            &format!("nats://127.0.0.1:{}", member.route_port),
        ])
        .args(["--routes", &others.join(",")])
        .args(["-m", &member.monitor_port.to_string()])
        .arg("-sd")
        .arg(&member.store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): install Debian's nats-server",
                super::nats::binary()
            )
        });
    let stderr = child.stderr.take().expect("piped");
    let log = member.log.clone();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut leader = leader;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("Server is ready") {
                let _ = ready_tx.send(());
            }
            if line.contains("metadata leader") || line.contains("Self is new JetStream cluster") {
                if let Some(tx) = leader.take() {
                    let _ = tx.send(());
                }
            }
            let mut log = log.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if ready_rx.recv_timeout(Duration::from_millis(100)).is_ok() {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "nats-server n{i} exited with {status}:\n{}",
                member.log.lock().unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "nats-server n{i} did not become ready:\n{}",
            member.log.lock().unwrap()
        );
    }
    member.child = Some(child);
}

/// The current members of JetStream's metadata group as the server monitored on `port` sees
/// them, when it is the group's leader (itself and its current replicas); `None` otherwise or
/// when it does not answer.
fn current_meta_peers(port: u16) -> Option<usize> {
    let (status, body) = super::server::http_get(port, "/jsz", Duration::from_secs(2)).ok()?;
    if status != 200 {
        return None;
    }
    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
    let replicas = jsz["meta_cluster"]["replicas"].as_array()?;
    let current = replicas.iter().filter(|r| r["current"] == true).count();
    Some(1 + current)
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
