//! Reads a JSON action schema (`schemaFile: {format: "pas", content}`) into [`Decl`]s. Two
//! shapes are understood:
//! - TypeAgent's *parsed action schema* (`ts/packages/actionSchema/src/serialize.ts`):
//!   `{"version":1, "entry":{"action":"X"}, "types":{"X":{"name","alias","type","comments"}}}`
//!   with types such as `{"type":"string-union","typeEnum":[…]}`,
//!   `{"type":"object","fields":{"f":{"optional","type","comments"}}}`,
//!   `{"type":"type-reference","name":"Y"}` and `{"type":"type-union","types":[…]}`;
//! - a plain JSON Schema whose `definitions` (or `$defs`) hold the action types: an object
//!   with `properties.actionName` a `const` (or a one-value `enum`) and, optionally,
//!   `properties.parameters`; `description`s are kept and local `$ref`s followed.
//!
//! The entry type (TypeAgent's `entry.action`, else the manifest's `schemaType`) is returned
//! with the declarations. Bounded like the TypeScript reader: by the manifest size and
//! [`MAX_TYPE_DEPTH`].

use serde_json::{Map, Value};

use super::schema::{Decl, Field, Type, MAX_TYPE_DEPTH};

/// The declarations of a JSON schema and the entry type it names, if it names one.
pub fn parse(content: &str) -> Result<(Vec<Decl>, Option<String>), String> {
    let root: Value =
        serde_json::from_str(content).map_err(|e| format!("schema is not JSON: {e}"))?;
    let Value::Object(root) = root else {
        return Err("schema is not a JSON object".into());
    };
    if let Some(types) = root.get("types") {
        let types = types
            .as_object()
            .ok_or("schema \"types\" is not an object")?;
        let entry = root
            .get("entry")
            .and_then(|e| e.get("action"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let decls = types
            .iter()
            .map(|(name, def)| pas_decl(name, def))
            .collect::<Result<_, _>>()?;
        return Ok((decls, entry));
    }
    let defs = root
        .get("definitions")
        .or_else(|| root.get("$defs"))
        .and_then(Value::as_object)
        .ok_or("schema has neither \"types\" (TypeAgent) nor \"definitions\" / \"$defs\" (JSON Schema)")?;
    let decls = defs
        .iter()
        .map(|(name, def)| {
            Ok(Decl {
                name: name.clone(),
                comment: description(def),
                ty: json_schema_type(def, 0)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok((decls, None))
}

/// One entry of a parsed action schema's `types`.
fn pas_decl(name: &str, def: &Value) -> Result<Decl, String> {
    let ty = def
        .get("type")
        .ok_or_else(|| format!("type '{name}' has no \"type\""))?;
    Ok(Decl {
        name: name.to_string(),
        comment: comments(def.get("comments")),
        ty: pas_type(ty, 0).map_err(|e| format!("type '{name}': {e}"))?,
    })
}

/// `["line", "line"]` → one text.
fn comments(v: Option<&Value>) -> Option<String> {
    let lines: Vec<&str> = v?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .map(str::trim)
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// A parsed action schema's `SchemaType`.
fn pas_type(v: &Value, depth: usize) -> Result<Type, String> {
    if depth > MAX_TYPE_DEPTH {
        return Err("types nested too deeply".into());
    }
    let d = depth + 1;
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .ok_or("a type without a \"type\" string")?;
    Ok(match kind {
        "string" => Type::String,
        "number" => Type::Number,
        "boolean" => Type::Boolean,
        "any" => Type::Any,
        "true" => Type::Literal(Value::Bool(true)),
        "false" => Type::Literal(Value::Bool(false)),
        "undefined" => Type::Undefined,
        "string-union" => {
            let values = v
                .get("typeEnum")
                .and_then(Value::as_array)
                .ok_or("a string-union without \"typeEnum\"")?;
            let mut members: Vec<Type> = values
                .iter()
                .map(|s| Type::Literal(Value::String(s.as_str().unwrap_or_default().to_string())))
                .collect();
            if members.len() == 1 {
                members.pop().expect("one")
            } else {
                Type::Union(members)
            }
        }
        "object" => {
            let fields = v
                .get("fields")
                .and_then(Value::as_object)
                .ok_or("an object without \"fields\"")?;
            let fields = fields
                .iter()
                .map(|(name, f)| {
                    let ty = f
                        .get("type")
                        .ok_or_else(|| format!("field '{name}' has no \"type\""))?;
                    Ok(Field {
                        name: name.clone(),
                        optional: f.get("optional").and_then(Value::as_bool).unwrap_or(false),
                        ty: pas_type(ty, d)?,
                        comment: comments(f.get("comments")),
                    })
                })
                .collect::<Result<_, String>>()?;
            Type::Object { fields, rest: None }
        }
        "array" => Type::Array(Box::new(pas_type(
            v.get("elementType")
                .ok_or("an array without \"elementType\"")?,
            d,
        )?)),
        "type-reference" => Type::Ref(
            v.get("name")
                .and_then(Value::as_str)
                .ok_or("a type-reference without \"name\"")?
                .to_string(),
        ),
        "type-union" => Type::Union(
            v.get("types")
                .and_then(Value::as_array)
                .ok_or("a type-union without \"types\"")?
                .iter()
                .map(|t| pas_type(t, d))
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("unknown type kind {other:?}")),
    })
}

fn description(v: &Value) -> Option<String> {
    v.get("description")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A JSON Schema as a [`Type`]: enough of it to find actions and rebuild parameters.
fn json_schema_type(v: &Value, depth: usize) -> Result<Type, String> {
    if depth > MAX_TYPE_DEPTH {
        return Err("schemas nested too deeply".into());
    }
    let d = depth + 1;
    let Value::Object(o) = v else {
        return Ok(Type::Any);
    };
    if let Some(r) = o.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return Ok(Type::Ref(name.to_string()));
    }
    if let Some(c) = o.get("const") {
        return Ok(Type::Literal(c.clone()));
    }
    if let Some(values) = o.get("enum").and_then(Value::as_array) {
        let mut members: Vec<Type> = values.iter().cloned().map(Type::Literal).collect();
        return Ok(if members.len() == 1 {
            members.pop().expect("one")
        } else {
            Type::Union(members)
        });
    }
    for (key, combine) in [("anyOf", true), ("oneOf", true), ("allOf", false)] {
        if let Some(parts) = o.get(key).and_then(Value::as_array) {
            let parts = parts
                .iter()
                .map(|p| json_schema_type(p, d))
                .collect::<Result<_, _>>()?;
            return Ok(if combine {
                Type::Union(parts)
            } else {
                Type::Intersection(parts)
            });
        }
    }
    Ok(match o.get("type").and_then(Value::as_str) {
        Some("string") => Type::String,
        Some("number" | "integer") => Type::Number,
        Some("boolean") => Type::Boolean,
        Some("null") => Type::Null,
        Some("array") => Type::Array(Box::new(match o.get("items") {
            Some(items) => json_schema_type(items, d)?,
            None => Type::Any,
        })),
        Some("object") => json_object(o, d)?,
        _ if o.contains_key("properties") => json_object(o, d)?,
        _ => Type::Any,
    })
}

fn json_object(o: &Map<String, Value>, depth: usize) -> Result<Type, String> {
    let required: Vec<&str> = o
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Vec::new();
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            fields.push(Field {
                name: name.clone(),
                // `actionName` is what makes the type an action, whatever `required` says.
                optional: !required.contains(&name.as_str()) && name != "actionName",
                ty: json_schema_type(p, depth)?,
                comment: description(p),
            });
        }
    }
    let rest = match o.get("additionalProperties") {
        Some(Value::Object(_)) => Some(Box::new(json_schema_type(
            &o["additionalProperties"],
            depth,
        )?)),
        _ => None,
    };
    Ok(Type::Object { fields, rest })
}
