//! Taking a conversation over (docs/cluster.md "Durability" and "Claims"): once this node
//! holds a conversation's lease, its files must hold every acknowledged write before the
//! conversation actor opens them, and the subject `rt.log.<id>` must be claimed so that no
//! earlier owner writes after them. `RegistryBackend::bring_files_current` does both.
//!
//! Where the files come from. Usually the log stream is ahead of this node's copy (another
//! node wrote since, or this node never held the conversation) and the directory is rebuilt
//! from the stream's records ([`Cluster::read_log`]). But JetStream may have lost writes it
//! acknowledged: NATS 2.9 syncs its file store only about every two minutes (`sync_interval`
//! exists from 2.10 on), so a power cut that takes NATS loses the tail of the stream, while
//! this node's files were fsynced before every acknowledgement. So the node never replaces
//! files that are ahead of the stream. It compares its copy with the stream's, file by file
//! (`plan`):
//! - when another node claimed the subject last and this copy holds nothing the stream lacked
//!   at that claim (what that node took over), the copy is only behind: the files that differ
//!   are taken from the stream, whatever that node rewrote since (a journal compaction);
//! - otherwise a file whose local content extends the stream's (the stream's bytes are a
//!   prefix of the node's) is *republished*: a `replace` record with the node's content,
//!   fenced on the subject's last record, logged at WARN with what was republished; a file
//!   the stream holds more of is taken from the stream;
//! - a file that differs both ways (a whole-file replace: the request journal's compaction,
//!   the chat history, the context meter) is the node's when the subject's last claim is this
//!   node's (every record after that claim is this node's own, so its copy is the newer one),
//!   or when nothing was ever written to the subject;
//! - when another node claimed the subject, this copy holds writes the stream lacked then,
//!   and the copies differ both ways (that node wrote on top), the histories have diverged:
//!   nothing is deleted. The node's directory is moved to
//!   `<instance>/set-aside/<id>-<unix seconds>/`, logged at ERROR with what to do, and the
//!   stream's version is served. (The writes may also be ones the fence refused because this
//!   node had been deposed, never acknowledged: the copy is kept all the same.)
//!
//! Who talks to it: [`RegistryBackend`]'s `acquire` (the registry taking a lease) and
//! `restore` (a backup rebuilding a conversation it does not own).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use async_nats::jetstream;
use async_nats::HeaderMap;
use bytes::Bytes;

use super::log_stream::{publish_record, record_piece, RecordError};
use super::{Cluster, ClusterError, RegistryBackend};
use crate::ids::ConversationId;
use crate::storage::replication::FileOp;

/// How many times a taking-over node reads a conversation's files again when an earlier
/// owner keeps writing after them; past it the lease is given back and the join fails.
const CLAIM_ATTEMPTS: usize = 5;

/// Where a node moves a conversation directory whose history diverged from the stream's,
/// inside its instance directory (beside `conversations/`, so nothing reads it as a
/// conversation).
pub const SET_ASIDE_DIR: &str = "set-aside";

/// A conversation's files as its records in the log stream build them.
#[derive(Debug, Default)]
pub struct StreamCopy {
    /// Each file (path inside the conversation's directory) with its content.
    pub files: HashMap<String, Vec<u8>>,
    /// Messages read that carry a file's bytes.
    pub records: u64,
    /// The stream sequence of the subject's last message (0: none).
    pub last_sequence: u64,
    /// The node of the subject's last claim (`Rt-Owner`), if it has one.
    pub last_claim: Option<String>,
    /// The files as the stream had them when that claim was made: what the claiming node
    /// took over.
    pub at_last_claim: Option<HashMap<String, Vec<u8>>>,
}

