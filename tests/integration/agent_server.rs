//! The `agent-server` channel: every method, argument rule and error text of the reference.

use serde_json::{json, Value};

use crate::harness::*;

/// A fresh server lists exactly the startup `default` conversation, with the wire shape of
/// `ConversationInfo`, and create answers without `indexedMessageCount`.
#[test]
fn create_list_shapes_and_default() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let list = c.agent("listConversations", json!([null])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "default");
    assert_eq!(list[0]["clientCount"], 0);
    assert_eq!(list[0]["messageCount"], 0);
    assert_eq!(list[0]["indexedMessageCount"], 0);

    let info = c
        .agent("createConversation", json!(["Research", null]))
        .unwrap();
    let obj = info.as_object().unwrap();
    let mut keys: Vec<_> = obj.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "clientCount",
            "conversationId",
            "createdAt",
            "messageCount",
            "name"
        ]
    );
    let id = info["conversationId"].as_str().unwrap();
    let parsed = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    let created = info["createdAt"].as_str().unwrap();
    assert!(created.ends_with('Z') && created.len() == 24, "{created}");

    // Registry order, not sorted.
    assert_eq!(c.names(), ["default", "Research"]);
}

/// The list filter is a case-insensitive, untrimmed substring; "" matches all.
#[test]
fn list_filter_is_untrimmed_substring() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.create("Alpha Project");
    c.create("beta");
    let names = |c: &mut Client, f: Value| -> Vec<String> {
        let l = c.agent("listConversations", json!([f])).unwrap();
        l.as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&mut c, json!("PROJ")), ["Alpha Project"]);
    assert_eq!(names(&mut c, json!(" project")), ["Alpha Project"]);
    assert!(names(&mut c, json!("project ")).is_empty());
    assert_eq!(names(&mut c, json!("")).len(), 3);
    // Missing argument = null = everything.
    assert_eq!(
        c.agent("listConversations", json!([]))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

/// Names: 1..=256 UTF-16 units, untrimmed; uniqueness by trimmed lower-case name; the exact
/// error texts; appendNumber; unknown behaviour.
#[test]
fn naming_rules_and_error_texts() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let len_err = "Conversation name must be between 1 and 256 characters";
    assert_eq!(
        c.agent("createConversation", json!(["", null]))
            .unwrap_err(),
        len_err
    );
    assert_eq!(
        c.agent("createConversation", json!([null])).unwrap_err(),
        len_err
    );
    assert_eq!(
        c.agent("createConversation", json!(["x".repeat(257)]))
            .unwrap_err(),
        len_err
    );
    // 128 emoji = 256 UTF-16 units: allowed; 129 are not.
    c.agent("createConversation", json!(["😀".repeat(128)]))
        .unwrap();
    assert_eq!(
        c.agent("createConversation", json!(["😀".repeat(129)]))
            .unwrap_err(),
        len_err
    );
    // Whitespace-only passes the length check and is stored raw.
    let spaces = c.agent("createConversation", json!(["   "])).unwrap();
    assert_eq!(spaces["name"], "   ");

    c.create("Project");
    assert_eq!(
        c.agent("createConversation", json!(["  project ", null]))
            .unwrap_err(),
        "A conversation named \"Project\" already exists. Pick a different name."
    );
    c.create("Project (2)");
    c.create("project (5)");
    let n = c
        .agent(
            "createConversation",
            json!(["Project", {"nameCollisionBehavior": "appendNumber"}]),
        )
        .unwrap();
    assert_eq!(n["name"], "Project (6)");
    assert_eq!(
        c.agent(
            "createConversation",
            json!(["Project", {"nameCollisionBehavior": "rename"}])
        )
        .unwrap_err(),
        "Unknown name collision behavior: rename"
    );
    // No collision: appendNumber keeps the name as given.
    let n = c
        .agent(
            "createConversation",
            json!([" Fresh ", {"nameCollisionBehavior": "appendNumber"}]),
        )
        .unwrap();
    assert_eq!(n["name"], " Fresh ");
}

