//! The action schema of a client agent, whatever it was written in: a small type model
//! ([`Type`], [`Decl`]) that the TypeScript reader ([`super::ts_schema`]) and the JSON reader
//! ([`super::pas_schema`]) both produce, turned here into the agent's actions — one
//! [`ClientAction`] per type with an `actionName: "<literal>"` field, its comment as the
//! description and its `parameters` as a JSON Schema the model fills in.
//!
//! Pure functions; bounded by the manifest size (the caller's bound) and by
//! [`MAX_TYPE_DEPTH`] for nested and recursive types.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

/// How deep types may nest (and references be followed) when a schema is turned into JSON
/// Schema; deeper ones become a free-form value. Also bounds the parsers' recursion.
pub const MAX_TYPE_DEPTH: usize = 24;

/// A type, as an action schema writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// `string`.
    String,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
    /// `any`, `unknown`, `object` and whatever has no closer JSON Schema: anything.
    Any,
    /// `null`.
    Null,
    /// `undefined`: dropped from unions (it only says "optional").
    Undefined,
    /// A literal: `"setAlarm"`, `3`, `true`.
    Literal(Value),
    /// `T[]` / `Array<T>`.
    Array(Box<Type>),
    /// `[A, B]`.
    Tuple(Vec<Type>),
    /// `{ a: T; b?: U }`, with an index signature's value type if any.
    Object {
        /// The fields, in order.
        fields: Vec<Field>,
        /// `[key: string]: T`: the type of any other field.
        rest: Option<Box<Type>>,
    },
    /// A named type declared elsewhere in the schema.
    Ref(String),
    /// `A | B`.
    Union(Vec<Type>),
    /// `A & B` (and `interface X extends A, B`).
    Intersection(Vec<Type>),
}

/// One field of an object type.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Its name.
    pub name: String,
    /// `name?:`.
    pub optional: bool,
    /// Its type.
    pub ty: Type,
    /// The comment above it: what the model reads about it.
    pub comment: Option<String>,
}

/// One named type of the schema (`type X = …`, `interface X {…}`, a JSON definition).
#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    /// Its name.
    pub name: String,
    /// The comment above it: for an action, its description.
    pub comment: Option<String>,
    /// Its type.
    pub ty: Type,
}

/// One action of a client agent, offered to the model as the tool `<agent>__<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientAction {
    /// `actionName`.
    pub name: String,
    /// The schema it came from (`schemaName` of the `executeAction` the client receives):
    /// the agent's name, or `<agent>.<sub>` for a sub-manifest's schema.
    pub schema_name: String,
    /// The comment above the action's type (empty when there is none).
    pub description: String,
    /// JSON Schema of `parameters` (an object; free-form when the schema says little).
    pub input_schema: Value,
    /// Whether the action's type declares `parameters` at all (`showAlarms` does not: the
    /// client then gets no `parameters` key, as TypeAgent's dispatcher sends it).
    pub has_parameters: bool,
}

/// The declarations of one schema file, by name, in file order.
pub struct Schema {
    /// Declarations in file order.
    decls: Vec<Decl>,
    /// Name → index into `decls` (the first declaration wins).
    by_name: HashMap<String, usize>,
}

impl Schema {
    /// The schema made of `decls`.
    pub fn new(decls: Vec<Decl>) -> Schema {
        let mut by_name = HashMap::new();
        for (i, d) in decls.iter().enumerate() {
            by_name.entry(d.name.clone()).or_insert(i);
        }
        Schema { decls, by_name }
    }

    fn get(&self, name: &str) -> Option<&Decl> {
        self.by_name.get(name).map(|&i| &self.decls[i])
    }

