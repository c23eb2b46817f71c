//! The inbound envelope decoder and the argument rules every method applies: any text must
//! decode to an envelope or a drop reason (an invoke's `metadata` checked, never refused), and
//! every accessor must answer or name the error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roundtable_actors::protocol::{Args, Inbound};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(inbound) = Inbound::parse(text) else {
        return;
    };
    if let Inbound::Invoke {
        metadata: Some(Ok(metadata)),
        ..
    } = &inbound
    {
        // A kept trace id is always a W3C one.
        if let Some(t) = &metadata.traceparent {
            assert_eq!(t.trace_id.len(), 32);
        }
    }
    if let Inbound::Invoke { method, args, .. } | Inbound::Call { method, args, .. } = inbound {
        exercise(&method, &args);
    }
});

fn exercise(method: &str, args: &Args) {
    for index in 0..4 {
        let _ = args.opt_str(method, index, "p");
        let _ = args.req_str(method, index, "p");
        let _ = args.opt_object(method, index, "p");
        let _ = args.opt_count(method, index, "p");
        let _ = args.opt_int(method, index, "p");
        if let Ok(options) = args.opt_object(method, index, "options") {
            let _ = roundtable_actors::protocol::opt_field_str(options, method, index, "name");
            let _ = roundtable_actors::protocol::opt_field_bool(options, method, index, "filter");
        }
    }
}
