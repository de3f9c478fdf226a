//! `kubectl argo rollouts get rollout|experiment` and `list rollouts`, rendered from the objects.
//!
//! The printer of Argo Rollouts' kubectl plugin (v1.9.1), reimplemented over JSON objects with
//! their real `status`: a Rollout with the ReplicaSets, Pods, Experiments and AnalysisRuns of its
//! namespace, matched by owner UID as the plugin matches them. Jobs are not read as objects: like
//! the plugin, the tree shows the Jobs an AnalysisRun's measurements name (`metadata.job-name`).
//!
//! Pure: "now" is a value ([`Options::now`]) used for AGE and for a ReplicaSet's remaining
//! scale-down delay; colour is a choice of the caller ([`Options::color`]; the plugin's
//! `--no-color` is `false`). Columns are aligned as the plugin's tab writer aligns them (Go's
//! `text/tabwriter`, minimum width 0, padding 2, spaces, widths in code points with colour codes
//! excluded), and the header block uses the plugin's `%-17s` labels, so trailing spaces are the
//! plugin's too.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use jiff::Timestamp;
use serde_json::Value;

const ICON_WAITING: &str = "◷";
const ICON_PROGRESSING: &str = "◌";
const ICON_WARNING: &str = "⚠";
const ICON_UNKNOWN: &str = "?";
const ICON_OK: &str = "✔";
const ICON_BAD: &str = "✖";
const ICON_PAUSED: &str = "॥";
const ICON_NEUTRAL: &str = "•";

const ICON_ROLLOUT: &str = "⟳";
const ICON_REVISION: &str = "#";
const ICON_REPLICA_SET: &str = "⧉";
const ICON_POD: &str = "□";
const ICON_EXPERIMENT: &str = "Σ";
const ICON_ANALYSIS: &str = "α";
const ICON_JOB: &str = "⊞";

const TAG_CANARY: &str = "canary";
const TAG_STABLE: &str = "stable";
const TAG_ACTIVE: &str = "active";
const TAG_PREVIEW: &str = "preview";
const TAG_PING: &str = "ping";
const TAG_PONG: &str = "pong";

const REVISION_ANNOTATION: &str = "rollout.argoproj.io/revision";
const WORKLOAD_GENERATION_ANNOTATION: &str = "rollout.argoproj.io/workload-generation";
const TEMPLATE_NAME_ANNOTATION: &str = "experiment.argoproj.io/template-name";
const SCALE_DOWN_DEADLINE_ANNOTATION: &str = "scale-down-deadline";
const POD_TEMPLATE_HASH_LABEL: &str = "rollouts-pod-template-hash";

/// How to render.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The moment AGE and scale-down delays are measured from.
    pub now: Timestamp,
    /// ANSI colours as the plugin prints them on a terminal; `false` is `--no-color`.
    pub color: bool,
}

/// The objects of a namespace the printer reads, as JSON (Kubernetes' JSON form, `status`
/// included). Anything not owned (by UID) by the object printed is ignored.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// `apps/v1` ReplicaSets.
    pub replica_sets: Vec<Value>,
    /// `v1` Pods.
    pub pods: Vec<Value>,
    /// `argoproj.io/v1alpha1` Experiments.
    pub experiments: Vec<Value>,
    /// `argoproj.io/v1alpha1` AnalysisRuns.
    pub analysis_runs: Vec<Value>,
}

impl Objects {
    /// Sorts documents by `kind` (ReplicaSet, Pod, Experiment, AnalysisRun; others are ignored),
    /// keeping their order.
    pub fn from_documents<'a>(docs: impl IntoIterator<Item = &'a Value>) -> Self {
        let mut objects = Objects::default();
        for doc in docs {
            match str_at(doc, &["kind"]) {
                "ReplicaSet" => objects.replica_sets.push(doc.clone()),
                "Pod" => objects.pods.push(doc.clone()),
                "Experiment" => objects.experiments.push(doc.clone()),
                "AnalysisRun" => objects.analysis_runs.push(doc.clone()),
                _ => {}
            }
        }
        objects
    }
}

// ---------------------------------------------------------------------------------------------
// JSON access

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    if cur.is_null() { None } else { Some(cur) }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

fn int_at(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn opt_int_at(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

fn bool_at(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

fn array_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn annotation<'a>(v: &'a Value, key: &str) -> &'a str {
    at(v, &["metadata", "annotations"])
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, nothing else.
fn atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn revision(v: &Value) -> i64 {
    atoi(annotation(v, REVISION_ANNOTATION)).unwrap_or(0)
}

fn uid(v: &Value) -> &str {
    str_at(v, &["metadata", "uid"])
}

fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"])
}

/// The first owner reference (in the object's order) whose UID is one of `uids`.
fn owner_uid<'a>(v: &'a Value, uids: &[&str]) -> Option<&'a str> {
    array_at(v, &["metadata", "ownerReferences"])
        .iter()
        .map(|r| str_at(r, &["uid"]))
        .find(|u| uids.contains(u))
}

fn timestamp(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str).and_then(|s| s.parse().ok())
}

fn created(v: &Value) -> Option<Timestamp> {
    timestamp(at(v, &["metadata", "creationTimestamp"]))
}

// ---------------------------------------------------------------------------------------------
// Durations, as Kubernetes' `duration.HumanDuration`