impl Cluster {
    /// Reads `id`'s records in the stream, all of them up to the subject's last message now
    /// (a read that stops short fails: the nemesis found a takeover restoring a prefix and
    /// writing on from there), into the files they build.
    pub async fn read_log(&self, id: ConversationId) -> Result<StreamCopy, ClusterError> {
        let context = format!("restoring {id} from the log stream");
        let mut copy = StreamCopy::default();
        let until = self.last_log_sequence(id).await?;
        self.replay(
            self.log_stream(),
            self.names().log_subject(id),
            jetstream::consumer::DeliverPolicy::All,
            (until > 0).then_some(until),
            &context,
            |message| {
                if let Ok(info) = message.info() {
                    copy.last_sequence = info.stream_sequence;
                }
                let headers = message.headers.as_ref();
                let header = |name: &str| {
                    headers
                        .and_then(|h| h.get(name))
                        .map(|v| v.as_str().to_string())
                };
                if let Some(owner) = header("Rt-Owner") {
                    copy.last_claim = Some(owner);
                    copy.at_last_claim = Some(copy.files.clone());
                }
                let (Some(file), Some(op)) = (header("Rt-File"), header("Rt-Op")) else {
                    return;
                };
                if !inside(&file) {
                    log::warn!(
                        "conversation {id}: log record for a path outside it ignored: {file:?}"
                    );
                    return;
                }
                let content = copy.files.entry(file).or_default();
                // A multi-part record starts over its file with its first part when it
                // replaces.
                let first_part = header("Rt-Part").is_none_or(|p| p.starts_with("1/"));
                if op == "replace" && first_part {
                    content.clear();
                }
                content.extend_from_slice(&message.payload);
                copy.records += 1;
            },
        )
        .await?;
        Ok(copy)
    }

    /// Rebuilds `dir` (a conversation's directory) from its records in the stream: the files
    /// exactly as the last owner wrote them, and nothing else. Answers the number of messages
    /// read and the stream sequence of the last one (0: none). For a directory nothing else
    /// holds (a backup's); a takeover goes through `RegistryBackend::bring_files_current`.
    pub async fn restore_conversation(
        &self,
        id: ConversationId,
        dir: &Path,
    ) -> Result<(u64, u64), ClusterError> {
        let copy = self.read_log(id).await?;
        let context = format!("restoring {id} from the log stream");
        let dir = dir.to_path_buf();
        let files = copy.files;
        blocking(&context, move || {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            write_files(&dir, files.iter())
        })
        .await?;
        Ok((copy.records, copy.last_sequence))
    }

    /// Claims `id`'s subject for this node, which has just taken the lease and holds the
    /// files as the stream has them through sequence `last`: publishes a claim (a message with
    /// `Rt-Owner` and no `Rt-File`, which restores skip) fenced on `last`. Stored, no earlier
    /// owner can write after it (its next record, fenced on its own last one, is refused), and
    /// its sequence is the fence of this node's first write: `Some(sequence)`. `None` when
    /// the subject moved past `last` (an owner whose lease lapsed wrote after the files were
    /// read): the files must be read again.
    ///
    /// Without the claim, a deposed owner that had not noticed yet could write, and have its
    /// write acknowledged, between this node's restore and its first write, which would then
    /// be refused only if it came at all: meanwhile this node served a history without an
    /// acknowledged turn (the nemesis found one: an owner resumed from `SIGSTOP` ran two turns
    /// after the new owner's restore, and nothing was written there afterwards).
    pub async fn claim_log(
        &self,
        id: ConversationId,
        last: u64,
    ) -> Result<Option<u64>, ClusterError> {
        let mut headers = HeaderMap::new();
        headers.insert("Rt-Owner", self.node());
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            last.to_string().as_str(),
        );
        let context = format!("claiming {id} in the log stream");
        let ack = self
            .jetstream()
            .publish_with_headers(self.names().log_subject(id), headers, Bytes::new())
            .await
            .map_err(|e| ClusterError::new(&context, e))?
            .await;
        match ack {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if e.kind() == jetstream::context::PublishErrorKind::WrongLastSequence => {
                Ok(None)
            }
            Err(e) => Err(ClusterError::new(&context, e)),
        }
    }

    /// Publishes `content` as a `replace` record of `file` of `id`, fenced on `fence` (the
    /// subject's last sequence): the stream's copy of the file becomes `content`. The new
    /// last sequence, or `None` when another record reached the subject first.
    async fn republish(
        &self,
        id: ConversationId,
        file: &str,
        content: &[u8],
        fence: u64,
    ) -> Result<Option<u64>, ClusterError> {
        let subject = self.names().log_subject(id);
        let bytes = Bytes::copy_from_slice(content);
        let max = record_piece(self);
        match publish_record(
            self.jetstream(),
            &subject,
            max,
            file,
            FileOp::Replace,
            bytes,
            Some(fence),
        )
        .await
        {
            Ok(last) => Ok(Some(last.unwrap_or(fence))),
            Err(RecordError::WrongLastSequence(_)) => Ok(None),
            Err(RecordError::Other(why)) => Err(ClusterError(format!(
                "republishing {file} of {id} to the log stream: {why}"
            ))),
        }
    }
}

