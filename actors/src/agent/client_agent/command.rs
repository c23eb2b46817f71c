//! `@` commands as TypeAgent describes them (agentSdk `command.ts`, `parameters.ts`): the
//! [`Descriptors`] tree an agent's `getCommands` answers (and Roundtable's built-in command
//! tables are written in), the walk that resolves `<sub> <sub> …` in it ([`resolve`]), and
//! [`parse_params`], a port of the dispatcher's `parseParams` (`command/parameters.ts`) that
//! turns the text after the command into the `ParsedCommandParams` an agent's
//! `executeCommand` / `getCommandCompletion` receive.
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

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};

/// Most entries (commands, tables, flags and arguments together) one agent's command tree
/// may have: a real agent has a few dozen; each is walked on every completion keystroke.
pub const MAX_COMMAND_ENTRIES: usize = 4096;
/// Deepest a command tree may nest (`@agent a b c …`).
pub const MAX_COMMAND_DEPTH: usize = 16;

/// A JSON value whose objects keep their keys in JavaScript's `Object.entries` order.
#[derive(Debug, Clone, PartialEq)]
pub enum Ordered {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Ordered>),
    /// An object, keys in `Object.entries` order.
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    /// The same value as a `serde_json::Value` (keys sorted).
    pub fn to_value(&self) -> Value {
        match self {
            Ordered::Null => Value::Null,
            Ordered::Bool(b) => Value::Bool(*b),
            Ordered::Number(n) => Value::Number(n.clone()),
            Ordered::String(s) => Value::String(s.clone()),
            Ordered::Array(a) => Value::Array(a.iter().map(Ordered::to_value).collect()),
            Ordered::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }

    /// The member `key` of an object.
    fn get(&self, key: &str) -> Option<&Ordered> {
        match self {
            Ordered::Object(o) => o.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A member that is present and not `null` (JavaScript's `!== undefined`, as JSON has no
    /// `undefined`: a `null` member is read as absent).
    fn member(&self, key: &str) -> Option<&Ordered> {
        self.get(key).filter(|v| **v != Ordered::Null)
    }
}

/// Whether `key` is an array index to JavaScript (`Object.entries` lists those first,
/// ascending): a canonical decimal below 2³² − 1.
fn array_index(key: &str) -> Option<u32> {
    let n: u32 = key.parse().ok()?;
    (n != u32::MAX && n.to_string() == key).then_some(n)
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ordered, D::Error> {
        struct OrderedVisitor;
        impl<'de> Visitor<'de> for OrderedVisitor {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Ordered, E> {
                serde_json::Number::from_f64(n)
                    .map(Ordered::Number)
                    .ok_or_else(|| E::custom("a number out of range"))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::String(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Ordered, E> {
                Ok(Ordered::String(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut entries: Vec<(String, Ordered)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Ordered>()? {
                    // A repeated key keeps its first place and takes the last value (JSON.parse).
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some(entry) => entry.1 = value,
                        None => entries.push((key, value)),
                    }
                }
                let (mut indexed, named): (Vec<_>, Vec<_>) = entries
                    .into_iter()
                    .partition(|(k, _)| array_index(k).is_some());
                indexed.sort_by_key(|(k, _)| array_index(k));
                indexed.extend(named);
                Ok(Ordered::Object(indexed))
            }
        }
        deserializer.deserialize_any(OrderedVisitor)
    }
}

/// The type of a flag's or an argument's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// `"string"` (the default).
    String,
    /// `"number"`: an integer written as JavaScript writes it back.
    Number,
    /// `"boolean"`: `true`/`false`/`1`/`0`.
    Boolean,
    /// `"json"`: an object (or array).
    Json,
}

impl ValueType {
    /// Reads `"string" | "number" | "boolean" | "json"`.
    fn parse(name: &str) -> Option<ValueType> {
        Some(match name {
            "string" => ValueType::String,
            "number" => ValueType::Number,
            "boolean" => ValueType::Boolean,
            "json" => ValueType::Json,
            _ => return None,
        })
    }
}

/// A flag (`--name value`, `-c value`), its type and multiplicity resolved as the agent SDK's
/// `getFlagType` / `getFlagMultiple` do.
#[derive(Debug, Clone, PartialEq)]
pub struct FlagDefinition {
    /// Its one-character alias (`-c`).
    pub char: Option<String>,
    /// `type`, else the type of `default`, else string.
    pub value_type: ValueType,
    /// `multiple`, else whether `default` is an array.
    pub multiple: bool,
    /// The value when the flag is not given (filled in by a full parse).
    pub default: Option<Value>,
}

impl FlagDefinition {
    /// A flag of this type with no alias and no default.
    pub fn of(value_type: ValueType) -> FlagDefinition {
        FlagDefinition {
            char: None,
            value_type,
            multiple: false,
            default: None,
        }
    }
}

/// A positional argument.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgDefinition {
    /// Its type (string by default).
    pub value_type: ValueType,
    /// It may be left out.
    pub optional: bool,
    /// It takes every following value (up to a flag or `--`).
    pub multiple: bool,
    /// It takes the rest of the line as one value, as if quoted.
    pub implicit_quotes: bool,
}

impl ArgDefinition {
    /// A required string argument.
    pub fn string() -> ArgDefinition {
        ArgDefinition {
            value_type: ValueType::String,
            optional: false,
            multiple: false,
            implicit_quotes: false,
        }
    }

    /// A string argument that takes the rest of the line (`@explain <request>`).
    pub fn rest_of_line() -> ArgDefinition {
        ArgDefinition {
            implicit_quotes: true,
            ..ArgDefinition::string()
        }
    }

    /// The same argument, optional.
    pub fn optional(self) -> ArgDefinition {
        ArgDefinition {
            optional: true,
            ..self
        }
    }
}

/// A command's `parameters`: flags and positional arguments, in declaration order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ParameterDefinitions {
    /// `flags`, when declared.
    pub flags: Option<Vec<(String, FlagDefinition)>>,
    /// `args`, when declared (in order: the first is the first positional value).
    pub args: Option<Vec<(String, ArgDefinition)>>,
}

impl ParameterDefinitions {
    /// Only positional arguments.
    pub fn args(args: Vec<(&str, ArgDefinition)>) -> ParameterDefinitions {
        ParameterDefinitions {
            flags: None,
            args: Some(args.into_iter().map(|(n, a)| (n.to_string(), a)).collect()),
        }
    }
}

/// One command (`CommandDescriptor`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommandDescriptor {
    /// What it does (for usage texts).
    pub description: String,
    /// Its parameters; `None`: it takes none.
    pub parameters: Option<ParameterDefinitions>,
}

impl CommandDescriptor {
    /// A command without parameters.
    pub fn new(description: &str) -> CommandDescriptor {
        CommandDescriptor {
            description: description.to_string(),
            parameters: None,
        }
    }

    /// A command with these parameters.
    pub fn with(description: &str, parameters: ParameterDefinitions) -> CommandDescriptor {
        CommandDescriptor {
            description: description.to_string(),
            parameters: Some(parameters),
        }
    }
}

/// A table's `defaultSubCommand`: a sub-command's name, or a command of its own.
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultSubCommand {
    /// The name of one of the table's commands.
    Name(String),
    /// A command that is not in the table.
    Command(CommandDescriptor),
}

/// A table of sub-commands (`CommandDescriptorTable`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DescriptorTable {
    /// What the family does.
    pub description: String,
    /// Sub-commands by name, in `Object.keys` order.
    pub commands: Vec<(String, Descriptors)>,
    /// What the table resolves to with no (or an unknown) sub-command.
    pub default_sub_command: Option<DefaultSubCommand>,
}

impl DescriptorTable {
    /// The sub-command `name`.
    pub fn get(&self, name: &str) -> Option<&Descriptors> {
        self.commands
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d)
    }

    /// The sub-command names, in order (`Object.keys(table.commands)`).
    pub fn names(&self) -> Vec<String> {
        self.commands.iter().map(|(n, _)| n.clone()).collect()
    }

    /// `getDefaultSubCommandDescriptor`: the default, unless it names a table (or nothing).
    pub fn default_descriptor(&self) -> Option<&CommandDescriptor> {
        match self.default_sub_command.as_ref()? {
            DefaultSubCommand::Command(c) => Some(c),
            DefaultSubCommand::Name(name) => match self.get(name)? {
                Descriptors::Command(c) => Some(c),
                Descriptors::Table(_) => None,
            },
        }
    }
}

