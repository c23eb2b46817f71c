use super::*;
use serde_json::json;

fn entry(kind: &str) -> Map<String, Value> {
    json!({"type": kind, "requestId": {"requestId": "r"}})
        .as_object()
        .unwrap()
        .clone()
}

#[test]
fn appends_recovers_and_reads_tails() {
    let dir = tempfile::tempdir().unwrap();
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
    for i in 0..5000 {
        log.append(entry(if i % 10 == 0 {
            "user-request"
        } else {
            "append-display"
        }));
    }
    futures_block(writer.sync(vec![log.path().clone()]));
    let tail = match log.read_after(Some(4990)) {
        HistoryRead::Ready(v) => v,
        HistoryRead::Disk { .. } => panic!("tail must come from memory"),
    };
    assert_eq!(tail.len(), 9);
    match log.read_after(Some(9)) {
        HistoryRead::Disk {
            path,
            from,
            below,
            from_memory,
        } => {
            let disk = read_range(&path, from, below).unwrap();
            assert_eq!(disk.len() + from_memory.len(), 4990);
            let first: Value = serde_json::from_str(&disk[0]).unwrap();
            assert_eq!(first["seq"], 10);
            assert_eq!(first["type"], "user-request");
        }
        HistoryRead::Ready(_) => panic!("old entries are on disk"),
    }
    // Torn tail: reopen continues the seq and the count.
    let path = dir.path().join(FILE_NAME);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"s\":5000,\"u\":5").unwrap();
    drop(f);
    let log = DisplayLog::open(dir.path(), writer).unwrap();
    assert_eq!(log.next_seq(), 5000);
    assert_eq!(log.message_count(), 500);
    assert!(fs::read(&path).unwrap().ends_with(b"}\n"));
}

/// Past [`RECENT_BYTES`] the oldest entries leave memory whatever their count; an entry
/// larger than the bound alone is never held; a read returns every entry all the same.
#[test]
fn memory_holds_a_bounded_number_of_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
    let text = |seq: usize, len: usize| format!("{seq:04}{}", "t".repeat(len));
    let sizes: Vec<usize> = (0..40)
        .map(|i| if i == 30 { RECENT_BYTES + 1 } else { 300 << 10 })
        .collect();
    for (i, len) in sizes.iter().enumerate() {
        let mut e = entry("append-display");
        e.insert("text".into(), text(i, *len).into());
        log.append(e);
        assert!(log.recent_bytes <= RECENT_BYTES, "after entry {i}");
        let held: usize = log.recent.iter().map(|(_, e)| e.len()).sum();
        assert_eq!(held, log.recent_bytes);
    }
    // 300 KiB entries: 13 fit in 4 MiB; the big one (seq 30) went at once.
    assert_eq!(log.recent.len(), 9);
    assert_eq!(log.recent.front().unwrap().0, 31);
    futures_block(writer.sync(vec![log.path().clone()]));
    for after in [None, Some(0), Some(29), Some(30), Some(35)] {
        let all = match log.read_after(after) {
            HistoryRead::Ready(v) => v.iter().map(|e| e.to_string()).collect(),
            HistoryRead::Disk {
                path,
                from,
                below,
                from_memory,
            } => {
                let mut v = read_range(&path, from, below).unwrap();
                v.extend(from_memory.iter().map(|e| e.to_string()));
                v
            }
        };
        let first = after.map_or(0, |a| a as usize + 1);
        assert_eq!(all.len(), 40 - first, "after {after:?}");
        for (k, e) in all.iter().enumerate() {
            let e: Value = serde_json::from_str(e).unwrap();
            assert_eq!(e["seq"], first + k);
            assert_eq!(e["text"], text(first + k, sizes[first + k]));
        }
    }
}

