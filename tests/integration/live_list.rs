//! The live conversation list (`subscribeConversations`, a Roundtable extension): the list in
//! the answer, then `conversationsChanged` calls on `agent-server` for every create, rename,
//! delete and (coalesced) count change; nothing for sockets that did not subscribe.

use serde_json::{json, Value};

use crate::harness::*;

/// Waits for the next `conversationsChanged` call on `agent-server`; returns its change.
fn next_change(c: &mut Client) -> Value {
    let args = c.expect_call(AGENT_SERVER, "conversationsChanged");
    assert_eq!(args.as_array().map(Vec::len), Some(1), "{args}");
    args[0].clone()
}

/// Waits for an `updated` change of `id` that satisfies `wanted` (count changes are
/// coalesced, so intermediate values may be skipped).
fn until_updated(c: &mut Client, id: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    loop {
        let change = next_change(c);
        if change["kind"] == "updated" && change["conversation"]["conversationId"] == id {
            if wanted(&change["conversation"]) {
                return change;
            }
        } else {
            panic!("expected only updates of {id}, got {change}");
        }
    }
}

/// Subscribe answers the list; create, join (client count), a turn (message count), rename
/// and delete each reach the subscriber, in order, with the conversation as lists show it;
/// a socket that did not subscribe gets none of it.
#[test]
fn subscriber_sees_every_change_others_none() {
    let server = Server::start(&[]);
    let mut watcher = server.connect();
    let mut actor = server.connect();
    let listed = watcher
        .agent("subscribeConversations", json!([]))
        .expect("subscribe");
    assert_eq!(
        listed,
        watcher.agent("listConversations", json!([null])).unwrap()
    );

    let id = actor.create("Live");
    let change = next_change(&mut watcher);
    assert_eq!(change["kind"], "created", "{change}");
    assert_eq!(change["conversation"]["conversationId"], id);
    assert_eq!(change["conversation"]["name"], "Live");
    assert_eq!(change["conversation"]["clientCount"], 0);

    actor.join(&id);
    until_updated(&mut watcher, &id, |c| c["clientCount"] == 1);
    actor.run_turn(&id, "hello list");
    until_updated(&mut watcher, &id, |c| c["messageCount"] == 1);

    actor
        .agent("renameConversation", json!([id, "Renamed", null]))
        .unwrap();
    let change = next_change(&mut watcher);
    assert_eq!(change["kind"], "renamed", "{change}");
    assert_eq!(change["conversation"]["name"], "Renamed");

    actor.agent("deleteConversation", json!([id])).unwrap();
    // The delete closes the actor's client: a count update may come first.
    let change = loop {
        let change = next_change(&mut watcher);
        if change["kind"] != "updated" {
            break change;
        }
    };
    assert_eq!(change["kind"], "deleted", "{change}");
    assert_eq!(change["conversation"]["conversationId"], id);

    // The acting socket never subscribed: nothing came before the answer to a list, which
    // the registry sends after every change it published (changes go out before the
    // answers of the requests that made them).
    actor.expect_none_before(
        "a conversationsChanged call to a socket that never subscribed",
        is_call(AGENT_SERVER, "conversationsChanged"),
        |c| c.agent("listConversations", json!([null])).unwrap(),
    );
}

/// `unsubscribeConversations` stops the calls (and answers void); a second subscribe starts
/// them again with the current list.
#[test]
fn unsubscribe_stops_changes() {
    let server = Server::start(&[]);
    let mut watcher = server.connect();
    let mut actor = server.connect();
    watcher.agent("subscribeConversations", json!([])).unwrap();
    actor.create("one");
    assert_eq!(next_change(&mut watcher)["kind"], "created");
    assert_eq!(
        watcher
            .agent("unsubscribeConversations", json!([]))
            .unwrap(),
        Value::Null
    );
    actor.create("two");
    let listed = watcher.agent("subscribeConversations", json!([])).unwrap();
    let names: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["default", "one", "two"]);
    // "two" was created while unsubscribed: the next change is "three", not "two".
    actor.create("three");
    let change = next_change(&mut watcher);
    assert_eq!(change["conversation"]["name"], "three", "{change}");
}

/// A subscribed socket that closes is forgotten: the registry drops it from its subscribers
/// (it logs so, at `debug`, with the count left: 0), the next subscriber is the only one, and
/// changes keep reaching it.
#[test]
fn closed_subscriber_is_dropped() {
    let server = Server::start_env(
        &[],
        &[(
            "RUST_LOG",
            "info,roundtable_actors::registry::watchers=debug",
        )],
    );
    let subscribed = "subscribed to the conversation list (";
    let mut gone = server.connect();
    gone.agent("subscribeConversations", json!([])).unwrap();
    server.wait_log(subscribed);
    // The registry logs `socket <n>: subscribed …` before it answers.
    let log = server.log();
    let line = log.lines().find(|l| l.contains(subscribed)).unwrap();
    let socket = line
        .split("socket ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no socket number in {line:?}"));
    assert!(line.ends_with("(1 subscribers)"), "{line}");
    gone.close();
    server.wait_log(&format!(
        "socket {socket}: unsubscribed from the conversation list (0 subscribers)"
    ));
    let mut watcher = server.connect();
    watcher.agent("subscribeConversations", json!([])).unwrap();
    server.wait_log_count(subscribed, 2);
    let log = server.log();
    let line = log
        .lines()
        .filter(|l| l.contains(subscribed))
        .nth(1)
        .unwrap();
    assert!(
        line.ends_with("(1 subscribers)"),
        "gone is still there: {line}"
    );
    let mut actor = server.connect();
    actor.create("after");
    assert_eq!(next_change(&mut watcher)["conversation"]["name"], "after");
}