/// Whether `file` (a record's `Rt-File`) names a path inside the conversation's directory.
fn inside(file: &str) -> bool {
    !file.split('/').any(|part| part == ".." || part.is_empty())
}

/// Runs `work` (file system work) on the blocking pool; its error is said with `context`.
async fn blocking<T: Send + 'static>(
    context: &str,
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ClusterError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ClusterError::new(context, e))?
        .map_err(|e| ClusterError::new(context, e))
}

/// Writes each of `files` into `dir` durably (made if missing), replacing what is there.
fn write_files<'a>(
    dir: &Path,
    files: impl Iterator<Item = (&'a String, &'a Vec<u8>)>,
) -> std::io::Result<()> {
    crate::storage::durable::create_dir_durable(dir).map_err(std::io::Error::other)?;
    for (file, content) in files {
        let path = dir.join(file);
        crate::storage::durable::create_dir_durable(path.parent().expect("inside dir"))
            .map_err(std::io::Error::other)?;
        crate::storage::durable::write_atomic(&path, content).map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// The files under `dir` (paths relative to it, `/`-separated) with their content, each
/// fsynced: the node's own copy of a conversation, read after the log writer forgot it (its
/// node-log records no longer replay, so what is kept must be on disk by itself). Hidden
/// files (a temporary file a crash left) are not the conversation's. Empty when `dir` does
/// not exist.
fn read_local(dir: &Path) -> std::io::Result<HashMap<String, Vec<u8>>> {
    let mut files = HashMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let entries = match std::fs::read_dir(dir.join(&relative)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            let path = relative.join(name);
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                let file = std::fs::File::open(entry.path())?;
                file.sync_all()?;
                let content = std::fs::read(entry.path())?;
                let key = path
                    .iter()
                    .map(|part| part.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                files.insert(key, content);
            }
        }
    }
    Ok(files)
}

/// How one file of the node's copy compares with the stream's (a missing file reads as
/// empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compared {
    /// The same bytes.
    Same,
    /// The node's copy extends the stream's.
    LocalAhead,
    /// The stream's copy extends the node's.
    StreamAhead,
    /// They differ both ways (a whole-file replace on one side).
    Different,
}

fn compare(local: &[u8], stream: &[u8]) -> Compared {
    if local == stream {
        Compared::Same
    } else if local.starts_with(stream) {
        Compared::LocalAhead
    } else if stream.starts_with(local) {
        Compared::StreamAhead
    } else {
        Compared::Different
    }
}

/// What a takeover does with the node's copy and the stream's.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Files whose local content goes to the stream (a `replace` record each).
    republish: Vec<String>,
    /// Files taken from the stream into the directory.
    rewrite: Vec<String>,
    /// The copies diverged: the node's directory is set aside and the stream's served.
    diverged: bool,
}

/// Whether the node's copy holds anything `base` (the stream's files at some point) lacks.
fn holds_more(local: &HashMap<String, Vec<u8>>, base: &HashMap<String, Vec<u8>>) -> bool {
    local.iter().any(|(name, l)| {
        let b = base.get(name).map_or(&[][..], Vec::as_slice);
        matches!(compare(l, b), Compared::LocalAhead | Compared::Different)
    })
}