/// `CommandDescriptors`: one command, or a table of them.
#[derive(Debug, Clone, PartialEq)]
pub enum Descriptors {
    /// A single command (`@agent <params>`).
    Command(CommandDescriptor),
    /// Sub-commands (`@agent <sub> …`).
    Table(DescriptorTable),
}

/// Reads an agent's `getCommands` answer from its JSON text (keys in order), bounded by
/// [`MAX_COMMAND_ENTRIES`] and [`MAX_COMMAND_DEPTH`]. `None` for a `null` answer (no
/// commands). The error says where the tree is wrong.
pub fn parse_descriptors(json_text: &str) -> Result<Option<Descriptors>, String> {
    let value: Ordered = serde_json::from_str(json_text).map_err(|e| format!("not JSON: {e}"))?;
    if value == Ordered::Null {
        return Ok(None);
    }
    let mut budget = MAX_COMMAND_ENTRIES;
    read_descriptors(&value, "commands", 0, &mut budget).map(Some)
}

/// Takes one entry from the budget.
fn spend(budget: &mut usize, at: &str) -> Result<(), String> {
    if *budget == 0 {
        return Err(format!(
            "{at}: more than {MAX_COMMAND_ENTRIES} commands, flags and arguments"
        ));
    }
    *budget -= 1;
    Ok(())
}

