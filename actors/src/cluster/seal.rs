//! The cluster's own authentication of node-to-node messages (docs/cluster.md "Who can do
//! what"): NATS access alone must not reach conversations, so every message one node sends
//! another over core NATS carries an HMAC-SHA256 made with the cluster secret
//! (`--cluster-secret-file`, the same on every node), checked before the message changes
//! anything. A message that fails the check is dropped, counted
//! (`roundtable_cluster_auth_refused_total`) and logged on the `roundtable::security` target
//! (at most one line per [`REFUSAL_LOG_INTERVAL`], with how many were refused since).
//!
//! Someone who can read NATS sees every message, so a MAC over the body alone would let them
//! replay one. Two kinds of seal close that:
//! - **Stamped** ([`Cluster::seal_stamped`], [`Cluster::open_stamped`]): requests and answers
//!   (a relay's opening and its answer, searches and their answers, the counts owners share).
//!   The MAC covers the subject, the reply subject, a timestamp and a random nonce; a
//!   receiver refuses a timestamp more than [`STAMP_WINDOW`] from its clock and a nonce it
//!   has seen (nonces are kept for twice the window: any later copy is out of the window).
//!   So a captured `relay.open` opens nothing when replayed, and cannot be pointed at
//!   another reply subject.
//! - **Streamed** ([`StreamSealer`], [`StreamOpener`]): the frames of one relay (B → A, on
//!   `rt.node.<A>.relay.<relay>.in`) and of one link (A → B, `rt.node.<B>.link.<link>.out`).
//!   The MAC covers the subject (which names the relay or link: a frame cannot move to
//!   another), the sender's epoch (its start time in microseconds: a link task that starts
//!   again for the same link begins a later one) and a sequence number, and the receiver
//!   takes only (epoch, sequence) above the last it took: no frame is taken twice or out of
//!   order. No clock or memory is needed per frame beyond one HMAC.
//!
//! Wire: the seal follows the body. Stamped: timestamp (ms since the Unix epoch, 8 bytes big
//! endian), nonce (16 bytes), MAC (32 bytes). Streamed: epoch (8), sequence (8), MAC (32).
//!
//! Bounds: at most [`MAX_NONCES`] nonces are remembered; a stamped message that arrives while
//! all of them are younger than twice the window is refused (counted and logged), which at
//! that size means more than about 4,000 requests a second from the other nodes.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::Cluster;

/// How far a stamped message's timestamp may be from the receiver's clock: the nodes' clocks
/// must agree to within this.
pub const STAMP_WINDOW: Duration = Duration::from_secs(30);

/// Most nonces remembered (each ~50 bytes with its bookkeeping: a few MB at most).
pub const MAX_NONCES: usize = 1 << 18;

/// Shortest refusal log interval: an attacker's flood makes one line per second.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Fewest bytes a cluster secret has (`head -c 32 /dev/urandom | base64` gives 44).
pub const MIN_SECRET_BYTES: usize = 16;

/// Length of a MAC (HMAC-SHA256).
const MAC_LEN: usize = 32;
/// Length of a stamped message's seal.
pub const STAMP_LEN: usize = 8 + 16 + MAC_LEN;
/// Length of a streamed message's seal.
pub const STREAM_SEAL_LEN: usize = 8 + 8 + MAC_LEN;

/// The cluster secret (`--cluster-secret-file`): its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// The secret `text` (the file's first line, trimmed): at least [`MIN_SECRET_BYTES`].
    pub fn new(text: String) -> Result<ClusterSecret, String> {
        if text.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the secret is {} bytes long; at least {MIN_SECRET_BYTES} are needed",
                text.len()
            ));
        }
        Ok(ClusterSecret(text))
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(***)")
    }
}

/// What kind of seal a MAC is for: a stamped MAC never checks as a streamed one.
#[derive(Clone, Copy)]
enum Kind {
    Stamped = b'S' as isize,
    Streamed = b'F' as isize,
}

/// The key and the receiver's memory of nonces and refusals (one per [`Cluster`], whose
/// methods of the same names count and log what these refuse).
pub struct Sealing {
    /// HMAC-SHA256 with the cluster secret.
    key: hmac::Key,
    /// Nonces of random numbers.
    random: SystemRandom,
    /// Nonces seen, and when, oldest first.
    nonces: Mutex<Nonces>,
    /// When a refusal was last logged, and how many since.
    refusals: Mutex<(Option<Instant>, u64)>,
}

/// The nonces of the stamped messages taken in the last twice [`STAMP_WINDOW`].
#[derive(Default)]
struct Nonces {
    /// For the look-up.
    seen: HashSet<[u8; 16]>,
    /// In arrival order, for expiry.
    order: VecDeque<(Instant, [u8; 16])>,
}