/// Decides, file by file, which copy of a conversation is kept (see the module docs).
/// `mine`: the subject's last claim is this node's, or nothing was ever written to it. Else
/// `at_claim`: the stream's files when its last claim (another node's) was made, `None` when
/// the subject has no claim at all.
fn plan(
    local: &HashMap<String, Vec<u8>>,
    stream: &HashMap<String, Vec<u8>>,
    at_claim: Option<&HashMap<String, Vec<u8>>>,
    mine: bool,
) -> Plan {
    // Another node took it over, and this copy holds nothing the stream lacked then: it is
    // only behind (whatever that node rewrote since, a compaction included).
    if !mine && at_claim.is_some_and(|base| !holds_more(local, base)) {
        let names: BTreeSet<&String> = local.keys().chain(stream.keys()).collect();
        let rewrite = names
            .into_iter()
            .filter(|name| {
                let l = local.get(*name).map_or(&[][..], Vec::as_slice);
                let s = stream.get(*name).map_or(&[][..], Vec::as_slice);
                l != s
            })
            .cloned()
            .collect();
        return Plan {
            rewrite,
            ..Plan::default()
        };
    }
    let names: BTreeSet<&String> = local.keys().chain(stream.keys()).collect();
    let mut plan = Plan::default();
    let mut different = Vec::new();
    for name in names {
        let l = local.get(name).map_or(&[][..], Vec::as_slice);
        let s = stream.get(name).map_or(&[][..], Vec::as_slice);
        match compare(l, s) {
            Compared::Same => {}
            Compared::LocalAhead => plan.republish.push(name.clone()),
            Compared::StreamAhead => plan.rewrite.push(name.clone()),
            Compared::Different => different.push(name.clone()),
        }
    }
    if mine {
        plan.republish.extend(different);
        plan.republish.sort();
    } else if !different.is_empty() || (!plan.republish.is_empty() && !plan.rewrite.is_empty()) {
        // This copy holds writes the stream lacks, and the stream holds writes this copy
        // lacks (another node wrote on top): the histories diverged. (Ahead only: the
        // extensions are republished; behind only: the stream's files are taken.)
        return Plan {
            republish: Vec::new(),
            rewrite: stream.keys().cloned().collect(),
            diverged: true,
        };
    }
    plan
}

/// `<instance>/set-aside/<id>-<unix seconds>` for the conversation directory `dir`
/// (`<instance>/conversations/<id>`).
fn set_aside_path(dir: &Path, id: ConversationId) -> PathBuf {
    let instance = dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| Path::new("."));
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    instance.join(SET_ASIDE_DIR).join(format!("{id}-{seconds}"))
}

impl RegistryBackend {
    /// Makes `dir` hold `id`'s files, every acknowledged write included, once this node has
    /// taken its lease, and claims the subject ([`Cluster::claim_log`]) so that no earlier
    /// owner writes after what the files hold. The files are kept as they are when this
    /// process wrote them last and nobody wrote after it (an eviction and a reload here need
    /// no read), else compared with the stream's (module docs); a claim or republish refused
    /// because an earlier owner wrote in between reads them again. Answers the stream
    /// sequence the conversation's next write is fenced on (the claim's).
    pub(super) async fn bring_files_current(
        &self,
        id: ConversationId,
        dir: &Path,
    ) -> Result<u64, ClusterError> {
        for _ in 0..CLAIM_ATTEMPTS {
            if let Some(last) = self.files_current(id, dir).await? {
                if let Some(fence) = self.cluster.claim_log(id, last).await? {
                    return Ok(fence);
                }
            }
            log::warn!(
                "conversation {id}: a record reached the log stream after the last one this \
                 node's files hold (an earlier owner still writing); reading it again"
            );
        }
        Err(ClusterError(format!(
            "conversation {id}: still written by another node after {CLAIM_ATTEMPTS} restores"
        )))
    }