/// `description` as a string ("" when absent or not a string: only usage texts show it).
fn description_of(value: &Ordered) -> String {
    match value.get("description") {
        Some(Ordered::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// One `CommandDescriptors` node at `at`: a table when it has `commands`.
fn read_descriptors(
    value: &Ordered,
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<Descriptors, String> {
    spend(budget, at)?;
    if depth > MAX_COMMAND_DEPTH {
        return Err(format!(
            "{at}: sub-commands nest deeper than {MAX_COMMAND_DEPTH} levels"
        ));
    }
    if !matches!(value, Ordered::Object(_)) {
        return Err(format!("{at}: not an object"));
    }
    let Some(commands) = value.member("commands") else {
        return read_command(value, at, budget).map(Descriptors::Command);
    };
    let Ordered::Object(entries) = commands else {
        return Err(format!("{at}.commands: not an object"));
    };
    let mut table = DescriptorTable {
        description: description_of(value),
        ..DescriptorTable::default()
    };
    for (name, entry) in entries {
        let child = read_descriptors(entry, &format!("{at}.{name}"), depth + 1, budget)?;
        table.commands.push((name.clone(), child));
    }
    table.default_sub_command = match value.member("defaultSubCommand") {
        None => None,
        Some(Ordered::String(name)) => Some(DefaultSubCommand::Name(name.clone())),
        Some(command @ Ordered::Object(_)) => Some(DefaultSubCommand::Command(read_command(
            command,
            &format!("{at}.defaultSubCommand"),
            budget,
        )?)),
        Some(_) => {
            return Err(format!(
                "{at}.defaultSubCommand: neither a name nor a command"
            ))
        }
    };
    Ok(Descriptors::Table(table))
}

/// One `CommandDescriptor` at `at`.
fn read_command(
    value: &Ordered,
    at: &str,
    budget: &mut usize,
) -> Result<CommandDescriptor, String> {
    let parameters = match value.member("parameters") {
        // `parameters: false` (the SDK's "no parameters" handlers) is no parameters too.
        None | Some(Ordered::Bool(false)) => None,
        Some(p @ Ordered::Object(_)) => {
            Some(read_parameters(p, &format!("{at}.parameters"), budget)?)
        }
        Some(_) => return Err(format!("{at}.parameters: not an object")),
    };
    Ok(CommandDescriptor {
        description: description_of(value),
        parameters,
    })
}

/// The entries of the object member `key` of `value` at `at`, if present.
fn entries_of<'a>(
    value: &'a Ordered,
    key: &str,
    at: &str,
) -> Result<Option<&'a [(String, Ordered)]>, String> {
    match value.member(key) {
        None => Ok(None),
        Some(Ordered::Object(entries)) => Ok(Some(entries)),
        Some(_) => Err(format!("{at}.{key}: not an object")),
    }
}

/// A boolean member (absent: `None`).
fn bool_member(value: &Ordered, key: &str, at: &str) -> Result<Option<bool>, String> {
    match value.member(key) {
        None => Ok(None),
        Some(Ordered::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{at}.{key}: not a boolean")),
    }
}

/// A `type` member: one of the four type names.
fn type_member(value: &Ordered, at: &str) -> Result<Option<ValueType>, String> {
    match value.member("type") {
        None => Ok(None),
        Some(Ordered::String(name)) => ValueType::parse(name).map(Some).ok_or_else(|| {
            format!("{at}.type: \"{name}\" is not \"string\", \"number\", \"boolean\" or \"json\"")
        }),
        Some(_) => Err(format!("{at}.type: not a string")),
    }
}

/// The type of a default value (`getTypeFromValue`): an array's is its first element's.
fn type_of_default(value: &Ordered, at: &str) -> Result<ValueType, String> {
    Ok(match value {
        Ordered::Null => ValueType::String,
        Ordered::Bool(_) => ValueType::Boolean,
        Ordered::Number(_) => ValueType::Number,
        Ordered::String(_) => ValueType::String,
        Ordered::Object(_) => ValueType::Json,
        Ordered::Array(items) => match items.first() {
            None => ValueType::String,
            Some(Ordered::Array(_)) => {
                return Err(format!(
                    "{at}.default: Invalid nested array default value for flag definition"
                ))
            }
            Some(first) => type_of_default(first, at)?,
        },
    })
}

/// `ParameterDefinitions` at `at`.
fn read_parameters(
    value: &Ordered,
    at: &str,
    budget: &mut usize,
) -> Result<ParameterDefinitions, String> {
    let mut parameters = ParameterDefinitions::default();
    if let Some(flags) = entries_of(value, "flags", at)? {
        let mut read = Vec::with_capacity(flags.len());
        for (name, def) in flags {
            let at = format!("{at}.flags.{name}");
            spend(budget, &at)?;
            if !matches!(def, Ordered::Object(_)) {
                return Err(format!("{at}: not an object"));
            }
            let default = def.member("default");
            let value_type = match type_member(def, &at)? {
                Some(t) => t,
                None => default.map_or(Ok(ValueType::String), |d| type_of_default(d, &at))?,
            };
            let multiple = match bool_member(def, "multiple", &at)? {
                Some(m) => m,
                None => matches!(default, Some(Ordered::Array(_))),
            };
            let char = match def.member("char") {
                None => None,
                Some(Ordered::String(c)) => Some(c.clone()),
                Some(_) => return Err(format!("{at}.char: not a string")),
            };
            read.push((
                name.clone(),
                FlagDefinition {
                    char,
                    value_type,
                    multiple,
                    default: default.map(Ordered::to_value),
                },
            ));
        }
        parameters.flags = Some(read);
    }
    if let Some(args) = entries_of(value, "args", at)? {
        let mut read = Vec::with_capacity(args.len());
        for (name, def) in args {
            let at = format!("{at}.args.{name}");
            spend(budget, &at)?;
            if !matches!(def, Ordered::Object(_)) {
                return Err(format!("{at}: not an object"));
            }
            read.push((
                name.clone(),
                ArgDefinition {
                    value_type: type_member(def, &at)?.unwrap_or(ValueType::String),
                    optional: bool_member(def, "optional", &at)?.unwrap_or(false),
                    multiple: bool_member(def, "multiple", &at)?.unwrap_or(false),
                    implicit_quotes: bool_member(def, "implicitQuotes", &at)?.unwrap_or(false),
                },
            ));
        }
        parameters.args = Some(read);
    }
    Ok(parameters)
}

/// JavaScript's white space (`\s`, `String.prototype.trim`): Unicode white space and the BOM.
pub fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// `s.trimStart()`.
pub fn trim_start_js(s: &str) -> &str {
    s.trim_start_matches(is_js_space)
}

/// The length of `s` in UTF-16 code units (JavaScript's `length`).
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Where resolving `<sub> <sub> …` in a command tree stopped (TypeAgent's
/// `ResolveCommandResult`, without the agent part, which the caller resolves).
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    /// Sub-commands consumed, in order.
    pub commands: Vec<String>,
    /// Byte offset in the text where the unresolved rest (the suffix, leading white space
    /// skipped) starts.
    pub suffix_start: usize,
    /// The table resolution stopped at (`None` for a single-command agent).
    pub table: Option<&'a DescriptorTable>,
    /// The command resolved to: an explicit leaf, or the table's default.
    pub descriptor: Option<&'a CommandDescriptor>,
    /// `descriptor` is an explicitly typed leaf (not the default).
    pub matched: bool,
}

/// The next white-space-delimited token of `text` at or after `pos`: (start, end) byte
/// offsets (`/^\s*\S+/`).
pub fn next_word(text: &str, pos: usize) -> Option<(usize, usize)> {
    let rest = &text[pos..];
    let start = pos + (rest.len() - trim_start_js(rest).len());
    let word = &text[start..];
    if word.is_empty() {
        return None;
    }
    let end = word.find(is_js_space).map_or(text.len(), |i| start + i);
    Some((start, end))
}

/// Resolves sub-commands in `text` from byte `pos` (`resolveCommandCore` after the agent
/// token): tokens are consumed while they name a sub-command of the current table; a leaf
/// ends it (`matched`), as does an unknown token (left in the suffix); at a table's end its
/// default becomes the descriptor.
pub fn resolve<'a>(
    descriptors: Option<&'a Descriptors>,
    text: &str,
    mut pos: usize,
) -> Resolved<'a> {
    let mut resolved = Resolved {
        commands: Vec::new(),
        suffix_start: pos,
        table: None,
        descriptor: None,
        matched: false,
    };
    match descriptors {
        None => {}
        Some(Descriptors::Command(c)) => resolved.descriptor = Some(c),
        Some(Descriptors::Table(root)) => {
            let mut table = root;
            loop {
                let Some((start, end)) = next_word(text, pos) else {
                    resolved.descriptor = table.default_descriptor();
                    break;
                };
                match table.get(&text[start..end]) {
                    None => {
                        resolved.descriptor = table.default_descriptor();
                        break;
                    }
                    Some(next) => {
                        resolved.commands.push(text[start..end].to_string());
                        pos = end;
                        match next {
                            Descriptors::Command(c) => {
                                resolved.descriptor = Some(c);
                                resolved.matched = true;
                                break;
                            }
                            Descriptors::Table(t) => table = t,
                        }
                    }
                }
            }
            resolved.table = Some(table);
        }
    }
    let rest = &text[pos..];
    resolved.suffix_start = pos + (rest.len() - trim_start_js(rest).len());
    resolved
}

/// `parseParams`' result: the parsed values (`ParsedCommandParams`) and what completion needs
/// (`ParseParamsResult`).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedParams {
    /// Argument values by name; `None` when the command declares no `args`.
    pub args: Option<Map<String, Value>>,
    /// Flag values by name; `None` when the command declares no `flags`.
    pub flags: Option<Map<String, Value>>,
    /// The tokens read, in order (an implicitly quoted argument is one token: the rest).
    pub tokens: Vec<String>,
    /// The last string parameter read (`name`, or `--name` for a flag): what the text being
    /// typed completes.
    pub last_completable_param: Option<String>,
    /// That parameter takes the rest of the line.
    pub last_param_implicit_quotes: bool,
    /// The arguments still to come.
    pub next_args: Vec<String>,
    /// Bytes at the end of the text the parse did not consume (after the last good token).
    pub remainder_bytes: usize,
    /// The same in UTF-16 code units (`remainderLength` on the wire).
    pub remainder_utf16: usize,
}

