//! Client verbs against a running `weir serve`: apply, get, status, history, the commands, gates,
//! delete.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use http::Method;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;
use weir_api::types::{
    Applied, CommandRequest, ErrorBody, EventPage, GateRequest, RolloutPage, RolloutView,
};
use weir_core::machine::Command;
use weir_http::{Answer, HttpClient};
use weir_store::StoredEvent;

use crate::cmd_core::OutputFormat;
use crate::schedule_text::{bar, due, rounded};
// Quiet on a closed pipe (`weir status NAME | head -1`), unlike std's.
use crate::stdout::{print, println};

/// Where the server is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The weir server's URL.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "WEIR_SERVER",
        default_value = "http://127.0.0.1:7979"
    )]
    pub(crate) server: String,
    #[command(flatten)]
    pub(crate) tls: crate::tls::ClientTlsArgs,
    /// The API token to send (`Authorization: Bearer`), from `weir token create`; needed when
    /// the server has tokens (docs/SECURITY.md). Prefer WEIR_TOKEN to the flag, which other
    /// users of the machine can see in the process list.
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        env = "WEIR_TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
}

/// A rollout by name: `NAME` (in `--namespace`) or `NAMESPACE/NAME`.
#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// The rollout: NAME or NAMESPACE/NAME.
    #[arg(value_name = "NAME")]
    name: String,
    /// The namespace when NAME has none.
    #[arg(long, short, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    server: ServerArgs,
}

impl NameArgs {
    fn path(&self) -> String {
        let (namespace, name) = self
            .name
            .split_once('/')
            .unwrap_or((self.namespace.as_str(), self.name.as_str()));
        format!("/api/v1/rollouts/{namespace}/{name}")
    }
}

/// Arguments of `weir apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The file of rollouts (weir Rollouts or Flagger Canaries; YAML with `---` between documents,
    /// or JSON).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
}

/// Arguments of `weir get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// One rollout (NAME or NAMESPACE/NAME); all when absent.
    #[arg(value_name = "NAME")]
    name: Option<String>,
    /// Only this namespace (and the namespace of NAME when it has none).
    #[arg(long, short)]
    namespace: Option<String>,
    /// `text`: a table; `json`: the rollouts as the API returns them.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    argo: crate::cmd_argo::ArgoGetArgs,
}

/// Arguments of `weir history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    name: NameArgs,
    /// `text`: one line per event with its evidence; `json`: the events as the API returns them.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

/// Arguments of `weir promote|abort|pause|resume|retry`.
#[derive(Debug, Args)]
pub struct CommandArgs {
    #[command(flatten)]
    name: NameArgs,
    /// Who gives the command, for the history (default: $USER).
    #[arg(long, visible_alias = "as", value_name = "NAME")]
    actor: Option<String>,
}

impl CommandArgs {
    fn actor(&self) -> String {
        self.actor
            .clone()
            .filter(|actor| !actor.trim().is_empty())
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "cli".into())
    }
}

/// Arguments of `weir promote`.
#[derive(Debug, Args)]
#[command(after_help = PROMOTE_HELP)]
pub struct PromoteArgs {
    #[command(flatten)]
    pub command: CommandArgs,
    /// Take only the plan's next step (a canary step or schedule entry) now, past its pause;
    /// without it the run promotes to the end, skipping the remaining steps.
    #[arg(long)]
    pub step: bool,
}

const PROMOTE_HELP: &str = "\
Examples:
  weir promote checkout            # all traffic to the new version now: the remaining steps skipped
  weir promote checkout --step     # only the next step now (its own pause still applies)

The history says which: \"promoted one step by ana to 30%: step 2 of 5\" or \"promoted by ana to the
end\". More: docs/STATE-MACHINE.md";

/// Arguments of `weir stop`.
#[derive(Debug, Args)]
#[command(after_help = STOP_HELP)]
pub struct StopArgs {
    #[command(flatten)]
    pub command: CommandArgs,
    /// Return everyone to the primary (for a flag: the control variation) as well, like
    /// `weir abort`; without it the weights stay where they are.
    #[arg(long)]
    pub rollback: bool,
}

const STOP_HELP: &str = "\
Examples:
  weir stop new-checkout-rollout                # the flag keeps its current split
  weir stop new-checkout-rollout --rollback     # everyone back on the control variation

The rollout's phase becomes Stopped (or Failed with --rollback); its schedule's state STOPPED,
stoppedBy user. Applying a new revision (or `weir retry` after --rollback) starts a new run.

More: docs/FLAGS.md";

