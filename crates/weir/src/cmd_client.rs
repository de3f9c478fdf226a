//! Client verbs against a running `weir serve`: apply, get, status, history, the commands, gates,
//! delete.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use http::Method;
use serde_json::{Value, json};
use weir_core::machine::Command;
use weir_http::{Answer, HttpClient};

use crate::cmd_core::OutputFormat;

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
    server: String,
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

struct Client {
    base: String,
    http: HttpClient,
}

/// The server's answer, decoded: JSON, or the error it reported.
enum Reply {
    Ok(Value),
    Refused { status: u16, body: Value },
}

impl Client {
    fn new(server: &ServerArgs) -> Client {
        Client {
            base: server.server.trim_end_matches('/').to_string(),
            http: HttpClient::default(),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Reply> {
        let url = format!("{}{path}", self.base);
        let (headers, bytes) = match body {
            Some(body) => (
                vec![("content-type", "application/json".to_string())],
                body.to_string().into_bytes(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        let answer: Answer = self
            .http
            .request(method, &url, headers, bytes.into(), Duration::from_secs(30))
            .await
            .map_err(|error| anyhow::anyhow!("cannot reach the weir server: {error} (is `weir serve` running? --server sets its URL)"))?;
        let body: Value = if answer.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&answer.body).unwrap_or(Value::Null)
        };
        Ok(if answer.status.is_success() {
            Reply::Ok(body)
        } else {
            Reply::Refused {
                status: answer.status.as_u16(),
                body,
            }
        })
    }
}

fn print_refusal(status: u16, body: &Value) {
    let error = &body["error"];
    let message = error["message"]
        .as_str()
        .unwrap_or("the server refused the request");
    eprintln!("error ({status}): {message}");
    for item in error["errors"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        eprintln!(
            "  - {}: {}",
            item["path"].as_str().unwrap_or("?"),
            item["message"].as_str().unwrap_or("")
        );
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn weight(value: &Value) -> String {
    match value.as_f64() {
        Some(weight) => format!("{weight}%"),
        None => "0%".into(),
    }
}

fn row(rollout: &Value) -> [String; 6] {
    let status = &rollout["status"];
    [
        rollout["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        rollout["metadata"]["name"]
            .as_str()
            .unwrap_or("?")
            .to_string(),
        status["phase"]
            .as_str()
            .unwrap_or("Initializing")
            .to_string(),
        weight(&status["canaryWeight"]),
        status["run"].as_u64().unwrap_or(0).to_string(),
        status["message"].as_str().unwrap_or("").to_string(),
    ]
}

fn print_table(rows: &[[String; 6]]) {
    let headers = ["NAMESPACE", "NAME", "PHASE", "CANARY", "RUN", "MESSAGE"];
    let mut widths = headers.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut text = String::new();
        for (index, cell) in cells.iter().enumerate() {
            if index == 5 {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[index]));
            }
        }
        println!("{}", text.trim_end());
    };
    line(headers);
    for row in rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4], &row[5]]);
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
    let client = Client::new(&args.server);
    runtime()?.block_on(async {
        let mut refused = 0;
        for document in documents {
            let name = document["metadata"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            match client
                .call(Method::POST, "/api/v1/rollouts", Some(document))
                .await?
            {
                Reply::Ok(body) => {
                    let outcome = body["outcome"].as_str().unwrap_or("applied");
                    println!("rollout {name} {outcome}");
                    for warning in body["warnings"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                    {
                        eprintln!(
                            "  warning: {}: {}",
                            warning["path"].as_str().unwrap_or(""),
                            warning["message"].as_str().unwrap_or("")
                        );
                    }
                }
                Reply::Refused { status, body } => {
                    refused += 1;
                    eprint!("rollout {name}: ");
                    print_refusal(status, &body);
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
    let client = Client::new(&args.server);
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
                Reply::Ok(body) => rollouts.push(body),
                Reply::Refused { status, body } => {
                    print_refusal(status, &body);
                    return Ok(ExitCode::from(1));
                }
            }
        } else {
            let mut cursor: Option<String> = None;
            loop {
                let mut path = "/api/v1/rollouts?limit=500".to_string();
                if let Some(namespace) = &args.namespace {
                    path.push_str(&format!("&namespace={namespace}"));
                }
                if let Some(cursor) = &cursor {
                    path.push_str(&format!("&cursor={cursor}"));
                }
                match client.call(Method::GET, &path, None).await? {
                    Reply::Ok(body) => {
                        rollouts.extend(body["items"].as_array().cloned().unwrap_or_default());
                        match body["nextCursor"].as_str() {
                            Some(next) => cursor = Some(next.to_string()),
                            None => break,
                        }
                    }
                    Reply::Refused { status, body } => {
                        print_refusal(status, &body);
                        return Ok(ExitCode::from(1));
                    }
                }
            }
        }
        match args.output {
            OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&rollouts)?),
            OutputFormat::Text if rollouts.is_empty() => println!("no rollouts"),
            OutputFormat::Text => print_table(&rollouts.iter().map(row).collect::<Vec<_>>()),
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn events(
    client: &Client,
    name: &NameArgs,
) -> Result<std::result::Result<Vec<Value>, ExitCode>> {
    let mut all = Vec::new();
    let mut after = 0u64;
    loop {
        let path = format!("{}/events?after={after}&limit=500", name.path());
        match client.call(Method::GET, &path, None).await? {
            Reply::Ok(body) => {
                all.extend(body["items"].as_array().cloned().unwrap_or_default());
                match body["nextAfter"].as_u64() {
                    Some(next) => after = next,
                    None => return Ok(Ok(all)),
                }
            }
            Reply::Refused { status, body } => {
                print_refusal(status, &body);
                return Ok(Err(ExitCode::from(1)));
            }
        }
    }
}

fn event_line(event: &Value) -> String {
    match serde_json::from_value::<weir_core::model::Event>(event.clone()) {
        Ok(parsed) => format!(
            "#{:<4} {}",
            event["seq"].as_u64().unwrap_or(0),
            crate::progress::format_event(&parsed)
        ),
        Err(_) => event.to_string(),
    }
}

/// `weir history NAME`.
pub fn history(args: &HistoryArgs) -> Result<ExitCode> {
    let client = Client::new(&args.name.server);
    runtime()?.block_on(async {
        let events = match events(&client, &args.name).await? {
            Ok(events) => events,
            Err(code) => return Ok(code),
        };
        match args.output {
            OutputFormat::Json => {
                for event in &events {
                    println!("{event}");
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
    let client = Client::new(&args.server);
    runtime()?.block_on(async {
        let rollout = match client.call(Method::GET, &args.path(), None).await? {
            Reply::Ok(body) => body,
            Reply::Refused { status, body } => {
                print_refusal(status, &body);
                return Ok(ExitCode::from(1));
            }
        };
        let status = &rollout["status"];
        let [namespace, name, phase, canary, run, message] = row(&rollout);
        println!("{namespace}/{name}: {phase}, canary {canary}, run {run}");
        if !message.is_empty() {
            println!("  {message}");
        }
        println!(
            "  canary revision {}, primary revision {}, steps taken {}, failed checks {}{}",
            status["canaryRevision"].as_str().unwrap_or("-"),
            status["primaryRevision"].as_str().unwrap_or("-"),
            status["stepsTaken"].as_u64().unwrap_or(0),
            status["failedChecks"].as_u64().unwrap_or(0),
            if status["paused"].as_bool() == Some(true) {
                ", paused"
            } else {
                ""
            },
        );
        let events = match events(&client, args).await? {
            Ok(events) => events,
            Err(code) => return Ok(code),
        };
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

/// `weir promote|abort|pause|resume|retry NAME`.
pub fn command(command: Command, args: &CommandArgs) -> Result<ExitCode> {
    let body = json!({"command": command.as_str(), "actor": args.actor()});
    send_command(args, body)
}

/// `weir gate open|close NAME --type TYPE --hook HOOK`.
pub fn gate(args: &GateArgs) -> Result<ExitCode> {
    let (name, target) = match &args.action {
        GateAction::Open(target) => ("open-gate", target),
        GateAction::Close(target) => ("close-gate", target),
    };
    let mut gate = serde_json::Map::new();
    if let Some(gate_type) = &target.gate_type {
        gate.insert("type".into(), json!(gate_type));
    }
    if let Some(hook) = &target.hook {
        gate.insert("hook".into(), json!(hook));
    }
    let body = json!({"command": name, "gate": gate, "actor": target.command.actor()});
    send_command(&target.command, body)
}

/// Posts a command and prints where the rollout stands after it.
fn send_command(args: &CommandArgs, body: Value) -> Result<ExitCode> {
    let client = Client::new(&args.name.server);
    runtime()?.block_on(async {
        match client
            .call(
                Method::POST,
                &format!("{}/commands", args.name.path()),
                Some(body),
            )
            .await?
        {
            Reply::Ok(rollout) => {
                let [namespace, name, phase, canary, _, message] = row(&rollout);
                println!("{namespace}/{name}: {phase}, canary {canary}: {message}");
                Ok(ExitCode::SUCCESS)
            }
            Reply::Refused { status, body } => {
                print_refusal(status, &body);
                Ok(ExitCode::from(1))
            }
        }
    })
}

/// `weir delete NAME`.
pub fn delete(args: &NameArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server);
    runtime()?.block_on(async {
        match client.call(Method::DELETE, &args.path(), None).await? {
            Reply::Ok(_) => {
                println!("rollout {} deleted", args.name);
                Ok(ExitCode::SUCCESS)
            }
            Reply::Refused { status, body } => {
                print_refusal(status, &body);
                Ok(ExitCode::from(1))
            }
        }
    })
}
