//! [`parse_params`], a port of the dispatcher's `parseParams` (`command/parameters.ts`):
//! the text after a command into `ParsedCommandParams`.

use serde_json::{json, Map, Value};

use super::*;

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
pub(super) fn parse_boolean(text: &str, kind: &str, name: &str) -> Result<bool, String> {
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
pub(super) fn parse_int(text: &str, kind: &str, name: &str) -> Result<Value, String> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    match text.parse::<i64>() {
        Ok(n) if n.to_string() == text && n.abs() <= MAX_SAFE => Ok(json!(n)),
        _ => Err(format!("Invalid number value '{text}' for {kind} '{name}'")),
    }
}

/// `parseJsonParameter`: an object or an array.
pub(super) fn parse_json(text: &str, kind: &str, name: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => Ok(v),
        Ok(_) => Err(format!(
            "Invalid JSON value for {kind} '{name}': Not an object"
        )),
        Err(e) => Err(format!("Invalid JSON value for {kind} '{name}': {e}")),
    }
}

/// `stripQuoteFromToken`.
pub(super) fn strip_quotes(token: &str) -> &str {
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
pub(super) fn invalid_value_token(token: &str) -> bool {
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
pub(super) fn set_property(obj: &mut Map<String, Value>, path: &str, value: Value) {
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
pub(super) struct ParamParser<'t> {
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
    pub(super) fn trim_rest(&self, s: &'t str) -> &'t str {
        if self.partial {
            trim_start_js(s)
        } else {
            s.trim_matches(is_js_space)
        }
    }

    /// `nextToken`: a quoted token (to its closing quote not preceded by `\`, or to the end)
    /// or a run of non-space characters.
    pub(super) fn next_token(&mut self) -> Option<String> {
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
    pub(super) fn flag_value(
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
    pub(super) fn step(&mut self, defs: &ParameterDefinitions) -> Result<bool, String> {
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
