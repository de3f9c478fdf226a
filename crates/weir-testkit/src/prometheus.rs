//! A real Prometheus server for tests: started from the `prometheus` binary on a loopback port it
//! picks itself (its log says which) with a generated configuration that scrapes the given
//! targets every second, stopped (and its data directory removed) when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::wait::DEADLINE;

/// A running Prometheus.
pub struct PrometheusServer {
    child: Child,
    address: SocketAddr,
    directory: PathBuf,
}

/// How to start one.
#[derive(Debug, Clone, Default)]
pub struct PrometheusOptions {
    /// `host:port` targets scraped every second at `/metrics` (job `weir`).
    pub targets: Vec<SocketAddr>,
    /// Users and bcrypt hashes for Prometheus's basic authentication (`--web.config.file`);
    /// empty: no authentication.
    pub basic_auth_users: Vec<(String, String)>,
}

/// The binary: `$PROMETHEUS` or `prometheus` on the PATH.
pub fn binary() -> String {
    std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into())
}

/// Whether the binary can be run here.
pub fn available() -> bool {
    Command::new(binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether a test that needs Prometheus can run: true when the binary is here. In CI (`CI` set)
/// a missing binary fails the test, since `.ci/run` installs it; elsewhere the test says it was
/// skipped and passes.
pub fn required() -> bool {
    if available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "prometheus is not installed; .ci/run installs it (apt-get install prometheus)"
    );
    eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus); CI runs this");
    false
}

impl PrometheusServer {
    /// Starts Prometheus on a port it picks itself (`--web.listen-address=127.0.0.1:0`), reads
    /// the address it bound from its log, and waits until it answers `/-/ready`.
    pub fn start(options: &PrometheusOptions) -> Result<PrometheusServer, String> {
        let directory = tempfile::Builder::new()
            .prefix("weir-prometheus-")
            .tempdir()
            .map_err(|error| format!("cannot create a directory: {error}"))?
            .keep();
        std::fs::create_dir_all(directory.join("data"))
            .map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
        // Targets come from a file Prometheus watches, so they can change after it started
        // (a `weir serve` on port 0 is known only after Prometheus, whose address it needs).
        write_targets(&directory, &options.targets)?;
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weir\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    file_sd_configs:\n      - files: [\"{}\"]\n",
            directory.join("targets.json").display()
        );
        let config_file = directory.join("prometheus.yml");
        std::fs::write(&config_file, config).map_err(|error| error.to_string())?;
        let mut command = Command::new(binary());
        command
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                directory.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            // Info level: the line that names the bound address is an info line.
            .arg("--log.level=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !options.basic_auth_users.is_empty() {
            let users: Vec<String> = options
                .basic_auth_users
                .iter()
                .map(|(user, hash)| format!("  {user}: '{hash}'"))
                .collect();
            let web_config = directory.join("web.yml");
            std::fs::write(
                &web_config,
                format!("basic_auth_users:\n{}\n", users.join("\n")),
            )
            .map_err(|error| error.to_string())?;
            command.arg(format!("--web.config.file={}", web_config.display()));
        }
        let mut child = command.spawn().map_err(|error| {
            format!(
                "cannot start {}: {error} (apt-get install prometheus)",
                binary()
            )
        })?;
        let stderr = child.stderr.take().ok_or("stderr is piped")?;
        let (bound_tx, bound_rx) = std::sync::mpsc::channel::<SocketAddr>();
        // Reads the log to its end (so the pipe never fills), reporting the bound address.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(address) = listening_address(&line) {
                    let _ = bound_tx.send(address);
                }
            }
        });
        let address = match bound_rx.recv_timeout(DEADLINE) {
            Ok(address) => address,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                return Err(format!(
                    "prometheus did not say where it listens (exit: {status:?})"
                ));
            }
        };
        let server = PrometheusServer {
            child,
            address,
            directory,
        };
        // Any HTTP answer (401 included, when authentication is on) means it serves.
        crate::wait::wait_until("prometheus to answer /-/ready", || {
            matches!(http_status(address, "/-/ready"), Some(200 | 401)).then_some(())
        });
        Ok(server)
    }

    /// Scrapes `targets` (`host:port`, at `/metrics`, every second) from now on, instead of
    /// those it had; waits until Prometheus lists them.
    pub fn set_targets(&self, targets: &[SocketAddr]) {
        write_targets(&self.directory, targets).unwrap();
        crate::wait::wait_until("prometheus to pick up its new targets", || {
            let (status, body) = http_get(self.address, "/api/v1/targets")?;
            (status == 200
                && targets
                    .iter()
                    .all(|target| body.contains(&target.to_string())))
            .then_some(())
        });
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

/// The status code of `GET path`, or `None` when nothing answers.
fn http_status(address: SocketAddr, path: &str) -> Option<u16> {
    http_get(address, path).map(|(status, _)| status)
}

fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    crate::http::get(address, path).map(|response| (response.status, response.body))
}

/// The file of targets Prometheus watches (file-based service discovery), written whole and
/// renamed into place so Prometheus never reads half of it.
fn write_targets(directory: &Path, targets: &[SocketAddr]) -> Result<(), String> {
    let targets: Vec<String> = targets.iter().map(ToString::to_string).collect();
    let groups = serde_json::json!([{ "targets": targets }]);
    let partial = directory.join("targets.json.partial");
    std::fs::write(&partial, groups.to_string()).map_err(|error| error.to_string())?;
    std::fs::rename(&partial, directory.join("targets.json")).map_err(|error| error.to_string())
}

/// The address in Prometheus's `msg="Listening on" address=127.0.0.1:PORT` log line.
fn listening_address(line: &str) -> Option<SocketAddr> {
    if !line.contains("msg=\"Listening on\"") {
        return None;
    }
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("address="))?
        .parse()
        .ok()
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_address_is_read_from_the_log() {
        let line = r#"ts=2026-11-25T02:43:10.941Z caller=tls_config.go:232 level=info component=web msg="Listening on" address=127.0.0.1:38467"#;
        assert_eq!(
            listening_address(line),
            Some("127.0.0.1:38467".parse().unwrap())
        );
        let earlier = r#"ts=2026-11-25T02:43:10.935Z caller=web.go:503 level=info component=web msg="Start listening for connections" address=127.0.0.1:0"#;
        assert_eq!(listening_address(earlier), None);
    }
}
