//! The action schema of a client agent, whatever it was written in: a small type model
//! ([`Type`], [`Decl`]) that the TypeScript reader ([`super::ts_schema`]) and the JSON reader
//! ([`super::pas_schema`]) both produce, turned here into the agent's actions — one
//! [`ClientAction`] per type with an `actionName: "<literal>"` field, its comment as the
//! description and its `parameters` as a JSON Schema the model fills in.
//!
//! Two steps, called by the registration (`super::parse_registration`): [`Schema::action_types`]
//! finds the action types (cheap: the registration checks their number and names before
//! anything is converted), then [`Schema::action`] writes each one's parameters schema.
//!
//! # The parameters schema
//! A named type that one action's parameters reach more than once (from two places, or from
//! itself) is written once, under the schema's `$defs`, and each use is
//! `{"$ref": "#/$defs/<name>"}`; a named type reached once is written in place (nested at most
//! [`MAX_TYPE_DEPTH`] deep, below which it too goes to `$defs`). The schema so grows with the
//! schema file, not with the number of paths through it — a type four fields wide and nine
//! levels deep is nine definitions, not 4⁹ copies — and a recursive type is a `$ref` to
//! itself.
//!
//! Bounds: every JSON value is counted as it is made, by a `JsonTally`, against
//! [`MAX_TOOL_SCHEMA_NODES`] and [`MAX_TOOL_SCHEMA_BYTES`] for the action and what is left of
//! [`MAX_AGENT_SCHEMA_NODES`] / [`MAX_AGENT_SCHEMA_BYTES`] for the agent ([`SchemaBudget`]);
//! the first value past a bound stops the conversion with an error, so a hostile schema costs
//! at most a bound's worth of work and memory. The walks over the types visit each
//! declaration once, or follow references at most [`MAX_TYPE_DEPTH`] deep.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

mod tally;
mod writer;

pub use tally::json_nodes;
use tally::{empty_parameters, JsonTally, Over};
use writer::Writer;

use super::{
    MAX_AGENT_SCHEMA_BYTES, MAX_AGENT_SCHEMA_NODES, MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_NODES,
};

/// How deep the parsers let types nest, how far references are followed when looking for
/// an action's fields, and how deep named types are written in place in a parameters schema
/// (deeper ones are `$ref`s).
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

/// An action type found in a schema: the declaration and its `actionName`.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionType {
    /// Index of the declaration in the [`Schema`].
    decl: usize,
    /// The declaration's name, for errors.
    pub type_name: String,
    /// Its `actionName` literal.
    pub name: String,
}

/// What the parameters schemas of one agent's actions may still take, over all its schemas
/// (the registration makes one per agent).
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaBudget {
    /// JSON values left, of [`MAX_AGENT_SCHEMA_NODES`].
    nodes_left: usize,
    /// Bytes (as compact JSON) left, of [`MAX_AGENT_SCHEMA_BYTES`].
    bytes_left: usize,
}

impl Default for SchemaBudget {
    fn default() -> SchemaBudget {
        SchemaBudget {
            nodes_left: MAX_AGENT_SCHEMA_NODES,
            bytes_left: MAX_AGENT_SCHEMA_BYTES,
        }
    }
}

impl SchemaBudget {
    /// A meter for one action: its own bounds, or what the agent has left if less.
    fn meter(&self) -> JsonTally {
        JsonTally {
            nodes: 0,
            bytes: 0,
            max_nodes: MAX_TOOL_SCHEMA_NODES.min(self.nodes_left),
            max_bytes: MAX_TOOL_SCHEMA_BYTES.min(self.bytes_left),
        }
    }

    /// What the schemas charged to it used: (JSON values, bytes as compact JSON).
    pub fn used(&self) -> (usize, usize) {
        (
            MAX_AGENT_SCHEMA_NODES - self.nodes_left,
            MAX_AGENT_SCHEMA_BYTES - self.bytes_left,
        )
    }

    /// Takes what an action's schema used.
    fn spend(&mut self, meter: &JsonTally) {
        self.nodes_left -= meter.nodes;
        self.bytes_left -= meter.bytes;
    }
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

    fn index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    fn get(&self, name: &str) -> Option<&Decl> {
        self.index(name).map(|i| &self.decls[i])
    }

    /// The actions, converted: [`Schema::action_types`], then [`Schema::action`] for each.
    pub fn actions(
        &self,
        entry: Option<&str>,
        schema_name: &str,
        budget: &mut SchemaBudget,
    ) -> Result<Vec<ClientAction>, String> {
        self.action_types(entry)?
            .iter()
            .map(|a| self.action(a, schema_name, budget))
            .collect()
    }