/// Rename: length checked first, then existence, then collision; renaming to its own name is
/// a no-op success; void result has no `result` key.
#[test]
fn rename_rules() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let a = c.create("A");
    c.create("B");
    let ghost = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        c.agent("renameConversation", json!([ghost, ""]))
            .unwrap_err(),
        "Conversation name must be between 1 and 256 characters"
    );
    assert_eq!(
        c.agent("renameConversation", json!([ghost, "C"]))
            .unwrap_err(),
        format!("Conversation not found: {ghost}")
    );
    assert_eq!(
        c.agent("renameConversation", json!([a, "b"])).unwrap_err(),
        "A conversation named \"B\" already exists. Pick a different name."
    );
    assert_eq!(
        c.agent("renameConversation", json!([a, " a "])).unwrap(),
        Value::Null
    );
    let id = c.send_invoke(
        AGENT_SERVER,
        "renameConversation",
        json!([a, "Renamed", null]),
    );
    let frame = loop {
        let f = c.read_frame(WAIT).expect("answer");
        if f["message"]["callId"] == id {
            break f;
        }
    };
    assert_eq!(frame["message"]["type"], "invokeResult");
    assert!(
        frame["message"].get("result").is_none(),
        "void result must have no key: {frame}"
    );
    assert!(c.names().contains(&"Renamed".to_string()));
    let r = c
        .agent(
            "renameConversation",
            json!([a, "B", {"nameCollisionBehavior": "appendNumber"}]),
        )
        .unwrap();
    assert_eq!(r, Value::Null);
    assert!(c.names().contains(&"B (1)".to_string()));
}

/// findConversations scores per the table; searchConversationContent answers [].
#[test]
fn find_and_search() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.create("research");
    c.create("my research notes");
    c.create("unrelated");
    let m = c
        .agent("findConversations", json!(["  Research ", null]))
        .unwrap();
    let got: Vec<(String, f64)> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["conversation"]["name"].as_str().unwrap().to_string(),
                x["score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("research".to_string(), 1.0),
            ("my research notes".to_string(), 0.9)
        ]
    );
    // A typo: one edit in eight letters, close enough (0.875 similar) to score 0.6125; the
    // longer name is not similar enough and scores nothing, so it is not listed.
    let m = c.agent("findConversations", json!(["reseach"])).unwrap();
    assert_eq!(m.as_array().unwrap().len(), 1, "{m}");
    assert_eq!(m[0]["conversation"]["name"], "research");
    let s = m[0]["score"].as_f64().unwrap();
    assert!((s - 0.6125).abs() < 1e-9, "{s}");
    // Two edits in eight (0.75 similar): 0.525. Four (0.5 similar) is below the threshold.
    let m = c.agent("findConversations", json!(["resaerch"])).unwrap();
    let s = m[0]["score"].as_f64().unwrap();
    assert!((s - 0.525).abs() < 1e-9, "{s}");
    assert_eq!(
        c.agent("findConversations", json!(["rxsxaxcx"])).unwrap(),
        json!([])
    );
    assert_eq!(
        c.agent("findConversations", json!(["research", 1]))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        c.agent("findConversations", json!(["   "])).unwrap(),
        json!([])
    );
    assert_eq!(
        c.agent("searchConversationContent", json!(["research", null]))
            .unwrap(),
        json!([])
    );
}

