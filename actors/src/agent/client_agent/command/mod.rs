//! `@` commands as TypeAgent describes them (agentSdk `command.ts`, `parameters.ts`): the
//! [`Descriptors`] tree an agent's `getCommands` answers (and Roundtable's built-in command
//! tables are written in), the walk that resolves `<sub> <sub> …` in it ([`resolve`]), and
//! [`parse_params`], a port of the dispatcher's `parseParams` (`command/parameters.ts`) that
//! turns the text after the command into the `ParsedCommandParams` an agent's
//! `executeCommand` / `getCommandCompletion` receive.
//!
//! Layout: `ordered.rs` (key-ordered JSON), `descriptors.rs` (the tree and its reading),
//! `words.rs` (JavaScript text, [`resolve`]), `params.rs` ([`parse_params`]), `usage.rs`.
//!
//! Who uses it: the conversation's completion (`conversation/completion.rs`) and its
//! `@<client agent> …` commands (`conversation/client_agents.rs`). Pure: no I/O.
//!
//! Positions: TypeAgent measures text in UTF-16 code units (JavaScript strings). Here every
//! index is a byte offset into the Rust string; only what goes on the wire
//! (`remainderLength`, a completion's `startIndex`) is converted, with [`utf16_len`].
//!
//! Order: positional arguments are declared by the order of an object's keys. serde_json's
//! map sorts keys, so `getCommands` answers are read from their JSON text ([`parse_descriptors`])
//! into [`Ordered`] values, which keep keys in the order JavaScript's `Object.entries` gives
//! (integer-like keys ascending first, then the others as sent).

mod descriptors;
mod ordered;
mod params;
mod usage;
mod words;

pub use descriptors::*;
pub use ordered::*;
pub use params::*;
pub use usage::*;
pub use words::*;