/// Go's `t1.Sub(t0)` in nanoseconds, saturating as Go does; an absent time is Go's zero time.
fn sub_nanos(t1: Timestamp, t0: Option<Timestamp>) -> i64 {
    // 0001-01-01T00:00:00Z, Go's zero time.
    const GO_ZERO_SECONDS: i128 = -62_135_596_800;
    let t0 = t0.map_or(GO_ZERO_SECONDS * 1_000_000_000, |t| t.as_nanosecond());
    let d = t1.as_nanosecond() - t0;
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub fn human_duration(nanos: i64) -> String {
    const S: i64 = 1_000_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    let seconds = nanos / S;
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / M;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / H;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

fn age(now: Timestamp, created: Option<Timestamp>) -> String {
    human_duration(sub_nanos(now, created))
}

// ---------------------------------------------------------------------------------------------
// Go's text/tabwriter (minwidth 0, tabwidth 0, padding 2, padchar ' ', no flags), with colour
// codes of no width as in `juju/ansiterm`'s copy of it

/// A cell's width as the plugin's tab writer (`juju/ansiterm`) counts it: code points, ANSI
/// escape sequences (`ESC [ ... final byte`) excluded.
fn display_width(cell: &str) -> usize {
    let mut width = 0;
    let mut chars = cell.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
            continue;
        }
        width += 1;
    }
    width
}

struct TabWriter {
    lines: Vec<Vec<String>>,
}

impl TabWriter {
    fn new() -> Self {
        TabWriter { lines: Vec::new() }
    }

    /// Adds text made of whole lines (each ending with `\n`).
    fn write(&mut self, text: &str) {
        for line in text.split_terminator('\n') {
            self.lines
                .push(line.split('\t').map(str::to_owned).collect());
        }
    }

    fn finish(self, out: &mut String) {
        let mut widths = Vec::new();
        self.format(out, &mut widths, 0, self.lines.len());
    }

    fn format(&self, out: &mut String, widths: &mut Vec<usize>, line0: usize, line1: usize) {
        let column = widths.len();
        let mut start = line0;
        let mut this = line0;
        while this < line1 {
            if column + 1 >= self.lines[this].len() {
                this += 1;
                continue;
            }
            self.write_lines(out, widths, start, this);
            start = this;
            let mut width = 0;
            while this < line1 && column + 1 < self.lines[this].len() {
                width = width.max(display_width(&self.lines[this][column]) + 2);
                this += 1;
            }
            widths.push(width);
            self.format(out, widths, start, this);
            widths.pop();
            start = this;
        }
        self.write_lines(out, widths, start, line1);
    }

    fn write_lines(&self, out: &mut String, widths: &[usize], line0: usize, line1: usize) {
        for line in &self.lines[line0..line1] {
            for (j, cell) in line.iter().enumerate() {
                out.push_str(cell);
                if let Some(&w) = widths.get(j) {
                    let n = w.saturating_sub(display_width(cell));
                    out.extend(std::iter::repeat_n(' ', n));
                }
            }
            out.push('\n');
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Colours

const FG_RED: u8 = 31;
const FG_GREEN: u8 = 32;
const FG_YELLOW: u8 = 33;
const FG_HI_BLUE: u8 = 94;

fn color_of(s: &str) -> u8 {
    match s {
        ICON_WAITING | ICON_UNKNOWN | TAG_CANARY => FG_YELLOW,
        ICON_PROGRESSING | TAG_PREVIEW | "Pending" | "Running" => FG_HI_BLUE,
        ICON_WARNING | ICON_BAD => FG_RED,
        ICON_OK | TAG_STABLE | TAG_ACTIVE => FG_GREEN,
        _ => 0,
    }
}

impl Options {
    /// The plugin's `colorize`: wraps even uncoloured words (code 0) when colour is on.
    fn colorize(&self, s: &str) -> String {
        self.colorize_status(s, s)
    }

    fn colorize_status(&self, s: &str, status: &str) -> String {
        if !self.color {
            return s.to_owned();
        }
        format!("\x1b[{}m{s}\x1b[0m", color_of(status))
    }
}

// ---------------------------------------------------------------------------------------------
// Infos, as the plugin's `info` package derives them

struct PodInfo {
    name: String,
    created: Option<Timestamp>,
    status: String,
    icon: &'static str,
    ready: String,
    restarts: i64,
}

struct ReplicaSetInfo {
    name: String,
    created: Option<Timestamp>,
    uid: String,
    status: &'static str,
    icon: &'static str,
    revision: i64,
    template: String,
    scale_down_deadline: String,
    replicas: i64,
    available: i64,
    stable: bool,
    canary: bool,
    active: bool,
    preview: bool,
    ping: bool,
    pong: bool,
    images: Vec<String>,
    pods: Vec<PodInfo>,
}

struct JobInfo {
    name: String,
    created: Option<Timestamp>,
    status: String,
    icon: &'static str,
}

struct AnalysisRunInfo {
    name: String,
    created: Option<Timestamp>,
    status: String,
    icon: &'static str,
    revision: i64,
    successful: i64,
    failed: i64,
    inconclusive: i64,
    error: i64,
    jobs: Vec<JobInfo>,
}

struct ExperimentInfo {
    name: String,
    namespace: String,
    created: Option<Timestamp>,
    status: String,
    message: String,
    icon: &'static str,
    revision: i64,
    replica_sets: Vec<ReplicaSetInfo>,
    analysis_runs: Vec<AnalysisRunInfo>,
}

struct ImageInfo {
    image: String,
    tags: Vec<String>,
}

fn analysis_icon(phase: &str) -> &'static str {
    match phase {
        "Successful" => ICON_OK,
        "Inconclusive" => ICON_UNKNOWN,
        "Failed" => ICON_BAD,
        "Error" => ICON_WARNING,
        "Running" => ICON_PROGRESSING,
        "Pending" => ICON_WAITING,
        _ => " ",
    }
}

fn rollout_icon(status: &str) -> &'static str {
    match status {
        "Progressing" => ICON_PROGRESSING,
        "Error" | "InvalidSpec" => ICON_WARNING,
        "Paused" => ICON_PAUSED,
        "Healthy" => ICON_OK,
        "Degraded" => ICON_BAD,
        "Unknown" => ICON_UNKNOWN,
        "ScaledDown" => ICON_NEUTRAL,
        _ => " ",
    }
}

fn replica_set_health(rs: &Value) -> &'static str {
    let spec_replicas = opt_int_at(rs, &["spec", "replicas"]);
    if int_at(rs, &["metadata", "generation"]) <= int_at(rs, &["status", "observedGeneration"]) {
        let failure = array_at(rs, &["status", "conditions"])
            .iter()
            .find(|c| str_at(c, &["type"]) == "ReplicaFailure");
        if failure.is_some_and(|c| str_at(c, &["status"]) == "True") {
            return "ReplicaFailure";
        } else if spec_replicas.is_some_and(|r| int_at(rs, &["status", "availableReplicas"]) < r) {
            return "Progressing";
        }
    } else {
        return "Progressing";
    }
    if spec_replicas == Some(0) {
        return "ScaledDown";
    }
    "Healthy"
}

