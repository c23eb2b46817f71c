//! `JsonTally`: the JSON of a parameters schema counted as it is made, against the
//! per-action and per-agent bounds; the first value past one stops the conversion.

use serde_json::{Map, Value};

use crate::agent::client_agent::{
    MAX_AGENT_SCHEMA_BYTES, MAX_AGENT_SCHEMA_NODES, MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_NODES,
};

/// `{"type": "object", "properties": {}}`: an action without parameters.
pub(super) fn empty_parameters(meter: &mut JsonTally) -> Result<Map<String, Value>, Over> {
    let mut schema = meter.typed("object")?;
    let properties = meter.object()?;
    meter.put(&mut schema, "properties", Value::Object(properties))?;
    Ok(schema)
}

/// The conversion went past a bound of its [`JsonTally`].
#[derive(Debug)]
pub(super) struct Over;

/// Counts the JSON an action's parameters schema is made of, as it is made: every value
/// ([`JsonTally::nodes`]) and its length as compact JSON ([`JsonTally::bytes`], exact: what
/// `to_string` gives). Every value of the schema is made through it.
#[derive(Debug)]
pub(super) struct JsonTally {
    /// JSON values made so far.
    pub(super) nodes: usize,
    /// Their length as compact JSON so far.
    pub(super) bytes: usize,
    /// Values allowed: [`MAX_TOOL_SCHEMA_NODES`], or what the agent has left.
    pub(super) max_nodes: usize,
    /// Bytes allowed: [`MAX_TOOL_SCHEMA_BYTES`], or what the agent has left.
    pub(super) max_bytes: usize,
}

impl JsonTally {
    pub(super) fn charge(&mut self, nodes: usize, bytes: usize) -> Result<(), Over> {
        self.nodes += nodes;
        self.bytes += bytes;
        if self.nodes > self.max_nodes || self.bytes > self.max_bytes {
            Err(Over)
        } else {
            Ok(())
        }
    }

    /// An empty object (add to it with [`JsonTally::put`]).
    pub(super) fn object(&mut self) -> Result<Map<String, Value>, Over> {
        self.charge(1, 2)?;
        Ok(Map::new())
    }

    /// Adds `key: value` to `map`, which does not have `key` yet; `value` was made through
    /// this meter.
    pub(super) fn put(
        &mut self,
        map: &mut Map<String, Value>,
        key: &str,
        value: Value,
    ) -> Result<(), Over> {
        debug_assert!(!map.contains_key(key), "{key} put twice");
        let comma = usize::from(!map.is_empty());
        self.charge(0, comma + json_string_len(key) + 1)?;
        map.insert(key.to_string(), value);
        Ok(())
    }

    pub(super) fn string(&mut self, s: &str) -> Result<Value, Over> {
        self.charge(1, json_string_len(s))?;
        Ok(Value::String(s.to_string()))
    }

    /// An array of values made through this meter.
    pub(super) fn array(&mut self, items: Vec<Value>) -> Result<Value, Over> {
        self.charge(1, 2 + items.len().saturating_sub(1))?;
        Ok(Value::Array(items))
    }

    /// `{"type": kind}`.
    pub(super) fn typed(&mut self, kind: &str) -> Result<Map<String, Value>, Over> {
        let mut schema = self.object()?;
        let kind = self.string(kind)?;
        self.put(&mut schema, "type", kind)?;
        Ok(schema)
    }

    /// A copy of `v` (a literal of the schema), value by value.
    pub(super) fn copy(&mut self, v: &Value) -> Result<Value, Over> {
        match v {
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                let items = items
                    .iter()
                    .map(|i| self.copy(i))
                    .collect::<Result<_, _>>()?;
                self.array(items)
            }
            Value::Object(o) => {
                let mut map = self.object()?;
                for (k, v) in o {
                    let v = self.copy(v)?;
                    self.put(&mut map, k, v)?;
                }
                Ok(Value::Object(map))
            }
            scalar => {
                self.charge(1, scalar.to_string().len())?;
                Ok(scalar.clone())
            }
        }
    }

    /// The error for going past the bound this meter hit, converting action `action`.
    pub(super) fn too_large(&self, action: &str) -> String {
        if self.nodes > MAX_TOOL_SCHEMA_NODES {
            format!(
                "the parameters schema of action '{action}' is too large (over the limit of \
                 {MAX_TOOL_SCHEMA_NODES} JSON nodes per action)"
            )
        } else if self.bytes > MAX_TOOL_SCHEMA_BYTES {
            format!(
                "the parameters schema of action '{action}' is too large (over the limit of \
                 {MAX_TOOL_SCHEMA_BYTES} bytes as JSON per action)"
            )
        } else if self.nodes > self.max_nodes {
            format!(
                "the parameters schemas of the agent's actions are too large (over the limit of \
                 {MAX_AGENT_SCHEMA_NODES} JSON nodes per agent, reached at action '{action}')"
            )
        } else {
            format!(
                "the parameters schemas of the agent's actions are too large (over the limit of \
                 {MAX_AGENT_SCHEMA_BYTES} bytes as JSON per agent, reached at action '{action}')"
            )
        }
    }
}

/// The length of `s` as a JSON string, quotes and escapes included (as `serde_json` writes
/// it: `\"`, `\\`, `\b \f \n \r \t`, other control characters as `\u00XX`).
pub(super) fn json_string_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// How many JSON values `v` is made of (itself included).
pub fn json_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(items) => items.iter().map(json_nodes).sum(),
        Value::Object(o) => o.values().map(json_nodes).sum(),
        _ => 0,
    }
}