impl ParsedParams {
    /// The JSON an agent receives (`ParseParamsResult`: `args`/`flags` absent when not
    /// declared, `lastCompletableParam` absent when none).
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        if let Some(args) = &self.args {
            out.insert("args".into(), Value::Object(args.clone()));
        }
        if let Some(flags) = &self.flags {
            out.insert("flags".into(), Value::Object(flags.clone()));
        }
        out.insert("tokens".into(), json!(self.tokens));
        if let Some(p) = &self.last_completable_param {
            out.insert("lastCompletableParam".into(), json!(p));
        }
        out.insert(
            "lastParamImplicitQuotes".into(),
            json!(self.last_param_implicit_quotes),
        );
        out.insert("nextArgs".into(), json!(self.next_args));
        out.insert("remainderLength".into(), json!(self.remainder_utf16));
        Value::Object(out)
    }
}

/// `parseBooleanParameter`.
fn parse_boolean(text: &str, kind: &str, name: &str) -> Result<bool, String> {
    match text.to_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!(
            "Invalid boolean value '{text}' for {kind} '{name}'"
        )),
    }
}

/// `parseIntParameter`: an integer JavaScript writes back exactly as typed (`"05"`, `"1e3"`,
/// `"-0"` and integers past 2⁵³ are refused).
fn parse_int(text: &str, kind: &str, name: &str) -> Result<Value, String> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    match text.parse::<i64>() {
        Ok(n) if n.to_string() == text && n.abs() <= MAX_SAFE => Ok(json!(n)),
        _ => Err(format!("Invalid number value '{text}' for {kind} '{name}'")),
    }
}

