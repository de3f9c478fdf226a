//! Versions weir starts itself: pick a port, spawn, wait until healthy (starting again on another
//! port when the first was taken), stop gracefully.
//!
//! A version must not outlive weir, nor leave behind anything it started (a command may well be
//! `sh -c "worker & exec server"`), even when weir is killed with SIGKILL and cannot clean up.
//! So each command runs in a process group of its own, led by a small POSIX shell guard
//! ([`GUARD`]) whose standard input is a pipe that only weir holds open. Stopping a version means
//! closing that pipe; when weir goes away for any reason the kernel closes it too. Either way the
//! guard signals the whole group: TERM, then KILL once the command is gone or 5 s have passed.
//!
//! Why not (also) `PR_SET_PDEATHSIG` on Linux: it needs `prctl` in the child between fork and
//! exec (unsafe code, or `setpriv --pdeathsig` in front of the guard), it fires when the *thread*
//! that spawned the child exits rather than the process (tokio's blocking threads come and go),
//! and it would reach the guard alone, not the group. The pipe's end-of-file reaches the guard
//! exactly when the last copy of weir's end closes (it is close-on-exec, so no other program
//! inherits it), which is what "weir is gone" means. What the pipe cannot catch is a program
//! that leaves the group on purpose (`setsid`, a daemon that detaches): that one is on its own.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use weir_core::model::local::VersionSpec;
use weir_engine::ProviderError;
use weir_http::HttpClient;

/// A started version.
#[derive(Debug)]
pub struct VersionProcess {
    child: Child,
    /// Where it serves.
    pub address: SocketAddr,
}

/// Runs `"$@"` and waits for it, as the leader of the process group weir started it in (so
/// `-$$` is the group). As soon as its standard input (a pipe only weir holds open) reaches
/// end-of-file, a watcher signals the whole group: TERM, then KILL when the command has exited or
/// 5 s later, whichever comes first - so whatever the command started goes too, even what ignores
/// TERM. The guard and the watcher ignore the TERM (set after the command was started, so the
/// command keeps the default); the final KILL ends them with the rest. The guard exits with the
/// command's status, so a version that dies is seen as dead; what a command that ended on its own
/// left behind gets a TERM then, and the KILL once weir lets go of the version. The command's own
/// standard input is `/dev/null`; the shell's own word on how it ended ("Terminated") is not
/// printed.
const GUARD: &str = r#"exec 3<&0
"$@" </dev/null 3<&- &
app=$!
trap '' TERM
(
  cat <&3
  kill -TERM -$$
  n=0
  while kill -0 "$app" && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
  kill -KILL -$$
) >/dev/null 2>&1 &
exec 3<&-
wait "$app" 2>/dev/null
status=$?
kill -TERM -$$ 2>/dev/null
exit "$status""#;

/// How many times a version is started on a new port when its port turned out to be taken.
const START_ATTEMPTS: usize = 3;

/// Picks a loopback port for a version to bind. The port has to be handed to the command, so
/// weir cannot bind it for the command; it checks the port is free and lets go. To keep the window
/// between the two binds from mattering, the port comes from below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`), where the kernel never hands out ports to other programs
/// that bind port 0 or connect out; a clash with a program that asked for that very port is
/// caught by [`VersionProcess::start`], which tries again on another port.
fn pick_port() -> std::io::Result<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    const LOW: u16 = 10_000;
    if ephemeral_low > LOW + 1_000 {
        let span = u64::from(ephemeral_low - LOW);
        for _ in 0..64 {
            let port = LOW + (random() % span) as u16;
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return Ok(port);
            }
        }
    }
    // No room below the ephemeral range (or all tried ports busy): let the kernel choose.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// A random number from std's per-process random hash keys (no random crate needed for this).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}

/// Whether someone else holds `port` now (after our command exited without serving on it).
fn port_taken(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err()
}

/// Why one attempt to start a version failed.
enum StartFailure {
    /// It exited before it was healthy and its port is held by someone else: it could not bind.
    PortTaken(String),
    /// It could not start or did not become healthy: perhaps it will next time.
    Failed(String),
    /// The program does not exist or cannot be executed: it never will.
    Unrunnable(String),
}

