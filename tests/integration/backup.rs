//! Backup, restore and layout upgrades, through the real binary: `roundtable backup` of a
//! server under write load restored into a new directory holds exactly the snapshot point;
//! restore refuses what it must; every layout fixture opens and is upgraded; a newer layout
//! is refused.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use serde_json::{json, Value};

use crate::harness::*;

/// The history text of a request the server stopped before it finished.
const STOPPED: &str = "The server stopped before this request finished; it did not complete.";

/// Runs `roundtable <args>` to completion.
fn roundtable(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("ROUNDTABLE_PORT")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run roundtable")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// `roundtable backup <file> --port <port>`, which must succeed.
pub(crate) fn backup(port: u16, file: &Path) {
    let out = roundtable(&[
        "backup",
        file.to_str().unwrap(),
        "--port",
        &port.to_string(),
    ]);
    assert!(out.status.success(), "backup failed: {}", stderr(&out));
}

/// `roundtable restore <file> --instance-dir <dir> [extra]`.
pub(crate) fn restore(file: &Path, dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "restore",
        file.to_str().unwrap(),
        "--instance-dir",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    roundtable(&args)
}

/// The archive's manifest (its first entry), plain or gzip.
fn manifest(file: &Path) -> Value {
    let mut bytes = fs::read(file).unwrap();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut plain)
            .unwrap();
        bytes = plain;
    }
    let mut archive = tar::Archive::new(&bytes[..]);
    let mut first = archive.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(&*first.path_bytes(), b"roundtable-backup.json");
    let mut text = String::new();
    first.read_to_string(&mut text).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn history(c: &mut Client, id: &str) -> Vec<Value> {
    c.join(id);
    c.invoke(&dispatcher(id), "getDisplayHistory", json!([]))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Every conversation as (id, name), in the server's order.
fn registry(c: &mut Client) -> Vec<(String, String)> {
    c.agent("listConversations", json!([null]))
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["conversationId"].as_str().unwrap().to_string(),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn request_of(entry: &Value) -> &Value {
    match entry.get("requestId") {
        Some(id) => &id["requestId"],
        None => &entry["message"]["requestId"]["requestId"],
    }
}

/// A turn some client saw complete, and when.
struct Done {
    conversation: String,
    request: String,
    at: Instant,
}

/// A client's report: which client (0..7) finished a turn or a create, and when.
type Progress = (usize, Instant);

/// Waits until each of `clients` reported `times` completions at or after `since`.
fn wait_for_each(
    progress: &mpsc::Receiver<Progress>,
    clients: usize,
    since: Instant,
    times: usize,
) {
    let mut seen = vec![0; clients];
    while seen.iter().any(|n| *n < times) {
        let (who, at) = progress
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("clients stalled: {seen:?} of {times} since the mark"));
        if at >= since {
            seen[who] += 1;
        }
    }
}

/// Runs turns in `id` until `stop`, reporting each completion.
fn turn_loop(
    url: String,
    id: String,
    who: usize,
    stop: Arc<AtomicBool>,
    progress: mpsc::Sender<Progress>,
) -> Vec<Done> {
    let mut c = Client::connect(&url);
    c.join(&id);
    let mut done = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let ack = c.submit(&id, &format!("what is {who} + {n}"));
        let request = Client::request_id(&ack);
        let calls = c.until_complete(&id, &request);
        assert_eq!(calls.last().unwrap().0, "notify", "{calls:?}");
        let at = Instant::now();
        done.push(Done {
            conversation: id.clone(),
            request,
            at,
        });
        let _ = progress.send((who, at));
        n += 1;
    }
    done
}

/// Creates `extra-0`, `extra-1`, … until `stop`; when each create was answered.
fn create_loop(
    url: String,
    who: usize,
    stop: Arc<AtomicBool>,
    progress: mpsc::Sender<Progress>,
) -> Vec<Instant> {
    let mut c = Client::connect(&url);
    let mut acked = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        c.create(&format!("extra-{}", acked.len()));
        let at = Instant::now();
        acked.push(at);
        let _ = progress.send((who, at));
    }
    acked
}

