//! A small WebDriver client (W3C WebDriver over HTTP, JSON bodies) driving a headless Chromium
//! through `chromedriver`: enough for the dashboard's end-to-end test - open a page, find
//! elements, click, type, run a script, take a screenshot.
//!
//! `chromedriver --port=0` lets the OS pick its port and prints it ("ChromeDriver was started
//! successfully on port N."), so nothing guesses a free port. The driver (and with it the
//! browser) is killed when the [`Browser`] is dropped. [`Browser::start`] returns why it cannot
//! start (no `chromium` or `chromedriver` installed) so the test decides whether that is a skip or
//! a failure (docs/TESTING.md, "The dashboard in a browser").

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::process::Guard;
use crate::wait::DEADLINE;

/// The key under which WebDriver names an element.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium driven through its own `chromedriver`, with one session open.
#[derive(Debug)]
pub struct Browser {
    driver: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
    /// The driver, leader of its process group.
    process: Guard,
}

/// An element of the page, by WebDriver's reference.
#[derive(Debug, Clone)]
pub struct Element(String);

/// Finds `name` on `PATH` (or takes `variable` from the environment when set).
fn binary(variable: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

impl Browser {
    /// Starts `chromedriver` on a port the OS picks and opens a headless Chromium session with a
    /// `width` x `height` window. `Err` says what is missing when Chromium or chromedriver is
    /// not installed (`WEIR_CHROMIUM` and `WEIR_CHROMEDRIVER` name other binaries); any other
    /// failure (installed but not starting) panics, since that is a broken test machine, not a
    /// missing tool.
    pub fn start(width: u32, height: u32) -> Result<Browser, String> {
        let driver_binary = binary("WEIR_CHROMEDRIVER", &["chromedriver"]).ok_or(
            "chromedriver is not installed (Debian: apt-get install chromium-driver; or set WEIR_CHROMEDRIVER)",
        )?;
        let browser_binary = binary("WEIR_CHROMIUM", &["chromium", "chromium-browser"]).ok_or(
            "chromium is not installed (Debian: apt-get install chromium; or set WEIR_CHROMIUM)",
        )?;
        let (process, port) = start_driver(&driver_binary);
        let driver = SocketAddr::from(([127, 0, 0, 1], port));
        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless=new".to_string(),
            "--disable-gpu".to_string(),
            "--disable-dev-shm-usage".to_string(),
            "--no-first-run".to_string(),
            "--disable-extensions".to_string(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        // Chromium's sandbox refuses to run as root (CI containers).
        if is_root() {
            args.push("--no-sandbox".to_string());
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": browser_binary.display().to_string(), "args": args},
        }}});
        let created = match send(driver, "POST", "/session", Some(&capabilities)) {
            Ok(created) => created,
            Err(error) => {
                // A browser half started must not outlive the test.
                kill_group(process.0.id());
                panic!(
                    "chromedriver cannot start {}: {error}",
                    browser_binary.display()
                )
            }
        };
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {created}"))
            .to_string();
        Ok(Browser {
            driver,
            session,
            _profile: profile,
            process,
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        send(self.driver, method, &path, body)
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}"))
    }

    /// Opens `url` and waits for the page to load.
    pub fn open(&self, url: &str) {
        self.call("POST", "/url", Some(&json!({"url": url})));
    }

    /// Resizes the window (CSS pixels).
    pub fn resize(&self, width: u32, height: u32) {
        self.call(
            "POST",
            "/window/rect",
            Some(&json!({"width": width, "height": height})),
        );
    }

    /// The first element matching CSS `selector`, if any.
    pub fn find(&self, selector: &str) -> Option<Element> {
        let path = format!("/session/{}/element", self.session);
        let body = json!({"using": "css selector", "value": selector});
        match send(self.driver, "POST", &path, Some(&body)) {
            Ok(found) => found[ELEMENT].as_str().map(|id| Element(id.to_string())),
            Err(_) => None,
        }
    }

    /// Waits (up to the tests' deadline) for an element matching `selector` and returns it.
    pub fn wait_for(&self, selector: &str) -> Element {
        crate::wait::wait_until(&format!("an element {selector:?} on the page"), || {
            self.find(selector)
        })
    }

    /// Clicks `element` as a user would (scrolled into view; refused if covered or disabled
    /// elements do not react).
    pub fn click(&self, element: &Element) {
        self.call(
            "POST",
            &format!("/element/{}/click", element.0),
            Some(&json!({})),
        );
    }

    /// Clicks the element matching `selector` once it is there and enabled. A page that
    /// re-renders live may replace the element between finding and clicking it (a stale
    /// reference): then it is found again.
    pub fn click_on(&self, selector: &str) {
        crate::wait::wait_until(&format!("{selector:?} to take a click"), || {
            let element = self.find(selector)?;
            if self.enabled_of(selector) != Some(true) {
                return None;
            }
            let path = format!("/session/{}/element/{}/click", self.session, element.0);
            match send(self.driver, "POST", &path, Some(&json!({}))) {
                Ok(_) => Some(()),
                Err(error) if error.contains("stale element") => None,
                Err(error) => panic!("WebDriver click on {selector:?}: {error}"),
            }
        });
    }

    /// The rendered text of the first element matching `selector` (read in the page, so a live
    /// re-render cannot make it stale); `None` when there is none.
    pub fn text_of(&self, selector: &str) -> Option<String> {
        self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            &[json!(selector)],
        )
        .as_str()
        .map(str::to_string)
    }

    /// Whether the first element matching `selector` is enabled; `None` when there is none.
    pub fn enabled_of(&self, selector: &str) -> Option<bool> {
        self.execute(
            "const e = document.querySelector(arguments[0]); return e ? !e.disabled : null;",
            &[json!(selector)],
        )
        .as_bool()
    }

    /// Clears a text field and types `text` into it.
    pub fn type_into(&self, element: &Element, text: &str) {
        self.call(
            "POST",
            &format!("/element/{}/clear", element.0),
            Some(&json!({})),
        );
        self.call(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(&json!({"text": text})),
        );
    }

    /// The rendered text of `element`. A page that re-renders live may replace it first (a
    /// stale reference fails the test): read such text with [`Browser::text_of`].
    pub fn text(&self, element: &Element) -> String {
        self.call("GET", &format!("/element/{}/text", element.0), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Whether `element` is enabled (a button without `disabled`).
    pub fn enabled(&self, element: &Element) -> bool {
        self.call("GET", &format!("/element/{}/enabled", element.0), None)
            .as_bool()
            .unwrap_or(false)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page and returns what it
    /// returns.
    pub fn execute(&self, script: &str, args: &[Value]) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(&json!({"script": script, "args": args})),
        )
    }

    /// The cookies of the current page's site as WebDriver sees them, with the flags the page
    /// cannot read (`httpOnly`, `sameSite`, `secure`).
    pub fn cookies(&self) -> Vec<Value> {
        match self.call("GET", "/cookie", None) {
            Value::Array(cookies) => cookies,
            _ => Vec::new(),
        }
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap_or_default())
            .expect("a screenshot is base64")
    }

    /// Saves a PNG of the window as `path`.
    pub fn save_screenshot(&self, path: &Path) {
        std::fs::write(path, self.screenshot())
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closes the browser; then the driver's process group goes (anything the browser left),
        // and the guard reaps the driver.
        let _ = send(
            self.driver,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        kill_group(self.process.0.id());
    }
}

