//! What a client-hosted agent asks of its host on its `agent:<name>` channel, by TypeAgent's
//! real method names: each of the 22 invokes of `AgentContextInvokeFunctions` gets its
//! deliberate answer (storage refused, port and readiness notices void, the transient and
//! dynamic agent methods refused with TypeAgent's or Roundtable's texts), `popupQuestion` is
//! asked of the conversation's clients and answered, cancelled or timed out; the
//! `agentThread*` calls reach the other clients and the history; `appendDisplay` in `step`
//! mode; and an invoke a client sends on `clientio:<id>` is answered `No invoke handler`.

use serde_json::{json, Value};

use crate::client_agents::{registration, PHONE};
use crate::harness::*;

/// A client of `id` hosting `androidDevice`, and its connection id there.
fn phone_in(server: &Server, id: &str) -> (Client, String) {
    let mut phone = server.connect();
    let joined = phone.join(id);
    phone
        .agent(
            "registerClientAgent",
            registration("androidDevice", Some(id)),
        )
        .unwrap();
    let connection = joined["connectionId"].as_str().unwrap().to_string();
    (phone, connection)
}

/// The next `method` call on `channel` whose arguments pass `wanted`.
fn call_where(
    c: &mut Client,
    channel: &str,
    method: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let args = c.expect_call(channel, method);
        if wanted(&args) {
            return args;
        }
    }
}

