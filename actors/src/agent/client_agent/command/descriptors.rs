//! The command tree TypeAgent's agents describe (`CommandDescriptor`, `CommandDescriptorTable`,
//! `ParameterDefinitions`) and [`parse_descriptors`], which reads it from a `getCommands`
//! answer within [`MAX_COMMAND_ENTRIES`] and [`MAX_COMMAND_DEPTH`].

use serde_json::Value;

use super::*;

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
    pub(super) fn parse(name: &str) -> Option<ValueType> {
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
pub(super) fn spend(budget: &mut usize, at: &str) -> Result<(), String> {
    if *budget == 0 {
        return Err(format!(
            "{at}: more than {MAX_COMMAND_ENTRIES} commands, flags and arguments"
        ));
    }
    *budget -= 1;
    Ok(())
}

/// `description` as a string ("" when absent or not a string: only usage texts show it).
pub(super) fn description_of(value: &Ordered) -> String {
    match value.get("description") {
        Some(Ordered::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// One `CommandDescriptors` node at `at`: a table when it has `commands`.
pub(super) fn read_descriptors(
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
pub(super) fn read_command(
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
pub(super) fn entries_of<'a>(
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
pub(super) fn bool_member(value: &Ordered, key: &str, at: &str) -> Result<Option<bool>, String> {
    match value.member(key) {
        None => Ok(None),
        Some(Ordered::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{at}.{key}: not a boolean")),
    }
}

/// A `type` member: one of the four type names.
pub(super) fn type_member(value: &Ordered, at: &str) -> Result<Option<ValueType>, String> {
    match value.member("type") {
        None => Ok(None),
        Some(Ordered::String(name)) => ValueType::parse(name).map(Some).ok_or_else(|| {
            format!("{at}.type: \"{name}\" is not \"string\", \"number\", \"boolean\" or \"json\"")
        }),
        Some(_) => Err(format!("{at}.type: not a string")),
    }
}

/// The type of a default value (`getTypeFromValue`): an array's is its first element's.
pub(super) fn type_of_default(value: &Ordered, at: &str) -> Result<ValueType, String> {
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
pub(super) fn read_parameters(
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
