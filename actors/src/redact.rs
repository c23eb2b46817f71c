//! Secrets out of URLs before they are shown or logged: [`redact_url_credentials`] is the one
//! function every place that prints a configured URL calls (`@system config`, `config show`,
//! `/health`, the log, provider and tool-server errors, the CLI's messages), so
//! `http://user:pass@host/` never reaches another client, a terminal or the journal.
//!
//! What is hidden: the user-info part of every `scheme://user[:pass]@host` in the text
//! (becomes `scheme://***@host`), and the value of every query parameter whose name says it
//! holds a secret (`token`, `key`, `api_key`, `password`, `secret`, `auth`, `sig`…:
//! `?token=***`). Scheme, host, port and path stay, so the message still says where.
//!
//! A command line (an MCP server's `args`, [`redact_args`]) hides the same way what its
//! secret-named options carry: the word after `--api-key`, `--token=…`, `API_KEY=…`,
//! `Authorization: …`, besides the URLs in it.

/// Characters that end a URL inside free text (a message, a TOML value, a list).
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ',' | ')' | ']' | '}')
}

/// Whether a query parameter named `name` carries a secret (its value is hidden).
fn secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "token",
        "key",
        "pass",
        "secret",
        "auth",
        "sig",
        "credential",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// `text` with the credentials of every URL in it replaced by `***` (see the module docs).
/// Text without `://` comes back unchanged.
pub fn redact_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after.find(ends_url).unwrap_or(after.len());
        let (url, tail) = after.split_at(end);
        out.push_str(&redact_after_scheme(url));
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// A comma-separated server list (`--cluster nats://a,b:4222`) redacted item by item; an item
/// without a scheme is read as `[user[:pass]@]host[:port]` (NATS takes bare addresses). Quotes
/// and spaces around an item (the list shown as a TOML string) stay.
pub fn redact_server_list(list: &str) -> String {
    list.split(',')
        .map(|item| {
            if item.contains("://") {
                return redact_url_credentials(item);
            }
            let start = item.len() - item.trim_start_matches(['"', '\'', ' ']).len();
            format!("{}{}", &item[..start], redact_after_scheme(&item[start..]))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `args` (a command's arguments) as they may be shown: the value of every option whose name
/// says it holds a secret (the query parameters' rule) is `***`, whether it is the next argument
/// (`--api-key VALUE`, unless that looks like another option), after `=` (`--token=VALUE`,
/// `API_KEY=VALUE`) or after `: ` (`Authorization: Bearer …`, as `--header` takes it); URLs
/// in the others are redacted as [`redact_url_credentials`] does.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut shown = Vec::with_capacity(args.len());
    let mut value_follows = false;
    for arg in args {
        if std::mem::take(&mut value_follows) && !arg.starts_with("--") {
            shown.push("***".to_string());
            continue;
        }
        let named = |sep: &str| {
            arg.split_once(sep)
                .filter(|(name, _)| is_option_name(name) && secret_parameter(name))
                .map(|(name, _)| format!("{name}{sep}***"))
        };
        if let Some(hidden) = named("=").or_else(|| named(": ")) {
            shown.push(hidden);
            continue;
        }
        if arg.starts_with('-') && !arg.contains('=') && secret_parameter(arg) {
            value_follows = true;
        }
        shown.push(redact_url_credentials(arg));
    }
    shown
}

/// Whether `name` (before `=` or `: `) reads as an option or a variable name, not as text:
/// letters, digits, `-` and `_` only.
fn is_option_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `[user[:pass]@]host[:port][/path][?query][#fragment]` with the user info and secret query
/// values hidden.
fn redact_after_scheme(url: &str) -> String {
    let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
    let (authority, rest) = url.split_at(authority_end);
    let mut out = match authority.rfind('@') {
        Some(at) => format!("***{}", &authority[at..]),
        None => authority.to_string(),
    };
    let Some(q) = rest.find('?') else {
        out.push_str(rest);
        return out;
    };
    out.push_str(&rest[..=q]);
    let query = &rest[q + 1..];
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if secret_parameter(name) && !value.is_empty() => {
                format!("{name}=***")
            }
            _ => pair.to_string(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    out.push_str(fragment);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_and_secret_parameters_are_hidden() {
        let cases = [
            ("http://127.0.0.1:1/v1", "http://127.0.0.1:1/v1"),
            (
                "http://user:pass@127.0.0.1:1/v1",
                "http://***@127.0.0.1:1/v1",
            ),
            ("nats://tok@h:4222", "nats://***@h:4222"),
            ("http://u:p@h", "http://***@h"),
            (
                "ws://127.0.0.1:8999/?token=abc&x=1",
                "ws://127.0.0.1:8999/?token=***&x=1",
            ),
            (
                "http://h/p?api_key=k&Password=p&name=n#frag",
                "http://h/p?api_key=***&Password=***&name=n#frag",
            ),
            // A password with '@' in it (not percent-encoded): the last '@' ends the user info.
            ("http://u:p@ss@h/x", "http://***@h/x"),
            (
                "tool-server = [\"w=http://u:p@h:1/v1\", \"v=http://h:2\"]",
                "tool-server = [\"w=http://***@h:1/v1\", \"v=http://h:2\"]",
            ),
            (
                "cannot reach http://a:b@h/tools: refused; then https://c@d/",
                "cannot reach http://***@h/tools: refused; then https://***@d/",
            ),
            (
                "no url here, user@example.com",
                "no url here, user@example.com",
            ),
            ("dangling ://", "dangling ://"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_url_credentials(text), want, "{text}");
        }
    }

    #[test]
    fn secret_options_of_a_command_line_are_hidden() {
        let args: Vec<String> = [
            "mcp-remote",
            "https://u:p@h/mcp?api_key=k",
            "--api-key",
            "sk-1",
            "--token=tok-2",
            "API_KEY=env-3",
            "--header",
            "Authorization: Bearer b-4",
            "--password",
            "--verbose",
            "--port=3",
            "x=y",
            "plain",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            redact_args(&args),
            [
                "mcp-remote",
                "https://***@h/mcp?api_key=***",
                "--api-key",
                "***",
                "--token=***",
                "API_KEY=***",
                "--header",
                "Authorization: ***",
                "--password",
                "--verbose",
                "--port=3",
                "x=y",
                "plain"
            ]
        );
    }

    #[test]
    fn server_lists_are_redacted_item_by_item() {
        assert_eq!(
            redact_server_list("nats://u:p@a:4222,b:4222,tok@c:4222"),
            "nats://***@a:4222,b:4222,***@c:4222"
        );
        assert_eq!(
            redact_server_list("\"tok@c:4222, u:p@d\""),
            "\"***@c:4222, ***@d\""
        );
    }
}