/// Every invoke of `AgentContextInvokeFunctions` but `popupQuestion`, as TypeAgent's agent SDK
/// sends it: storage and token cache answer `Storage not available`; `setLocalHostPort`,
/// `releasePort`, the two `notify…` and `reloadAgentSchema` answer void (the SDK sends some
/// of them without handling an error) and are logged with the conversation and connection;
/// `registerPort` answers a fresh `regId`; `indexes` `[]`; the transient sub-agent methods
/// TypeAgent's texts (the queued one only in an open action context); the dynamic agent and
/// local view methods `<method>: not supported by Roundtable`. Wrong shapes get the protocol's
/// invalid-argument texts, another session context TypeAgent's `Invalid contextId`, an unknown
/// method `No invoke handler`.
#[test]
fn every_invoke_to_the_host_gets_its_answer() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("host invokes");
    let (mut phone, connection) = phone_in(&server, &id);
    let mut ask = |method: &str, param: Value| phone.invoke(PHONE, method, json!([param]));

    let storage = "Storage not available".to_string();
    let place = json!({"contextId": 0, "session": true, "storagePath": "alarms.json"});
    let with = |extra: Value| {
        let mut p = place.clone();
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    assert_eq!(
        ask("storageRead", with(json!({"options": "utf8"}))),
        Err(storage.clone())
    );
    assert_eq!(
        ask(
            "storageWrite",
            with(json!({"data": "[]", "options": "utf8"}))
        ),
        Err(storage.clone())
    );
    assert_eq!(ask("storageList", place.clone()), Err(storage.clone()));
    assert_eq!(ask("storageExists", place.clone()), Err(storage.clone()));
    assert_eq!(ask("storageDelete", place.clone()), Err(storage.clone()));
    let cache = json!({"contextId": 0, "session": false});
    assert_eq!(ask("tokenCacheRead", cache.clone()), Err(storage.clone()));
    assert_eq!(
        ask(
            "tokenCacheWrite",
            json!({"contextId": 0, "session": false, "token": "t"})
        ),
        Err(storage.clone())
    );
    assert_eq!(ask("tokenCacheDelete", cache), Err(storage));

    assert_eq!(
        ask("setLocalHostPort", json!({"contextId": 0, "port": 8080})),
        Ok(Value::Null)
    );
    server.wait_log(&format!(
        "client agent androidDevice (conversation {id}, connection {connection}): setLocalHostPort 8080"
    ));
    let registered = ask(
        "registerPort",
        json!({"contextId": 0, "role": "view", "port": 8081}),
    )
    .unwrap();
    let reg_id = registered["regId"].as_str().expect("regId");
    assert_eq!(reg_id.len(), 36, "a UUID: {reg_id}");
    assert_eq!(
        ask("releasePort", json!({"regId": reg_id, "contextId": 0})),
        Ok(Value::Null)
    );
    assert_eq!(
        ask("releasePort", json!({"regId": "never-registered"})),
        Ok(Value::Null)
    );
    assert_eq!(
        ask("notifyReadinessChanged", json!({"contextId": 0})),
        Ok(Value::Null)
    );
    assert_eq!(
        ask(
            "notifyClientCountChanged",
            json!({"contextId": 0, "role": "default", "count": 2})
        ),
        Ok(Value::Null)
    );
    assert_eq!(
        ask("reloadAgentSchema", json!({"contextId": 0})),
        Ok(Value::Null)
    );
    assert_eq!(
        ask("indexes", json!({"contextId": 0, "type": "image"})),
        Ok(json!([]))
    );

    assert_eq!(
        ask(
            "toggleTransientAgent",
            json!({"contextId": 0, "name": "androidDevice.alarms", "enable": true})
        ),
        Err("Transient sub agent not found: androidDevice.alarms".into())
    );
    assert_eq!(
        ask(
            "toggleTransientAgent",
            json!({"contextId": 0, "name": "alarms", "enable": false})
        ),
        Err("Invalid sub agent name: alarms".into())
    );
    for method in [
        "removeDynamicAgent",
        "forceCleanupDynamicAgent",
        "addDynamicAgent",
    ] {
        let param = json!({"contextId": 0, "name": "webPage",
            "manifest": {"description": "A page."}, "agentInterface": ["executeAction"]});
        assert_eq!(
            ask(method, param),
            Err(format!("{method}: not supported by Roundtable"))
        );
    }
    assert_eq!(
        ask(
            "getSharedLocalHostPort",
            json!({"contextId": 0, "agentName": "shell"})
        ),
        Err("getSharedLocalHostPort: not supported by Roundtable".into())
    );

    // Shapes and contexts.
    assert_eq!(
        ask(
            "storageRead",
            json!({"contextId": "0", "session": true, "storagePath": "a"})
        ),
        Err(
            "Invalid argument 0 (contextId) of storageRead: expected a non-negative integer".into()
        )
    );
    assert_eq!(
        phone.invoke(PHONE, "setLocalHostPort", json!([8080])),
        Err("Invalid argument 0 (param) of setLocalHostPort: expected an object".into())
    );
    let mut ask = |method: &str, param: Value| phone.invoke(PHONE, method, json!([param]));
    assert_eq!(
        ask(
            "notifyClientCountChanged",
            json!({"contextId": 0, "role": "default"})
        ),
        Err(
            "Invalid argument 0 (count) of notifyClientCountChanged: expected a non-negative integer"
                .into()
        )
    );
    assert_eq!(
        ask("indexes", json!({"contextId": 1, "type": "all"})),
        Err("Internal error: Invalid contextId 1".into())
    );
    assert_eq!(
        phone.invoke(PHONE, "getStorage", json!([{}])),
        Err("No invoke handler getStorage".into())
    );

    // queueToggleTransientAgent(actionContextId, agentName, active): positional, and only
    // in an open action context.
    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    let context = args[0]["actionContextId"].as_u64().unwrap();
    let queue = |phone: &mut Client, context: u64, name: &str| {
        phone.invoke(
            PHONE,
            "queueToggleTransientAgent",
            json!([context, name, true]),
        )
    };
    assert_eq!(
        queue(&mut phone, context, "androidDevice.alarms"),
        Err("Transient sub agent not found: androidDevice.alarms".into())
    );
    assert_eq!(
        queue(&mut phone, context, "clock.alarms"),
        Err("Invalid sub agent name: clock.alarms".into())
    );
    assert_eq!(
        phone.invoke(
            PHONE,
            "queueToggleTransientAgent",
            json!([context, "androidDevice.alarms", "yes"])
        ),
        Err("Invalid argument 2 (active) of queueToggleTransientAgent: expected a boolean".into())
    );
    phone.send_result(PHONE, call_id, json!({"historyText": "no alarms"}));
    cli.until_complete(&id, &rid);
    assert_eq!(
        queue(&mut phone, context, "androidDevice.alarms"),
        Err(format!(
            "Internal error: Invalid contextId {context} used out of scope"
        ))
    );
    assert_eq!(
        queue(&mut phone, context + 7, "androidDevice.alarms"),
        Err(format!("Internal error: Invalid contextId {}", context + 7))
    );
}