const GATE_HELP: &str = "\
Examples:
  weir gate open checkout --type confirm-promotion      # promote when the plan ends
  weir gate close shop/checkout --hook load-approval --as ana
  weir gate open checkout --hook load-approval          # overrides that; `weir history` shows both

More: docs/WEBHOOKS.md";

/// Arguments of `weir gate`.
#[derive(Debug, Args)]
#[command(after_long_help = GATE_HELP)]
pub struct GateArgs {
    #[command(subcommand)]
    action: GateAction,
}

/// Open or close.
#[derive(Debug, Subcommand)]
enum GateAction {
    /// Let the gate pass whatever its hooks answer, for the rest of the run.
    ///
    /// A run waiting at the gate moves on at once (confirm-rollout, confirm-promotion) or at its
    /// next tick (confirm-traffic-increase).
    Open(GateTarget),
    /// Hold the gate whatever its hooks answer, for the rest of the run (until `weir gate open`).
    ///
    /// Also works on a gate no hook guards: `weir gate close NAME --type confirm-promotion`
    /// keeps the run in WaitingPromotion at the end of its plan. Holding the weight this way is
    /// waiting on a person, like `weir pause`: the progress deadline does not fail the run.
    Close(GateTarget),
}

/// Which gate, of which rollout.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["gate_type", "hook"])))]
struct GateTarget {
    #[command(flatten)]
    command: CommandArgs,
    /// Every hook of this gate type (and the type itself when no hook guards it).
    #[arg(long = "type", value_name = "TYPE", value_parser = ["confirm-rollout", "confirm-traffic-increase", "confirm-promotion"])]
    gate_type: Option<String>,
    /// One webhook, by its name in spec.analysis.webhooks (its type is the gate's).
    #[arg(long, value_name = "HOOK")]
    hook: Option<String>,
}

/// The most of an answer a client verb reads: far above a page of the API's lists (at most
/// [`LIST_PAGE`] items) or one rollout (a document is at most 4 MiB), a bound on memory against
/// a server that sends without end.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// How many items a client verb asks for per page of a list; it follows `nextCursor` to the
/// end.
pub(crate) const LIST_PAGE: usize = 100;

pub(crate) struct Client {
    base: String,
    http: HttpClient,
    tls: crate::tls::ClientTlsArgs,
    /// `Authorization: Bearer ...`, when a token was given.
    authorization: Option<String>,
}

/// A refusal: the HTTP status and, from a weir server, the error it reported.
pub(crate) struct Refused {
    pub(crate) status: u16,
    body: Option<ErrorBody>,
    /// The body as JSON (null when it is not), for answers that are not weir's error shape.
    pub(crate) raw: Value,
}

impl Client {
    /// A client of the server `server` names, trusting the roots its `--ca` says (an error
    /// when that file cannot be used).
    pub(crate) fn new(server: &ServerArgs) -> Result<Client> {
        Ok(Client {
            base: server.server.trim_end_matches('/').to_string(),
            http: HttpClient::trusting(&server.tls.roots(&server.server)?)
                .reading_up_to(MAX_ANSWER_BYTES),
            tls: server.tls.clone(),
            authorization: server
                .token
                .as_deref()
                .map(str::trim)
                .filter(|token| !token.is_empty())
                .map(|token| format!("Bearer {token}")),
        })
    }