fn replica_set_icon(status: &str) -> &'static str {
    match status {
        "Progressing" => ICON_PROGRESSING,
        "Healthy" => ICON_OK,
        "ReplicaFailure" => ICON_BAD,
        "ScaledDown" => ICON_NEUTRAL,
        _ => " ",
    }
}

fn replica_set_infos(owner: &str, ro: Option<&Value>, objects: &Objects) -> Vec<ReplicaSetInfo> {
    let mut infos = Vec::new();
    for rs in &objects.replica_sets {
        if owner_uid(rs, &[owner]).is_none() {
            continue;
        }
        let status = replica_set_health(rs);
        let mut info = ReplicaSetInfo {
            name: name(rs).to_owned(),
            created: created(rs),
            uid: uid(rs).to_owned(),
            status,
            icon: replica_set_icon(status),
            revision: revision(rs),
            template: annotation(rs, TEMPLATE_NAME_ANNOTATION).to_owned(),
            scale_down_deadline: annotation(rs, SCALE_DOWN_DEADLINE_ANNOTATION).to_owned(),
            replicas: int_at(rs, &["status", "replicas"]),
            available: int_at(rs, &["status", "availableReplicas"]),
            stable: false,
            canary: false,
            active: false,
            preview: false,
            ping: false,
            pong: false,
            images: array_at(rs, &["spec", "template", "spec", "containers"])
                .iter()
                .map(|c| str_at(c, &["image"]).to_owned())
                .collect(),
            pods: Vec::new(),
        };
        if let Some(ro) = ro {
            let hash = at(rs, &["metadata", "labels", POD_TEMPLATE_HASH_LABEL])
                .and_then(Value::as_str)
                .unwrap_or("");
            let stable_rs = str_at(ro, &["status", "stableRS"]);
            let current = str_at(ro, &["status", "currentPodHash"]);
            if at(ro, &["spec", "strategy", "canary"]).is_some() {
                let ping_pong = at(ro, &["spec", "strategy", "canary", "pingPong"]).is_some();
                let stable_is_ping = str_at(ro, &["status", "canary", "stablePingPong"]) == "ping";
                if stable_rs == hash {
                    info.stable = true;
                    if ping_pong {
                        info.ping = stable_is_ping;
                        info.pong = !stable_is_ping;
                    }
                } else if current == hash {
                    info.canary = true;
                    if ping_pong {
                        info.ping = !stable_is_ping;
                        info.pong = stable_is_ping;
                    }
                }
            }
            if at(ro, &["spec", "strategy", "blueGreen"]).is_some() {
                if stable_rs == hash {
                    info.stable = true;
                }
                if str_at(ro, &["status", "blueGreen", "activeSelector"]) == hash {
                    info.active = true;
                } else if str_at(ro, &["status", "blueGreen", "previewSelector"]) == hash {
                    info.preview = true;
                }
            }
        }
        infos.push(info);
    }
    // The plugin's comparator looks at creation times but never uses the result: revision
    // (newest first), then name.
    infos.sort_by(|a, b| {
        b.revision
            .cmp(&a.revision)
            .then_with(|| a.name.cmp(&b.name))
    });
    add_pod_infos(&mut infos, objects);
    infos
}

fn add_pod_infos(infos: &mut [ReplicaSetInfo], objects: &Objects) {
    let uids: Vec<String> = infos.iter().map(|i| i.uid.clone()).collect();
    let uid_refs: Vec<&str> = uids.iter().map(String::as_str).collect();
    let index: HashMap<&str, usize> = uid_refs.iter().enumerate().map(|(i, u)| (*u, i)).collect();
    for pod in &objects.pods {
        let Some(owner) = owner_uid(pod, &uid_refs) else {
            continue;
        };
        if let Some(&i) = index.get(owner) {
            infos[i].pods.push(pod_info(pod));
        }
    }
    for info in infos.iter_mut() {
        info.pods
            .sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    }
}

