//! Versions weir starts itself: allocate a port, spawn, wait until healthy, stop gracefully.

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
        let mut command = Command::new(substitute(program));
        command
            .args(args.iter().map(substitute))
            .envs(&spec.env)
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // If weir exits normally, its versions go with it.
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
        // SIGKILL: the router no longer sends it traffic, so there is nothing to drain.
        let _ = self.child.kill().await;
    }
}
