use super::*;
use serde_json::Value;

#[test]
fn parses_invoke_and_treats_null_as_absent() {
    let f = r#"{"name":"agent-server","message":{"type":"invoke","callId":3,"name":"listConversations","args":[null]}}"#;
    let Inbound::Invoke {
        call_id,
        method,
        args,
        ..
    } = Inbound::parse(f).unwrap()
    else {
        panic!("not an invoke")
    };
    assert_eq!((call_id, method.as_str()), (3, "listConversations"));
    assert_eq!(
        args.opt_str("listConversations", 0, "filter").unwrap(),
        None
    );
}

/// `metadata` rides along with an invoke and never turns it into an invalid one: checked
/// when present, ignored whole (with the reason) when of the wrong shape, absent when null.
#[test]
fn invoke_metadata_is_read_never_refused() {
    let with = |metadata: &str| {
        let f = format!(
            r#"{{"name":"dispatcher:x","message":{{"type":"invoke","callId":1,"name":"submitCommand","args":["hi"],"metadata":{metadata}}}}}"#
        );
        match Inbound::parse(&f).unwrap() {
            Inbound::Invoke { metadata, .. } => metadata,
            other => panic!("{other:?}"),
        }
    };
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let m = with(&format!(
        r#"{{"version":1,"traceparent":"00-{trace}-b7ad6b7169203331-01"}}"#
    ))
    .unwrap()
    .unwrap();
    assert_eq!(m.traceparent.unwrap().trace_id, trace);
    assert_eq!(
        with(r#"{"version":"1"}"#),
        Some(Err(trace::MetadataIgnored::Version("\"1\"".into())))
    );
    assert_eq!(with("[1]"), Some(Err(trace::MetadataIgnored::NotObject)));
    assert_eq!(with("null"), None);
}

#[test]
fn invalid_invoke_needs_a_valid_call_id() {
    let bad_args = r#"{"name":"x","message":{"type":"invoke","callId":1,"name":"m","args":{}}}"#;
    assert!(matches!(
        Inbound::parse(bad_args),
        Ok(Inbound::InvalidInvoke { call_id: 1, .. })
    ));
    let bad_id = r#"{"name":"x","message":{"type":"invoke","callId":-1,"name":"m","args":[]}}"#;
    assert!(Inbound::parse(bad_id).is_err());
    let huge = r#"{"name":"x","message":{"type":"invoke","callId":9007199254740992,"name":"m","args":[]}}"#;
    assert!(Inbound::parse(huge).is_err());
}

#[test]
fn answers_to_server_invokes_carry_their_outcome() {
    let ok = r#"{"name":"agent:phone","message":{"type":"invokeResult","callId":4,"result":{"historyText":"ok"}}}"#;
    match Inbound::parse(ok).unwrap() {
        Inbound::Response {
            channel,
            call_id,
            outcome,
        } => {
            assert_eq!((channel.as_str(), call_id), ("agent:phone", 4));
            assert_eq!(outcome.unwrap().unwrap()["historyText"], "ok");
        }
        other => panic!("{other:?}"),
    }
    let void = r#"{"name":"agent:phone","message":{"type":"invokeResult","callId":5}}"#;
    assert!(matches!(
        Inbound::parse(void),
        Ok(Inbound::Response {
            outcome: Ok(None),
            ..
        })
    ));
    let err = r#"{"name":"agent:phone","message":{"type":"invokeError","callId":6,"error":"no"}}"#;
    assert!(matches!(
        Inbound::parse(err),
        Ok(Inbound::Response { outcome: Err(e), .. }) if e == "no"
    ));
    let no_id = r#"{"name":"agent:phone","message":{"type":"invokeResult"}}"#;
    assert!(Inbound::parse(no_id).is_err());
    let frame = invoke_frame("agent:phone", 2, "executeAction", &serde_json::json!([{}]));
    assert_eq!(
        frame,
        r#"{"name":"agent:phone","message":{"type":"invoke","callId":2,"name":"executeAction","args":[{}]}}"#
    );
}

#[test]
fn void_result_has_no_result_key() {
    assert_eq!(
        invoke_result("agent-server", 7, None),
        r#"{"name":"agent-server","message":{"type":"invokeResult","callId":7}}"#
    );
    let call = call_frame("clientio:a", 2, "notify", "[null]");
    let v: Value = serde_json::from_str(&call).unwrap();
    assert_eq!(v["message"]["callId"], 2);
    assert_eq!(v["message"]["args"][0], Value::Null);
}

#[test]
fn unparsable_invokes_keep_their_call_id() {
    let deep = format!(
        r#"{{"name":"agent-server","message":{{"type":"invoke","callId":7,"name":"x","args":[{}1{}]}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    match Inbound::parse(&deep) {
        Ok(Inbound::Unparsable {
            channel, call_id, ..
        }) => assert_eq!((channel.as_str(), call_id), ("agent-server", 7)),
        other => panic!("{other:?}"),
    }
    let surrogate = r#"{"message":{"callId":3,"args":["\ud800"],"type":"invoke","name":"m"},"name":"dispatcher:x"}"#;
    match Inbound::parse(surrogate) {
        Ok(Inbound::Unparsable {
            channel,
            call_id,
            reason,
        }) => {
            assert_eq!((channel.as_str(), call_id), ("dispatcher:x", 3));
            assert!(reason.contains("escape"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A call, a bad callId or an unreadable channel stay unanswered.
    for text in [
        r#"{"name":"a","message":{"type":"call","callId":1,"args":["\ud800"]}}"#,
        r#"{"name":"a","message":{"type":"invoke","callId":-1,"args":["\ud800"]}}"#,
        r#"{"name":"\ud800","message":{"type":"invoke","callId":1}}"#,
        r#"{"name":"a","message":{"type":"invoke","callId":1"#,
    ] {
        assert!(Inbound::parse(text).is_err(), "{text}");
    }
    // Parse amplification: refused before a tree is built, still answered.
    let bomb = format!(
        r#"{{"name":"agent-server","message":{{"type":"invoke","callId":9,"name":"x","args":[{}[]]}}}}"#,
        "[],".repeat(MAX_INBOUND_VALUES)
    );
    match Inbound::parse(&bomb) {
        Ok(Inbound::Unparsable {
            call_id, reason, ..
        }) => {
            assert_eq!(call_id, 9);
            assert!(
                reason.starts_with("more than 200000 JSON values"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(count_values(r#"{"a":[1,2],"b":"x,[{"}"#), 5);
}

#[test]
fn error_texts_are_exact() {
    assert_eq!(
        RpcError::NameExists("CLI".into()).to_string(),
        "A conversation named \"CLI\" already exists. Pick a different name."
    );
    assert_eq!(
        RpcError::AlreadyJoined("x".into()).to_string(),
        "Already joined conversation 'x'. Call leaveConversation() before joining again."
    );
}