/// `parseJsonParameter`: an object or an array.
fn parse_json(text: &str, kind: &str, name: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => Ok(v),
        Ok(_) => Err(format!(
            "Invalid JSON value for {kind} '{name}': Not an object"
        )),
        Err(e) => Err(format!("Invalid JSON value for {kind} '{name}': {e}")),
    }
}

/// `stripQuoteFromToken`.
fn strip_quotes(token: &str) -> &str {
    match token.chars().next() {
        Some(q @ ('\'' | '"')) => {
            if token.len() == 1 || !token.ends_with(q) {
                &token[1..]
            } else {
                &token[1..token.len() - 1]
            }
        }
        _ => token,
    }
}

/// `invalidValueToken`: what looks like a flag cannot be a flag's value unless quoted.
fn invalid_value_token(token: &str) -> bool {
    if token.starts_with("--") {
        return true;
    }
    let b = token.as_bytes();
    token.chars().count() == 2 && b[0] == b'-' && !b[1].is_ascii_digit()
}

/// `resolveFlag`: `--name`, `--name.prop` for a JSON flag, or `-c`.
pub fn resolve_flag<'a>(
    flags: &'a [(String, FlagDefinition)],
    token: &str,
) -> Option<(&'a str, &'a FlagDefinition)> {
    if let Some(key) = token.strip_prefix("--") {
        if let Some((name, def)) = flags.iter().find(|(n, _)| n == key) {
            return Some((name, def));
        }
        let (head, _) = key.split_once('.')?;
        return flags
            .iter()
            .find(|(n, d)| n == head && d.value_type == ValueType::Json)
            .map(|(n, d)| (n.as_str(), d));
    }
    let alias = token.strip_prefix('-')?;
    flags
        .iter()
        .find(|(_, d)| d.char.as_deref() == Some(alias))
        .map(|(n, d)| (n.as_str(), d))
}

