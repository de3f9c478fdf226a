//! A throwaway PostgreSQL cluster per test: `initdb` into a fresh directory under `/tmp`, a
//! server listening on a unix socket only (no port to race for), databases made on demand,
//! stopped and removed when the [`PgCluster`] is dropped.
//!
//! The server programs come from Debian's `postgresql` package (`/usr/lib/postgresql/*/bin`;
//! `.ci/run` installs it). Without them a test fails naming the package; it never skips.
//! `initdb` and `postgres` refuse to run as root: as root the programs run as the `postgres`
//! user (`runuser`), on a directory it owns (docs/TESTING.md, and
//! `/work/shared/reference/postgres-testing.md` for the traps found).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `postgres` user's name (it owns the data directory when the tests run as root).
const SYSTEM_USER: &str = "postgres";

/// A running PostgreSQL cluster in a temporary directory, stopped and removed on drop.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    /// Removed on drop, after the server stopped.
    dir: tempfile::TempDir,
    as_root: bool,
}

impl PgCluster {
    /// Creates and starts a cluster (about 1-2 s). Panics, saying why, when it cannot (the
    /// server programs are missing, initdb or the start failed: the server log is included).
    pub fn start() -> PgCluster {
        let bin = server_programs();
        let as_root = running_as_root();
        // Under /tmp (not a private TMPDIR): the postgres user must reach it.
        let dir = tempfile::Builder::new()
            .prefix("weir-pg-")
            .tempdir_in("/tmp")
            .unwrap();
        let cluster = PgCluster { bin, dir, as_root };
        cluster.watchdog();
        std::fs::create_dir(cluster.socket_dir()).unwrap();
        if as_root {
            run(Command::new("chown")
                .arg("-R")
                .arg(format!("{SYSTEM_USER}:"))
                .arg(cluster.dir.path()));
        }
        let data = cluster.data_dir();
        run(cluster
            .program("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            // Only initdb's own writes skip the fsync; the server keeps fsync on.
            .arg("--no-sync"));
        // Settings in the file (rather than on pg_ctl's command line, which goes through a
        // shell) so that a restart reads them again.
        let settings = format!(
            "\n# weir-testkit\nlisten_addresses = ''\nunix_socket_directories = '{}'\n\
             max_connections = 200\nfsync = on\n",
            cluster.socket_dir().display()
        );
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str(&settings);
        std::fs::write(&conf, text).unwrap();
        cluster.pg_ctl_start();
        cluster
    }

    /// Stops the server and removes its directory once this process is gone, should it die
    /// without dropping the cluster (killed by nextest's timeout, or by a signal): pg_ctl
    /// detaches the postmaster from the test's process group, so it would outlive the test.
    /// `setsid` keeps the watchdog out of that group too.
    fn watchdog(&self) {
        let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ -d "$2/data" ]; then
  pm=$(head -n 1 "$2/data/postmaster.pid" 2>/dev/null)
  if [ -n "$pm" ]; then kill -CONT "$pm" 2>/dev/null; pkill -CONT -P "$pm" 2>/dev/null; fi
  if [ "$4" = root ]; then runuser -u postgres -- "$3/pg_ctl" -D "$2/data" -m immediate stop
  else "$3/pg_ctl" -D "$2/data" -m immediate stop; fi
fi
rm -rf "$2""#;
        let spawned = Command::new("setsid")
            .args(["sh", "-c", script, "weir-pg-watchdog"])
            .arg(std::process::id().to_string())
            .arg(self.dir.path())
            .arg(&self.bin)
            .arg(if self.as_root { "root" } else { "user" })
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        // Not waited for: it ends after this process. Without setsid the cluster is still
        // stopped by Drop on every ordinary end of a test.
        drop(spawned);
    }