impl Sealing {
    /// Seals and checks with `secret`.
    pub fn new(secret: &ClusterSecret) -> Sealing {
        Sealing {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret.0.as_bytes()),
            random: SystemRandom::new(),
            nonces: Mutex::default(),
            refusals: Mutex::default(),
        }
    }

    /// The MAC of a message of `kind` to `subject` (reply `reply`) with `fields` and `body`.
    fn mac(&self, kind: Kind, subject: &str, reply: &str, fields: &[u8], body: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(&[kind as u8]);
        for part in [subject.as_bytes(), reply.as_bytes()] {
            context.update(&(part.len() as u32).to_be_bytes());
            context.update(part);
        }
        context.update(fields);
        context.update(body);
        context.sign()
    }

    fn verify(
        &self,
        kind: Kind,
        subject: &str,
        reply: &str,
        fields: &[u8],
        body: &[u8],
        mac: &[u8],
    ) -> bool {
        let expected = self.mac(kind, subject, reply, fields, body);
        // In constant time: every byte is compared whatever the first difference.
        expected.as_ref().len() == mac.len()
            && expected
                .as_ref()
                .iter()
                .zip(mac)
                .fold(0u8, |differ, (a, b)| differ | (a ^ b))
                == 0
    }

    /// Remembers `nonce` (seen at `now`): false when it was seen already or there is no room.
    fn fresh_nonce(&self, nonce: [u8; 16], now: Instant) -> Result<(), &'static str> {
        let mut nonces = self.nonces.lock().unwrap_or_else(|e| e.into_inner());
        let keep = STAMP_WINDOW * 2;
        while let Some((at, old)) = nonces.order.front().copied() {
            if now.duration_since(at) < keep {
                break;
            }
            nonces.order.pop_front();
            nonces.seen.remove(&old);
        }
        if nonces.seen.contains(&nonce) {
            return Err("a replay (its nonce was seen)");
        }
        if nonces.order.len() >= MAX_NONCES {
            return Err("too many requests to remember (MAX_NONCES)");
        }
        nonces.seen.insert(nonce);
        nonces.order.push_back((now, nonce));
        Ok(())
    }
}

/// Milliseconds since the Unix epoch now.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The sending side of one sealed stream (a relay's frames, or a link's): its epoch and the
/// sequence of its last message.
pub struct StreamSealer {
    /// The sender's start, in microseconds since the Unix epoch.
    epoch: u64,
    /// The last sequence used.
    sequence: u64,
}

impl Default for StreamSealer {
    fn default() -> StreamSealer {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        StreamSealer { epoch, sequence: 0 }
    }
}

/// The receiving side of one sealed stream: the (epoch, sequence) of the last message taken.
#[derive(Default)]
pub struct StreamOpener {
    /// Only a later one is taken.
    last: (u64, u64),
}

impl Sealing {
    /// `body` sealed as a stamped message to `subject` with reply subject `reply`.
    pub fn seal_stamped(&self, subject: &str, reply: Option<&str>, body: &[u8]) -> Bytes {
        let mut fields = [0u8; 24];
        fields[..8].copy_from_slice(&now_ms().to_be_bytes());
        self.random
            .fill(&mut fields[8..])
            .expect("the system's random numbers");
        let mac = self.mac(Kind::Stamped, subject, reply.unwrap_or(""), &fields, body);
        let mut out = Vec::with_capacity(body.len() + STAMP_LEN);
        out.extend_from_slice(body);
        out.extend_from_slice(&fields);
        out.extend_from_slice(mac.as_ref());
        out.into()
    }

