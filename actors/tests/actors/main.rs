//! Actor-level tests without sockets: the real actors, started inside an actix `System` on a
//! temporary directory and driven by their messages, counting lifecycle hooks and messages the
//! way actix's own tests do (`actix/tests/test_supervisor.rs`). Waits have a time-out.

mod conversation;
mod registry;