/// `popupQuestion` is a `requestInteraction` of type `question` with the agent as `source`
/// and no `requestId`, to every unfiltered client (a filtered one joining meanwhile is not
/// given it, an unfiltered one is); another client answers it and the agent gets the index;
/// `cancelInteraction` takes `defaultId` or fails with `Cancelled by client`; at most
/// `MAX_QUESTIONS_PER_AGENT` wait per agent; unregistering cancels the agent's questions.
/// With no answer in time it takes `defaultId` or fails with `Interaction timed out`.
#[test]
fn popup_questions_are_answered_cancelled_and_timed_out() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("popups");
    let (mut phone, _) = phone_in(&server, &id);
    let io = clientio(&id);
    let d = dispatcher(&id);
    let popup = |phone: &mut Client, param: Value| {
        let mut p = json!({"contextId": 0});
        p.as_object_mut()
            .unwrap()
            .extend(param.as_object().unwrap().clone());
        phone.send_invoke(PHONE, "popupQuestion", json!([p]))
    };
    let asked = |c: &mut Client| {
        call_where(c, &io, "requestInteraction", |a| {
            a[0]["source"] == "androidDevice"
        })[0]
            .clone()
    };

    let call = popup(
        &mut phone,
        json!({"message": "Let example.com connect?", "choices": ["Allow once", "Always", "Deny"]}),
    );
    let q = asked(&mut cli);
    let interaction = q["interactionId"].as_str().unwrap().to_string();
    assert_eq!(q["type"], "question");
    assert_eq!(q["message"], "Let example.com connect?");
    assert_eq!(q["choices"], json!(["Allow once", "Always", "Deny"]));
    assert!(
        q.get("requestId").is_none() && q.get("defaultId").is_none(),
        "{q}"
    );
    let mut filtered = server.connect();
    let joined = filtered.agent(
        "joinConversation",
        json!([{"conversationId": id, "filter": true}]),
    );
    assert_eq!(joined.unwrap()["pendingInteractions"], json!([]));
    let mut other = server.connect();
    let joined = other.join(&id);
    assert_eq!(
        joined["pendingInteractions"][0]["interactionId"],
        interaction.as_str()
    );
    assert_eq!(
        other.invoke(
            &d,
            "respondToInteraction",
            json!([{"interactionId": interaction, "type": "question", "value": 3}])
        ),
        Err("Invalid argument 0 (response) of respondToInteraction: expected a choice from 0 to 2, got 3".into())
    );
    other
        .invoke(
            &d,
            "respondToInteraction",
            json!([{"interactionId": interaction, "type": "question", "value": 1}]),
        )
        .unwrap();
    assert_eq!(phone.wait_answer(PHONE, call), Ok(json!(1)));
    assert_eq!(
        cli.expect_call(&io, "interactionResolved"),
        json!([interaction, 1])
    );

    // Cancelled: the default when there is one, else TypeAgent's text.
    for (default, answer) in [
        (json!(1), Ok(json!(1))),
        (Value::Null, Err("Cancelled by client".to_string())),
    ] {
        let call = popup(
            &mut phone,
            json!({"message": "Keep the alarm?", "defaultId": default}),
        );
        let q = asked(&mut cli);
        assert_eq!(q["choices"], json!(["Yes", "No"]));
        assert_eq!(
            q.get("defaultId"),
            default.as_u64().map(Value::from).as_ref()
        );
        cli.send_call(&d, "cancelInteraction", json!([q["interactionId"]]));
        assert_eq!(phone.wait_answer(PHONE, call), answer);
        assert_eq!(
            other.expect_call(&io, "interactionCancelled"),
            json!([q["interactionId"]])
        );
    }
    let call = popup(&mut phone, json!({"message": "Keep it?", "defaultId": 2}));
    assert_eq!(
        phone.wait_answer(PHONE, call),
        Err("popupQuestion: defaultId 2 is not one of the 2 choices".into())
    );

    // Bounded per agent; the agent's questions go with its registration.
    let waiting: Vec<(u64, Value)> = (0..4)
        .map(|n| {
            let call = popup(&mut phone, json!({"message": format!("Question {n}?")}));
            (call, asked(&mut cli)["interactionId"].clone())
        })
        .collect();
    let call = popup(&mut phone, json!({"message": "One more?"}));
    assert_eq!(
        phone.wait_answer(PHONE, call),
        Err(
            "popupQuestion: client agent 'androidDevice' already has 4 questions waiting (limit 4)"
                .into()
        )
    );
    assert_eq!(
        phone.agent(
            "unregisterClientAgent",
            json!([{"name": "androidDevice", "conversationId": id}])
        ),
        Ok(Value::Null)
    );
    let mut cancelled: Vec<Value> = (0..4)
        .map(|_| other.expect_call(&io, "interactionCancelled")[0].clone())
        .collect();
    let mut expected = Vec::new();
    for (call, interaction) in waiting {
        assert_eq!(
            phone.wait_answer(PHONE, call),
            Err("Cancelled by client".into())
        );
        expected.push(interaction);
    }
    let order = |v: &Value| v.as_str().unwrap().to_string();
    cancelled.sort_by_key(order);
    expected.sort_by_key(order);
    assert_eq!(cancelled, expected);
    let history = cli.invoke(&d, "getDisplayHistory", json!([])).unwrap();
    let asked_of_all =
        history.as_array().unwrap().iter().find(|e| {
            e["type"] == "pending-interaction" && e["interactionId"] == interaction.as_str()
        });
    let entry = asked_of_all.expect("logged");
    assert_eq!(entry["source"], "androidDevice");
    assert!(entry.get("requestId").is_none(), "{entry}");
    assert!(history
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["type"] == "interaction-resolved"
            && e["interactionId"] == interaction.as_str()
            && e["response"] == 1));

    // No answer in time: the default, else TypeAgent's text.
    let server = Server::start(&["--interaction-timeout", "0.3"]);
    let (_cli, id) = server.joined("popup timeouts");
    let (mut phone, _) = phone_in(&server, &id);
    let call = popup(&mut phone, json!({"message": "Anyone?"}));
    assert_eq!(
        phone.wait_answer(PHONE, call),
        Err("Interaction timed out".into())
    );
    let call = popup(&mut phone, json!({"message": "Anyone?", "defaultId": 0}));
    assert_eq!(phone.wait_answer(PHONE, call), Ok(json!(0)));
}