/// Most entries (commands, tables, flags and arguments together) one agent's command tree
/// may have: a real agent has a few dozen; each is walked on every completion keystroke.
pub const MAX_COMMAND_ENTRIES: usize = 4096;
/// Deepest a command tree may nest (`@agent a b c …`).
pub const MAX_COMMAND_DEPTH: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn defs(json_text: &str) -> ParameterDefinitions {
        match parse_descriptors(json_text).unwrap().unwrap() {
            Descriptors::Command(c) => c.parameters.unwrap(),
            Descriptors::Table(_) => panic!("a command"),
        }
    }

    #[test]
    fn keys_keep_the_order_javascript_gives_them() {
        let v: Ordered = serde_json::from_str(r#"{"b":1,"a":2,"10":3,"2":4,"b":5}"#).unwrap();
        let Ordered::Object(entries) = v else {
            panic!()
        };
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["2", "10", "b", "a"]);
        assert_eq!(entries[2].1, Ordered::Number(5.into()));
    }

    #[test]
    fn reads_tables_defaults_and_parameters() {
        let text = r#"{"description":"phone","defaultSubCommand":"show","commands":{
            "set":{"description":"set","parameters":{"args":{"time":{"description":"t"},
                "label":{"description":"l","optional":true,"implicitQuotes":true}},
                "flags":{"repeat":{"description":"r","char":"r","type":"boolean"},
                         "days":{"description":"d","default":["mon"]}}}},
            "show":{"description":"show"},
            "more":{"description":"m","commands":{"x":{"description":"x"}}}}}"#;
        let Some(Descriptors::Table(t)) = parse_descriptors(text).unwrap() else {
            panic!()
        };
        assert_eq!(t.names(), ["set", "show", "more"]);
        assert_eq!(
            t.default_descriptor(),
            Some(&CommandDescriptor::new("show"))
        );
        let Some(Descriptors::Command(set)) = t.get("set") else {
            panic!()
        };
        let p = set.parameters.as_ref().unwrap();
        let args: Vec<&str> = p
            .args
            .as_ref()
            .unwrap()
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(args, ["time", "label"]);
        let flags = p.flags.as_ref().unwrap();
        assert_eq!(flags[0].1.value_type, ValueType::Boolean);
        assert_eq!(flags[1].1.value_type, ValueType::String);
        assert!(flags[1].1.multiple);
        assert_eq!(parse_descriptors("null").unwrap(), None);
        assert_eq!(
            parse_descriptors(r#"{"commands":{"a":5}}"#).unwrap_err(),
            "commands.a: not an object"
        );
        assert_eq!(
            parse_descriptors(r#"{"parameters":{"flags":{"f":{"type":"date"}}}}"#).unwrap_err(),
            "commands.parameters.flags.f.type: \"date\" is not \"string\", \"number\", \"boolean\" or \"json\""
        );
        let many = format!(
            "{{\"commands\":{{{}}}}}",
            (0..MAX_COMMAND_ENTRIES)
                .map(|i| format!("\"c{i}\":{{}}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(parse_descriptors(&many)
            .unwrap_err()
            .contains("more than 4096"));
        let deep = format!(
            "{}{{}}{}",
            "{\"commands\":{\"a\":".repeat(MAX_COMMAND_DEPTH + 1),
            "}}".repeat(MAX_COMMAND_DEPTH + 1)
        );
        assert!(parse_descriptors(&deep)
            .unwrap_err()
            .contains("deeper than 16"));
    }

    #[test]
    fn resolves_like_resolve_command_core() {
        let text = r#"{"defaultSubCommand":"help","commands":{"help":{},"new":{"parameters":{"args":{"name":{"optional":true}}}},
            "config":{"commands":{"show":{},"agents":{}},"defaultSubCommand":"show"}}}"#;
        let tree = parse_descriptors(text).unwrap().unwrap();
        let r = resolve(Some(&tree), "x config ag", 1);
        assert_eq!(r.commands, ["config"]);
        assert_eq!(r.suffix_start, 9);
        assert!(!r.matched);
        assert_eq!(r.table.unwrap().names(), ["show", "agents"]);
        let r = resolve(Some(&tree), "x new  bob ", 1);
        assert!(r.matched);
        assert_eq!(r.suffix_start, 7);
        let r = resolve(Some(&tree), "x ", 1);
        assert_eq!(r.suffix_start, 2);
        assert!(r.descriptor.is_some() && !r.matched);
    }

    #[test]
    fn parses_params_as_typeagent_does() {
        let d = defs(
            r#"{"parameters":{"flags":{"debug":{"type":"boolean","char":"d"},"level":{"type":"number"},
                "name":{},"tag":{"multiple":true},"cfg":{"type":"json"}},
                "args":{"first":{},"rest":{"multiple":true,"optional":true}}}}"#,
        );
        let p = parse_params(
            r#"-d a --level 3 "b c" d --tag x --tag y --cfg.k.v z"#,
            &d,
            false,
        )
        .unwrap();
        assert_eq!(
            p.flags.clone().map(Value::Object).unwrap(),
            json!({"debug": true, "level": 3, "tag": ["x", "y"], "cfg": {"k": {"v": "z"}}})
        );
        assert_eq!(
            p.args.clone().map(Value::Object).unwrap(),
            json!({"first": "a", "rest": ["b c", "d"]})
        );
        assert_eq!(p.tokens.len(), 12);
        assert_eq!(p.remainder_bytes, 0);
        let err = |t: &str| parse_params(t, &d, false).unwrap_err();
        assert_eq!(
            err("a --level 05"),
            "Invalid number value '05' for flag '--level'"
        );
        assert_eq!(err("a --level"), "Missing value for flag '--level'");
        assert_eq!(err("a --name x --name y"), "Duplicate flag '--name'");
        assert_eq!(err("a -x"), "Invalid flag '-x'");
        assert_eq!(err(""), "Missing argument 'first'");
        assert!(err("a --cfg [").starts_with("Invalid JSON value for flag '--cfg': "));
        assert_eq!(
            err("a --cfg 5"),
            "Invalid JSON value for flag '--cfg': Not an object"
        );
        let two = defs(r#"{"parameters":{"args":{"a":{},"n":{"type":"number"}}}}"#);
        assert_eq!(
            parse_params("x 1 y", &two, false).unwrap_err(),
            "Too many arguments 'y'"
        );
        // A boolean flag followed by a non-boolean is true, and the token is an argument.
        let p = parse_params("-d a", &d, false).unwrap();
        assert_eq!(p.flags.unwrap()["debug"], true);
        assert_eq!(p.args.unwrap()["first"], "a");
    }

    #[test]
    fn partial_parses_report_what_completion_needs() {
        let d = defs(
            r#"{"parameters":{"flags":{"level":{"type":"number"}},"args":{"name":{},"note":{"implicitQuotes":true,"optional":true}}}}"#,
        );
        let p = parse_params("bo", &d, true).unwrap();
        assert_eq!(p.last_completable_param.as_deref(), Some("name"));
        assert_eq!(
            (p.remainder_bytes, p.next_args.clone()),
            (0, vec!["note".to_string()])
        );
        let p = parse_params("bob take  it ", &d, true).unwrap();
        assert_eq!(p.tokens, ["bob", "take  it "]);
        assert!(p.last_param_implicit_quotes);
        // A bad flag value is rolled back and read again as the next argument.
        let p = parse_params("--level x", &d, true).unwrap();
        assert_eq!(
            p.to_json(),
            json!({"args": {"name": "x"}, "flags": {}, "tokens": ["--level", "x"],
                "lastCompletableParam": "name", "lastParamImplicitQuotes": false,
                "nextArgs": ["note"], "remainderLength": 0})
        );
        // An error stops the good position before the token it is about.
        let one = defs(r#"{"parameters":{"args":{"name":{}}}}"#);
        let p = parse_params("bob extra", &one, true).unwrap();
        assert_eq!((p.remainder_bytes, p.tokens.len()), (5, 2));
        let p = parse_params("é ", &ParameterDefinitions::default(), true).unwrap();
        assert_eq!((p.remainder_bytes, p.remainder_utf16), (3, 2));
    }
}
