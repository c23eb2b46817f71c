//! `Writer`: one action's parameters written as JSON Schema (named types in place or under
//! `$defs`), every value made through a `JsonTally`.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::*;

/// Writes one action's parameters as JSON Schema, through a [`JsonTally`].
pub(super) struct Writer<'a> {
    /// The declarations.
    schema: &'a Schema,
    /// References to each declaration the parameters reach ([`Schema::uses`]): one is
    /// written in place, more go to `$defs`.
    uses: Vec<u32>,
    /// The `$defs` key of each declaration given one, by declaration index.
    def_keys: HashMap<usize, String>,
    /// Keys given, to keep them distinct.
    keys_taken: HashSet<String>,
    /// Declarations given a key, in the order they were first referenced; those from
    /// `written` on are still to be written.
    defs: Vec<usize>,
    /// How many of `defs` are written.
    written: usize,
    /// What the schema is made through.
    meter: &'a mut JsonTally,
}

impl<'a> Writer<'a> {
    /// The parameters schema of `root`: the type itself (a named one written in place, so the
    /// top of the schema says what it is), then `$defs` with every type it refers to.
    pub(super) fn parameters(
        schema: &'a Schema,
        root: &Type,
        meter: &'a mut JsonTally,
    ) -> Result<Map<String, Value>, Over> {
        let mut writer = Writer {
            schema,
            uses: schema.uses(root),
            def_keys: HashMap::new(),
            keys_taken: HashSet::new(),
            defs: Vec::new(),
            written: 0,
            meter,
        };
        writer.write_parameters(root)
    }

    pub(super) fn write_parameters(&mut self, root: &Type) -> Result<Map<String, Value>, Over> {
        let (ty, decl) = self.schema.resolve_decl(root);
        let comment = decl.and_then(|d| d.comment.as_deref());
        let mut schema = self.write(ty, 1, comment)?;
        if self.defs.is_empty() {
            return Ok(schema);
        }
        let mut defs = self.meter.object()?;
        while let Some(&index) = self.defs.get(self.written) {
            self.written += 1;
            let decl = &self.schema.decls[index];
            let def = self.write(&decl.ty, 1, decl.comment.as_deref())?;
            let key = self.def_keys[&index].clone();
            self.meter.put(&mut defs, &key, Value::Object(def))?;
        }
        self.meter.put(&mut schema, "$defs", Value::Object(defs))?;
        Ok(schema)
    }

    /// `ty` as JSON Schema, nested `depth` deep, described by `description`: comments as
    /// descriptions, unions of literals as enums, `undefined` dropped, intersections of object
    /// types as one object type.
    pub(super) fn write(
        &mut self,
        ty: &Type,
        depth: usize,
        description: Option<&str>,
    ) -> Result<Map<String, Value>, Over> {
        let deeper = depth + 1;
        let mut schema = match ty {
            Type::String => self.meter.typed("string")?,
            Type::Number => self.meter.typed("number")?,
            Type::Boolean => self.meter.typed("boolean")?,
            Type::Null => self.meter.typed("null")?,
            Type::Any | Type::Undefined => self.meter.object()?,
            Type::Literal(v) => self.literals(&[v])?,
            Type::Array(item) => {
                let mut schema = self.meter.typed("array")?;
                let items = self.write(item, deeper, None)?;
                self.meter.put(&mut schema, "items", Value::Object(items))?;
                schema
            }
            Type::Tuple(items) => {
                let mut schema = self.meter.typed("array")?;
                let mut written = Vec::with_capacity(items.len());
                for item in items {
                    written.push(Value::Object(self.write(item, deeper, None)?));
                }
                let prefix = self.meter.array(written)?;
                self.meter.put(&mut schema, "prefixItems", prefix)?;
                for key in ["minItems", "maxItems"] {
                    let n = Value::from(items.len());
                    self.meter.charge(1, n.to_string().len())?;
                    self.meter.put(&mut schema, key, n)?;
                }
                schema
            }
            Type::Object { fields, rest } => {
                let fields: Vec<&Field> = fields.iter().collect();
                self.object(&fields, rest.as_deref(), depth)?
            }
            Type::Ref(name) => return self.reference(name, depth, description),
            Type::Union(members) => return self.union(members, depth, description),
            Type::Intersection(parts) => {
                let objects = parts
                    .iter()
                    .all(|p| matches!(self.schema.resolve(p), Type::Object { .. }));
                if objects && depth < MAX_TYPE_DEPTH {
                    let mut fields = Vec::new();
                    self.schema.fields(ty, 0, &mut HashSet::new(), &mut fields);
                    self.object(&fields, None, depth)?
                } else {
                    let mut all = Vec::with_capacity(parts.len());
                    for p in parts {
                        all.push(Value::Object(self.write(p, deeper, None)?));
                    }
                    let all = self.meter.array(all)?;
                    let mut schema = self.meter.object()?;
                    self.meter.put(&mut schema, "allOf", all)?;
                    schema
                }
            }
        };
        self.describe(&mut schema, description)?;
        Ok(schema)
    }

    pub(super) fn describe(
        &mut self,
        schema: &mut Map<String, Value>,
        description: Option<&str>,
    ) -> Result<(), Over> {
        if let Some(text) = description {
            let text = self.meter.string(text)?;
            self.meter.put(schema, "description", text)?;
        }
        Ok(())
    }