    /// Sends a request and decodes the answer into the type the server encodes for it.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<std::result::Result<T, Refused>> {
        let url = format!("{}{path}", self.base);
        let (mut headers, bytes) = match body {
            Some(body) => (
                vec![("content-type", "application/json".to_string())],
                body.to_string().into_bytes(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        if let Some(authorization) = &self.authorization {
            headers.push(("authorization", authorization.clone()));
        }
        let answer: Answer = self
            .http
            .request(method, &url, headers, bytes.into(), Duration::from_secs(30))
            .await
            .map_err(|error| {
                if error.is_certificate() {
                    anyhow::anyhow!("cannot verify the weir server: {error}; {}", self.tls.hint())
                } else {
                    anyhow::anyhow!("cannot reach the weir server: {error} (is `weir serve` running? --server sets its URL)")
                }
            })?;
        if answer.oversized {
            bail!(
                "the server at {url} answered with more than {} MiB, the most this weir reads (status {})",
                MAX_ANSWER_BYTES / (1024 * 1024),
                answer.status
            );
        }
        if !answer.status.is_success() {
            return Ok(Err(Refused {
                status: answer.status.as_u16(),
                body: serde_json::from_slice(&answer.body).ok(),
                raw: serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
            }));
        }
        let body: &[u8] = if answer.body.is_empty() {
            b"null"
        } else {
            &answer.body
        };
        serde_json::from_slice(body)
            .map(Ok)
            .with_context(|| format!("the server at {url} answered with a body this weir cannot read (a different version?)"))
    }
}

pub(crate) fn print_refusal(refused: &Refused) {
    let Some(ErrorBody { error }) = &refused.body else {
        eprintln!("error ({}): the server refused the request", refused.status);
        return;
    };
    eprintln!("error ({}): {}", refused.status, error.message);
    for item in &error.errors {
        eprintln!("  - {}: {}", item.path, item.message);
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn row(rollout: &RolloutView) -> [String; 6] {
    let metadata = &rollout.document.metadata;
    let status = rollout.document.status.clone().unwrap_or_default();
    [
        metadata.namespace_or_default().to_string(),
        metadata.name.clone(),
        format!("{:?}", status.phase),
        format!("{}", status.canary_weight),
        status.run.to_string(),
        status.message,
    ]
}

fn print_table(rows: &[[String; 6]]) {
    print_columns(
        &["NAMESPACE", "NAME", "PHASE", "CANARY", "RUN", "MESSAGE"],
        rows,
    );
}

/// The table with each rollout's owner and the age of its lease (several instances on one
/// database): `OWNER` is the instance stepping it (`none` between owners), `LEASE` how long
/// ago it renewed the lease, `expired` once it lapsed (the owner died or stalls; another
/// instance takes it over).
fn print_owned_table(rollouts: &[RolloutView]) {
    let rows: Vec<[String; 8]> = rollouts
        .iter()
        .map(|rollout| {
            let [namespace, name, phase, canary, run, message] = row(rollout);
            let (owner, lease) = match &rollout.owner {
                Some(owner) => (
                    owner.instance.clone().unwrap_or_else(|| "none".into()),
                    match (owner.expired, owner.lease_age_seconds) {
                        (true, Some(age)) => format!("expired ({age:.0}s)"),
                        (true, None) => "-".into(),
                        (false, Some(age)) => format!("{age:.1}s"),
                        (false, None) => "-".into(),
                    },
                ),
                None => ("-".into(), "-".into()),
            };
            [namespace, name, phase, canary, run, owner, lease, message]
        })
        .collect();
    print_columns(
        &[
            "NAMESPACE",
            "NAME",
            "PHASE",
            "CANARY",
            "RUN",
            "OWNER",
            "LEASE",
            "MESSAGE",
        ],
        &rows,
    );
}

/// A table: columns padded to their widest cell, the last one left as it is.
pub(crate) fn print_columns<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) {
    let mut widths = headers.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut text = String::new();
        for (index, cell) in cells.iter().enumerate() {
            if index + 1 == N {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[index]));
            }
        }
        println!("{}", text.trim_end());
    };
    line(*headers);
    for row in rows {
        line(std::array::from_fn(|index| row[index].as_str()));
    }
}

