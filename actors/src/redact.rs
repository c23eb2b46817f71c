//! Secrets out of URLs before they are shown or logged: [`redact_url_credentials`] is the one
//! function every place that prints a configured URL calls (`@system config`, `config show`,
//! `/health`, the log, provider and tool-server errors, the CLI's messages), so
//! `http://user:pass@host/` never reaches another client, a terminal or the journal.
//!
//! What is hidden: the user-info part of every `scheme://user[:pass]@host` in the text
//! (becomes `scheme://***@host`), and the value of every query parameter whose name says it
//! holds a secret (`token`, `key`, `api_key`, `password`, `secret`, `auth`, `sig`…:
//! `?token=***`). Scheme, host, port and path stay, so the message still says where.

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