    /// The body of a stamped message received on `subject` (reply `reply`) when its seal is
    /// good, its timestamp within [`STAMP_WINDOW`] and its nonce new; else why not.
    pub fn open_stamped<'a>(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: &'a [u8],
    ) -> Result<&'a [u8], &'static str> {
        let split = payload
            .len()
            .checked_sub(STAMP_LEN)
            .ok_or("no seal (not from a node of this cluster)")?;
        let (body, seal) = payload.split_at(split);
        let (fields, mac) = seal.split_at(24);
        if !self.verify(
            Kind::Stamped,
            subject,
            reply.unwrap_or(""),
            fields,
            body,
            mac,
        ) {
            return Err("a wrong seal (not made with this cluster's secret)");
        }
        let stamp = u64::from_be_bytes(fields[..8].try_into().expect("8 bytes"));
        if now_ms().abs_diff(stamp) > STAMP_WINDOW.as_millis() as u64 {
            return Err("a timestamp outside the window (a replay, or clocks apart)");
        }
        self.fresh_nonce(fields[8..].try_into().expect("16 bytes"), Instant::now())?;
        Ok(body)
    }

    /// `body` sealed as the next message of `stream`, to `subject`.
    pub fn seal_stream(&self, stream: &mut StreamSealer, subject: &str, body: &[u8]) -> Bytes {
        stream.sequence += 1;
        let mut fields = [0u8; 16];
        fields[..8].copy_from_slice(&stream.epoch.to_be_bytes());
        fields[8..].copy_from_slice(&stream.sequence.to_be_bytes());
        let mac = self.mac(Kind::Streamed, subject, "", &fields, body);
        let mut out = Vec::with_capacity(body.len() + STREAM_SEAL_LEN);
        out.extend_from_slice(body);
        out.extend_from_slice(&fields);
        out.extend_from_slice(mac.as_ref());
        out.into()
    }

    /// The body of a message of the stream `stream` reads on `subject` when its seal is good
    /// and it comes after the last one taken; else why not.
    pub fn open_stream<'a>(
        &self,
        stream: &mut StreamOpener,
        subject: &str,
        payload: &'a [u8],
    ) -> Result<&'a [u8], &'static str> {
        let split = payload
            .len()
            .checked_sub(STREAM_SEAL_LEN)
            .ok_or("no seal (not from a node of this cluster)")?;
        let (body, seal) = payload.split_at(split);
        let (fields, mac) = seal.split_at(16);
        if !self.verify(Kind::Streamed, subject, "", fields, body, mac) {
            return Err("a wrong seal (not made with this cluster's secret)");
        }
        let epoch = u64::from_be_bytes(fields[..8].try_into().expect("8 bytes"));
        let sequence = u64::from_be_bytes(fields[8..].try_into().expect("8 bytes"));
        if (epoch, sequence) <= stream.last {
            return Err("a replay (its sequence was taken already)");
        }
        stream.last = (epoch, sequence);
        Ok(body)
    }
}

impl Cluster {
    /// [`Sealing::seal_stamped`] with this node's key.
    pub fn seal_stamped(&self, subject: &str, reply: Option<&str>, body: &[u8]) -> Bytes {
        self.inner.sealing.seal_stamped(subject, reply, body)
    }