    /// The directory holding the socket, the data and the server log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log (what to read when something went wrong).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Creates database `name` and returns its sqlx URL ([`PgCluster::url`]).
    pub fn database(&self, name: &str) -> String {
        assert!(
            name.bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_'),
            "database names in tests are [A-Za-z0-9_]: {name:?}"
        );
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""));
        self.url(name)
    }

    /// The sqlx URL of database `name`: user `postgres` over the cluster's unix socket.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@localhost/{name}?host={}",
            self.socket_dir().display()
        )
    }

    /// Runs `sql` with `psql` in database `database` and returns what it printed (unaligned,
    /// tuples only), panicking when it fails.
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let output = run(Command::new(self.bin.join("psql"))
            .arg("-h")
            .arg(self.socket_dir())
            .args(["-U", "postgres", "-d", database])
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Stops the server the hard way (`pg_ctl stop -m immediate`: no checkpoint, crash recovery
    /// on the next start), as a crash would.
    pub fn stop_immediately(&self) {
        run(self.program("pg_ctl").arg("-D").arg(self.data_dir()).args([
            "-m",
            "immediate",
            "-w",
            "stop",
        ]));
    }

    /// Starts the server again after [`PgCluster::stop_immediately`] or a kill of the
    /// postmaster, retrying until [`crate::wait::DEADLINE`]: after a SIGKILL the old backends
    /// hold the shared memory for a moment and a start fails meanwhile.
    pub fn restart(&self) {
        let until = std::time::Instant::now() + crate::wait::DEADLINE;
        loop {
            match self.try_start() {
                Ok(()) => return,
                Err(error) if std::time::Instant::now() >= until => {
                    panic!("restarting PostgreSQL: {error}")
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
        }
    }

    /// Freezes the server (SIGSTOP to the postmaster and every process it started): it keeps
    /// its sockets, so connections are accepted by the kernel and then never answered, and
    /// statements in progress hang - a database that stopped answering (a partition, a stalled
    /// machine) rather than one that is down. [`PgCluster::thaw`] (or drop) resumes it.
    pub fn freeze(&self) {
        let postmaster = self
            .postmaster_pid()
            .expect("freezing PostgreSQL: it is not running (no postmaster.pid)");
        // The postmaster first, and stopped before its children are listed, so that it forks
        // no backend afterwards (one left running could still answer its connection).
        signal_all("STOP", &[postmaster]);
        wait_stopped(postmaster);
        let children = children_of(postmaster);
        signal_all("STOP", &children);
        for child in children {
            wait_stopped(child);
        }
    }

    /// Resumes a server [`PgCluster::freeze`] froze (harmless when it is not frozen).
    pub fn thaw(&self) {
        if let Some(postmaster) = self.postmaster_pid() {
            let mut pids = vec![postmaster];
            pids.extend(children_of(postmaster));
            signal_all("CONT", &pids);
        }
    }

    /// The postmaster's process id (the first line of `postmaster.pid`), while it runs; for
    /// tests that kill it.
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    fn pg_ctl_start(&self) {
        if let Err(error) = self.try_start() {
            panic!("{error}");
        }
    }

    fn try_start(&self) -> Result<(), String> {
        let output = self
            .program("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "120", "start"])
            .output()
            .map_err(|error| format!("running pg_ctl: {error}"))?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "pg_ctl start failed: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log()
        ))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// A server program, run as the `postgres` user when we are root, from a directory that
    /// user can enter.
    fn program(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        let mut command = if self.as_root {
            let mut command = Command::new("runuser");
            command.args(["-u", SYSTEM_USER, "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(self.dir.path());
        command
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // A frozen server would not stop: resume it first.
        self.thaw();
        // Best effort: the directory goes either way (the TempDir's own drop).
        let _ = self
            .program("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The processes whose parent is `parent` (from `/proc`).
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so read after
            // the last ')'.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// Waits until process `pid` is stopped (state `T`) or gone.
fn wait_stopped(pid: u32) {
    crate::wait::wait_until(&format!("process {pid} to stop"), || {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return Some(());
        };
        let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
        matches!(state, "T" | "t" | "Z" | "X").then_some(())
    });
}

/// Sends SIG`signal` to `pids` with kill(1) (best effort: a process may have ended).
fn signal_all(signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .output();
}

/// The newest `/usr/lib/postgresql/*/bin` holding `initdb`, `pg_ctl`, `postgres` and `psql`.
fn server_programs() -> PathBuf {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|entry| {
                    let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                    let bin = entry.path().join("bin");
                    ["initdb", "pg_ctl", "postgres", "psql"]
                        .iter()
                        .all(|program| bin.join(program).is_file())
                        .then_some((version, bin))
                })
                .collect();
            versions.sort();
            versions.pop().map(|(_, bin)| bin)
        })
        .clone()
        .unwrap_or_else(|| {
            panic!(
                "the PostgreSQL server programs were not found under /usr/lib/postgresql/*/bin: \
                 install them with `apt-get install postgresql` (.ci/run does)"
            )
        })
}

fn running_as_root() -> bool {
    let output = run(Command::new("id").arg("-u"));
    String::from_utf8_lossy(&output.stdout).trim() == "0"
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("running {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Where a test's store lives: a SQLite file by default, or a database on a throwaway
/// PostgreSQL cluster when `WEIR_TEST_STORE=postgres` (`.ci/run` runs the API and engine tests
/// both ways). Anything else in the variable fails the test, naming the values allowed.
#[derive(Debug)]
pub enum TestDb {
    /// A SQLite file in a temporary directory.
    Sqlite(crate::fixtures::TempDb),
    /// A fresh database (`url`) on its own cluster.
    Postgres {
        /// The cluster (stopped when this is dropped).
        cluster: PgCluster,
        /// The database's sqlx URL.
        url: String,
    },
}

impl TestDb {
    /// The store `WEIR_TEST_STORE` asks for (`sqlite`, the default, or `postgres`).
    pub fn from_env() -> TestDb {
        match std::env::var("WEIR_TEST_STORE").as_deref() {
            Err(_) | Ok("" | "sqlite") => TestDb::Sqlite(crate::fixtures::TempDb::new()),
            Ok("postgres") => {
                let cluster = PgCluster::start();
                let url = cluster.database("weir");
                TestDb::Postgres { cluster, url }
            }
            Ok(other) => panic!("WEIR_TEST_STORE={other:?}: expected sqlite or postgres"),
        }
    }
}