    /// The action types: the members of `entry` (the manifest's `schemaType`) that are action
    /// types, in order, or — without an entry — every action type in file order. Errors name
    /// what is missing, and an action declared twice.
    pub fn action_types(&self, entry: Option<&str>) -> Result<Vec<ActionType>, String> {
        let names = self.action_names();
        let decls: Vec<usize> = match entry {
            Some(entry) => {
                let index = self.index(entry).ok_or_else(|| {
                    format!("schema type '{entry}' is not declared in the schema")
                })?;
                let mut seen = HashSet::from([index]);
                let mut found = Vec::new();
                let ty = &self.decls[index].ty;
                self.collect_actions(ty, Some(index), &names, 0, &mut seen, &mut found);
                if found.is_empty() {
                    return Err(format!(
                        "schema type '{entry}' has no action types (types with an `actionName: \"…\"` field)"
                    ));
                }
                found
            }
            None => (0..self.decls.len())
                .filter(|&i| names[i].is_some())
                .collect(),
        };
        let mut types: Vec<ActionType> = Vec::with_capacity(decls.len());
        let mut taken = HashSet::new();
        for decl in decls {
            let name = names[decl].clone().expect("an action type has a name");
            if !taken.insert(name.clone()) {
                return Err(format!("action '{name}' is declared twice"));
            }
            types.push(ActionType {
                decl,
                type_name: self.decls[decl].name.clone(),
                name,
            });
        }
        Ok(types)
    }

    /// The action declarations `ty` names: itself, the members of a union, through
    /// references (each declaration once, in order; `seen` holds those reached). `names`:
    /// [`Schema::action_names`].
    fn collect_actions(
        &self,
        ty: &Type,
        decl: Option<usize>,
        names: &[Option<String>],
        depth: usize,
        seen: &mut HashSet<usize>,
        out: &mut Vec<usize>,
    ) {
        if depth > MAX_TYPE_DEPTH {
            return;
        }
        match ty {
            Type::Union(members) => {
                for m in members {
                    self.collect_actions(m, None, names, depth + 1, seen, out);
                }
            }
            Type::Ref(name) => {
                if let Some(i) = self.index(name).filter(|&i| seen.insert(i)) {
                    let ty = &self.decls[i].ty;
                    self.collect_actions(ty, Some(i), names, depth + 1, seen, out);
                }
            }
            _ => out.extend(decl.filter(|&i| names[i].is_some())),
        }
    }

