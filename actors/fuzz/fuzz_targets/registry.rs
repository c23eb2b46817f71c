//! The registry loader: `conversations.json` and `conversations.journal` with arbitrary
//! content load or are refused with a `Corrupt` error naming the file, never a panic; a file
//! that is refused is left untouched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtable_actors::storage::layout::Layout;
use roundtable_actors::storage::registry_load::load_registry;

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input between the registry file and the journal.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (registry, journal) = rest.split_at(at);
    let dir = tempfile::tempdir().expect("temp dir");
    let layout = Layout::new(dir.path());
    std::fs::create_dir_all(layout.conversations_dir()).expect("mkdir");
    std::fs::write(layout.registry_file(), registry).expect("write registry");
    std::fs::write(layout.journal_file(), journal).expect("write journal");
    if load_registry(&layout, false, None).is_err() {
        let kept = std::fs::read(layout.registry_file()).expect("registry left in place");
        assert_eq!(kept, registry, "a refused registry was changed");
    }
});