/// The seqs of a history read, from memory or (after the writer has written) from disk.
fn seqs_of(read: HistoryRead) -> Vec<u64> {
    let entries: Vec<String> = match read {
        HistoryRead::Ready(v) => v.iter().map(|e| e.to_string()).collect(),
        HistoryRead::Disk {
            path,
            from,
            below,
            from_memory,
        } => {
            let mut v = read_range(&path, from, below).unwrap();
            v.extend(from_memory.iter().map(|e| e.to_string()));
            v
        }
    };
    entries
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// A page is the newest `limit` entries of `after < seq < before`, in order, whether it
/// lies in memory, on disk, or across both.
#[test]
fn pages_read_the_newest_entries_of_a_range() {
    let dir = tempfile::tempdir().unwrap();
    let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
    let mut log = DisplayLog::open(dir.path(), writer.clone()).unwrap();
    for _ in 0..5000 {
        log.append(entry("append-display"));
    }
    futures_block(writer.sync(vec![log.path().clone()]));
    let first_recent = (5000 - RECENT_ENTRIES) as u64;
    let range = |a: u64, b: u64| (a..b).collect::<Vec<u64>>();
    // (afterSeq, beforeSeq, limit, seqs).
    type Case = (Option<i64>, Option<i64>, u64, Vec<u64>);
    let cases: [Case; 10] = [
        (None, None, 40, range(4960, 5000)),
        (None, Some(4960), 40, range(4920, 4960)),
        (
            None,
            Some(first_recent as i64 + 5),
            10,
            range(first_recent - 5, first_recent + 5),
        ),
        (None, Some(1000), 1000, range(0, 1000)),
        (None, Some(30), 1000, range(0, 30)),
        (None, Some(0), 10, vec![]),
        (None, Some(-4), 10, vec![]),
        (Some(4990), None, 1000, range(4991, 5000)),
        (Some(100), Some(120), 1000, range(101, 120)),
        (Some(-1), Some(9999), 3, range(4997, 5000)),
    ];
    for (after, before, limit, want) in cases {
        let got = seqs_of(log.read_page(after, before, limit));
        assert_eq!(got, want, "after {after:?} before {before:?} limit {limit}");
    }
    assert!(matches!(
        log.read_page(None, None, 40),
        HistoryRead::Ready(_)
    ));
}

/// The search finds any range of a log of 200,000 lines (some of them 100 KiB, one of them
/// garbage, the last one torn), at its start, middle and end, and over a backup's cut.
#[test]
fn ranges_are_found_by_bisection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let mut out = Vec::new();
    let mut cut = 0;
    for s in 0..200_000u64 {
        if s == 150_000 {
            out.extend_from_slice(b"{\"s\":oops\n");
        }
        if s == 190_000 {
            cut = out.len() as u64;
        }
        let text = if s % 10_000 == 7 {
            "b".repeat(100 << 10)
        } else {
            format!("t{s}")
        };
        let e = json!({"seq": s, "text": text});
        out.extend_from_slice(format!("{{\"s\":{s},\"u\":0,\"e\":{e}}}\n").as_bytes());
    }
    // A torn last line, still being written.
    out.extend_from_slice(b"{\"s\":200000,\"u\":0,\"e\":{\"seq\":20");
    fs::write(&path, &out).unwrap();
    let seqs = |v: Vec<String>| -> Vec<u64> {
        v.iter()
            .map(|e| {
                serde_json::from_str::<Value>(e).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    for (from, below) in [
        (0, 5),
        (0, 1),
        (9_990, 10_010),
        (100_000, 101_000),
        (149_999, 150_002),
        (199_990, 200_000),
        (199_999, u64::MAX),
        (200_000, 200_010),
    ] {
        let want: Vec<u64> = (from..below.min(200_000)).collect();
        assert_eq!(
            seqs(read_range(&path, from, below).unwrap()),
            want,
            "{from}..{below}"
        );
    }
    // Every start near the end: wherever the steps back from the end land.
    for from in 196_000..200_000 {
        let got = seqs(read_range(&path, from, from + 2).unwrap());
        assert_eq!(got, (from..(from + 2).min(200_000)).collect::<Vec<_>>());
    }
    let want: Vec<u64> = (189_990..190_000).collect();
    assert_eq!(
        seqs(read_range_at(&path, Some(cut), 189_990, 190_010).unwrap()),
        want
    );
}

#[test]
fn imports_typeagent_logs() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = json!([
        {"type":"user-request","seq":0,"timestamp":1,"requestId":{"requestId":"a"},"command":"hi"},
        {"type":"command-result","seq":1,"timestamp":2,"requestId":{"requestId":"a"}}
    ]);
    fs::write(dir.path().join(LEGACY_FILE_NAME), legacy.to_string()).unwrap();
    let log = DisplayLog::open(
        dir.path(),
        LogWriter::start(Default::default(), dir.path().to_path_buf()),
    )
    .unwrap();
    assert_eq!((log.next_seq(), log.message_count()), (2, 1));
    let all = read_range(log.path(), 0, 2).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&all[0]).unwrap(), legacy[0]);
}

fn futures_block(rx: tokio::sync::oneshot::Receiver<Result<(), String>>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(rx).unwrap().unwrap();
}
