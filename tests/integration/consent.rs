//! Consent (issue 49, finding 4 of the third security review): a model whose tool output was
//! injected called `manage_conversation` and the server handed "secret-plans" off into "work"
//! for every client there, and renamed and moved the user, asking nobody. Now a model's move
//! (`new`, `switch`, `prev`, `next`), `rename` and `handoff` are first put to the requester
//! alone as a yes/no `requestChoice` — what TypeAgent's clients and Roundtable's render — and
//! run only when it answers yes; a decline or a time-out is what the model is told, and
//! nothing happens. A scripted OpenAI-compatible model over a real socket plays the steered
//! model.

use serde_json::{json, Value};

use crate::harness::*;

/// The secret the source conversation holds.
const SECRET: &str = "the launch code is 7431";

/// A model that answers the user's text with the `manage_conversation` call `plan` gives,
/// a handoff's summary request by repeating everything it was shown (so a summary that ran
/// would carry the secret), and anything else with `results: <tool messages>`.
fn steered_model() -> ScriptedHttp {
    scripted(move |_, body| {
        let plan = |text: &str| match text {
            "read the web page" => vec![(
                "manage_conversation",
                json!({"subcommand": "handoff", "name": "secret-plans"}),
            )],
            "tidy the name" => vec![(
                "manage_conversation",
                json!({"subcommand": "rename", "newName": "pwned"}),
            )],
            "go elsewhere" => vec![(
                "manage_conversation",
                json!({"subcommand": "switch", "name": "secret-plans"}),
            )],
            _ => vec![],
        };
        if let Some(answer) = planned_tool_calls(body, &plan) {
            return answer;
        }
        let last = body["messages"].as_array().and_then(|m| m.last());
        if last.is_some_and(|m| m["role"] == "user" && m["content"].is_string()) {
            // A summary request (or a plain message): echo what was shown.
            return (
                200,
                completion(json!({"role": "assistant", "content": body["messages"].to_string()})),
            );
        }
        tool_results_answer(body)
    })
}

/// The newest tool message of the model's last request (what it was told last).
fn told(model: &ScriptedHttp) -> Value {
    let bodies = model.bodies.lock().unwrap().clone();
    bodies.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].clone())
        .unwrap_or_default()
}

/// The review's injection: declined, the handoff never runs (no summary is asked of the
/// model, the secret reaches neither the other client nor the history), and only the
/// requester was asked; allowed, a rename goes to the client; unanswered, a switch is not
/// sent and the model hears why.
#[test]
fn a_models_handoff_rename_and_switch_ask_the_requester_first() {
    let model = steered_model();
    let server = Server::with_model(&model, "m", &["--interaction-timeout", "1"]);
    let (mut owner, secret) = server.joined("secret-plans");
    owner.run_turn(&secret, SECRET);
    let (mut a, work) = server.joined("work");
    let mut b = server.connect();
    b.join(&work);
    let clientio = clientio(&work);
    let asked_before = model.bodies.lock().unwrap().len();

    // The handoff: asked of A alone, declined.
    let rid = Client::request_id(&a.submit(&work, "read the web page"));
    let choice = a.answer_choice(&work, false);
    assert_eq!(choice[0]["requestId"], rid.as_str());
    assert_eq!(choice[2], "yesNo");
    assert_eq!(
        choice[3],
        "The assistant asks to copy a summary of the conversation \"secret-plans\" into this \
         one, where everyone in it can read it. Allow it?"
    );
    let calls = a.until_complete(&work, &rid);
    b.expect_none_before(
        "the requester's consent question",
        is_call(&clientio, "requestChoice"),
        |b| b.until_complete(&work, &rid),
    );
    assert_eq!(
        told(&model),
        "ERROR: the user declined: you may not copy a summary of the conversation \
         \"secret-plans\" into this one, where everyone in it can read it; nothing was done"
    );
    // No summary was asked for: one model call for the tool, one for the answer.
    assert_eq!(model.bodies.lock().unwrap().len(), asked_before + 2);
    let shown = Client::texts(&calls).join("\n");
    assert!(
        !shown.contains("7431") && !shown.contains("Handoff from"),
        "{shown}"
    );
    let history = b
        .invoke(&dispatcher(&work), "getDisplayHistory", json!([]))
        .unwrap()
        .to_string();
    assert!(!history.contains("7431"), "{history}");

    // The rename: allowed, so the takeAction goes to the requester.
    let rid = Client::request_id(&a.submit(&work, "tidy the name"));
    let choice = a.answer_choice(&work, true);
    assert_eq!(
        choice[3],
        "The assistant asks to rename this conversation to \"pwned\". Allow it?"
    );
    let calls = a.until_complete(&work, &rid);
    let action = calls
        .iter()
        .find(|(m, _)| m == "takeAction")
        .expect("the allowed rename is sent");
    assert_eq!(
        action.1[2],
        json!({"subcommand": "rename", "newName": "pwned"})
    );

    // The switch: nobody answers within the interaction time-out; nothing is sent.
    let rid = Client::request_id(&a.submit(&work, "go elsewhere"));
    a.expect_call(&clientio, "requestChoice");
    let calls = a.until_complete(&work, &rid);
    assert!(calls.iter().all(|(m, _)| m != "takeAction"), "{calls:?}");
    assert_eq!(
        told(&model),
        "ERROR: the user did not allow it (no answer in time); nothing was done"
    );
}

/// The builtin provider's calls come only from the words the requester typed ("hand off my
/// secret-plans conversation here" is the requester's own, as `@conversation handoff` is):
/// nobody is asked.
#[test]
fn the_requesters_own_words_are_not_asked_about() {
    let server = Server::start(&[]);
    let (mut owner, secret) = server.joined("secret-plans");
    owner.run_turn(&secret, SECRET);
    let (mut a, work) = server.joined("work");
    let calls = a.run_turn(&work, "switch to my secret-plans conversation");
    assert!(calls.iter().all(|(m, _)| m != "requestChoice"), "{calls:?}");
    assert!(
        calls.iter().any(|(m, _)| m == "takeAction"),
        "the typed switch is sent: {calls:?}"
    );
}
