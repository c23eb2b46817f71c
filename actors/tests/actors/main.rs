//! Actor-level tests without sockets: the real actors, started inside an actix `System` on a
//! temporary instance directory and driven by their messages, as actix's own tests do.

mod registry;