/// The agent's threads (TypeAgent's `beginAgentThread`), with no request running: each
/// display goes to the other clients with the thread's own request id `{requestId: "",
/// clientRequestId: "agent-androidDevice-<uuid>"}`, the agent as source and the thread's
/// kind; `bubble` output is in the display log, `toast` output is not; a display after
/// `agentThreadComplete` (or for a thread never begun) is ignored, as in TypeAgent.
#[test]
fn agent_threads_reach_the_other_clients_and_the_history() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("threads");
    let (mut phone, _) = phone_in(&server, &id);
    let io = clientio(&id);
    let thread = |m: &str, args: Value| (m.to_string(), args);
    for (method, args) in [
        thread("agentThreadBegin", json!([0, "t-ring", "bubble"])),
        thread("agentThreadSetDisplay", json!([0, "t-ring", "Ringing…"])),
        thread(
            "agentThreadAppendDisplay",
            json!([0, "t-ring", {"type": "text", "content": "Answered"}, "block"]),
        ),
        thread("agentThreadBegin", json!([0, "t-toast", "toast"])),
        thread(
            "agentThreadAppendDisplay",
            json!([0, "t-toast", "Battery low", "block"]),
        ),
        thread("agentThreadComplete", json!([0, "t-ring"])),
        thread(
            "agentThreadAppendDisplay",
            json!([0, "t-ring", "late", "block"]),
        ),
        thread("agentThreadSetDisplay", json!([0, "t-never", "stray"])),
        thread("notify", json!([0, "info", "threads done", null])),
    ] {
        phone.send_call(PHONE, &method, args);
    }

    let set = cli.expect_call(&io, "setDisplay");
    let request_id = set[0]["requestId"].clone();
    let client_request_id = request_id["clientRequestId"].as_str().unwrap();
    assert!(
        client_request_id.starts_with("agent-androidDevice-") && client_request_id.len() == 56,
        "{request_id}"
    );
    let message = |content: Value, kind: &str, request_id: &Value| {
        json!({"message": content, "requestId": request_id, "source": "androidDevice",
            "sourceIcon": "⏰", "kind": kind})
    };
    assert_eq!(
        set,
        json!([message(json!("Ringing…"), "bubble", &request_id)])
    );
    let appended = |c: &mut Client| {
        call_where(c, &io, "appendDisplay", |a| {
            a[0]["source"] == "androidDevice"
        })
    };
    assert_eq!(
        appended(&mut cli),
        json!([
            message(
                json!({"type": "text", "content": "Answered"}),
                "bubble",
                &request_id
            ),
            "block"
        ])
    );
    let toast = appended(&mut cli);
    assert_eq!(toast[0]["kind"], "toast");
    assert_eq!(toast[0]["message"], "Battery low");
    assert_eq!(toast[0]["requestId"]["requestId"], "");
    assert_ne!(toast[0]["requestId"], request_id, "a thread of its own");
    // The notify sent last arrives after everything the threads showed.
    call_where(&mut cli, &io, "notify", |a| a[2] == "threads done");
    let shown: Vec<&Value> = cli
        .inbox
        .iter()
        .map(|f| &f["message"]["args"][0]["message"])
        .collect();
    assert!(
        !shown.contains(&&json!("late")) && !shown.contains(&&json!("stray")),
        "{shown:?}"
    );

    let history = cli
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let entries = history.as_array().unwrap();
    assert!(entries.iter().any(|e| e["type"] == "set-display"
        && e["message"] == message(json!("Ringing…"), "bubble", &request_id)));
    assert!(entries.iter().any(|e| e["type"] == "append-display"
        && e["mode"] == "block"
        && e["message"]["message"]["content"] == "Answered"));
    assert!(
        entries
            .iter()
            .all(|e| e["message"]["message"] != "Battery low"),
        "a toast is not replayed"
    );
}

