//! `idem serve`: the playground's static files on 127.0.0.1, for local use. A teacher
//! can host the same folder on any static web server instead; nothing is fetched from
//! elsewhere.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::error::usage;

/// Serve the playground (the folder `bash web/build.sh` makes) on 127.0.0.1.
#[derive(Debug, Args)]
pub struct Cmd {
    /// The port; 0 picks a free one (the line printed says which).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The folder of the built page.
    #[arg(long, value_name = "DIR", default_value = "web/dist")]
    dir: PathBuf,
}

/// The content type of a file the page is made of.
fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// The file under `root` a request path names: `/` is `index.html`; a query is ignored;
/// a path that climbs out of `root` names nothing.
fn resolve(root: &Path, url: &str) -> Option<PathBuf> {
    let path = url.split(['?', '#']).next().unwrap_or("/");
    let rel = Path::new(path.trim_start_matches('/'));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let file = if path.ends_with('/') {
        root.join(rel).join("index.html")
    } else {
        root.join(rel)
    };
    file.is_file().then_some(file)
}

impl Cmd {
    /// Runs the command: serves until interrupted.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        if !self.dir.join("index.html").is_file() {
            return Err(usage(format!(
                "{} has no index.html: build the page first with `bash web/build.sh`",
                self.dir.display()
            )));
        }
        let server = tiny_http::Server::http(("127.0.0.1", self.port)).map_err(|e| {
            usage(format!(
                "cannot listen on 127.0.0.1:{} ({e}); choose another with --port",
                self.port
            ))
        })?;
        let port = server.server_addr().to_ip().map_or(self.port, |a| a.port());
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "serving {} at http://127.0.0.1:{port}/ (Ctrl-C stops)",
            self.dir.display()
        )?;
        out.flush()?;
        drop(out);
        for request in server.incoming_requests() {
            let get = matches!(
                request.method(),
                tiny_http::Method::Get | tiny_http::Method::Head
            );
            let file = get.then(|| resolve(&self.dir, request.url())).flatten();
            // A client that hung up is its own business: keep serving.
            let _ = match file.map(|f| (std::fs::read(&f), f)) {
                Some((Ok(body), f)) => {
                    let header =
                        tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type(&f))
                            .map_err(|()| anyhow::anyhow!("bad content type"))?;
                    request.respond(tiny_http::Response::from_data(body).with_header(header))
                }
                _ if !get => request.respond(
                    tiny_http::Response::from_string("only GET and HEAD").with_status_code(405),
                ),
                _ => request
                    .respond(tiny_http::Response::from_string("not found").with_status_code(404)),
            };
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_folder() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(
            resolve(root, "/Cargo.toml?x=1"),
            Some(root.join("Cargo.toml"))
        );
        assert_eq!(resolve(root, "/../Cargo.toml"), None);
        assert_eq!(resolve(root, "/src/../Cargo.toml"), None);
        assert_eq!(resolve(root, "/no-such-file"), None);
    }
}
