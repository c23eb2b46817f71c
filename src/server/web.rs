//! The built-in web client: plain HTML / CSS / JavaScript from `web/`, embedded in the binary
//! with `include_str!` and served on `/` (the page) and `/app/<file>` (its assets) to requests
//! that are not WebSocket upgrades. The page speaks the same agent-server protocol as every
//! other client, over a same-origin WebSocket, so the Origin check passes without
//! `--allow-origin`.
//!
//! Every answer has `Cache-Control: no-store` (the files change with the binary, and a page
//! opened with `?token=` must not sit in a cache with its address), and the page a strict
//! `Content-Security-Policy`: no inline script or style, nothing from other origins, and
//! WebSockets only to the server itself.

use actix_web::http::{header, Method};
use actix_web::{HttpRequest, HttpResponse};

/// The page's Content-Security-Policy. `frame-src blob: data:` and the sandboxed `srcdoc`
/// frames are for agent `html` content; `connect-src 'self'` covers the WebSocket to this
/// server (CSP 3: `'self'` matches `ws:`/`wss:` on the page's own host and port) and nothing
/// else, so injected script could not send what it reads anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self'; frame-src 'self' blob: data:; img-src 'self' data:; style-src 'self'; script-src 'self'; base-uri 'none'";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// `(name, content type, body)` for each file of `web/`, embedded from the crate root so the
/// table reads as a list of names.
macro_rules! web_files {
    ($($name:literal => $kind:expr),* $(,)?) => {
        &[$(($name, $kind, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/web/", $name)))),*]
    };
}

/// The files under `/app/`: name, content type, body.
const FILES: &[(&str, &str, &str)] = web_files![
    "index.html" => HTML,
    "app.js" => JS,
    "rpc.js" => JS,
    "markdown.js" => JS,
    "api.js" => JS,
    "completion.js" => JS,
    "composer.js" => JS,
    "connection.js" => JS,
    "dialogs.js" => JS,
    "dom.js" => JS,
    "interactions.js" => JS,
    "live.js" => JS,
    "log.js" => JS,
    "manage.js" => JS,
    "navigation.js" => JS,
    "pages.js" => JS,
    "render.js" => JS,
    "sidebar.js" => JS,
    "state.js" => JS,
    "status.js" => JS,
    "streaming.js" => JS,
    "ui.js" => JS,
    "util.js" => JS,
    "style.css" => CSS,
];

/// The asset served at `path`, as (content type, body): `/` is the page, `/app/<file>` one of
/// the files in `web/`. Anything else is `None`.
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    let name = if path == "/" {
        "index.html"
    } else {
        path.strip_prefix("/app/")?
    };
    FILES
        .iter()
        .find(|(file, _, _)| *file == name)
        .map(|&(_, content_type, body)| (content_type, body))
}

/// The HTTP answer for a request that is not a WebSocket upgrade: the asset for GET / HEAD,
/// 405 for other methods on an asset path, `None` when the path is not an asset.
pub fn respond(req: &HttpRequest) -> Option<HttpResponse> {
    let (content_type, body) = asset(req.path())?;
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        return Some(
            HttpResponse::MethodNotAllowed()
                .insert_header((header::ALLOW, "GET, HEAD"))
                .finish(),
        );
    }
    let mut res = HttpResponse::Ok();
    res.content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
    if content_type == HTML {
        res.insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
            .insert_header((header::X_FRAME_OPTIONS, "DENY"));
    }
    // actix-http leaves the body out of HEAD answers and keeps its Content-Length.
    Some(res.body(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;
    use actix_web::test::TestRequest;

    #[test]
    fn paths() {
        assert_eq!(asset("/").unwrap().0, HTML);
        assert!(asset("/").unwrap().1.contains("<title>Roundtable</title>"));
        assert_eq!(asset("/app/app.js").unwrap().0, JS);
        assert_eq!(asset("/app/rpc.js").unwrap().0, JS);
        assert_eq!(asset("/app/markdown.js").unwrap().0, JS);
        assert_eq!(asset("/app/style.css").unwrap().0, CSS);
        assert_eq!(asset("/app/index.html").unwrap().0, HTML);
        for missing in [
            "",
            "/app/",
            "/app",
            "/app/nope.js",
            "/app/../Cargo.toml",
            "/app/app.js/",
            "/index.html",
            "/health",
            "//",
        ] {
            assert!(asset(missing).is_none(), "{missing}");
        }
    }

    /// Every file in `web/` is served, with the content type its extension says, every
    /// module an ES module imports is one of them (a new module left out of [`FILES`] would
    /// load in a test checkout and fail in the browser), and index.html preloads each.
    #[test]
    fn every_web_file_and_every_import_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("web");
        for file in std::fs::read_dir(&dir).expect("web/ exists") {
            let name = file.unwrap().file_name().into_string().unwrap();
            let kind = match name.rsplit('.').next() {
                Some("js") => JS,
                Some("css") => CSS,
                Some("html") => HTML,
                _ => continue,
            };
            let served =
                asset(&format!("/app/{name}")).unwrap_or_else(|| panic!("{name} not served"));
            assert_eq!(served.0, kind, "{name}");
        }
        let index = asset("/app/index.html").expect("index.html").1;
        for (name, kind, body) in FILES {
            if *kind != JS {
                continue;
            }
            // index.html preloads every module but the one it loads, so the page fetches
            // them at once instead of one import level after another.
            if *name != "app.js" {
                let preload = format!("<link rel=\"modulepreload\" href=\"/app/{name}\">");
                assert!(index.contains(&preload), "index.html lacks {preload}");
            }
            for import in body.split("from \"./").skip(1) {
                let target = &import[..import.find('"').expect("closed import")];
                assert!(
                    asset(&format!("/app/{target}")).is_some(),
                    "{name} imports {target}"
                );
            }
        }
    }

    /// The CSP forbids inline code: the page must have none.
    #[test]
    fn page_has_no_inline_script_or_style() {
        let html = asset("/").unwrap().1;
        let lower = html.to_ascii_lowercase();
        assert!(!lower.contains("<style"));
        assert!(!lower.contains(" style="));
        assert!(!lower.contains("javascript:"));
        for tag in lower.split("<script").skip(1) {
            let open = &tag[..tag.find('>').expect("closed tag")];
            assert!(
                open.contains("src=\"/app/"),
                "inline script: <script{open}>"
            );
            assert!(tag[open.len() + 1..].starts_with("</script>"));
        }
        for (i, _) in lower.match_indices(" on") {
            let name: String = lower[i + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let after = &lower[i + 3 + name.len()..];
            assert!(
                name.is_empty() || !after.starts_with('='),
                "inline event handler attribute on{name}"
            );
        }
        assert!(!lower.contains("http://") && !lower.contains("https://"));
    }

    #[test]
    fn headers() {
        let req = TestRequest::get().uri("/").to_http_request();
        let res = respond(&req).unwrap();
        assert_eq!(res.status(), 200);
        let h = res.headers();
        assert_eq!(h.get(header::CONTENT_TYPE).unwrap(), HTML);
        assert_eq!(h.get(header::CACHE_CONTROL).unwrap(), "no-store");
        assert_eq!(
            h.get(header::CONTENT_SECURITY_POLICY).unwrap(),
            CONTENT_SECURITY_POLICY
        );

        let req = TestRequest::default()
            .method(Method::HEAD)
            .uri("/app/style.css")
            .to_http_request();
        let res = respond(&req).unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers().get(header::CONTENT_TYPE).unwrap(), CSS);
        assert!(res.headers().get(header::CONTENT_SECURITY_POLICY).is_none());

        let req = TestRequest::post().uri("/").to_http_request();
        let res = respond(&req).unwrap();
        assert_eq!(res.status(), 405);
        assert_eq!(res.headers().get(header::ALLOW).unwrap(), "GET, HEAD");

        let req = TestRequest::get().uri("/nope").to_http_request();
        assert!(respond(&req).is_none());
        let req = TestRequest::get().uri("/app/app.js").to_http_request();
        let body = respond(&req).unwrap().into_body().try_into_bytes().unwrap();
        assert_eq!(body, asset("/app/app.js").unwrap().1.as_bytes());
    }
}