    /// Makes `dir` hold `id`'s files through the subject's last record, and the subject hold
    /// everything the files hold: that record's sequence. `None` when another record reached
    /// the subject while this node republished (read again).
    async fn files_current(
        &self,
        id: ConversationId,
        dir: &Path,
    ) -> Result<Option<u64>, ClusterError> {
        let current = self.replicator.current_through(id);
        if current.is_some() && dir.is_dir() {
            let last = self.cluster.last_log_sequence(id).await?;
            if Some(last) == current {
                log::info!(
                    "conversation {id}: owned by this node; its files are current (stream \
                     sequence {last})"
                );
                return Ok(Some(last));
            }
        }
        // The files are compared and maybe replaced from outside the writer: a replay after a
        // crash must not write this node's older records of them into the result.
        self.log_writer
            .forget(dir.to_path_buf())
            .await
            .map_err(|_| {
                ClusterError::new("forget the node log's records", "log writer stopped")
            })?;
        let stream = self.cluster.read_log(id).await?;
        let context = format!("reading this node's copy of {id}");
        let local = {
            let dir = dir.to_path_buf();
            blocking(&context, move || read_local(&dir)).await?
        };
        let me = self.cluster.node();
        let mine = stream.last_claim.as_deref() == Some(me)
            || (stream.last_claim.is_none() && stream.records == 0);
        let plan = plan(&local, &stream.files, stream.at_last_claim.as_ref(), mine);
        let mut last = stream.last_sequence;
        if plan.diverged {
            let aside = set_aside_path(dir, id);
            let (from, to, files) = (dir.to_path_buf(), aside.clone(), stream.files.clone());
            blocking(&context, move || {
                crate::storage::durable::create_dir_durable(to.parent().expect("in set-aside"))
                    .map_err(std::io::Error::other)?;
                std::fs::rename(&from, &to)?;
                crate::storage::durable::fsync_dir(from.parent().expect("in conversations"))
                    .map_err(std::io::Error::other)?;
                write_files(&from, files.iter())
            })
            .await?;
            log::error!(
                "conversation {id}: this node's copy and the log stream differ both ways: it \
                 holds writes the stream lacked when node {} took the conversation over, and \
                 that node wrote on top (JetStream lost writes it had acknowledged, or this \
                 node's last writes were refused because it had been deposed and were never \
                 acknowledged). Nothing was deleted: this node's copy was moved to {}, and the \
                 stream's version ({} records, through stream sequence {last}) is served. \
                 Compare the two display logs (displayLog.jsonl) and enter again what only the \
                 set-aside copy holds.",
                stream.last_claim.as_deref().unwrap_or("(unknown)"),
                aside.display(),
                stream.records,
            );
            return Ok(Some(last));
        }
        for file in &plan.republish {
            let content = &local[file];
            match self.cluster.republish(id, file, content, last).await? {
                Some(sequence) => last = sequence,
                None => return Ok(None),
            }
        }
        if !plan.rewrite.is_empty() {
            let files: HashMap<String, Vec<u8>> = plan
                .rewrite
                .iter()
                .map(|f| (f.clone(), stream.files[f].clone()))
                .collect();
            let dir = dir.to_path_buf();
            blocking(&context, move || write_files(&dir, files.iter())).await?;
        }
        if plan.republish.is_empty() {
            log::info!(
                "conversation {id}: owned by this node; {} log records restored (through \
                 stream sequence {last}, {} of its files rewritten)",
                stream.records,
                plan.rewrite.len()
            );
        } else {
            let bytes: usize = plan.republish.iter().map(|f| local[f].len()).sum();
            log::warn!(
                "conversation {id}: this node's files hold writes the log stream lacks (its \
                 last record was stream sequence {}, last claimed by {}): republished {} \
                 ({bytes} bytes) from this node's copy, now through stream sequence {last}. \
                 JetStream lost writes it had acknowledged: a NATS server before 2.10 syncs \
                 its store about every two minutes (docs/cluster.md, \"What an \
                 acknowledgement means\")",
                stream.last_sequence,
                stream.last_claim.as_deref().unwrap_or("no node"),
                plan.republish.join(", "),
            );
        }
        Ok(Some(last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> HashMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(name, content)| (name.to_string(), content.as_bytes().to_vec()))
            .collect()
    }

    /// A node whose files extend the stream's republishes them, whoever claimed last; a
    /// stream ahead is taken; the same copies change nothing.
    #[test]
    fn the_longer_copy_of_each_file_wins() {
        let stream = files(&[("displayLog.jsonl", "a\n"), ("requests.jsonl", "r1\n")]);
        let local = files(&[("displayLog.jsonl", "a\nb\n"), ("requests.jsonl", "r1\n")]);
        for mine in [true, false] {
            let at_claim = (!mine).then_some(&stream);
            let plan = |local, stream| plan(local, stream, at_claim, mine);
            assert_eq!(
                plan(&local, &stream),
                Plan {
                    republish: vec!["displayLog.jsonl".into()],
                    ..Plan::default()
                }
            );
            assert_eq!(
                plan(&stream, &local),
                Plan {
                    rewrite: vec!["displayLog.jsonl".into()],
                    ..Plan::default()
                }
            );
            assert_eq!(plan(&local, &local), Plan::default());
        }
        // A conversation the stream has nothing of (its create and first turn lost).
        assert_eq!(
            plan(&local, &HashMap::new(), None, true).republish,
            ["displayLog.jsonl", "requests.jsonl"]
        );
        // An empty file the node prepared is no difference.
        assert_eq!(
            plan(
                &files(&[("history.jsonl", "")]),
                &HashMap::new(),
                None,
                false
            ),
            Plan::default()
        );
    }

    /// A file replaced whole here (a compaction) is this node's when it claimed last; when
    /// another node claimed since, copies that differ both ways have diverged.
    #[test]
    fn copies_that_differ_both_ways_are_mine_only_after_my_claim() {
        let stream = files(&[("displayLog.jsonl", "a\n"), ("requests.jsonl", "r1\nr2\n")]);
        let local = files(&[("displayLog.jsonl", "a\nb\n"), ("requests.jsonl", "c\n")]);
        assert_eq!(
            plan(&local, &stream, None, true),
            Plan {
                republish: vec!["displayLog.jsonl".into(), "requests.jsonl".into()],
                ..Plan::default()
            }
        );
        assert!(plan(&local, &stream, Some(&stream), false).diverged);
        // Ahead in one file and behind in another, after another node's claim: diverged too.
        let behind = files(&[("displayLog.jsonl", "a\nb\n"), ("requests.jsonl", "r1\n")]);
        let at_claim = files(&[("displayLog.jsonl", "a\n"), ("requests.jsonl", "r1\n")]);
        assert!(plan(&behind, &stream, Some(&at_claim), false).diverged);
        assert!(!plan(&behind, &stream, None, true).diverged);
    }

    /// A copy that holds nothing beyond what the stream had when another node took over is
    /// only behind, whatever that node rewrote since (its compaction of the journal).
    #[test]
    fn a_copy_behind_another_nodes_takeover_is_replaced_even_after_a_compaction() {
        let local = files(&[("displayLog.jsonl", "a\n"), ("requests.jsonl", "r1\nr2\n")]);
        let at_claim = local.clone();
        let stream = files(&[("displayLog.jsonl", "a\nb\n"), ("requests.jsonl", "c\n")]);
        assert_eq!(
            plan(&local, &stream, Some(&at_claim), false),
            Plan {
                rewrite: vec!["displayLog.jsonl".into(), "requests.jsonl".into()],
                ..Plan::default()
            }
        );
        // Holding a write the stream lacked at the takeover makes it a divergence instead.
        let more = files(&[
            ("displayLog.jsonl", "a\nx\n"),
            ("requests.jsonl", "r1\nr2\n"),
        ]);
        assert!(plan(&more, &stream, Some(&at_claim), false).diverged);
        // The other node wrote nothing since its claim: the extension is republished.
        assert_eq!(
            plan(&more, &at_claim, Some(&at_claim), false).republish,
            ["displayLog.jsonl"]
        );
    }

    #[test]
    fn paths_outside_the_directory_are_refused() {
        assert!(inside("displayLog.jsonl"));
        assert!(inside("attachments/a.png"));
        assert!(!inside("../conversations.json"));
        assert!(!inside("a//b"));
        assert!(!inside("/etc/passwd"));
    }
}
