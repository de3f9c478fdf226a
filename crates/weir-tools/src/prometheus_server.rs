//! A real Prometheus server for tests and trials: started from the `prometheus` binary on a free
//! loopback port with a generated configuration that scrapes the given targets every second,
//! stopped (and its data directory removed) when dropped.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

impl PrometheusServer {
    /// Starts Prometheus and waits (up to a minute) until it answers `/-/ready`.
    pub fn start(options: &PrometheusOptions) -> Result<PrometheusServer, String> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map_err(|error| format!("no free port: {error}"))?
            .port();
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let directory =
            std::env::temp_dir().join(format!("weir-prometheus-{}-{port}", std::process::id()));
        std::fs::create_dir_all(directory.join("data"))
            .map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
        let targets: Vec<String> = options
            .targets
            .iter()
            .map(|target| format!("\"{target}\""))
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: weir\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
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
            .arg(format!("--web.listen-address={address}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
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
        let child = command.spawn().map_err(|error| {
            format!(
                "cannot start {}: {error} (apt-get install prometheus)",
                binary()
            )
        })?;
        let mut server = PrometheusServer {
            child,
            address,
            directory,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Any HTTP answer (401 included, when authentication is on) means it listens;
            // 200 from /-/ready means it is ready, so authentication is checked via status line.
            match http_status(address, "/-/ready") {
                Some(200 | 401) => return Ok(server),
                _ if Instant::now() > deadline => {
                    return Err("prometheus did not become ready within 60 s".into());
                }
                _ => {}
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("prometheus exited at start: {status}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}