    /// [`Sealing::open_stamped`] with this node's key; a refused message is counted and
    /// logged (`what` names it) and answers `None`.
    pub fn open_stamped<'a>(
        &self,
        what: &str,
        subject: &str,
        reply: Option<&str>,
        payload: &'a [u8],
    ) -> Option<&'a [u8]> {
        match self.inner.sealing.open_stamped(subject, reply, payload) {
            Ok(body) => Some(body),
            Err(why) => {
                self.refused(what, subject, why);
                None
            }
        }
    }

    /// [`Sealing::seal_stream`] with this node's key.
    pub fn seal_stream(&self, stream: &mut StreamSealer, subject: &str, body: &[u8]) -> Bytes {
        self.inner.sealing.seal_stream(stream, subject, body)
    }

    /// [`Sealing::open_stream`] with this node's key; a refused message is counted and logged
    /// and answers `None`.
    pub fn open_stream<'a>(
        &self,
        stream: &mut StreamOpener,
        subject: &str,
        payload: &'a [u8],
    ) -> Option<&'a [u8]> {
        match self.inner.sealing.open_stream(stream, subject, payload) {
            Ok(body) => Some(body),
            Err(why) => {
                self.refused("a relay frame", subject, why);
                None
            }
        }
    }

    /// Counts a refused message and logs it on the security target, at most once per
    /// [`REFUSAL_LOG_INTERVAL`] (with how many were refused since the last line).
    fn refused(&self, what: &str, subject: &str, why: &str) {
        self.stats().auth_refused.fetch_add(1, Ordering::Relaxed);
        let mut refusals = self
            .inner
            .sealing
            .refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if refusals
            .0
            .is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL)
        {
            refusals.1 += 1;
            return;
        }
        let since = std::mem::take(&mut refusals.1);
        refusals.0 = Some(now);
        drop(refusals);
        log::warn!(
            target: crate::SECURITY_LOG_TARGET,
            "cluster node {}: refused {what} on {subject}: {why}{}",
            self.node(),
            if since > 0 {
                format!(" ({since} more refused since the last such line)")
            } else {
                String::new()
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealing() -> Sealing {
        Sealing::new(&ClusterSecret::new("0123456789abcdef0123".into()).unwrap())
    }

    /// A nonce is taken once; nonces older than twice the window are forgotten; past the
    /// bound new ones are refused.
    #[test]
    fn nonces_are_taken_once_and_bounded() {
        let s = sealing();
        let start = Instant::now();
        assert!(s.fresh_nonce([1; 16], start).is_ok());
        assert!(s.fresh_nonce([1; 16], start).is_err());
        assert!(s.fresh_nonce([2; 16], start).is_ok());
        let later = start + STAMP_WINDOW * 2;
        assert!(s.fresh_nonce([3; 16], later).is_ok());
        assert_eq!(
            s.nonces.lock().unwrap().order.len(),
            1,
            "the old ones expired"
        );
        for i in 0..MAX_NONCES - 1 {
            let mut nonce = [0u8; 16];
            nonce[..8].copy_from_slice(&(i as u64 + 10).to_be_bytes());
            assert!(s.fresh_nonce(nonce, later).is_ok());
        }
        assert!(s.fresh_nonce([4; 16], later).is_err(), "full");
    }

    /// A MAC binds the kind, the subject and the reply subject.
    #[test]
    fn macs_bind_kind_subject_and_reply() {
        let s = sealing();
        let mac = s.mac(Kind::Stamped, "rt.search", "_INBOX.a", b"f", b"body");
        let ok = |kind, subject, reply| s.verify(kind, subject, reply, b"f", b"body", mac.as_ref());
        assert!(ok(Kind::Stamped, "rt.search", "_INBOX.a"));
        assert!(!ok(Kind::Streamed, "rt.search", "_INBOX.a"));
        assert!(!ok(Kind::Stamped, "rt.counts", "_INBOX.a"));
        assert!(!ok(Kind::Stamped, "rt.search", "_INBOX.b"));
        // The subject/reply split cannot be moved.
        assert!(!ok(Kind::Stamped, "rt.search_INBOX.a", ""));
        let other = Sealing::new(&ClusterSecret::new("another secret, long".into()).unwrap());
        assert!(!other.verify(
            Kind::Stamped,
            "rt.search",
            "_INBOX.a",
            b"f",
            b"body",
            mac.as_ref()
        ));
    }

    /// A stream's messages are taken once each, in order, on their own subject only; a
    /// later epoch (a link task started again) goes on, an earlier one is refused.
    #[test]
    fn stream_messages_are_taken_once_in_order_on_their_subject() {
        let s = sealing();
        let mut sender = StreamSealer::default();
        let first = s.seal_stream(&mut sender, "rt.node.a.relay.r1.in", b"one");
        let second = s.seal_stream(&mut sender, "rt.node.a.relay.r1.in", b"two");
        let mut receiver = StreamOpener::default();
        let subject = "rt.node.a.relay.r1.in";
        assert!(s
            .open_stream(
                &mut StreamOpener::default(),
                "rt.node.a.relay.r2.in",
                &first
            )
            .is_err());
        assert_eq!(
            s.open_stream(&mut receiver, subject, &first),
            Ok(&b"one"[..])
        );
        assert!(
            s.open_stream(&mut receiver, subject, &first).is_err(),
            "a replay"
        );
        assert_eq!(
            s.open_stream(&mut receiver, subject, &second),
            Ok(&b"two"[..])
        );
        assert!(
            s.open_stream(&mut receiver, subject, &first).is_err(),
            "out of order"
        );
        let mut restarted = StreamSealer {
            epoch: sender.epoch + 1,
            sequence: 0,
        };
        let third = s.seal_stream(&mut restarted, subject, b"three");
        assert_eq!(
            s.open_stream(&mut receiver, subject, &third),
            Ok(&b"three"[..])
        );
        let late = s.seal_stream(&mut sender, subject, b"late");
        assert!(
            s.open_stream(&mut receiver, subject, &late).is_err(),
            "an earlier epoch"
        );
        let mut tampered = second.to_vec();
        tampered[0] ^= 1;
        assert!(s
            .open_stream(&mut StreamOpener::default(), subject, &tampered)
            .is_err());
        assert!(s.open_stream(&mut receiver, subject, b"short").is_err());
    }

    /// A stamped message opens once, on its subject and reply subject only.
    #[test]
    fn stamped_messages_open_once_on_their_subjects() {
        let s = sealing();
        let sealed = s.seal_stamped("rt.node.a.relay.open", Some("_INBOX.x"), b"{}");
        assert!(s
            .open_stamped("rt.node.a.relay.open", Some("_INBOX.y"), &sealed)
            .is_err());
        assert!(s
            .open_stamped("rt.node.b.relay.open", Some("_INBOX.x"), &sealed)
            .is_err());
        assert_eq!(
            s.open_stamped("rt.node.a.relay.open", Some("_INBOX.x"), &sealed),
            Ok(&b"{}"[..])
        );
        assert!(s
            .open_stamped("rt.node.a.relay.open", Some("_INBOX.x"), &sealed)
            .is_err());
        assert!(s
            .open_stamped("rt.search", None, b"{\"query\": \"x\"}")
            .is_err());
    }

    #[test]
    fn short_secrets_are_refused_and_never_shown() {
        assert!(ClusterSecret::new("short".into()).is_err());
        let secret = ClusterSecret::new("0123456789abcdef".into()).unwrap();
        assert_eq!(format!("{secret:?}"), "ClusterSecret(***)");
    }
}