/// Sets `obj.<path>` (dot-separated) to `value`, making the objects on the way.
fn set_property(obj: &mut Map<String, Value>, path: &str, value: Value) {
    let mut parts = path.split('.').peekable();
    let mut current = obj;
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            current.insert(part.to_string(), value);
            return;
        }
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        current = entry.as_object_mut().expect("made an object");
    }
}

/// The parser's state: the text still to read (`curr`), what it read, and where it was last
/// in a good state.
struct ParamParser<'t> {
    /// The unread text (a suffix of the input: leading white space trimmed; with `partial`
    /// trailing white space kept, as it says the last token is complete).
    curr: &'t str,
    /// Keep trailing white space (completion) or trim it (execution).
    partial: bool,
    tokens: Vec<String>,
    flags: Map<String, Value>,
    args: Map<String, Value>,
    arg_index: usize,
    last_completable: Option<String>,
    last_implicit_quotes: bool,
    advance_multiple: bool,
    /// `curr` after the last fully read flag, flag value or argument.
    last_good: &'t str,
}

impl<'t> ParamParser<'t> {
    /// Trims what follows a token.
    fn trim_rest(&self, s: &'t str) -> &'t str {
        if self.partial {
            trim_start_js(s)
        } else {
            s.trim_matches(is_js_space)
        }
    }

    /// `nextToken`: a quoted token (to its closing quote not preceded by `\`, or to the end)
    /// or a run of non-space characters.
    fn next_token(&mut self) -> Option<String> {
        let curr = self.curr;
        let quote = curr.chars().next()?;
        let token;
        if quote == '\'' || quote == '"' {
            let mut from = 1;
            loop {
                match curr[from..].find(quote).map(|i| from + i) {
                    None => {
                        token = curr;
                        self.curr = "";
                        break;
                    }
                    Some(end) if !curr[..end].ends_with('\\') => {
                        token = &curr[..=end];
                        self.curr = self.trim_rest(&curr[end + 1..]);
                        break;
                    }
                    Some(end) => from = end + 1,
                }
            }
        } else {
            let end = curr.find(is_js_space).unwrap_or(curr.len());
            token = &curr[..end];
            self.curr = self.trim_rest(&curr[end..]);
        }
        self.tokens.push(token.to_string());
        Some(token.to_string())
    }

    /// `parseValueToken`: the value of flag `name` (typed as `flag_token`) from `value_token`.
    fn flag_value(
        &mut self,
        flag_token: &str,
        name: &str,
        value_type: ValueType,
        value_token: Option<&str>,
    ) -> Result<Value, String> {
        let Some(value_token) = value_token.filter(|v| !invalid_value_token(v)) else {
            return Err(format!("Missing value for flag '{flag_token}'"));
        };
        let stripped = strip_quotes(value_token);
        match value_type {
            ValueType::Boolean => parse_boolean(stripped, "flag", flag_token).map(Value::Bool),
            ValueType::Number => parse_int(stripped, "flag", flag_token),
            ValueType::String => Ok(json!(stripped)),
            ValueType::Json => {
                let prefix = format!("--{name}.");
                let Some(property) = flag_token.strip_prefix(&prefix) else {
                    return parse_json(stripped, "flag", flag_token);
                };
                let existing = self.flags.remove(name);
                if existing.as_ref().is_some_and(Value::is_array) {
                    return Err(format!(
                        "Invalid flag '{name}': multiple json value cannot use property syntax"
                    ));
                }
                let mut obj = match existing {
                    Some(Value::Object(o)) => o,
                    _ => Map::new(),
                };
                set_property(&mut obj, property, json!(stripped));
                Ok(Value::Object(obj))
            }
        }
    }

    /// Reads one token (and a flag's value); `Ok(false)` at the end of the text.
    fn step(&mut self, defs: &ParameterDefinitions) -> Result<bool, String> {
        let rest = self.curr;
        let Some(next) = self.next_token() else {
            return Ok(false);
        };
        self.last_completable = None;
        let flag = defs
            .flags
            .as_deref()
            .and_then(|flags| resolve_flag(flags, &next));
        if let Some((name, def)) = flag {
            if self.advance_multiple {
                self.advance_multiple = false;
                self.arg_index += 1;
            }
            self.last_good = self.curr;
            let rollback = self.curr;
            let value_token = self.next_token();
            let value = match self.flag_value(&next, name, def.value_type, value_token.as_deref()) {
                Ok(v) => v,
                Err(e) => {
                    if value_token.is_some() {
                        self.curr = rollback;
                        self.tokens.pop();
                    }
                    if def.value_type != ValueType::Boolean {
                        return Err(e);
                    }
                    Value::Bool(true)
                }
            };
            if def.multiple {
                match self.flags.get_mut(name) {
                    Some(Value::Array(values)) => values.push(value),
                    _ => {
                        self.flags.insert(name.to_string(), json!([value]));
                    }
                }
            } else {
                if self.flags.contains_key(name) {
                    return Err(format!("Duplicate flag '{next}'"));
                }
                self.flags.insert(name.to_string(), value);
            }
            self.last_good = self.curr;
            if def.value_type == ValueType::String {
                self.last_completable = Some(format!("--{name}"));
                self.last_implicit_quotes = false;
            }
            return Ok(true);
        }
        if next == "--" {
            if self.advance_multiple {
                self.advance_multiple = false;
                self.arg_index += 1;
            }
            return Ok(true);
        }
        if next.starts_with('-') {
            return Err(format!("Invalid flag '{next}'"));
        }
        let Some((name, def)) = defs.args.as_deref().and_then(|a| a.get(self.arg_index)) else {
            return Err(format!("Too many arguments '{next}'"));
        };
        let mut arg = strip_quotes(&next).to_string();
        if def.implicit_quotes && arg == next {
            self.tokens.pop();
            self.tokens.push(rest.to_string());
            arg = rest.to_string();
            self.curr = "";
        }
        let value = match def.value_type {
            ValueType::Number => parse_int(&arg, "argument", name)?,
            ValueType::Json => parse_json(&arg, "argument", name)?,
            ValueType::Boolean => Value::Bool(parse_boolean(&arg, "argument", name)?),
            ValueType::String => Value::String(arg),
        };
        if def.multiple {
            self.advance_multiple = true;
            match self.args.get_mut(name) {
                Some(Value::Array(values)) => values.push(value),
                _ => {
                    self.args.insert(name.clone(), json!([value]));
                }
            }
        } else {
            self.arg_index += 1;
            self.args.insert(name.clone(), value);
        }
        self.last_good = self.curr;
        if def.value_type == ValueType::String {
            self.last_completable = Some(name.clone());
            self.last_implicit_quotes = def.implicit_quotes;
        }
        Ok(true)
    }
}

/// TypeAgent's `parseParams(parameters, paramDefs, partial)`: tokens (quoted values, `--`,
/// flags with values, `--json.prop value`, implicitly quoted rest-of-line arguments) into
/// typed flags and arguments. `partial` (completion): errors are skipped and the parse goes
/// on, trailing white space is kept, defaults are not filled in and missing arguments are no
/// error. The error texts are TypeAgent's (a JSON value's parse error is serde_json's).
pub fn parse_params(
    text: &str,
    defs: &ParameterDefinitions,
    partial: bool,
) -> Result<ParsedParams, String> {
    let curr = if partial {
        trim_start_js(text)
    } else {
        text.trim_matches(is_js_space)
    };
    let mut p = ParamParser {
        curr,
        partial,
        tokens: Vec::new(),
        flags: Map::new(),
        args: Map::new(),
        arg_index: 0,
        last_completable: None,
        last_implicit_quotes: false,
        advance_multiple: false,
        last_good: curr,
    };
    loop {
        match p.step(defs) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) if !partial => return Err(e),
            Err(_) => {}
        }
    }
    if !partial {
        for (name, def) in defs.flags.iter().flatten() {
            if let (false, Some(default)) = (p.flags.contains_key(name), &def.default) {
                p.flags.insert(name.clone(), default.clone());
            }
        }
    }
    let mut next_args = Vec::new();
    if let Some(args) = &defs.args {
        for (name, def) in args.iter().skip(p.arg_index) {
            next_args.push(name.clone());
            if def.optional || (def.multiple && p.args.contains_key(name)) {
                continue;
            }
            if partial {
                break;
            }
            return Err(format!("Missing argument '{name}'"));
        }
    }
    Ok(ParsedParams {
        args: defs.args.is_some().then_some(p.args),
        flags: defs.flags.is_some().then_some(p.flags),
        tokens: p.tokens,
        last_completable_param: p.last_completable,
        last_param_implicit_quotes: p.last_implicit_quotes,
        next_args,
        remainder_bytes: p.last_good.len(),
        remainder_utf16: utf16_len(p.last_good),
    })
}

