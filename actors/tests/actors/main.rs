//! Actor-level tests without sockets: each module starts one actor on a temporary directory,
//! talks to it with its messages and counts lifecycle hooks and messages the way actix's own
//! tests do (`actix/tests/test_supervisor.rs`). Every wait is on an event with a time-out,
//! never a sleep.

mod conversation;
