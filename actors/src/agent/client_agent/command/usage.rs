//! A command's usage line and a table's list of sub-commands, for `@<agent> help`-style
//! answers.

use super::*;

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
