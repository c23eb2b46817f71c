//! The display-log loader and reader, and the request-journal parser, on arbitrary file
//! content: a load cuts a torn tail and answers, reads skip what does not parse.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use roundtable_actors::storage::display_log::{self, DisplayLog, FILE_NAME};
use roundtable_actors::storage::log_writer::LogWriter;

struct Fixture {
    dir: tempfile::TempDir,
    writer: LogWriter,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let writer = LogWriter::start(Default::default(), dir.path().to_path_buf());
        Fixture { dir, writer }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let path = f.dir.path().join(FILE_NAME);
    std::fs::write(&path, data).expect("write fixture");
    let _ = display_log::read_range(&path, 0, u64::MAX);
    if let Ok(log) = DisplayLog::open(f.dir.path(), f.writer.clone()) {
        let _ = display_log::read_range(log.path(), 0, log.next_seq());
        let after = std::fs::read(&path).expect("read back");
        // What stays on disk is a prefix of what was there (only a torn tail is cut).
        assert!(data.starts_with(&after));
    }
    let _ = display_log::message_count_on_disk(f.dir.path());
    let _ = roundtable_actors::storage::requests::parse_open(data, &path);
});
