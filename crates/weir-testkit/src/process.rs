//! Processes a test starts: killed and reaped when the test ends, however it ends; and `weir`
//! commands whose bound addresses are read back from their first line of output.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::wait::DEADLINE;

/// A child process killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct Guard(pub Child);

impl Guard {
    /// Starts `command` under a guard.
    pub fn spawn(command: &mut Command) -> Guard {
        Guard(
            command
                .spawn()
                .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}")),
        )
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a command to its end and returns what it printed.
pub fn output(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("cannot run {binary} {args:?}: {error}"))
}

/// `weir apply -f FILE --server URL`, which must succeed.
pub fn apply(binary: &str, file: &std::path::Path, server: &str) {
    let applied = output(
        binary,
        &[
            "apply",
            "-f",
            &file.display().to_string(),
            "--server",
            server,
        ],
    );
    assert!(
        applied.status.success(),
        "weir apply -f {}: {}",
        file.display(),
        String::from_utf8_lossy(&applied.stderr)
    );
}

/// A long-running `weir` command started with `--output json`, whose first line of standard
/// output names the addresses it bound (`{"listening": {"api": "127.0.0.1:41234"}}`). The rest
/// of its standard output is collected line by line; its standard error goes to the test's.
/// Killed with SIGKILL on drop.
#[derive(Debug)]
pub struct Weir {
    child: Child,
    listening: BTreeMap<String, SocketAddr>,
    lines: Arc<Mutex<Vec<String>>>,
    ended: mpsc::Receiver<()>,
    /// Its standard error, line by line, when started with [`Weir::start_capturing_stderr`].
    stderr: Option<Arc<Mutex<Vec<String>>>>,
}

impl Weir {
    /// Starts `weir serve` on a port it picks, over the database `db`, with `extra` arguments,
    /// and waits for its listening line (`url("api")` is where it answers).
    pub fn serve(binary: &str, db: &std::path::Path, extra: &[&str]) -> Weir {
        let db = db.display().to_string();
        let mut args = vec![
            "serve",
            "--db",
            &db,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        Weir::start(binary, &args)
    }

    /// Starts `binary` with `args` (which must ask for `--output json`) and waits for its
    /// listening line.
    pub fn start(binary: &str, args: &[&str]) -> Weir {
        Weir::start_with_env(binary, args, &[])
    }

    /// [`Weir::start`] with environment variables set for the command (e.g. `KUBECONFIG`).
    pub fn start_with_env(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Weir {
        Weir::launch(binary, args, env, false)
    }

    /// [`Weir::start_with_env`], and its standard error is collected ([`Weir::stderr_lines`])
    /// instead of going to the test's (for tests of what a server logs).
    pub fn start_capturing_stderr(binary: &str, args: &[&str], env: &[(&str, &str)]) -> Weir {
        Weir::launch(binary, args, env, true)
    }

    /// The lines printed on standard error so far (empty unless started with
    /// [`Weir::start_capturing_stderr`]).
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr
            .as_ref()
            .map(|lines| lines.lock().unwrap().clone())
            .unwrap_or_default()
    }

    fn launch(binary: &str, args: &[&str], env: &[(&str, &str)], capture_stderr: bool) -> Weir {
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if capture_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {binary} {args:?}: {error}"));
        let stderr = child.stderr.take().map(|pipe| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let collected = Arc::clone(&lines);
            // Reads to the end, so the pipe never fills however much the command logs.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    collected.lock().unwrap().push(line);
                }
            });
            lines
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (first_tx, first_rx) = mpsc::channel::<String>();
        let (ended_tx, ended) = mpsc::channel::<()>();
        let collected = Arc::clone(&lines);
        // Reads to the end, so the pipe never fills however much the command prints.
        std::thread::spawn(move || {
            let mut first = Some(first_tx);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match first.take() {
                    Some(sender) => {
                        let _ = sender.send(line);
                    }
                    None => collected.lock().unwrap().push(line),
                }
            }
            let _ = ended_tx.send(());
        });
        let first = match first_rx.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("{binary} {args:?} printed no listening line (exit: {status:?})");
            }
        };
        let listening = parse_listening(&first)
            .unwrap_or_else(|| panic!("{binary} {args:?}: not a listening line: {first}"));
        Weir {
            child,
            listening,
            lines,
            ended,
            stderr,
        }
    }

    /// The address bound under `name` (`api`, `router`, `metrics`, `admin`, `app`, ...).
    pub fn address(&self, name: &str) -> SocketAddr {
        *self
            .listening
            .get(name)
            .unwrap_or_else(|| panic!("no {name:?} address in {:?}", self.listening))
    }

    /// `http://` and the address bound under `name`.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}", self.address(name))
    }

    /// The lines printed on standard output after the listening line, so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for it to exit on its own (at most [`DEADLINE`]) and returns its status; every line
    /// it printed is in [`Weir::lines`] by then.
    pub fn wait(&mut self) -> ExitStatus {
        let status = crate::wait::wait_until("the weir command to exit", || {
            self.child.try_wait().unwrap()
        });
        // Its output is complete once the reader saw the end of the pipe.
        let _ = self.ended.recv_timeout(DEADLINE);
        status
    }

    /// Sends it a signal by name with `kill` (`TERM`, `INT`, `STOP`, `CONT`, ...), which must
    /// succeed.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.id().to_string()])
            .status()
            .unwrap_or_else(|error| panic!("cannot run kill: {error}"));
        assert!(status.success(), "kill -{name} {} failed", self.id());
    }

    /// Kills it with SIGKILL (it cleans up nothing) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `{"listening": {NAME: "HOST:PORT", ...}}` as a map.
fn parse_listening(line: &str) -> Option<BTreeMap<String, SocketAddr>> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value["listening"]
        .as_object()?
        .iter()
        .map(|(name, address)| Some((name.clone(), address.as_str()?.parse().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_line_is_read_and_anything_else_refused() {
        let parsed =
            parse_listening(r#"{"listening":{"api":"127.0.0.1:41234","router":"127.0.0.1:1"}}"#)
                .unwrap();
        assert_eq!(parsed["api"].port(), 41234);
        assert_eq!(parsed.len(), 2);
        assert!(parse_listening(r#"{"event":{}}"#).is_none());
        assert!(parse_listening(r#"{"listening":{"api":"nowhere"}}"#).is_none());
    }
}