    /// The actions: the members of `entry` (the manifest's `schemaType`) that are action
    /// types, in order, or — without an entry — every action type in file order. Errors name
    /// what is missing.
    pub fn actions(
        &self,
        entry: Option<&str>,
        schema_name: &str,
    ) -> Result<Vec<ClientAction>, String> {
        let decls: Vec<&Decl> = match entry {
            Some(entry) => {
                let decl = self.get(entry).ok_or_else(|| {
                    format!("schema type '{entry}' is not declared in the schema")
                })?;
                let mut found = Vec::new();
                self.collect_actions(&decl.ty, Some(decl), 0, &mut found);
                if found.is_empty() {
                    return Err(format!(
                        "schema type '{entry}' has no action types (types with an `actionName: \"…\"` field)"
                    ));
                }
                found
            }
            None => self
                .decls
                .iter()
                .filter(|d| self.action_name(&d.ty, 0).is_some())
                .collect(),
        };
        let mut actions: Vec<ClientAction> = Vec::new();
        for decl in decls {
            let action = self.action(decl, schema_name)?;
            if actions.iter().any(|a| a.name == action.name) {
                return Err(format!("action '{}' is declared twice", action.name));
            }
            actions.push(action);
        }
        Ok(actions)
    }

    /// The action declarations `ty` names: itself, the members of a union, through references.
    fn collect_actions<'a>(
        &'a self,
        ty: &'a Type,
        decl: Option<&'a Decl>,
        depth: usize,
        out: &mut Vec<&'a Decl>,
    ) {
        if depth > MAX_TYPE_DEPTH {
            return;
        }
        match ty {
            Type::Union(members) => {
                for m in members {
                    self.collect_actions(m, None, depth + 1, out);
                }
            }
            Type::Ref(name) => {
                if let Some(d) = self.get(name) {
                    self.collect_actions(&d.ty, Some(d), depth + 1, out);
                }
            }
            ty => {
                if let Some(d) = decl.filter(|_| self.action_name(ty, 0).is_some()) {
                    if !out.iter().any(|o| std::ptr::eq(*o, d)) {
                        out.push(d);
                    }
                }
            }
        }
    }

    /// The fields of an object type, through references and intersections.
    fn fields<'a>(&'a self, ty: &'a Type, depth: usize, out: &mut Vec<&'a Field>) {
        if depth > MAX_TYPE_DEPTH {
            return;
        }
        match ty {
            Type::Object { fields, .. } => out.extend(fields),
            Type::Intersection(parts) => {
                for p in parts {
                    self.fields(p, depth + 1, out);
                }
            }
            Type::Ref(name) => {
                if let Some(d) = self.get(name) {
                    self.fields(&d.ty, depth + 1, out);
                }
            }
            _ => {}
        }
    }

    /// The `actionName` literal of an action type.
    fn action_name(&self, ty: &Type, depth: usize) -> Option<String> {
        let mut fields = Vec::new();
        self.fields(ty, depth, &mut fields);
        let field = fields.into_iter().find(|f| f.name == "actionName")?;
        match self.resolve(&field.ty, depth) {
            Type::Literal(Value::String(s)) => Some(s.clone()),
            Type::Union(members) if members.len() == 1 => match &members[0] {
                Type::Literal(Value::String(s)) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// `ty` with references followed (bounded).
    fn resolve<'a>(&'a self, ty: &'a Type, depth: usize) -> &'a Type {
        match ty {
            Type::Ref(name) if depth <= MAX_TYPE_DEPTH => match self.get(name) {
                Some(d) => self.resolve(&d.ty, depth + 1),
                None => ty,
            },
            _ => ty,
        }
    }

    fn action(&self, decl: &Decl, schema_name: &str) -> Result<ClientAction, String> {
        let name = self
            .action_name(&decl.ty, 0)
            .ok_or_else(|| format!("type '{}' has no `actionName` literal", decl.name))?;
        let mut fields = Vec::new();
        self.fields(&decl.ty, 0, &mut fields);
        let parameters = fields.into_iter().find(|f| f.name == "parameters");
        let input_schema = match parameters {
            None => json!({"type": "object", "properties": {}}),
            Some(field) => {
                let mut schema = self.json_schema(&field.ty, 0);
                match schema.get("type") {
                    Some(t) if t == "object" => {}
                    // Free-form (or a union of objects): the model sends an object.
                    None => schema["type"] = json!("object"),
                    Some(_) => {
                        return Err(format!(
                            "the parameters of action '{name}' (type '{}') are not an object type",
                            decl.name
                        ))
                    }
                }
                schema
            }
        };
        Ok(ClientAction {
            name,
            schema_name: schema_name.to_string(),
            description: decl.comment.clone().unwrap_or_default(),
            input_schema,
            has_parameters: parameters.is_some(),
        })
    }

    /// `ty` as JSON Schema: references inlined (to [`MAX_TYPE_DEPTH`]), comments as
    /// descriptions, unions of string literals as enums, `undefined` dropped.
    pub fn json_schema(&self, ty: &Type, depth: usize) -> Value {
        if depth > MAX_TYPE_DEPTH {
            return json!({});
        }
        let d = depth + 1;
        match ty {
            Type::String => json!({"type": "string"}),
            Type::Number => json!({"type": "number"}),
            Type::Boolean => json!({"type": "boolean"}),
            Type::Any | Type::Undefined => json!({}),
            Type::Null => json!({"type": "null"}),
            Type::Literal(v) => literal_schema(std::slice::from_ref(v)),
            Type::Array(item) => json!({"type": "array", "items": self.json_schema(item, d)}),
            Type::Tuple(items) => {
                let items: Vec<Value> = items.iter().map(|t| self.json_schema(t, d)).collect();
                json!({"type": "array", "prefixItems": items, "minItems": items.len(), "maxItems": items.len()})
            }
            Type::Object { fields, rest } => {
                let mut properties = Map::new();
                let mut required = Vec::new();
                for f in fields {
                    let mut schema = self.json_schema(&f.ty, d);
                    if let (Some(c), Some(o)) = (&f.comment, schema.as_object_mut()) {
                        o.insert("description".into(), json!(c));
                    }
                    properties.insert(f.name.clone(), schema);
                    if !f.optional && !matches!(f.ty, Type::Undefined) {
                        required.push(json!(f.name));
                    }
                }
                let mut schema = json!({"type": "object", "properties": properties});
                if !required.is_empty() {
                    schema["required"] = Value::Array(required);
                }
                if let Some(rest) = rest {
                    schema["additionalProperties"] = self.json_schema(rest, d);
                }
                schema
            }
            Type::Ref(name) => match self.get(name) {
                Some(decl) => {
                    let mut schema = self.json_schema(&decl.ty, d);
                    if let (Some(c), Some(o)) = (&decl.comment, schema.as_object_mut()) {
                        o.entry("description").or_insert_with(|| json!(c));
                    }
                    schema
                }
                None => json!({}),
            },
            Type::Union(members) => self.union_schema(members, d),
            Type::Intersection(parts) => {
                let mut fields = Vec::new();
                self.fields(ty, depth, &mut fields);
                if parts
                    .iter()
                    .all(|p| matches!(self.resolve(p, d), Type::Object { .. }))
                {
                    let fields = fields.into_iter().cloned().collect();
                    self.json_schema(&Type::Object { fields, rest: None }, d)
                } else {
                    let all: Vec<Value> = parts.iter().map(|p| self.json_schema(p, d)).collect();
                    json!({"allOf": all})
                }
            }
        }
    }

    fn union_schema(&self, members: &[Type], depth: usize) -> Value {
        let members: Vec<&Type> = members
            .iter()
            .filter(|m| !matches!(m, Type::Undefined))
            .collect();
        let resolved: Vec<&Type> = members.iter().map(|m| self.resolve(m, depth)).collect();
        let literals: Option<Vec<Value>> = resolved
            .iter()
            .map(|t| match t {
                Type::Literal(v) => Some(v.clone()),
                _ => None,
            })
            .collect();
        match (members.len(), literals) {
            (0, _) => json!({}),
            (1, _) => self.json_schema(members[0], depth),
            (_, Some(values)) => literal_schema(&values),
            _ => {
                let any: Vec<Value> = members.iter().map(|m| self.json_schema(m, depth)).collect();
                json!({"anyOf": any})
            }
        }
    }
}

/// `{"type": …, "enum": [...]}` for literals of one JSON type, else a bare `enum`.
fn literal_schema(values: &[Value]) -> Value {
    let kind = |v: &Value| match v {
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        _ => "null",
    };
    let first = values.first().map(kind);
    if first.is_some() && values.iter().all(|v| Some(kind(v)) == first) {
        json!({"type": first, "enum": values})
    } else {
        json!({"enum": values})
    }
}