/// Unknown methods, malformed invokes, calls, unknown channels, identity and discovery.
#[test]
fn rpc_edges() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    assert_eq!(
        c.agent("noSuchMethod", json!([])).unwrap_err(),
        "No invoke handler noSuchMethod"
    );

    // Malformed invoke with a valid callId: answered.
    c.send_text(r#"{"name":"agent-server","message":{"type":"invoke","callId":41,"name":"listConversations","args":"nope"}}"#);
    assert_eq!(
        c.wait_answer(AGENT_SERVER, 41).unwrap_err(),
        "Invalid invoke message"
    );
    c.send_text(r#"{"name":"agent-server","message":{"type":"invoke","callId":42,"args":[]}}"#);
    assert_eq!(
        c.wait_answer(AGENT_SERVER, 42).unwrap_err(),
        "Invalid invoke message"
    );
    // Invalid callId, unknown channel, a call: never answered; the socket keeps working.
    // The connection handles frames in order, and an answer to any of them would come before
    // the answer to the same `listConversations` sent after them.
    c.send_text(r#"{"name":"agent-server","message":{"type":"invoke","callId":-1,"name":"listConversations","args":[]}}"#);
    c.send_text(r#"{"name":"nowhere","message":{"type":"invoke","callId":0,"name":"listConversations","args":[]}}"#);
    c.send_call(AGENT_SERVER, "listConversations", json!([]));
    let call = c.send_invoke(AGENT_SERVER, "listConversations", json!([]));
    let frame = c.read_frame(WAIT).expect("the list's answer");
    assert_eq!(
        crate::support::protocol::answer_id(&frame),
        Some((AGENT_SERVER, call)),
        "one of the frames above was answered: {frame}"
    );

    let me = c.agent("getUserIdentity", json!([])).unwrap();
    assert!(me["username"].is_string() && me["displayName"].is_string());
    let initial = me["initial"].as_str().unwrap();
    assert_eq!(initial.chars().count(), 1);
    assert_eq!(initial.to_uppercase(), initial);

    let port = c
        .invoke(
            "discovery",
            "lookupPort",
            json!([{"agentName": "agent-server"}]),
        )
        .unwrap();
    assert_eq!(port, json!({"port": server.port}));
    let none = c
        .invoke("discovery", "lookupPort", json!([{"agentName": "browser"}]))
        .unwrap();
    assert_eq!(none, json!({"port": null}));
}

/// Wrong argument types get a precise error; path-like ids are just "not found".
#[test]
fn wrong_types_and_path_like_ids() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let e = c.agent("createConversation", json!([42])).unwrap_err();
    assert_eq!(
        e,
        "Invalid argument 0 (name) of createConversation: expected a string"
    );
    let e = c.agent("listConversations", json!([{"x": 1}])).unwrap_err();
    assert!(e.starts_with("Invalid argument 0 (filter)"), "{e}");
    let e = c
        .agent("joinConversation", json!(["not-an-object"]))
        .unwrap_err();
    assert!(e.starts_with("Invalid argument 0 (options)"), "{e}");
    let e = c
        .agent("joinConversation", json!([{"filter": "yes"}]))
        .unwrap_err();
    assert!(e.starts_with("Invalid argument 0 (filter)"), "{e}");
    let e = c
        .agent("findConversations", json!(["x", "ten"]))
        .unwrap_err();
    assert!(e.starts_with("Invalid argument 1 (maxMatches)"), "{e}");
    for id in [
        "../../etc",
        "..",
        "/tmp",
        "conversations.json",
        "00000000-0000-0000-0000-000000000000/..",
    ] {
        assert_eq!(
            c.agent("joinConversation", json!([{"conversationId": id}]))
                .unwrap_err(),
            format!("Conversation not found: {id}")
        );
        assert_eq!(
            c.agent("deleteConversation", json!([id])).unwrap_err(),
            format!("Conversation not found: {id}")
        );
        assert_eq!(
            c.agent("renameConversation", json!([id, "x"])).unwrap_err(),
            format!("Conversation not found: {id}")
        );
    }
    assert!(server.dir.join("conversations").is_dir());
    assert_eq!(c.names(), ["default"]);
}

/// After its join result, and only then, a joiner (whatever its `filter`) gets the two
/// `statusNotice` dismissals TypeAgent's server sends, as its first `clientio` calls
/// (callIds 0 and 1); clients already joined get only the join's system message.
#[test]
fn joiner_gets_the_status_notice_dismissals_first() {
    let server = Server::start(&[]);
    let mut a = server.connect();
    let id = a.create("notices");
    a.join(&id);
    let mut f = server.connect();
    f.agent(
        "joinConversation",
        json!([{"conversationId": id, "filter": true}]),
    )
    .unwrap();
    let channel = format!("clientio:{id}");
    let dismissal = |call_id: usize, notice: &str| {
        json!({"name": channel, "message": {"type": "call", "callId": call_id, "name": "notify",
            "args": [null, "statusNotice", {"id": notice, "dismiss": true}, "agent-server"]}})
    };
    for client in [&mut f, &mut a] {
        for (call_id, notice) in ["stale-build", "config-drift"].into_iter().enumerate() {
            let frame = client.read_frame(WAIT).expect("a notice");
            assert_eq!(frame, dismissal(call_id, notice));
        }
    }
    // a's next call is f's join message, not another notice.
    let next = a.read_frame(WAIT).expect("the join message");
    assert_eq!(next["message"]["callId"], 2, "{next}");
    assert_ne!(next["message"]["args"][1], "statusNotice", "{next}");
}
