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
    /// Starts `weir serve` on a port it picks, over the database `db` (created when missing:
    /// `--create-db`), with `extra` arguments, and waits for its listening line (`url("api")`
    /// is where it answers).
    pub fn serve(binary: &str, db: &std::path::Path, extra: &[&str]) -> Weir {
        let db = db.display().to_string();
        let mut args = vec![
            "serve",
            "--db",
            &db,
            "--create-db",
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

/// A string no other process's command line contains, to find the processes a test started by
/// it: digits, so it can be the fraction of a `sleep` argument (`sleep 1001.MARKER`).
pub fn unique_marker() -> String {
    use std::hash::{BuildHasher, Hasher};
    // std's per-process random hash keys, with the time and the pid: no random crate needed.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{:020}", hasher.finish())
}

/// The ids of the processes whose command line contains `marker` (read from /proc; Linux).
pub fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        panic!("cannot read /proc: these tests look for processes there (Linux)");
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // A process that exits meanwhile has no command line any more: not counted.
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .split(|byte| *byte == 0)
                    .any(|arg| String::from_utf8_lossy(arg).contains(marker))
            })
        })
        .collect()
}

/// The processes marked with a marker from [`unique_marker`]: on drop, whatever still carries
/// the marker is killed with SIGKILL, so a failing test leaves nothing running behind it.
#[derive(Debug)]
pub struct Marked(pub String);

impl Marked {
    /// A new, unique marker.
    pub fn new() -> Marked {
        Marked(unique_marker())
    }

    /// The processes carrying it now.
    pub fn processes(&self) -> Vec<u32> {
        processes_with(&self.0)
    }

    /// Waits (at most `deadline`) until no process carries it; the failure lists what is left
    /// and whose child it is (parent 1: orphaned, under init).
    pub fn wait_until_gone(&self, deadline: std::time::Duration, after: &str) {
        let gone = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::wait::wait_until_within(deadline, after, || {
                self.processes().is_empty().then_some(())
            })
        }));
        if gone.is_err() {
            panic!(
                "{} processes still run {deadline:?} {after}:\n{}",
                self.processes().len(),
                self.describe()
            );
        }
    }

    /// Each process carrying it now, with its parent and its command line, one per line (for
    /// failure messages).
    pub fn describe(&self) -> String {
        self.processes()
            .iter()
            .map(|pid| {
                let parent = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        // After the command name in parentheses: state, then the parent's id.
                        let rest = stat.rsplit_once(')')?.1.to_owned();
                        rest.split_whitespace().nth(1).map(str::to_owned)
                    })
                    .unwrap_or_default();
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
                    .unwrap_or_default();
                let cmdline: String = cmdline.chars().take(120).collect();
                format!("  pid {pid} (parent {parent}): {}", cmdline.trim_end())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Default for Marked {
    fn default() -> Marked {
        Marked::new()
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        let left = self.processes();
        if !left.is_empty() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(left.iter().map(u32::to_string))
                .stderr(Stdio::null())
                .status();
        }
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

    #[test]
    fn marked_processes_are_found_and_killed_on_drop() {
        let marked = Marked::new();
        assert_ne!(marked.0, Marked::new().0);
        assert!(marked.processes().is_empty());
        let mut sleeping = Command::new("sleep")
            .arg(format!("1001.{}", marked.0))
            .spawn()
            .unwrap();
        // Between fork and exec the child still shows the test's own command line: wait for
        // the exec.
        crate::wait::wait_until("the marked sleep to show its command line", || {
            (marked.processes() == vec![sleeping.id()]).then_some(())
        });
        assert!(
            marked.describe().contains("sleep 1001."),
            "{}",
            marked.describe()
        );
        drop(marked);
        // Killed by the drop: it ends by a signal.
        let status = sleeping.wait().unwrap();
        assert_eq!(status.code(), None, "{status}");
    }
}

/// What `weir run FILE --output json` did with a rollout file, run to its end.
#[derive(Debug)]
pub struct RunOutcome {
    /// Its exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// The events of the rollout's history it printed, in order.
    pub events: Vec<serde_json::Value>,
    /// Everything it printed, standard output then standard error.
    pub printed: String,
}

/// Writes `yaml` to a file in a fresh directory and runs `weir run` on it (its database in the
/// same directory, JSON output) with these variables in its environment, to its end.
pub fn run_rollout_file(binary: &str, yaml: &str, env: &[(&str, &str)]) -> RunOutcome {
    let dir = crate::fixtures::TempDb::new();
    let file = dir.file("rollout.yaml");
    if let Err(error) = std::fs::write(&file, yaml) {
        panic!("cannot write {}: {error}", file.display());
    }
    let mut run = Weir::start_capturing_stderr(
        binary,
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
            "--output",
            "json",
        ],
        env,
    );
    let status = run.wait();
    let lines = run.lines();
    let printed = format!("{}\n{}", lines.join("\n"), run.stderr_lines().join("\n"));
    let events = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|line| line["event"].clone())
        .filter(|event| !event.is_null())
        .collect();
    RunOutcome {
        code: status.code(),
        events,
        printed,
    }
}