    /// The `actionName` literal of each declaration (by index), `None` for a type that is not
    /// an action type: the first `actionName` field of its object type (through references
    /// and intersections, as [`Schema::fields`] lists them), when it is a string literal.
    ///
    /// Worked out for every declaration at once, each declaration's parts looked at once (a
    /// type reached through a reference being worked out counts as having none: a cycle),
    /// with an explicit stack: linear in the schema, however the types refer to each other.
    fn action_names(&self) -> Vec<Option<String>> {
        /// What a declaration's `actionName` field depends on, in order.
        enum Part<'a> {
            /// An object type of its own, with this `actionName` field or none.
            Own(Option<&'a Field>),
            /// Another declaration's.
            Of(usize),
        }
        fn parts<'a>(schema: &'a Schema, ty: &'a Type, out: &mut Vec<Part<'a>>) {
            match ty {
                Type::Object { fields, .. } => {
                    out.push(Part::Own(fields.iter().find(|f| f.name == "actionName")))
                }
                Type::Intersection(types) => {
                    for t in types {
                        parts(schema, t, out);
                    }
                }
                Type::Ref(name) => out.extend(schema.index(name).map(Part::Of)),
                _ => {}
            }
        }
        /// Per declaration: not looked at, being worked out, or its `actionName` field.
        #[derive(Clone, Copy)]
        enum State<'a> {
            New,
            Working,
            Done(Option<&'a Field>),
        }
        let mut state = vec![State::New; self.decls.len()];
        for start in 0..self.decls.len() {
            if !matches!(state[start], State::New) {
                continue;
            }
            // (declaration, its parts, how many of them are looked at)
            let mut stack: Vec<(usize, Vec<Part<'_>>, usize)> = Vec::new();
            let open = |i: usize, state: &mut Vec<State<'_>>| {
                state[i] = State::Working;
                let mut p = Vec::new();
                parts(self, &self.decls[i].ty, &mut p);
                (i, p, 0)
            };
            stack.push(open(start, &mut state));
            while let Some((decl, parts, next)) = stack.last_mut() {
                let mut found = None;
                let mut deeper = None;
                while let Some(part) = parts.get(*next) {
                    match *part {
                        Part::Own(field) => found = field,
                        Part::Of(other) => match state[other] {
                            State::Done(field) => found = field,
                            State::Working => {}
                            State::New => {
                                deeper = Some(other);
                                break;
                            }
                        },
                    }
                    *next += 1;
                    if found.is_some() {
                        break;
                    }
                }
                if let Some(other) = deeper {
                    let opened = open(other, &mut state);
                    stack.push(opened);
                    continue;
                }
                state[*decl] = State::Done(found);
                stack.pop();
            }
        }
        state
            .into_iter()
            .map(|s| match s {
                State::Done(Some(field)) => self.literal_name(field),
                _ => None,
            })
            .collect()
    }

    /// The string literal an `actionName` field's type is (through references).
    fn literal_name(&self, field: &Field) -> Option<String> {
        match self.resolve(&field.ty) {
            Type::Literal(Value::String(s)) => Some(s.clone()),
            Type::Union(members) if members.len() == 1 => match &members[0] {
                Type::Literal(Value::String(s)) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The fields of an object type, through references and intersections (each declaration
    /// once: `seen` holds those reached).
    fn fields<'a>(
        &'a self,
        ty: &'a Type,
        depth: usize,
        seen: &mut HashSet<usize>,
        out: &mut Vec<&'a Field>,
    ) {
        if depth > MAX_TYPE_DEPTH {
            return;
        }
        match ty {
            Type::Object { fields, .. } => out.extend(fields),
            Type::Intersection(parts) => {
                for p in parts {
                    self.fields(p, depth + 1, seen, out);
                }
            }
            Type::Ref(name) => {
                if let Some(i) = self.index(name).filter(|&i| seen.insert(i)) {
                    self.fields(&self.decls[i].ty, depth + 1, seen, out);
                }
            }
            _ => {}
        }
    }

    /// The field `name` of an object type (the first, through references and intersections).
    fn field<'a>(&'a self, ty: &'a Type, name: &str) -> Option<&'a Field> {
        let mut fields = Vec::new();
        self.fields(ty, 0, &mut HashSet::new(), &mut fields);
        fields.into_iter().find(|f| f.name == name)
    }

    /// `ty` with references followed (at most [`MAX_TYPE_DEPTH`]).
    fn resolve<'a>(&'a self, ty: &'a Type) -> &'a Type {
        self.resolve_decl(ty).0
    }

    /// `ty` with references followed (at most [`MAX_TYPE_DEPTH`]), and the declaration of the
    /// last one followed.
    fn resolve_decl<'a>(&'a self, mut ty: &'a Type) -> (&'a Type, Option<&'a Decl>) {
        let mut decl = None;
        for _ in 0..=MAX_TYPE_DEPTH {
            let Type::Ref(name) = ty else { break };
            let Some(d) = self.get(name) else { break };
            ty = &d.ty;
            decl = Some(d);
        }
        (ty, decl)
    }

    /// The action `action` (one of [`Schema::action_types`]) with its parameters as JSON
    /// Schema, charged to `budget`. Errors: parameters that are not an object type, a
    /// schema past a bound.
    pub fn action(
        &self,
        action: &ActionType,
        schema_name: &str,
        budget: &mut SchemaBudget,
    ) -> Result<ClientAction, String> {
        let decl = &self.decls[action.decl];
        let name = &action.name;
        let parameters = self.field(&decl.ty, "parameters");
        let mut meter = budget.meter();
        let written = match parameters {
            None => empty_parameters(&mut meter),
            Some(field) => Writer::parameters(self, &field.ty, &mut meter),
        };
        let mut schema = written.map_err(|Over| meter.too_large(name))?;
        match schema.get("type") {
            Some(t) if t == "object" => {}
            // Free-form (or a union of objects): the model sends an object.
            None => {
                let object = meter.string("object");
                object
                    .and_then(|o| meter.put(&mut schema, "type", o))
                    .map_err(|Over| meter.too_large(name))?;
            }
            Some(_) => {
                return Err(format!(
                    "the parameters of action '{name}' (type '{}') are not an object type",
                    decl.name
                ))
            }
        }
        let input_schema = Value::Object(schema);
        debug_assert_eq!(
            (meter.nodes, meter.bytes),
            (json_nodes(&input_schema), input_schema.to_string().len()),
            "the meter counts what is written"
        );
        budget.spend(&meter);
        Ok(ClientAction {
            name: name.clone(),
            schema_name: schema_name.to_string(),
            description: decl.comment.clone().unwrap_or_default(),
            input_schema,
            has_parameters: parameters.is_some(),
        })
    }

    /// How many references to each declaration (by index) `root` reaches, following each
    /// declaration once: 1 means it can be written in place.
    fn uses(&self, root: &Type) -> Vec<u32> {
        let mut uses = vec![0u32; self.decls.len()];
        let mut todo = vec![root];
        while let Some(ty) = todo.pop() {
            match ty {
                Type::Ref(name) => {
                    if let Some(i) = self.index(name) {
                        uses[i] = uses[i].saturating_add(1);
                        if uses[i] == 1 {
                            todo.push(&self.decls[i].ty);
                        }
                    }
                }
                Type::Array(item) => todo.push(item),
                Type::Tuple(types) | Type::Union(types) | Type::Intersection(types) => {
                    todo.extend(types)
                }
                Type::Object { fields, rest } => {
                    todo.extend(fields.iter().map(|f| &f.ty));
                    todo.extend(rest.as_deref());
                }
                Type::String
                | Type::Number
                | Type::Boolean
                | Type::Any
                | Type::Null
                | Type::Undefined
                | Type::Literal(_) => {}
            }
        }
        uses
    }
}
