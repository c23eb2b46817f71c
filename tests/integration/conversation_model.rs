//! A conversation's own model (issue 50): `@system model NAME` makes one conversation use
//! another provider of the server's (a `[providers.NAME]` profile), for everyone in it; every
//! client is told (`conversationModel`), `getStatus` carries it, the choice survives a
//! restart, other conversations keep the default, `default` goes back, and a name the server
//! does not offer is an exact error.

use serde_json::{json, Value};

use crate::harness::*;

/// A config file offering the builtin default and a profile `local` at `model`.
fn config(dir: &std::path::Path, model: &ScriptedHttp) -> String {
    let file = dir.join("rt.toml");
    std::fs::write(
        &file,
        format!(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"local-model\"\n",
            model.url
        ),
    )
    .unwrap();
    file.display().to_string()
}

/// `getStatus`'s `model`.
fn status_model(c: &mut Client, id: &str) -> Value {
    c.invoke(&dispatcher(id), "getStatus", json!([])).unwrap()["model"].clone()
}

#[test]
fn a_conversation_chooses_its_model_for_everyone_in_it() {
    let model = scripted(|_, _| {
        (
            200,
            completion(json!({"role": "assistant", "content": "from the local model"})),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let instance = dir.path().join("instance");
    let config = config(dir.path(), &model);
    let server = Server::start_in(&instance, &["--config", &config]);
    let (mut a, id) = server.joined("local talk");
    let mut b = server.connect();
    b.join(&id);
    assert_eq!(
        status_model(&mut a, &id),
        json!({"provider": "builtin", "model": null, "default": true,
               "providers": ["builtin", "local"]})
    );
    assert_eq!(Client::texts(&a.run_turn(&id, "hello")), ["echo: hello"]);

    let rid = Client::request_id(&a.submit(&id, "@system model local"));
    let calls = a.until_complete(&id, &rid);
    assert_eq!(
        Client::texts(&calls),
        ["This conversation now uses local, model `local-model` for every request."]
    );
    // Every client is told, the other one included.
    let told = loop {
        let notice = b.expect_call(&clientio(&id), "notify");
        if notice[1] == "conversationModel" {
            break notice;
        }
    };
    assert_eq!(
        told[2],
        json!({"provider": "local", "model": "local-model"})
    );
    assert_eq!(
        status_model(&mut b, &id)["provider"],
        "local",
        "a joined client's status says it"
    );
    // B's request goes to the chosen model.
    assert_eq!(
        Client::texts(&b.run_turn(&id, "hello")).last().unwrap(),
        "from the local model"
    );
    assert_eq!(model.bodies.lock().unwrap().len(), 1);
    // Another conversation keeps the default.
    let (mut c, other) = server.joined("still builtin");
    assert_eq!(Client::texts(&c.run_turn(&other, "hi")), ["echo: hi"]);
    // An unknown name is an exact error, and changes nothing.
    let calls = a.run_turn(&id, "@system model nope");
    let error = "@system model: this server offers no provider named \"nope\"; it offers \
                 builtin, local";
    assert_eq!(calls.last().unwrap().1[2]["result"]["lastError"], error);
    assert_eq!(status_model(&mut a, &id)["provider"], "local");

    // The choice is the conversation's: it survives a restart.
    drop((a, b, c));
    let mut server = server;
    server.stop();
    let server = Server::start_in(&instance, &["--config", &config]);
    let mut a = server.connect();
    a.join(&id);
    assert_eq!(status_model(&mut a, &id)["provider"], "local");
    assert_eq!(
        Client::texts(&a.run_turn(&id, "again")).last().unwrap(),
        "from the local model"
    );
    // `default` goes back to the server's default.
    a.run_turn(&id, "@system model default");
    assert_eq!(status_model(&mut a, &id)["provider"], "builtin");
    assert_eq!(
        Client::texts(&a.run_turn(&id, "bye")).last().unwrap(),
        "echo: bye"
    );
}
