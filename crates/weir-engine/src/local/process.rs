//! Versions weir starts itself: allocate a port, spawn, wait until healthy, stop gracefully.
//!
//! A version must not outlive weir, even when weir is killed with SIGKILL and cannot clean up.
//! Without unsafe code there is no parent-death signal, so each command runs under a small POSIX
//! shell guard ([`GUARD`]) whose standard input is a pipe that only weir holds open: when weir
//! goes away for any reason the pipe reaches end-of-file and the guard stops the command.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::config::VersionSpec;
use crate::http::HttpClient;

/// A started version.
#[derive(Debug)]
pub struct VersionProcess {
    child: Child,
    /// Where it serves.
    pub address: SocketAddr,
}

/// Runs `"$@"` and waits for it. As soon as its standard input (a pipe only weir holds open)
/// reaches end-of-file, it stops the command: TERM, then KILL if it still runs 5 s later. It exits
/// with the command's status, so a version that dies is seen as dead. The command's own standard
/// input is `/dev/null`.
const GUARD: &str = r#"exec 3<&0
"$@" </dev/null 3<&- &
app=$!
(
  cat <&3
  kill -TERM "$app"
  n=0
  while kill -0 "$app" && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
  kill -KILL "$app"
) >/dev/null 2>&1 &
watcher=$!
exec 3<&-
wait "$app"
status=$?
kill "$watcher" 2>/dev/null
exit "$status""#;

/// Picks a free loopback port. The listener is closed before the command binds it; a race with
/// another process is possible but rare, and shows up as a failed health check.
fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

impl VersionProcess {
    /// Starts `spec.command` on a free port and waits until its health check answers 2xx.
    pub async fn start(spec: &VersionSpec, client: &HttpClient) -> Result<VersionProcess, String> {
        let Some((program, args)) = spec
            .command
            .as_ref()
            .and_then(|command| command.split_first())
        else {
            return Err("the version has no command".into());
        };
        let port = free_port().map_err(|error| format!("cannot find a free port: {error}"))?;
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
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|error| format!("cannot start {program:?}: {error}"))?;
        let mut process = VersionProcess {
            child,
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        };
        let url = format!("http://{}{}", process.address, spec.health_path());
        let deadline = tokio::time::Instant::now() + spec.start_timeout();
        loop {
            if let Ok(Some(exit)) = process.child.try_wait() {
                return Err(format!(
                    "{program:?} exited with {exit} before becoming healthy"
                ));
            }
            if let Ok(answer) = client.get(&url, Duration::from_secs(1)).await
                && answer.status.is_success()
            {
                return Ok(process);
            }
            if tokio::time::Instant::now() >= deadline {
                process.stop_now().await;
                return Err(format!(
                    "{program:?} did not answer {url} with 2xx within {:?}",
                    spec.start_timeout()
                ));
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

    /// Stops it now.
    pub async fn stop_now(&mut self) {
        // Closing the lifeline makes the guard stop the command; the router no longer sends it
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