    /// An object type with `fields` (a name given twice: the last one, in the first one's
    /// place) and `rest`, the type of any other field.
    pub(super) fn object(
        &mut self,
        fields: &[&Field],
        rest: Option<&Type>,
        depth: usize,
    ) -> Result<Map<String, Value>, Over> {
        let mut unique: Vec<&Field> = Vec::with_capacity(fields.len());
        let mut at: HashMap<&str, usize> = HashMap::new();
        for f in fields {
            match at.get(f.name.as_str()) {
                Some(&i) => unique[i] = f,
                None => {
                    at.insert(&f.name, unique.len());
                    unique.push(f);
                }
            }
        }
        let mut schema = self.meter.typed("object")?;
        let mut properties = self.meter.object()?;
        let mut required = Vec::new();
        for f in unique {
            let field = self.write(&f.ty, depth + 1, f.comment.as_deref())?;
            self.meter
                .put(&mut properties, &f.name, Value::Object(field))?;
            if !f.optional && !matches!(f.ty, Type::Undefined) {
                required.push(self.meter.string(&f.name)?);
            }
        }
        self.meter
            .put(&mut schema, "properties", Value::Object(properties))?;
        if !required.is_empty() {
            let required = self.meter.array(required)?;
            self.meter.put(&mut schema, "required", required)?;
        }
        if let Some(rest) = rest {
            let rest = self.write(rest, depth + 1, None)?;
            self.meter
                .put(&mut schema, "additionalProperties", Value::Object(rest))?;
        }
        Ok(schema)
    }

    /// The named type `name`: written in place when the parameters reach it once and it is
    /// not too deep, else `{"$ref": "#/$defs/<key>"}` (written under `$defs` once). An
    /// undeclared name is free-form.
    pub(super) fn reference(
        &mut self,
        name: &str,
        depth: usize,
        description: Option<&str>,
    ) -> Result<Map<String, Value>, Over> {
        let Some(index) = self.schema.index(name) else {
            let mut schema = self.meter.object()?;
            self.describe(&mut schema, description)?;
            return Ok(schema);
        };
        let decl = &self.schema.decls[index];
        if self.uses[index] <= 1 && depth < MAX_TYPE_DEPTH {
            return self.write(&decl.ty, depth + 1, description.or(decl.comment.as_deref()));
        }
        let key = self.def_key(index);
        let mut schema = self.meter.object()?;
        let target = self.meter.string(&format!("#/$defs/{key}"))?;
        self.meter.put(&mut schema, "$ref", target)?;
        self.describe(&mut schema, description)?;
        Ok(schema)
    }

    /// The `$defs` key of declaration `index`, given on first use (its name, with any
    /// character but `[A-Za-z0-9_.-]` as `_`, made distinct), queuing it to be written.
    pub(super) fn def_key(&mut self, index: usize) -> String {
        if let Some(key) = self.def_keys.get(&index) {
            return key.clone();
        }
        let base: String = self.schema.decls[index]
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let base = if base.is_empty() {
            "_".to_string()
        } else {
            base
        };
        let mut key = base.clone();
        let mut n = index;
        while self.keys_taken.contains(&key) {
            key = format!("{base}_{n}");
            n += 1;
        }
        self.keys_taken.insert(key.clone());
        self.def_keys.insert(index, key.clone());
        self.defs.push(index);
        key
    }

    /// A union: `undefined` members dropped, literals (through references) as one enum,
    /// else `anyOf`.
    pub(super) fn union(
        &mut self,
        members: &[Type],
        depth: usize,
        description: Option<&str>,
    ) -> Result<Map<String, Value>, Over> {
        let members: Vec<&Type> = members
            .iter()
            .filter(|m| !matches!(m, Type::Undefined))
            .collect();
        let literals: Option<Vec<&Value>> = members
            .iter()
            .map(|m| match self.schema.resolve(m) {
                Type::Literal(v) => Some(v),
                _ => None,
            })
            .collect();
        let mut schema = match (members.len(), literals) {
            (0, _) => self.meter.object()?,
            (1, _) => return self.write(members[0], depth, description),
            (_, Some(values)) => self.literals(&values)?,
            _ => {
                let mut any = Vec::with_capacity(members.len());
                for m in members {
                    any.push(Value::Object(self.write(m, depth + 1, None)?));
                }
                let any = self.meter.array(any)?;
                let mut schema = self.meter.object()?;
                self.meter.put(&mut schema, "anyOf", any)?;
                schema
            }
        };
        self.describe(&mut schema, description)?;
        Ok(schema)
    }

    /// `{"type": …, "enum": [...]}` for literals of one JSON type, else a bare `enum`.
    pub(super) fn literals(&mut self, values: &[&Value]) -> Result<Map<String, Value>, Over> {
        let kind = |v: &Value| match v {
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "boolean",
            Value::Null => "null",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let first = values.first().map(|v| kind(v));
        let mut schema = match first {
            Some(first) if values.iter().all(|v| kind(v) == first) => self.meter.typed(first)?,
            _ => self.meter.object()?,
        };
        let mut copies = Vec::with_capacity(values.len());
        for v in values {
            copies.push(self.meter.copy(v)?);
        }
        let values = self.meter.array(copies)?;
        self.meter.put(&mut schema, "enum", values)?;
        Ok(schema)
    }
}
