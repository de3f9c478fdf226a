//! A real Graphite render API for tests: `graphite-api` (PyPI; the render API over whisper files,
//! without carbon) served by `gunicorn` from the virtual environment `.ci/run` makes in
//! `target/graphite-venv` (`WEIR_GRAPHITE_VENV` names another). The server reads the whisper
//! files of a temporary directory, into which the test writes points with the `whisper` module
//! of the same environment ([`GraphiteServer::feed`]). gunicorn binds `127.0.0.1:0` and its log
//! says which port it got ("Listening at: http://127.0.0.1:PORT"); the server is ready once
//! `/render` answers. Dropping it kills gunicorn's master and its worker (a marker in their
//! command line finds both) and removes the directory.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::process::Marked;
use crate::wait::DEADLINE;

/// A running graphite-api.
pub struct GraphiteServer {
    child: Child,
    address: SocketAddr,
    directory: PathBuf,
    venv: PathBuf,
    // Dropped after `drop` killed the master: kills the worker should it still run.
    _marked: Marked,
}

/// The virtual environment: `$WEIR_GRAPHITE_VENV`, else `target/graphite-venv` (of
/// `$CARGO_TARGET_DIR` when set).
pub fn venv() -> PathBuf {
    std::env::var_os("WEIR_GRAPHITE_VENV").map_or_else(
        || {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
                PathBuf::from,
            );
            target.join("graphite-venv")
        },
        PathBuf::from,
    )
}

/// What to run to get the environment, for messages.
const INSTALL: &str = "bash .ci/run makes it; or by hand: python3 -m venv target/graphite-venv && \
     target/graphite-venv/bin/pip install graphite-api==1.1.3 whisper==1.1.10 gunicorn==27.0.1 \
     tzlocal==2.1 Flask==1.1.4 Werkzeug==1.0.1 Jinja2==2.11.3 itsdangerous==1.1.0 \
     MarkupSafe==2.0.1 (and apt-get install libcairo2)";

/// Whether the environment has graphite-api, whisper and gunicorn.
pub fn available() -> bool {
    let venv = venv();
    venv.join("bin/gunicorn").exists()
        && Command::new(venv.join("bin/python"))
            .args(["-c", "import graphite_api.render.glyph, whisper"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

/// Whether a test that needs graphite-api can run: true when the environment is there. In CI
/// (`CI` set) a missing one fails the test, since `.ci/run` makes it; elsewhere the test says it
/// was skipped and passes.
pub fn required() -> bool {
    if available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "graphite-api is not installed in {}: {INSTALL}",
        venv().display()
    );
    eprintln!(
        "SKIPPED: graphite-api is not installed in {} ({INSTALL}); CI runs this",
        venv().display()
    );
    false
}

impl GraphiteServer {
    /// Starts graphite-api under gunicorn on a port it picks itself, over an empty directory of
    /// whisper files; reads the bound address from gunicorn's log and waits until `/render`
    /// answers.
    pub fn start() -> Result<GraphiteServer, String> {
        let venv = venv();
        let directory = tempfile::Builder::new()
            .prefix("weir-graphite-")
            .tempdir()
            .map_err(|error| format!("cannot create a directory: {error}"))?
            .keep();
        let whisper = directory.join("whisper");
        std::fs::create_dir_all(&whisper)
            .map_err(|error| format!("cannot create {}: {error}", whisper.display()))?;
        let config = format!(
            "search_index: {}\nfinders:\n  - graphite_api.finders.whisper.WhisperFinder\nfunctions:\n  - graphite_api.functions.SeriesFunctions\n  - graphite_api.functions.PieFunctions\nwhisper:\n  directories:\n    - {}\n",
            directory.join("index").display(),
            whisper.display()
        );
        let config_file = directory.join("graphite-api.yaml");
        std::fs::write(&config_file, config).map_err(|error| error.to_string())?;
        let marked = Marked::new();
        let mut child = Command::new(venv.join("bin/gunicorn"))
            .env("GRAPHITE_API_CONFIG", &config_file)
            .args(["--bind", "127.0.0.1:0", "--workers", "1"])
            // gunicorn 27 listens on a control socket in ~/.gunicorn by default, shared by
            // every gunicorn of the user: tests running in parallel must not meet there.
            .arg("--no-control-socket")
            // In the master's and the worker's command line, so that both are found and killed.
            .args(["--env", &format!("WEIR_TEST_MARKER={}", marked.0)])
            .arg("graphite_api.app:app")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot start gunicorn of {}: {error}", venv.display()))?;
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
                    "gunicorn did not say where it listens (exit: {status:?})"
                ));
            }
        };
        let server = GraphiteServer {
            child,
            address,
            directory,
            venv,
            _marked: marked,
        };
        // The master listens before its worker has loaded the app: wait for a real answer.
        crate::wait::wait_until("graphite-api to answer /render", || {
            let response = crate::http::get(address, "/render?target=weir.ready&format=json")?;
            (response.status == 200).then_some(())
        });
        Ok(server)
    }

    /// Writes `points` (`(unix seconds, value)`) into the series `metric` (`a.b.c`: the file
    /// `a/b/c.wsp`), created first when missing with one archive of 1 s points over a day. Points
    /// must be within that day and not in the future (whisper drops others).
    pub fn feed(&self, metric: &str, points: &[(i64, f64)]) {
        let path = self
            .directory
            .join("whisper")
            .join(format!("{}.wsp", metric.replace('.', "/")));
        let points: Vec<String> = points
            .iter()
            .map(|(at, value)| format!("{at}:{value}"))
            .collect();
        let script = "import os, sys, whisper\n\
             path = sys.argv[1]\n\
             os.makedirs(os.path.dirname(path), exist_ok=True)\n\
             if not os.path.exists(path):\n    whisper.create(path, [(1, 86400)])\n\
             points = [(int(p.split(':')[0]), float(p.split(':')[1])) for p in sys.argv[2:]]\n\
             whisper.update_many(path, points)\n";
        let output = Command::new(self.venv.join("bin/python"))
            .args(["-c", script])
            .arg(&path)
            .args(&points)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| {
                panic!("cannot run the Python of {}: {error}", self.venv.display())
            });
        assert!(
            output.status.success(),
            "whisper could not write {}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
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

/// The address in gunicorn's `[INFO] Listening at: http://127.0.0.1:PORT (PID)` log line.
fn listening_address(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once("Listening at: http://")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The current time in unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64)
}

impl Drop for GraphiteServer {
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
        let line =
            "[2026-11-28 13:26:07 +0000] [3708] [INFO] Listening at: http://127.0.0.1:44155 (3708)";
        assert_eq!(
            listening_address(line),
            Some("127.0.0.1:44155".parse().unwrap())
        );
        assert_eq!(
            listening_address("[2026-11-28 13:26:07 +0000] [3708] [INFO] Starting gunicorn 27.0.1"),
            None
        );
    }
}