/// `weir apply -f FILE`.
pub fn apply(args: &ApplyArgs) -> Result<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let documents = weir_core::document::parse_values(&bytes)
        .map_err(|error| anyhow::anyhow!("{}: {error}", args.file.display()))?;
    if documents.is_empty() {
        bail!("{} holds no document", args.file.display());
    }
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        let mut refused = 0;
        for document in documents {
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            // A flag is not a rollout: say so here rather than let the rollout endpoint refuse
            // it with a message about rollouts.
            if document["kind"].as_str() == Some(weir_core::model::FLAG_KIND) {
                refused += 1;
                eprintln!(
                    "flag {name}: not applied: flags are applied with `weir flag` / POST \
                     /api/v1/flags"
                );
                continue;
            }
            match client
                .call::<Applied>(Method::POST, "/api/v1/rollouts", Some(document))
                .await?
            {
                Ok(applied) => {
                    let outcome = serde_json::to_value(applied.outcome)?;
                    println!("rollout {name} {}", outcome.as_str().unwrap_or("applied"));
                    for warning in &applied.warnings {
                        eprintln!("  warning: {warning}");
                    }
                }
                Err(refusal) => {
                    refused += 1;
                    eprint!("rollout {name}: ");
                    print_refusal(&refusal);
                }
            }
        }
        Ok(if refused == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// `weir get [NAME]`.
pub fn get(args: &GetArgs) -> Result<ExitCode> {
    if args.argo.wanted() {
        return crate::cmd_argo::get(&args.argo, args.name.as_deref(), args.namespace.as_deref());
    }
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        let mut rollouts = Vec::new();
        if let Some(name) = &args.name {
            let (namespace, name) = name.split_once('/').unwrap_or((
                args.namespace.as_deref().unwrap_or("default"),
                name.as_str(),
            ));
            match client
                .call(
                    Method::GET,
                    &format!("/api/v1/rollouts/{namespace}/{name}"),
                    None,
                )
                .await?
            {
                Ok(rollout) => rollouts.push(rollout),
                Err(refusal) => {
                    print_refusal(&refusal);
                    return Ok(ExitCode::from(1));
                }
            }
        } else {
            let mut cursor: Option<String> = None;
            loop {
                let mut path = format!("/api/v1/rollouts?limit={LIST_PAGE}");
                if let Some(namespace) = &args.namespace {
                    path.push_str(&format!("&namespace={namespace}"));
                }
                if let Some(cursor) = &cursor {
                    path.push_str(&format!("&cursor={cursor}"));
                }
                match client.call::<RolloutPage>(Method::GET, &path, None).await? {
                    Ok(page) => {
                        rollouts.extend(page.items);
                        match page.next_cursor {
                            Some(next) => cursor = Some(next),
                            None => break,
                        }
                    }
                    Err(refusal) => {
                        print_refusal(&refusal);
                        return Ok(ExitCode::from(1));
                    }
                }
            }
        }
        match args.output {
            OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&rollouts)?),
            OutputFormat::Text if rollouts.is_empty() => println!("no rollouts"),
            OutputFormat::Text if rollouts.iter().any(|rollout| rollout.owner.is_some()) => {
                print_owned_table(&rollouts)
            }
            OutputFormat::Text => print_table(&rollouts.iter().map(row).collect::<Vec<_>>()),
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn events(
    client: &Client,
    name: &NameArgs,
) -> Result<std::result::Result<Vec<StoredEvent>, ExitCode>> {
    let mut all = Vec::new();
    let mut after = 0u64;
    loop {
        let path = format!("{}/events?after={after}&limit=500", name.path());
        match client.call::<EventPage>(Method::GET, &path, None).await? {
            Ok(page) => {
                all.extend(page.items);
                match page.next_after {
                    Some(next) => after = next,
                    None => return Ok(Ok(all)),
                }
            }
            Err(refusal) => {
                print_refusal(&refusal);
                return Ok(Err(ExitCode::from(1)));
            }
        }
    }
}

fn event_line(stored: &StoredEvent) -> String {
    format!(
        "#{:<4} {}",
        stored.seq,
        crate::progress::format_event(&stored.event)
    )
}

/// `weir history NAME`.
pub fn history(args: &HistoryArgs) -> Result<ExitCode> {
    let client = Client::new(&args.name.server)?;
    runtime()?.block_on(async {
        let events = match events(&client, &args.name).await? {
            Ok(events) => events,
            Err(code) => return Ok(code),
        };
        match args.output {
            OutputFormat::Json => {
                for event in &events {
                    println!("{}", serde_json::to_string(event)?);
                }
            }
            OutputFormat::Text => {
                for event in &events {
                    println!("{}", event_line(event));
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `weir status NAME`: a readable summary and the last events.
pub fn status(args: &NameArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        let rollout = match client
            .call::<RolloutView>(Method::GET, &args.path(), None)
            .await?
        {
            Ok(rollout) => rollout,
            Err(refusal) => {
                print_refusal(&refusal);
                return Ok(ExitCode::from(1));
            }
        };
        let status = rollout.document.status.clone().unwrap_or_default();
        let [namespace, name, phase, canary, run, message] = row(&rollout);
        println!("{namespace}/{name}: {phase}, canary {canary}, run {run}");
        if !message.is_empty() {
            println!("  {message}");
        }
        println!(
            "  canary revision {}, primary revision {}, steps taken {}, failed checks {}{}",
            status.canary_revision.as_deref().unwrap_or("-"),
            status.primary_revision.as_deref().unwrap_or("-"),
            status.steps_taken,
            status.failed_checks,
            if status.paused { ", paused" } else { "" },
        );
        if let Some(since) = status.evidence_wait_since {
            // How long the run has held for evidence of health (the message says for what).
            let waited = jiff::Timestamp::now().duration_since(since);
            println!(
                "  waiting for evidence since {since} ({}s; spec.analysis.evidence.deadline {})",
                waited.as_secs().max(0),
                rollout.document.spec.analysis.evidence.deadline,
            );
        }
        let events = match events(&client, args).await? {
            Ok(events) => events,
            Err(code) => return Ok(code),
        };
        if let weir_core::model::Plan::Schedule(_) = &rollout.document.spec.plan {
            print!(
                "{}",
                schedule_table(&rollout.document.spec, &status, jiff::Timestamp::now())
            );
        }
        println!("last events:");
        for event in events
            .iter()
            .rev()
            .take(10)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            println!("  {}", event_line(event));
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// A schedule's entries with when each fired in the current run (`status.triggered`, committed
/// with the step that applied it), the next one and when it is due, the schedule's state in
/// the seed's words, and a progress bar of the weight now.
fn schedule_table(
    spec: &weir_core::model::RolloutSpec,
    status: &weir_core::model::RolloutStatus,
    now: jiff::Timestamp,
) -> String {
    let entries = weir_core::machine::schedule_entries(spec);
    let done = status.triggered.len().min(entries.len());
    let state = weir_core::machine::schedule_state(spec, status)
        .map_or("-", weir_core::model::ScheduleState::as_str);
    let stopped_by = status
        .stopped_by
        .map(|by| format!(" (stopped by {})", by.as_str()))
        .unwrap_or_default();
    let mut text = format!(
        "schedule: {state}{stopped_by}, {done} of {} entries done {} {} on the new variation\n",
        entries.len(),
        bar(
            u64::from(status.canary_weight.basis_points()),
            u64::from(weir_core::Weight::FULL.basis_points()),
            20
        ),
        status.canary_weight
    );
    text.push_str("   #  AT                         WEIGHT  TRIGGERED\n");
    // Only a run under way has a next entry: a stopped, failed or finished one fires no more.
    let waits_for_entries = status.phase.in_run();
    for (index, (at, weight)) in entries.iter().enumerate() {
        let when = match status.triggered.get(index) {
            Some(fired) => {
                let late = fired.lateness();
                if late >= jiff::SignedDuration::from_secs(1) {
                    format!("{} ({} late)", fired.triggered_at, rounded(late))
                } else {
                    format!(
                        "{} ({} ms after its time)",
                        fired.triggered_at,
                        late.as_millis()
                    )
                }
            }
            None if index == done && waits_for_entries => format!("next, {}", due(*at, now)),
            None => String::new(),
        };
        text.push_str(&format!(
            "  {:>2}  {:<25}  {:>6}  {when}\n",
            index + 1,
            at.to_string(),
            weight.to_string()
        ));
    }
    text
}

/// `weir promote [--step]|abort|pause|resume|retry NAME`.
pub fn command(command: Command, args: &CommandArgs) -> Result<ExitCode> {
    let rollback = match command {
        Command::Stop { rollback } => Some(rollback),
        _ => None,
    };
    let request = CommandRequest {
        command: command.as_str().to_string(),
        actor: Some(args.actor()),
        gate: None,
        rollback,
        step: (command == Command::PromoteStep).then_some(true),
    };
    send_command(args, &request)
}

/// `weir gate open|close NAME --type TYPE --hook HOOK`.
pub fn gate(args: &GateArgs) -> Result<ExitCode> {
    let (name, target) = match &args.action {
        GateAction::Open(target) => ("open-gate", target),
        GateAction::Close(target) => ("close-gate", target),
    };
    let request = CommandRequest {
        command: name.to_string(),
        actor: Some(target.command.actor()),
        gate: Some(GateRequest {
            gate_type: target.gate_type.clone(),
            hook: target.hook.clone(),
        }),
        rollback: None,
        step: None,
    };
    send_command(&target.command, &request)
}

/// Posts a command and prints where the rollout stands after it.
fn send_command(args: &CommandArgs, request: &CommandRequest) -> Result<ExitCode> {
    let client = Client::new(&args.name.server)?;
    runtime()?.block_on(async {
        match client
            .call(
                Method::POST,
                &format!("{}/commands", args.name.path()),
                Some(serde_json::to_value(request)?),
            )
            .await?
        {
            Ok(rollout) => {
                let [namespace, name, phase, canary, _, message] = row(&rollout);
                println!("{namespace}/{name}: {phase}, canary {canary}: {message}");
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => {
                print_refusal(&refusal);
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// `weir delete NAME`.
pub fn delete(args: &NameArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        match client
            .call::<IgnoredAny>(Method::DELETE, &args.path(), None)
            .await?
        {
            Ok(_) => {
                println!("rollout {} deleted", args.name);
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => {
                print_refusal(&refusal);
                Ok(ExitCode::from(1))
            }
        }
    })
}