/// The plugin's pod status, as `kubectl get pods` derives it.
fn pod_info(pod: &Value) -> PodInfo {
    let init_specs = array_at(pod, &["spec", "initContainers"]);
    let restart_always: HashMap<&str, bool> = init_specs
        .iter()
        .map(|c| {
            (
                str_at(c, &["name"]),
                str_at(c, &["restartPolicy"]) == "Always",
            )
        })
        .collect();
    let total = array_at(pod, &["spec", "containers"]).len();
    let mut ready = 0;
    let mut restarts = 0;
    let mut reason = str_at(pod, &["status", "phase"]).to_owned();
    if !str_at(pod, &["status", "reason"]).is_empty() {
        reason = str_at(pod, &["status", "reason"]).to_owned();
    }
    let mut initializing = false;
    for (i, c) in array_at(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        restarts += int_at(c, &["restartCount"]);
        let terminated = at(c, &["state", "terminated"]);
        let waiting_reason = str_at(c, &["state", "waiting", "reason"]);
        if let Some(t) = terminated {
            if int_at(t, &["exitCode"]) == 0 {
                continue;
            }
            let r = str_at(t, &["reason"]);
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if int_at(t, &["signal"]) != 0 {
                format!("Init:Signal:{}", int_at(t, &["signal"]))
            } else {
                format!("Init:ExitCode:{}", int_at(t, &["exitCode"]))
            };
            initializing = true;
        } else if restart_always
            .get(str_at(c, &["name"]))
            .copied()
            .unwrap_or(false)
            && bool_at(c, &["started"])
        {
            if bool_at(c, &["ready"]) {
                continue;
            }
        } else if at(c, &["state", "waiting"]).is_some()
            && !waiting_reason.is_empty()
            && waiting_reason != "PodInitializing"
        {
            reason = format!("Init:{waiting_reason}");
            initializing = true;
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
            initializing = true;
        }
        break;
    }
    if !initializing {
        restarts = 0;
        let mut has_running = false;
        for c in array_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int_at(c, &["restartCount"]);
            let waiting = str_at(c, &["state", "waiting", "reason"]);
            let terminated = at(c, &["state", "terminated"]);
            if at(c, &["state", "waiting"]).is_some() && !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = terminated {
                let r = str_at(t, &["reason"]);
                reason = if !r.is_empty() {
                    r.to_owned()
                } else if int_at(t, &["signal"]) != 0 {
                    format!("Signal:{}", int_at(t, &["signal"]))
                } else {
                    format!("ExitCode:{}", int_at(t, &["exitCode"]))
                };
            } else if bool_at(c, &["ready"]) && at(c, &["state", "running"]).is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = "Running".into();
        }
    }
    if at(pod, &["metadata", "deletionTimestamp"]).is_some() {
        reason = if str_at(pod, &["status", "reason"]) == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    PodInfo {
        name: name(pod).to_owned(),
        created: created(pod),
        icon: pod_icon(&reason),
        status: reason,
        ready: format!("{ready}/{total}"),
        restarts,
    }
}

fn pod_icon(status: &str) -> &'static str {
    if status.starts_with("Init:") {
        return ICON_PROGRESSING;
    }
    if status.starts_with("Signal:") || status.starts_with("ExitCode:") {
        return ICON_BAD;
    }
    if status.ends_with("Error") || status.starts_with("Err") {
        return ICON_WARNING;
    }
    match status {
        "Pending" | "Terminating" | "ContainerCreating" => ICON_PROGRESSING,
        "Running" | "Completed" => ICON_OK,
        "Failed" | "InvalidImageName" | "CrashLoopBackOff" => ICON_BAD,
        "ImagePullBackOff" | "RegistryUnavailable" => ICON_WARNING,
        "Unknown" => ICON_UNKNOWN,
        _ => " ",
    }
}

fn analysis_run_infos(owner: &str, objects: &Objects) -> Vec<AnalysisRunInfo> {
    let mut infos = Vec::new();
    for run in &objects.analysis_runs {
        if owner_uid(run, &[owner]).is_none() {
            continue;
        }
        let phase = str_at(run, &["status", "phase"]);
        let mut info = AnalysisRunInfo {
            name: name(run).to_owned(),
            created: created(run),
            status: phase.to_owned(),
            icon: analysis_icon(phase),
            revision: revision(run),
            successful: 0,
            failed: 0,
            inconclusive: 0,
            error: 0,
            jobs: Vec::new(),
        };
        let results = array_at(run, &["status", "metricResults"]);
        for mr in results {
            info.successful += int_at(mr, &["successful"]);
            info.failed += int_at(mr, &["failed"]);
            info.inconclusive += int_at(mr, &["inconclusive"]);
            info.error += int_at(mr, &["error"]);
            // The plugin looks the measurements up by the result's name: the first result of
            // that name.
            let mr_name = str_at(mr, &["name"]);
            let Some(first) = results.iter().find(|r| str_at(r, &["name"]) == mr_name) else {
                continue;
            };
            for m in array_at(first, &["measurements"]) {
                let Some(job) = at(m, &["metadata", "job-name"]).and_then(Value::as_str) else {
                    continue;
                };
                let phase = str_at(m, &["phase"]);
                info.jobs.push(JobInfo {
                    name: job.to_owned(),
                    created: timestamp(at(m, &["startedAt"])),
                    status: phase.to_owned(),
                    icon: analysis_icon(phase),
                });
            }
        }
        infos.push(info);
    }
    infos.sort_by(|a, b| {
        b.revision
            .cmp(&a.revision)
            .then_with(|| a.created.cmp(&b.created))
            .then_with(|| b.name.cmp(&a.name))
    });
    infos
}

fn experiment_info(exp: &Value, objects: &Objects) -> ExperimentInfo {
    let phase = str_at(exp, &["status", "phase"]);
    ExperimentInfo {
        name: name(exp).to_owned(),
        namespace: str_at(exp, &["metadata", "namespace"]).to_owned(),
        created: created(exp),
        status: phase.to_owned(),
        message: str_at(exp, &["status", "message"]).to_owned(),
        icon: analysis_icon(phase),
        revision: revision(exp),
        replica_sets: replica_set_infos(uid(exp), None, objects),
        analysis_runs: analysis_run_infos(uid(exp), objects),
    }
}

fn experiment_infos(ro: &Value, objects: &Objects) -> Vec<ExperimentInfo> {
    let mut infos: Vec<ExperimentInfo> = objects
        .experiments
        .iter()
        .filter(|e| owner_uid(e, &[uid(ro)]).is_some())
        .map(|e| experiment_info(e, objects))
        .collect();
    // The plugin's comparator (newer revision first, else earlier creation) is no strict order;
    // Go sorts lists this short by insertion, reproduced here.
    let less = |a: &ExperimentInfo, b: &ExperimentInfo| {
        a.revision > b.revision
            || a.created.unwrap_or(Timestamp::MIN) < b.created.unwrap_or(Timestamp::MIN)
    };
    for i in 1..infos.len() {
        let mut j = i;
        while j > 0 && less(&infos[j], &infos[j - 1]) {
            infos.swap(j, j - 1);
            j -= 1;
        }
    }
    infos
}