/// Six clients run turns in three conversations and a seventh creates conversations while
/// `roundtable backup` runs. Restored into a new directory and served, the backup holds
/// exactly its manifest's point: the registry is the original's at that point (a prefix of
/// the creates, holding every one answered before the backup started); each conversation's
/// history is the original's cut at the manifest's last seq, followed only by the failed
/// results of the requests the manifest lists as open; every turn completed before the
/// backup started is there.
#[test]
fn backup_under_load_restores_exactly_the_snapshot() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let ids: Vec<String> = (0..3).map(|i| c.create(&format!("busy {i}"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (progress_tx, progress) = mpsc::channel();
    let begun = Instant::now();
    let workers: Vec<_> = (0..6)
        .map(|who| {
            let (url, id, stop, progress) = (
                server.url(),
                ids[who % 3].clone(),
                stop.clone(),
                progress_tx.clone(),
            );
            std::thread::spawn(move || turn_loop(url, id, who, stop, progress))
        })
        .collect();
    let creator = {
        let (url, stop, progress) = (server.url(), stop.clone(), progress_tx.clone());
        std::thread::spawn(move || create_loop(url, 6, stop, progress))
    };
    drop(progress_tx);
    wait_for_each(&progress, 7, begun, 2);

    // A turn the snapshot catches running (it waits for an answer), and one queued behind it.
    let mut asked = server.connect();
    let held = asked.create("held");
    asked.join(&held);
    let running = Client::request_id(&asked.submit(&held, "ask me privately are you there?"));
    asked.expect_call(&clientio(&held), "requestChoice");
    let queued = Client::request_id(&asked.submit(&held, "what is 2 + 3"));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("under-load.tar");
    let started = Instant::now();
    backup(server.port, &file);
    // Every client goes on past the backup, so each conversation and the registry have
    // changes after the snapshot point that the restored copy must not have.
    wait_for_each(&progress, 7, Instant::now(), 1);
    stop.store(true, Ordering::Relaxed);
    let turns: Vec<Done> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let creates = creator.join().unwrap();

    let m = manifest(&file);
    assert_eq!(m["format"], 1);
    assert_eq!(m["layoutVersion"], 2);
    let open_at_cut: usize = m["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["openRequests"].as_array().unwrap().len())
        .sum();
    eprintln!(
        "backup: {} turns and {} creates in all, {open_at_cut} requests open at the snapshot; writers held {} µs",
        turns.len(),
        creates.len(),
        m["writersHeldMicros"]
    );
    let listed: Vec<(String, String)> = m["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["conversationId"].as_str().unwrap().to_string(),
                e["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The registry at the snapshot point: the original's first entries (no delete or rename
    // ran), with the creates a prefix holding every create answered before the backup.
    let original = registry(&mut c);
    assert!(listed.len() < original.len(), "creates after the backup");
    assert_eq!(listed[..], original[..listed.len()], "not a prefix");
    let extras = listed
        .iter()
        .filter(|(_, n)| n.starts_with("extra-"))
        .count();
    let before = creates.iter().filter(|at| **at < started).count();
    assert!(
        extras >= before,
        "{extras} creates in the backup, {before} answered before it"
    );

    let held_entry = m["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["conversationId"] == held.as_str())
        .unwrap();
    assert_eq!(held_entry["openRequests"], json!([running, queued]));
    let originals: HashMap<String, Vec<Value>> = ids
        .iter()
        .chain([&held])
        .map(|id| (id.clone(), history(&mut c, id)))
        .collect();

    let target = dir.path().join("restored");
    let out = restore(&file, &target, &[]);
    assert!(out.status.success(), "restore failed: {}", stderr(&out));
    let restored = Server::start_in(&target, &[]);
    let mut r = restored.connect();
    let mut restored_registry = registry(&mut r);
    let mut expected = listed.clone();
    restored_registry.sort();
    expected.sort();
    assert_eq!(restored_registry, expected);

    for entry in m["conversations"].as_array().unwrap() {
        let id = entry["conversationId"].as_str().unwrap();
        let Some(original) = originals.get(id) else {
            continue;
        };
        let last = entry["lastSeq"]
            .as_u64()
            .expect("busy conversations have entries");
        let open: HashSet<&str> = entry["openRequests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let got = history(&mut r, id);
        let cut = |h: &[Value]| -> Vec<Value> {
            h.iter()
                .filter(|e| e["seq"].as_u64().unwrap() <= last)
                .cloned()
                .collect()
        };
        if id != held {
            assert!(
                cut(original).len() < original.len(),
                "{id}: turns after the backup"
            );
        }
        assert_eq!(cut(&got), cut(original), "{id}: history up to seq {last}");
        assert_eq!(cut(&got).len() as u64, last + 1, "{id}: seqs 0..={last}");
        for e in got.iter().filter(|e| e["seq"].as_u64().unwrap() > last) {
            let request = request_of(e).as_str().unwrap_or("");
            assert!(open.contains(request), "{id}: {e} past the cut");
        }
        for request in &open {
            let failed = got.iter().any(|e| {
                e["type"] == "command-result" && request_of(e) == request && e["error"] == STOPPED
            });
            assert!(
                failed,
                "{id}: open request {request} was not closed as stopped"
            );
        }
        for turn in turns
            .iter()
            .filter(|t| t.conversation == id && t.at < started)
        {
            let kept = |kind: &str| {
                got.iter().any(|e| {
                    e["type"] == kind
                        && request_of(e) == turn.request.as_str()
                        && e["seq"].as_u64().unwrap() <= last
                        && e.get("error").is_none()
                })
            };
            assert!(
                kept("user-request") && kept("command-result"),
                "{id}: turn {} completed before the backup is missing",
                turn.request
            );
        }
    }
}

/// Writes a tar with the given entries (name bytes written as they are, so `..` and `/`
/// survive), each a small regular file.
fn raw_tar(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut builder = tar::Builder::new(&mut out);
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_size(data.len() as u64);
            header.set_mode(0o600);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.finish().unwrap();
    }
    out
}

/// A manifest with these versions and no files.
fn manifest_json(format: u32, layout: u32) -> Vec<u8> {
    json!({"format": format, "layoutVersion": layout, "roundtableVersion": "9.9.9",
           "snapshotAt": "2030-01-01T00:00:00.000Z", "snapshotMillis": 0,
           "writersHeldMicros": 0, "files": 0, "bytes": 0, "conversations": []})
    .to_string()
    .into_bytes()
}

/// Restore refuses a non-empty directory (untouched) unless `--force`, which replaces what
/// it holds; a directory a server is running on; bad, truncated, newer and hostile archives
/// (nothing written); a server refuses a directory whose restore did not finish. A `.tgz`
/// backup restores, and `GET /backup` needs the token when the server has one.
#[test]
fn restore_refuses_what_it_must() {
    let server = Server::start(&["--token", "s3cret"]);
    let mut c = Client::connect(&format!("{}?token=s3cret", server.url()));
    let id = c.create("keep me");
    c.join(&id);
    c.run_turn(&id, "what is 1 + 1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.tgz");
    let port = server.port.to_string();
    let out = roundtable(&["backup", file.to_str().unwrap(), "--port", &port]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("refused the backup (401 Unauthorized)"),
        "{}",
        stderr(&out)
    );
    assert!(!file.exists());
    let url = format!("{}?token=s3cret", server.url());
    let out = roundtable(&["backup", file.to_str().unwrap(), "--url", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(&fs::read(&file).unwrap()[..2], &[0x1f, 0x8b], "gzip");

    // Not empty: refused, untouched.
    let target = dir.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("mine.txt"), "precious").unwrap();
    let out = restore(&file, &target, &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "{} is not empty; restore only fills a new or empty directory (--force deletes what it holds first)",
            target.display()
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        fs::read_to_string(target.join("mine.txt")).unwrap(),
        "precious"
    );
    // --force replaces it.
    let out = restore(&file, &target, &["--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!target.join("mine.txt").exists());
    {
        let restored = Server::start_in(&target, &[]);
        let mut r = restored.connect();
        assert!(registry(&mut r).contains(&(id.clone(), "keep me".to_string())));
        // A directory served by a running server is refused even with --force.
        let out = restore(&file, &target, &["--force"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("is in use by another roundtable server"),
            "{}",
            stderr(&out)
        );
    }

    let refused = |archive: &[u8], expect: &str| {
        let bad = dir.path().join("bad.tar");
        fs::write(&bad, archive).unwrap();
        let fresh = dir.path().join("fresh");
        let out = restore(&bad, &fresh, &[]);
        assert!(!out.status.success(), "{expect}: restored");
        let err = stderr(&out);
        assert!(err.contains(&format!("{}: ", bad.display())), "{err}");
        assert!(err.contains(expect), "expected {expect:?} in {err}");
        assert!(!fresh.exists(), "{expect}: the directory was created");
    };
    refused(
        b"this is not a tar archive at all, just some text",
        "not a Roundtable backup",
    );
    let good = {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(&fs::read(&file).unwrap()[..])
            .read_to_end(&mut plain)
            .unwrap();
        plain
    };
    refused(&good[..good.len() / 2], "incomplete");
    refused(
        &raw_tar(&[("instance/FORMAT", b"2\n")]),
        "its first entry is \"instance/FORMAT\", not roundtable-backup.json",
    );
    let manifest = manifest_json(1, 2);
    refused(
        &raw_tar(&[
            ("roundtable-backup.json", &manifest),
            ("instance/../escaped", b"x"),
        ]),
        "refusing entry \"instance/../escaped\": a path that leaves the instance directory (..)",
    );
    assert!(!dir.path().join("escaped").exists());
    refused(
        &raw_tar(&[("roundtable-backup.json", &manifest), ("/tmp/abs", b"x")]),
        "refusing entry \"/tmp/abs\": an absolute path",
    );
    refused(
        &raw_tar(&[("roundtable-backup.json", &manifest)]),
        "the archive is incomplete (it ends before its end record)",
    );
    refused(
        &raw_tar(&[("roundtable-backup.json", &manifest_json(2, 2))]),
        "written by a newer Roundtable (backup format 2, layout version 2); this Roundtable (0.1.0) reads backup format 1 and layout versions up to 2",
    );
    refused(
        &raw_tar(&[("roundtable-backup.json", &manifest_json(1, 3))]),
        "written by a newer Roundtable (backup format 1, layout version 3)",
    );

    // An interrupted restore leaves its marker; a server refuses the directory.
    fs::write(target.join(".restore-incomplete"), "").unwrap();
    let err = Server::try_start_in(&target, &[])
        .err()
        .expect("an unfinished restore is refused");
    assert!(err.contains("holds an unfinished restore"), "{err}");
}

/// Copies a committed layout fixture into a fresh directory.
fn fixture(name: &str) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(&fixtures().join(name), dir.path());
    dir
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layouts")
}

/// Every layout this project has read or written opens, keeps its conversations and
/// histories, and is upgraded to version 2 (`FORMAT`), once: TypeAgent's (its registry files
/// kept in `.upgrade-backup-v0/`), Roundtable's before `FORMAT` (1) and the current one (2).
#[test]
fn every_layout_fixture_opens_and_is_upgraded() {
    /// A fixture and what it must show: every name in order, and one conversation's
    /// history (its first command and entry count).
    struct Case {
        fixture: &'static str,
        names: &'static [&'static str],
        busy: &'static str,
        command: &'static str,
        entries: usize,
    }
    let cases = [
        Case {
            fixture: "typeagent",
            names: &["Old chat", "Never used"],
            busy: "Old chat",
            command: "hello world",
            entries: 4,
        },
        Case {
            fixture: "v1",
            names: &[
                "default",
                "Trip planning",
                "Groceries (weekly)",
                "Late idea",
            ],
            busy: "Trip planning",
            command: "what is 2 + 3",
            entries: 10,
        },
        Case {
            fixture: "v2",
            names: &["default", "Book club", "Scratch", "Afterthought"],
            busy: "Book club",
            command: "what is 6 * 7",
            entries: 10,
        },
    ];
    for case in cases {
        let name = case.fixture;
        let dir = fixture(name);
        for start in 0..2 {
            let server = Server::start_in(dir.path(), &[]);
            let upgraded = server.log().contains("from layout version");
            assert_eq!(
                upgraded,
                start == 0 && name != "v2",
                "{name}, start {start}"
            );
            let mut c = server.connect();
            let listed = registry(&mut c);
            let got: Vec<&str> = listed.iter().map(|(_, n)| n.as_str()).collect();
            assert_eq!(got, case.names, "{name}");
            let (id, _) = listed.iter().find(|(_, n)| n == case.busy).unwrap();
            let h = history(&mut c, id);
            assert_eq!(h.len(), case.entries, "{name}: {h:?}");
            assert_eq!(h[0]["type"], "user-request");
            assert_eq!(h[0]["command"], case.command);
            assert!(server.shutdown().success());
            assert_eq!(
                fs::read_to_string(dir.path().join("FORMAT")).unwrap(),
                "2\n",
                "{name}"
            );
        }
    }
    // TypeAgent's registry as it was, kept by the upgrade.
    let dir = fixture("typeagent");
    drop(Server::start_in(dir.path(), &[]));
    assert_eq!(
        fs::read(
            dir.path()
                .join(".upgrade-backup-v0/server-sessions/sessions.json")
        )
        .unwrap(),
        fs::read(fixtures().join("typeagent/server-sessions/sessions.json")).unwrap()
    );
}

/// A layout newer than this Roundtable reads is refused with both versions named, and left
/// as it was.
#[test]
fn a_newer_layout_is_refused_untouched() {
    let dir = fixture("v2");
    fs::write(dir.path().join("FORMAT"), "3\n").unwrap();
    let err = Server::try_start_in(dir.path(), &[])
        .err()
        .expect("a newer layout is refused");
    assert!(
        err.contains(&format!(
            "instance directory {} has layout version 3, written by a newer Roundtable; this Roundtable (0.1.0) reads layout versions up to 2",
            dir.path().display()
        )),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("FORMAT")).unwrap(),
        "3\n"
    );
    assert!(dir
        .path()
        .join("conversations/conversations.journal")
        .exists());
}