/// A command's usage, plainer than TypeAgent's `getUsage` (no colours, no help text):
/// `Usage: @<command> <arg> [<optional>] <many>...`, then its flags.
pub fn command_usage(command: &str, descriptor: &CommandDescriptor) -> String {
    let mut line = format!("Usage: @{command}");
    let Some(parameters) = &descriptor.parameters else {
        return line;
    };
    for (name, arg) in parameters.args.iter().flatten() {
        let many = if arg.multiple { "..." } else { "" };
        if arg.optional {
            line.push_str(&format!(" [<{name}>{many}]"));
        } else {
            line.push_str(&format!(" <{name}>{many}"));
        }
    }
    let flags = parameters.flags.as_deref().unwrap_or_default();
    if !flags.is_empty() {
        line.push_str(" [flags]\nFlags:");
        for (name, flag) in flags {
            let alias = flag
                .char
                .as_ref()
                .map_or(String::new(), |c| format!(", -{c}"));
            let value = match flag.value_type {
                ValueType::Boolean => "",
                ValueType::Number => " <number>",
                ValueType::String => " <string>",
                ValueType::Json => " <json>",
            };
            line.push_str(&format!("\n  --{name}{alias}{value}"));
        }
    }
    line
}

/// A table's usage, plainer than TypeAgent's `getHandlerTableUsage`: its sub-commands with
/// their descriptions.
pub fn table_usage(command: &str, table: &DescriptorTable) -> String {
    let mut text = format!("Usage: @{command} <subcommand> ...\nSubcommands:");
    for (name, sub) in &table.commands {
        let description = match sub {
            Descriptors::Command(c) => &c.description,
            Descriptors::Table(t) => &t.description,
        };
        if description.is_empty() {
            text.push_str(&format!("\n  {name}"));
        } else {
            text.push_str(&format!("\n  {name}: {description}"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

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