fn merge_image(image: ImageInfo, images: &mut Vec<ImageInfo>) {
    if let Some(existing) = images.iter_mut().find(|i| i.image == image.image) {
        let tags: BTreeSet<String> = existing.tags.drain(..).chain(image.tags).collect();
        existing.tags = tags.into_iter().collect();
    } else {
        images.push(image);
    }
    images.sort_by(|a, b| a.image.cmp(&b.image));
}

fn experiment_images(exp: &ExperimentInfo, images: &mut Vec<ImageInfo>) {
    for rs in exp.replica_sets.iter().filter(|rs| rs.replicas > 0) {
        for image in &rs.images {
            let mut tags = Vec::new();
            if !rs.template.is_empty() {
                tags.push(format!("Σ:{}", rs.template));
            }
            merge_image(
                ImageInfo {
                    image: image.clone(),
                    tags,
                },
                images,
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Rollout's phase and weights

fn generation_observed(ro: &Value) -> bool {
    let observed = match at(ro, &["status", "observedGeneration"]) {
        Some(Value::String(s)) => atoi(s),
        Some(Value::Number(n)) => n.as_i64(),
        _ => None,
    };
    let Some(observed) = observed else {
        return true;
    };
    let generation = int_at(ro, &["metadata", "generation"]);
    observed >= generation
}

fn workload_generation_observed(ro: &Value) -> bool {
    let Some(wanted) = atoi(annotation(ro, WORKLOAD_GENERATION_ANNOTATION)) else {
        return true;
    };
    match atoi(str_at(ro, &["status", "workloadObservedGeneration"])) {
        Some(observed) => observed == wanted,
        None => true,
    }
}

fn replicas_or_default(ro: &Value) -> i64 {
    opt_int_at(ro, &["spec", "replicas"]).unwrap_or(1)
}

/// The phase and message clients show (`rolloututil.GetRolloutPhase`): the controller's stored
/// phase once the spec is observed, else the plugin's own derivation.
pub fn rollout_phase(ro: &Value) -> (String, String) {
    let progressing = |m: &str| ("Progressing".to_owned(), m.to_owned());
    if !generation_observed(ro) {
        return progressing("waiting for rollout spec update to be observed");
    }
    if bool_at(ro, &["status", "controllerPause"])
        && array_at(ro, &["status", "pauseConditions"]).is_empty()
    {
        return progressing("waiting for rollout to unpause");
    }
    if bool_at(ro, &["spec", "templateResolvedFromRef"]) && !workload_generation_observed(ro) {
        return progressing(
            "waiting for rollout spec update to be observed for the reference workload",
        );
    }
    let phase = str_at(ro, &["status", "phase"]);
    if !phase.is_empty() {
        return (
            phase.to_owned(),
            str_at(ro, &["status", "message"]).to_owned(),
        );
    }
    calculate_phase(ro)
}

fn calculate_phase(ro: &Value) -> (String, String) {
    let progressing = |m: &str| ("Progressing".to_owned(), m.to_owned());
    for cond in array_at(ro, &["status", "conditions"]) {
        let message = str_at(cond, &["message"]);
        if str_at(cond, &["type"]) == "InvalidSpec" {
            return ("Degraded".into(), format!("InvalidSpec: {message}"));
        }
        let reason = str_at(cond, &["reason"]);
        if reason == "RolloutAborted" || reason == "ProgressDeadlineExceeded" {
            return ("Degraded".into(), format!("{reason}: {message}"));
        }
    }
    if bool_at(ro, &["spec", "paused"]) {
        return ("Paused".into(), "manually paused".into());
    }
    if let Some(first) = array_at(ro, &["status", "pauseConditions"]).first() {
        return ("Paused".into(), str_at(first, &["reason"]).to_owned());
    }
    if let Some(restart_at) = timestamp(at(ro, &["spec", "restartAt"]))
        && timestamp(at(ro, &["status", "restartedAt"])) != Some(restart_at)
    {
        return progressing("rollout is restarting");
    }
    let updated = int_at(ro, &["status", "updatedReplicas"]);
    if updated < replicas_or_default(ro) {
        return progressing("more replicas need to be updated");
    }
    if int_at(ro, &["status", "availableReplicas"]) < updated {
        return progressing("updated replicas are still becoming available");
    }
    let stable = str_at(ro, &["status", "stableRS"]);
    let current = str_at(ro, &["status", "currentPodHash"]);
    if at(ro, &["spec", "strategy", "blueGreen"]).is_some() {
        let active = str_at(ro, &["status", "blueGreen", "activeSelector"]);
        if active.is_empty() || active != current {
            return progressing("active service cutover pending");
        }
        if stable.is_empty() || stable != current {
            let post = at(
                ro,
                &["spec", "strategy", "blueGreen", "postPromotionAnalysis"],
            );
            let run = str_at(
                ro,
                &[
                    "status",
                    "blueGreen",
                    "postPromotionAnalysisRunStatus",
                    "status",
                ],
            );
            let completed = matches!(run, "Successful" | "Failed" | "Error" | "Inconclusive");
            if post.is_some() && !completed {
                return progressing("waiting for analysis to complete");
            }
            return progressing("waiting for post-promotion verification to complete");
        }
    } else if at(ro, &["spec", "strategy", "canary"]).is_some() {
        if at(ro, &["spec", "strategy", "canary", "trafficRouting"]).is_none()
            && int_at(ro, &["status", "replicas"]) > updated
        {
            return progressing("old replicas are pending termination");
        }
        if stable.is_empty() || stable != current {
            return progressing("waiting for all steps to complete");
        }
    }
    ("Healthy".into(), String::new())
}

fn max_traffic_weight(ro: &Value) -> i64 {
    opt_int_at(
        ro,
        &[
            "spec",
            "strategy",
            "canary",
            "trafficRouting",
            "maxTrafficWeight",
        ],
    )
    .unwrap_or(100)
}

/// The current step, `None` past the last one or without steps.
fn current_step(ro: &Value) -> Option<(usize, &Value)> {
    let steps = array_at(ro, &["spec", "strategy", "canary", "steps"]);
    if steps.is_empty() {
        return None;
    }
    let index = usize::try_from(int_at(ro, &["status", "currentStepIndex"])).unwrap_or(0);
    steps.get(index).map(|s| (index, s))
}

fn current_set_weight(ro: &Value) -> i64 {
    if bool_at(ro, &["status", "abort"]) {
        return 0;
    }
    let Some((index, _)) = current_step(ro) else {
        return max_traffic_weight(ro);
    };
    let steps = array_at(ro, &["spec", "strategy", "canary", "steps"]);
    steps[..=index]
        .iter()
        .rev()
        .find_map(|s| opt_int_at(s, &["setWeight"]))
        .unwrap_or(0)
}

fn step_string(ro: &Value) -> String {
    let steps = array_at(ro, &["spec", "strategy", "canary", "steps"]);
    match opt_int_at(ro, &["status", "currentStepIndex"]) {
        Some(i) if !steps.is_empty() => format!("{i}/{}", steps.len()),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// get rollout

const TABLE_WIDTH: usize = 17;

fn header_line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<TABLE_WIDTH$}{value}");
}

fn prefixes(is_last: bool, sub: &str) -> (String, String) {
    if is_last {
        (format!("{sub}└──"), format!("{sub}   "))
    } else {
        (format!("{sub}├──"), format!("{sub}│  "))
    }
}

impl Options {
    fn format_image(&self, image: &ImageInfo) -> String {
        if image.tags.is_empty() {
            return image.image.clone();
        }
        let tags: Vec<String> = image.tags.iter().map(|t| self.colorize(t)).collect();
        format!("{} ({})", image.image, tags.join(", "))
    }

    fn images(&self, out: &mut String, images: &[ImageInfo]) {
        for (i, image) in images.iter().enumerate() {
            let label = if i == 0 { "Images:" } else { "" };
            header_line(out, label, self.format_image(image));
        }
    }

    fn row(&self, w: &mut TabWriter, cells: [&str; 6]) {
        let [name, kind, icon, status, age, info] = cells;
        w.write(&format!(
            "{name}\t{kind}\t{} {status}\t{age}\t{info}\n",
            self.colorize(icon)
        ));
    }

    fn replica_set(&self, w: &mut TabWriter, rs: &ReplicaSetInfo, prefix: &str, sub: &str) {
        let mut cols = Vec::new();
        let mut name = rs.name.clone();
        let tag = |on: bool, tag: &str, cols: &mut Vec<String>, name: &mut String| {
            if on {
                cols.push(self.colorize(tag));
                *name = self.colorize_status(name, tag);
            }
        };
        tag(rs.stable, TAG_STABLE, &mut cols, &mut name);
        if rs.canary {
            tag(true, TAG_CANARY, &mut cols, &mut name);
        } else if rs.active {
            tag(true, TAG_ACTIVE, &mut cols, &mut name);
        } else if rs.preview {
            tag(true, TAG_PREVIEW, &mut cols, &mut name);
        }
        tag(rs.ping, TAG_PING, &mut cols, &mut name);
        tag(rs.pong, TAG_PONG, &mut cols, &mut name);
        if !rs.scale_down_deadline.is_empty() {
            cols.push(format!(
                "delay:{}",
                self.scale_down_delay(&rs.scale_down_deadline)
            ));
        }
        self.row(
            w,
            [
                &format!("{prefix}{ICON_REPLICA_SET} {name}"),
                "ReplicaSet",
                rs.icon,
                rs.status,
                &age(self.now, rs.created),
                &cols.join(","),
            ],
        );
        for (i, pod) in rs.pods.iter().enumerate() {
            let (pod_prefix, _) = prefixes(i + 1 == rs.pods.len(), sub);
            let mut info = vec![format!("ready:{}", pod.ready)];
            if pod.restarts > 0 {
                info.push(format!("restarts:{}", pod.restarts));
            }
            self.row(
                w,
                [
                    &format!("{pod_prefix}{ICON_POD} {}", pod.name),
                    "Pod",
                    pod.icon,
                    &pod.status,
                    &age(self.now, pod.created),
                    &info.join(","),
                ],
            );
        }
    }

    fn scale_down_delay(&self, deadline: &str) -> String {
        match deadline.parse::<Timestamp>() {
            Ok(d) if d < self.now => "passed".into(),
            Ok(d) => human_duration(sub_nanos(d, Some(self.now))),
            Err(_) => String::new(),
        }
    }

    fn analysis_run(&self, w: &mut TabWriter, run: &AnalysisRunInfo, prefix: &str, sub: &str) {
        let name = self.colorize_status(&run.name, &run.status);
        let mut cols = Vec::new();
        for (count, icon) in [
            (run.successful, ICON_OK),
            (run.failed, ICON_BAD),
            (run.inconclusive, ICON_UNKNOWN),
            (run.error, ICON_WARNING),
        ] {
            if count > 0 {
                cols.push(format!("{} {count}", self.colorize(icon)));
            }
        }
        self.row(
            w,
            [
                &format!("{prefix}{ICON_ANALYSIS} {name}"),
                "AnalysisRun",
                run.icon,
                &run.status,
                &age(self.now, run.created),
                &cols.join(","),
            ],
        );
        for (i, job) in run.jobs.iter().enumerate() {
            let (job_prefix, _) = prefixes(i + 1 == run.jobs.len(), sub);
            let name = self.colorize_status(&job.name, &job.status);
            self.row(
                w,
                [
                    &format!("{job_prefix}{ICON_JOB} {name}"),
                    "Job",
                    job.icon,
                    &job.status,
                    &age(self.now, job.created),
                    "",
                ],
            );
        }
    }

    fn experiment(&self, w: &mut TabWriter, exp: &ExperimentInfo, prefix: &str, sub: &str) {
        let name = self.colorize_status(&exp.name, &exp.status);
        self.row(
            w,
            [
                &format!("{prefix}{ICON_EXPERIMENT} {name}"),
                "Experiment",
                exp.icon,
                &exp.status,
                &age(self.now, exp.created),
                "",
            ],
        );
        let total = exp.replica_sets.len() + exp.analysis_runs.len();
        let mut curr = 0;
        for rs in &exp.replica_sets {
            let (p, s) = prefixes(curr + 1 == total, sub);
            self.replica_set(w, rs, &p, &s);
            curr += 1;
        }
        for run in &exp.analysis_runs {
            let (p, s) = prefixes(curr + 1 == total, sub);
            self.analysis_run(w, run, &p, &s);
            curr += 1;
        }
    }
}

fn tree_header(w: &mut TabWriter) {
    w.write("NAME\tKIND\tSTATUS\tAGE\tINFO\n");
}

/// `kubectl argo rollouts get rollout`: the Rollout `ro` with what `objects` holds of its own.
pub fn get_rollout(ro: &Value, objects: &Objects, options: &Options) -> String {
    let replica_sets = replica_set_infos(uid(ro), Some(ro), objects);
    let experiments = experiment_infos(ro, objects);
    let analysis_runs = analysis_run_infos(uid(ro), objects);

    let canary = at(ro, &["spec", "strategy", "canary"]).is_some();
    let strategy = if canary {
        "Canary"
    } else if at(ro, &["spec", "strategy", "blueGreen"]).is_some() {
        "BlueGreen"
    } else {
        ""
    };
    let (status, message) = rollout_phase(ro);
    let icon = rollout_icon(&status);

    let mut out = String::new();
    header_line(&mut out, "Name:", name(ro));
    header_line(
        &mut out,
        "Namespace:",
        str_at(ro, &["metadata", "namespace"]),
    );
    header_line(
        &mut out,
        "Status:",
        format!("{} {status}", options.colorize(icon)),
    );
    if !message.is_empty() {
        header_line(&mut out, "Message:", &message);
    }
    header_line(&mut out, "Strategy:", strategy);
    if canary {
        let set_weight = current_set_weight(ro);
        let available = int_at(ro, &["status", "availableReplicas"]);
        let mut actual = 0;
        if current_step(ro).is_none() {
            actual = max_traffic_weight(ro);
        } else if available > 0 {
            if at(ro, &["spec", "strategy", "canary", "trafficRouting"]).is_none() {
                for rs in replica_sets.iter().filter(|rs| rs.canary) {
                    actual = rs.available * max_traffic_weight(ro) / available;
                }
            } else if let Some(weights) = at(ro, &["status", "canary", "weights"]) {
                actual = int_at(weights, &["canary", "weight"]);
            } else {
                actual = set_weight;
            }
        }
        header_line(&mut out, "  Step:", step_string(ro));
        header_line(&mut out, "  SetWeight:", set_weight);
        header_line(&mut out, "  ActualWeight:", actual);
    }

    let mut images = Vec::new();
    for rs in replica_sets.iter().filter(|rs| rs.replicas > 0) {
        for image in &rs.images {
            let tags = [
                (rs.canary, TAG_CANARY),
                (rs.stable, TAG_STABLE),
                (rs.active, TAG_ACTIVE),
                (rs.preview, TAG_PREVIEW),
                (rs.ping, TAG_PING),
                (rs.pong, TAG_PONG),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, t)| t.to_owned())
            .collect();
            merge_image(
                ImageInfo {
                    image: image.clone(),
                    tags,
                },
                &mut images,
            );
        }
    }
    for exp in &experiments {
        let mut own = Vec::new();
        experiment_images(exp, &mut own);
        for image in own {
            merge_image(image, &mut images);
        }
    }
    options.images(&mut out, &images);

    out.push_str("Replicas:\n");
    header_line(&mut out, "  Desired:", replicas_or_default(ro));
    header_line(&mut out, "  Current:", int_at(ro, &["status", "replicas"]));
    header_line(
        &mut out,
        "  Updated:",
        int_at(ro, &["status", "updatedReplicas"]),
    );
    header_line(
        &mut out,
        "  Ready:",
        int_at(ro, &["status", "readyReplicas"]),
    );
    header_line(
        &mut out,
        "  Available:",
        int_at(ro, &["status", "availableReplicas"]),
    );
    out.push('\n');

    let mut w = TabWriter::new();
    tree_header(&mut w);
    options.row(
        &mut w,
        [
            &format!("{ICON_ROLLOUT} {}", name(ro)),
            "Rollout",
            icon,
            &status,
            &age(options.now, created(ro)),
            "",
        ],
    );
    let revisions: BTreeSet<i64> = replica_sets
        .iter()
        .map(|r| r.revision)
        .chain(experiments.iter().map(|e| e.revision))
        .chain(analysis_runs.iter().map(|a| a.revision))
        .collect();
    let count = revisions.len();
    for (i, rev) in revisions.into_iter().rev().enumerate() {
        let (prefix, sub) = prefixes(i + 1 == count, "");
        w.write(&format!(
            "{prefix}{ICON_REVISION} revision:{rev}\t\t \t\t\n"
        ));
        let rss: Vec<_> = replica_sets.iter().filter(|r| r.revision == rev).collect();
        let exps: Vec<_> = experiments.iter().filter(|e| e.revision == rev).collect();
        let runs: Vec<_> = analysis_runs.iter().filter(|a| a.revision == rev).collect();
        let total = rss.len() + exps.len() + runs.len();
        let mut curr = 0;
        for rs in rss {
            let (p, s) = prefixes(curr + 1 == total, &sub);
            options.replica_set(&mut w, rs, &p, &s);
            curr += 1;
        }
        for exp in exps {
            let (p, s) = prefixes(curr + 1 == total, &sub);
            options.experiment(&mut w, exp, &p, &s);
            curr += 1;
        }
        for run in runs {
            let (p, s) = prefixes(curr + 1 == total, &sub);
            options.analysis_run(&mut w, run, &p, &s);
            curr += 1;
        }
    }
    w.finish(&mut out);
    out
}

/// `kubectl argo rollouts get experiment`.
pub fn get_experiment(exp: &Value, objects: &Objects, options: &Options) -> String {
    let info = experiment_info(exp, objects);
    let mut out = String::new();
    header_line(&mut out, "Name:", &info.name);
    header_line(&mut out, "Namespace:", &info.namespace);
    header_line(
        &mut out,
        "Status:",
        format!("{} {}", options.colorize(info.icon), info.status),
    );
    if !info.message.is_empty() {
        header_line(&mut out, "Message:", &info.message);
    }
    let mut images = Vec::new();
    experiment_images(&info, &mut images);
    options.images(&mut out, &images);
    out.push('\n');
    let mut w = TabWriter::new();
    tree_header(&mut w);
    options.experiment(&mut w, &info, "", "");
    w.finish(&mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// list rollouts

#[derive(PartialEq)]
struct ListLine {
    namespace: String,
    name: String,
    cells: String,
}

fn list_line(ro: &Value) -> ListLine {
    let mut strategy = "unknown";
    let mut step = "-".to_owned();
    let mut set_weight = "-".to_owned();
    if at(ro, &["spec", "strategy", "canary"]).is_some() {
        strategy = "Canary";
        let s = step_string(ro);
        if !s.is_empty() {
            step = s;
        }
        set_weight = current_set_weight(ro).to_string();
    } else if at(ro, &["spec", "strategy", "blueGreen"]).is_some() {
        strategy = "BlueGreen";
    }
    let (status, _) = rollout_phase(ro);
    let ready = format!(
        "{}/{}",
        int_at(ro, &["status", "readyReplicas"]),
        int_at(ro, &["status", "replicas"])
    );
    let cells = format!(
        "{:<10}\t{strategy:<9}\t{status:<12}\t{step:<4}\t{set_weight:<10}\t{ready:<5}\t{:<7}\t{:<10}\t{:<9}",
        name(ro),
        replicas_or_default(ro),
        int_at(ro, &["status", "updatedReplicas"]),
        int_at(ro, &["status", "availableReplicas"]),
    );
    ListLine {
        namespace: str_at(ro, &["metadata", "namespace"]).to_owned(),
        name: name(ro).to_owned(),
        cells,
    }
}

/// `kubectl argo rollouts list rollouts` of the Rollouts given, in their order (the API
/// server's: by namespace, then name). Empty when there are none: the plugin then prints
/// "No resources found." on stderr.
pub fn list_rollouts(rollouts: &[Value]) -> String {
    if rollouts.is_empty() {
        return String::new();
    }
    let mut w = TabWriter::new();
    w.write("NAME\tSTRATEGY\tSTATUS\tSTEP\tSET-WEIGHT\tREADY\tDESIRED\tUP-TO-DATE\tAVAILABLE\n");
    for ro in rollouts {
        w.write(&format!("{}\n", list_line(ro).cells));
    }
    let mut out = String::new();
    w.finish(&mut out);
    out
}

/// What `list rollouts --watch` prints after the table for a sequence of watched versions of
/// Rollouts: a line for each version that changes what its Rollout's line showed, aligned on
/// their own (the plugin uses a second tab writer).
pub fn list_rollout_updates(initial: &[Value], updates: &[Value]) -> String {
    let mut previous: Vec<ListLine> = initial.iter().map(list_line).collect();
    let mut w = TabWriter::new();
    for ro in updates {
        let line = list_line(ro);
        let prev = previous
            .iter_mut()
            .find(|p| p.namespace == line.namespace && p.name == line.name);
        match prev {
            Some(p) if *p == line => {}
            Some(p) => {
                w.write(&format!("{}\n", line.cells));
                *p = line;
            }
            None => {
                w.write(&format!("{}\n", line.cells));
                previous.push(line);
            }
        }
    }
    let mut out = String::new();
    w.finish(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_as_kubernetes_prints_them() {
        const S: i64 = 1_000_000_000;
        assert_eq!(human_duration(-3 * S), "<invalid>");
        assert_eq!(human_duration(-S / 2), "0s");
        assert_eq!(human_duration(119 * S), "119s");
        assert_eq!(human_duration(150 * S), "2m30s");
        assert_eq!(human_duration(4 * 3600 * S - S / 2), "3h59m");
        assert_eq!(human_duration(7 * 86400 * S), "7d");
        assert_eq!(human_duration(3 * 86400 * S + 5 * 3600 * S), "3d5h");
        assert_eq!(human_duration(800 * 86400 * S), "2y70d");
    }

    #[test]
    fn tab_writer_pads_all_but_the_last_cell() {
        let mut w = TabWriter::new();
        w.write("a\tbb\tc\n");
        w.write("ccc\t\t\n");
        let mut out = String::new();
        w.finish(&mut out);
        assert_eq!(out, "a    bb  c\nccc      \n");
    }
}