/// Kills process group `leader` with SIGKILL (`kill` the command: no unsafe code for libc).
fn kill_group(leader: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{leader}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The port in chromedriver's "ChromeDriver was started successfully on port N." line.
/// How many times chromedriver is started before its failure to start fails the test.
const DRIVER_STARTS: usize = 3;

/// Starts chromedriver on a port the OS picks, in a process group of its own (which takes
/// Chromium's processes along: killing the group leaves no browser behind even when a failed
/// test could not close its session), and reads the port it reports.
///
/// A driver that exits before reporting a port is started again, up to [`DRIVER_STARTS`] times:
/// with `--port=0` it binds IPv4 first and then the same port on IPv6, which another process may
/// hold on a busy machine. Its output is in the panic message when every start fails.
fn start_driver(driver_binary: &Path) -> (Guard, u16) {
    let mut outputs = Vec::new();
    for _ in 0..DRIVER_STARTS {
        let mut child = Command::new(driver_binary)
            .arg("--port=0")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", driver_binary.display()));
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let process = Guard(child);
        let (line_tx, line_rx) = mpsc::channel::<String>();
        // Read both streams to their end (so no pipe ever fills), passing every line on.
        for stream in [
            Box::new(stdout) as Box<dyn Read + Send>,
            Box::new(stderr) as Box<dyn Read + Send>,
        ] {
            let lines = line_tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = lines.send(line);
                }
            });
        }
        drop(line_tx);
        let mut printed = Vec::new();
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match line_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(port) = started_port(&line) {
                        return (process, port);
                    }
                    printed.push(line);
                }
                // Both streams closed: the driver is gone without a port; start another.
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "{} printed no \"started successfully on port N\" line within {DEADLINE:?}:\n{}",
                    driver_binary.display(),
                    printed.join("\n")
                ),
            }
        }
        outputs.push(printed.join("\n"));
    }
    panic!(
        "{} exited before reporting a port, {DRIVER_STARTS} times; it printed:\n{}",
        driver_binary.display(),
        outputs.join("\n---\n")
    )
}

fn started_port(line: &str) -> Option<u16> {
    let rest = line.split("started successfully on port ").nth(1)?;
    rest.trim().trim_end_matches('.').parse().ok()
}