/// `appendDisplay` in `step` mode (TypeAgent's "starts a new, distinct message
/// container"), from a running action and from a thread: broadcast with mode `step` and
/// logged with it, so a replaying client shows it as a new block.
#[test]
fn append_display_in_step_mode() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("steps");
    let mut other = server.connect();
    other.join(&id);
    let (mut phone, _) = phone_in(&server, &id);
    let io = clientio(&id);

    let rid = Client::request_id(&cli.submit(&id, "run androidDevice__showAlarms"));
    let (call_id, args) = phone.expect_invoke(PHONE, "executeAction");
    let context = args[0]["actionContextId"].clone();
    phone.send_call(
        PHONE,
        "appendDisplay",
        json!([{"actionContextId": context, "content": "Step 1: listing", "mode": "step"}]),
    );
    phone.send_call(PHONE, "agentThreadBegin", json!([0, "t", "bubble"]));
    phone.send_call(
        PHONE,
        "agentThreadAppendDisplay",
        json!([0, "t", "Step 2: thread", "step"]),
    );
    let shown = call_where(&mut other, &io, "appendDisplay", |a| {
        a[0]["message"] == "Step 1: listing"
    });
    assert_eq!(shown[1], "step");
    assert_eq!(shown[0]["requestId"]["requestId"], rid.as_str());
    let shown = call_where(&mut other, &io, "appendDisplay", |a| {
        a[0]["message"] == "Step 2: thread"
    });
    assert_eq!(shown[1], "step");
    phone.send_result(PHONE, call_id, json!({"historyText": "2 alarms"}));
    cli.until_complete(&id, &rid);

    let history = cli
        .invoke(&dispatcher(&id), "getDisplayHistory", json!([]))
        .unwrap();
    let steps: Vec<&Value> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "append-display" && e["mode"] == "step")
        .map(|e| &e["message"]["message"])
        .collect();
    assert_eq!(steps, [&json!("Step 1: listing"), &json!("Step 2: thread")]);
}

/// An invoke a client sends on the `clientio:<id>` channel of a conversation it joined is
/// answered `No invoke handler <method>`, as TypeAgent's server answers (its side of that
/// channel has no invoke handlers); on a conversation it did not join it is dropped
/// unanswered, like any unknown channel.
#[test]
fn an_invoke_on_clientio_has_no_handler() {
    let server = Server::start(&[]);
    let (mut cli, id) = server.joined("clientio invokes");
    let mut other = server.connect();
    let elsewhere = other.create("not joined");
    let dropped = cli.send_invoke(&clientio(&elsewhere), "question", json!([]));
    assert_eq!(
        cli.invoke(
            &clientio(&id),
            "question",
            json!([null, "Ready?", ["Yes", "No"]])
        ),
        Err("No invoke handler question".into())
    );
    // Answers come in order: one to the invoke sent first would be here by now.
    assert!(
        cli.inbox
            .iter()
            .all(|f| f["message"]["callId"] != dropped || f["name"] != clientio(&elsewhere)),
        "{:?}",
        cli.inbox
    );
}