impl VersionProcess {
    /// Starts `spec.command` on a free port and waits until its health check answers 2xx. When
    /// the command exits early because another program took its port meanwhile, it is started
    /// again on another port (up to [`START_ATTEMPTS`] times), and `notes` says so for the
    /// rollout's history.
    pub async fn start(
        spec: &VersionSpec,
        client: &HttpClient,
        notes: &mut Vec<String>,
    ) -> Result<VersionProcess, ProviderError> {
        let mut attempt = 1;
        loop {
            let port = pick_port().map_err(|error| {
                ProviderError::transient(format!("cannot find a free port: {error}"))
            })?;
            match Self::start_on(spec, client, port).await {
                Ok(process) => return Ok(process),
                Err(StartFailure::PortTaken(reason)) if attempt < START_ATTEMPTS => {
                    notes.push(format!(
                        "{reason}; port {port} was taken by another program meanwhile, starting it again on another port (attempt {} of {START_ATTEMPTS})",
                        attempt + 1
                    ));
                    attempt += 1;
                }
                Err(StartFailure::PortTaken(reason) | StartFailure::Failed(reason)) => {
                    return Err(ProviderError::transient(reason));
                }
                Err(StartFailure::Unrunnable(reason)) => {
                    return Err(ProviderError::permanent(reason));
                }
            }
        }
    }

    async fn start_on(
        spec: &VersionSpec,
        client: &HttpClient,
        port: u16,
    ) -> Result<VersionProcess, StartFailure> {
        let Some((program, args)) = spec
            .command
            .as_ref()
            .and_then(|command| command.split_first())
        else {
            return Err(StartFailure::Failed("the version has no command".into()));
        };
        let substitute = |text: &String| text.replace("{port}", &port.to_string());
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(GUARD)
            .arg("weir-version")
            .arg(substitute(program))
            .args(args.iter().map(substitute))
            .envs(&spec.env)
            .env("PORT", port.to_string())
            // The guard's lifeline: weir never writes to it; its end-of-file means weir is gone.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Its own group, led by the guard: stopping the version signals the group. Also out
            // of the terminal's foreground group, so Ctrl-C reaches weir, which stops versions
            // in order, and not the versions directly.
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|error| StartFailure::Failed(format!("cannot start {program:?}: {error}")))?;
        let mut process = VersionProcess {
            child,
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        };
        let url = format!("http://{}{}", process.address, spec.health_path());
        let deadline = tokio::time::Instant::now() + spec.start_timeout();
        loop {
            if let Ok(Some(exit)) = process.child.try_wait() {
                let reason = format!("{program:?} exited with {exit} before becoming healthy");
                // The shell's codes for "not found" and "not executable": no retry can help.
                if matches!(exit.code(), Some(126 | 127)) {
                    return Err(StartFailure::Unrunnable(format!(
                        "{reason}: {program:?} cannot be run (not found or not executable)"
                    )));
                }
                return Err(if port_taken(port) {
                    StartFailure::PortTaken(reason)
                } else {
                    StartFailure::Failed(reason)
                });
            }
            if let Ok(answer) = client.get(&url, Duration::from_secs(1)).await
                && answer.status.is_success()
            {
                return Ok(process);
            }
            if tokio::time::Instant::now() >= deadline {
                process.stop_now().await;
                return Err(StartFailure::Failed(format!(
                    "{program:?} did not answer {url} with 2xx within {:?}",
                    spec.start_timeout()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Stops it after `drain` (in-flight requests finish; the router sends it nothing new).
    pub fn stop_after(mut self, drain: Duration) {
        tokio::spawn(async move {
            tokio::time::sleep(drain).await;
            self.stop_now().await;
        });
    }

    /// Stops it now: the command and everything in its group get TERM, then KILL once it is
    /// gone or after 5 s (see [`GUARD`]). Returns once the guard has exited; anything that
    /// ignored the TERM gets the KILL right after.
    pub async fn stop_now(&mut self) {
        // Closing the lifeline makes the guard stop the group; the router no longer sends it
        // traffic, so there is nothing to drain.
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

#[cfg(test)]
mod tests;