fn is_root() -> bool {
    // The effective user id without libc: `id -u` is everywhere the browser test runs.
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .is_some_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// One WebDriver call: the `value` of its JSON answer, or the error WebDriver gave.
fn send(
    driver: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Value, String> {
    let text = body.map(Value::to_string).unwrap_or_default();
    let (status, answer) = exchange(driver, method, path, &text)
        .map_err(|error| format!("chromedriver at {driver}: {error}"))?;
    let value: Value = serde_json::from_slice(&answer)
        .map_err(|error| format!("not JSON ({error}): {}", String::from_utf8_lossy(&answer)))?;
    if status >= 400 {
        return Err(format!(
            "{status} {}: {}",
            value["value"]["error"], value["value"]["message"]
        ));
    }
    Ok(value["value"].clone())
}

/// One HTTP/1.1 request and its answer's status and body. chromedriver keeps connections open
/// whatever the request says, so the body is read by its `Content-Length` (or its chunks), not
/// to the end of the stream.
fn exchange(
    driver: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&driver, Duration::from_secs(5))?;
    // Creating a session starts the browser, which takes a while on a loaded machine.
    stream.set_read_timeout(Some(DEADLINE))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {driver}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {status_line:?}")))?;
    let mut length = None;
    let mut chunked = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            }
        }
    }
    let mut answer = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(std::io::Error::other)?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = length {
        answer.resize(length, 0);
        reader.read_exact(&mut answer)?;
    } else {
        reader.read_to_end(&mut answer)?;
    }
    Ok((status, answer))
}

/// The axe-core version the dashboard's accessibility checks run (from the npm registry).
pub const AXE_CORE_VERSION: &str = "4.14.1";

/// axe-core's script (`axe.min.js`): `WEIR_AXE_CORE` names the file, else the copy in
/// `target/axe/node_modules/axe-core/`, installed there with the machine's `npm` the first
/// time it is missing (as `.ci/run` installs the Python tools into `target/`). `Err` says why
/// there is none (no npm, no registry).
pub fn axe_core() -> Result<String, String> {
    static SOURCE: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    SOURCE
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("WEIR_AXE_CORE") {
                return std::fs::read_to_string(&path)
                    .map_err(|error| format!("WEIR_AXE_CORE={}: {error}", path.display()));
            }
            let prefix = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/axe");
            let script = prefix.join("node_modules/axe-core/axe.min.js");
            let installed =
                std::fs::read_to_string(prefix.join("node_modules/axe-core/package.json"))
                    .is_ok_and(|package| {
                        package.contains(&format!("\"version\": \"{AXE_CORE_VERSION}\""))
                    });
            if !installed {
                std::fs::create_dir_all(&prefix)
                    .map_err(|error| format!("cannot create {}: {error}", prefix.display()))?;
                let npm = binary("WEIR_NPM", &["npm"]).ok_or("no npm on PATH (for axe-core)")?;
                let output = Command::new(npm)
                    .args(["install", "--no-audit", "--no-fund", "--prefix"])
                    .arg(&prefix)
                    .arg(format!("axe-core@{AXE_CORE_VERSION}"))
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|error| format!("cannot run npm: {error}"))?;
                if !output.status.success() {
                    return Err(format!(
                        "npm install axe-core@{AXE_CORE_VERSION}: {}",
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
            std::fs::read_to_string(&script)
                .map_err(|error| format!("{}: {error}", script.display()))
        })
        .clone()
}

impl Browser {
    /// The WCAG 2.1 A and AA violations axe-core finds in the page as it is now (dialogs open,
    /// errors shown), each as `{id, impact, help, nodes: [selector, ...]}`; `[]` when clean.
    /// `axe` is [`axe_core`]'s script, injected once per loaded document.
    pub fn axe_violations(&self, axe: &str) -> Value {
        let present = self.execute("return typeof window.axe === 'object'", &[]);
        if present != Value::Bool(true) {
            self.execute(&format!("{axe}\n;return true;"), &[]);
        }
        self.execute(
            "return window.axe.run(document, {
               runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
               resultTypes: ['violations'],
             }).then(result => result.violations.map(v => ({
               id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.map(n => n.target.join(' ') + ' ' + n.failureSummary),
             })));",
            &[],
        )
    }

    /// Sets the `<select>` matching `selector` to `value` as a user's choice would (the page
    /// hears `input` and `change`).
    pub fn select_value(&self, selector: &str, value: &str) {
        crate::wait::wait_until(&format!("{selector:?} to take {value:?}"), || {
            let done = self.execute(
                "const e = document.querySelector(arguments[0]);
                 if (!e || e.disabled || ![...e.options].some(o => o.value === arguments[1])) return false;
                 e.focus(); e.value = arguments[1];
                 e.dispatchEvent(new Event('input', {bubbles: true}));
                 e.dispatchEvent(new Event('change', {bubbles: true}));
                 return true;",
                &[json!(selector), json!(value)],
            );
            (done == Value::Bool(true)).then_some(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_port_is_read_from_its_line() {
        assert_eq!(
            started_port("ChromeDriver was started successfully on port 36335."),
            Some(36335)
        );
        assert_eq!(started_port("Starting ChromeDriver 156.0 on port 0"), None);
    }
}
