//! `weir flag`: feature flags on a running `weir serve` (create, get, list, set, delete),
//! evaluating one as an application would, over OFREP, listing the rollouts of flags, a flag's
//! change history and its triggers.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use http::Method;
use serde_json::{Map, Value, json};
use weir_api::types::{FlagRolloutPage, FlagRolloutView};

use crate::cmd_client::{Client, ServerArgs, print_refusal, runtime};
use crate::cmd_core::OutputFormat;
use crate::schedule_text::{bar, due};
// Quiet on a closed pipe (`weir flag list | head -1`), unlike std's.
use crate::stdout::{print, println};

const FLAG_HELP: &str = "\
Examples:
  weir flag create -f examples/flags/new-checkout.yaml
  weir flag list -n shop
  weir flag eval new-checkout -n shop --key user-42 --context country=DE
  weir flag set new-checkout -n shop --weights on=20,off=80
  weir flag set new-checkout -n shop --disable
  weir flag get new-checkout -n shop -o json
  weir flag delete new-checkout -n shop
  weir flag rollouts -n shop --status waiting,running
  weir flag history new-checkout -n shop
  weir flag trigger create new-checkout -n shop --action off --description 'error-rate alert'
  weir flag trigger list new-checkout -n shop
  weir flag trigger revoke new-checkout 6f1c2a9e0b3d4c5e -n shop

Applications read flags with any OpenFeature SDK and its OFREP provider, base URL
http://SERVER/ns/NAMESPACE (http://SERVER for namespace default). More: docs/FLAGS.md";

/// Arguments of `weir flag`.
#[derive(Debug, Args)]
#[command(after_long_help = FLAG_HELP)]
pub struct FlagArgs {
    #[command(subcommand)]
    action: FlagAction,
}

#[derive(Debug, Subcommand)]
enum FlagAction {
    /// Create the flags of a file (YAML with `---` between documents, or JSON); an existing
    /// flag of the same key is an error (use `set`, or `--update` to replace it).
    Create(CreateArgs),
    /// Show one flag.
    Get(KeyArgs),
    /// List flags with their state and default strategy.
    List(ListArgs),
    /// Change a flag: turn it on or off, serve one variation to everyone, or split by weights.
    Set(SetArgs),
    /// Delete a flag.
    Delete(KeyArgs),
    /// Evaluate a flag as an application would (over OFREP) and print the variant, the value
    /// and why.
    Eval(EvalArgs),
    /// List the rollouts of flags: where each schedule stands, the weight now, the next entry
    /// and when it is due.
    Rollouts(RolloutsArgs),
    /// A flag's change history, newest first: when, who, what, and every field that changed.
    History(HistoryArgs),
    /// Triggers: secret URLs that turn a flag on or off when POSTed to (for alerting systems).
    #[command(subcommand)]
    Trigger(TriggerCommand),
}

#[derive(Debug, Args)]
struct HistoryArgs {
    #[command(flatten)]
    flag: KeyArgs,
    /// At most this many changes (the newest).
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

#[derive(Debug, Subcommand)]
enum TriggerCommand {
    /// Create a trigger; prints its URL with the secret, which is shown only this once.
    Create(TriggerCreateArgs),
    /// List a flag's triggers (without secrets): action, description, uses, last use.
    List(KeyArgs),
    /// Revoke a trigger: its URL answers 404 from now on.
    Revoke(TriggerRevokeArgs),
}

#[derive(Debug, Args)]
struct TriggerCreateArgs {
    #[command(flatten)]
    flag: KeyArgs,
    /// What calling the trigger does: `on` or `off`.
    #[arg(long, value_parser = ["on", "off"])]
    action: String,
    /// What it is for (e.g. the alert that calls it).
    #[arg(long, default_value = "")]
    description: String,
}

#[derive(Debug, Args)]
struct TriggerRevokeArgs {
    #[command(flatten)]
    flag: KeyArgs,
    /// The trigger's id (`weir flag trigger list`).
    #[arg(value_name = "ID")]
    id: String,
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The file of Flag documents.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: PathBuf,
    /// Replace flags that exist already.
    #[arg(long)]
    update: bool,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, Args)]
struct KeyArgs {
    /// The flag: KEY or NAMESPACE/KEY.
    #[arg(value_name = "KEY")]
    key: String,
    /// The namespace when KEY has none.
    #[arg(long, short, default_value = "default")]
    namespace: String,
    /// `text` (YAML for `get`) or `json`.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(flatten)]
    server: ServerArgs,
}

impl KeyArgs {
    fn parts(&self) -> (&str, &str) {
        self.key
            .split_once('/')
            .unwrap_or((self.namespace.as_str(), self.key.as_str()))
    }

    fn path(&self) -> String {
        let (namespace, key) = self.parts();
        format!("/api/v1/flags/{namespace}/{key}")
    }
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only this namespace.
    #[arg(long, short)]
    namespace: Option<String>,
    /// Only flags whose key (or a tag, or a variation's description) contains this.
    #[arg(long)]
    search: Option<String>,
    /// Only flags with this tag (repeatable: flags with every one).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// key, created, -created, updated, -updated.
    #[arg(long, default_value = "key")]
    order: String,
    /// `text`: a table; `json`: the flags as the API returns them.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, Args)]
struct RolloutsArgs {
    /// Only this namespace.
    #[arg(long, short)]
    namespace: Option<String>,
    /// Only rollouts of this flag (repeatable, or KEY,KEY).
    #[arg(long = "flag", value_name = "KEY")]
    flags: Vec<String>,
    /// Only schedules in this state: waiting, running, finished, stopped (repeatable, or
    /// STATE,STATE).
    #[arg(long = "status", value_name = "STATE")]
    states: Vec<String>,
    /// Only schedules of this type: manual or template.
    #[arg(long = "type", value_name = "TYPE")]
    schedule_type: Option<String>,
    /// Only rollouts whose name or flag key contains this (any case).
    #[arg(long)]
    search: Option<String>,
    /// name, created, -created, updated, -updated.
    #[arg(long, default_value = "name", allow_hyphen_values = true)]
    order: String,
    /// `text`: a table; `json`: one rollout per line as the API returns it.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").required(true).multiple(true).args(["enable", "disable", "variation", "weights"])))]
struct SetArgs {
    #[command(flatten)]
    flag: KeyArgs,
    /// Turn the flag on.
    #[arg(long, conflicts_with = "disable")]
    enable: bool,
    /// Turn the flag off: everyone gets its off variation.
    #[arg(long)]
    disable: bool,
    /// Serve this variation to everyone the targets and rules leave (the default strategy).
    #[arg(long, value_name = "VARIATION", conflicts_with = "weights")]
    variation: Option<String>,
    /// Split everyone the targets and rules leave by weights: `on=20,off=80` (percentages to
    /// 0.001%, summing to 100).
    #[arg(long, value_name = "NAME=PERCENT,...")]
    weights: Option<String>,
}

#[derive(Debug, Args)]
struct EvalArgs {
    #[command(flatten)]
    flag: KeyArgs,
    /// The targeting key (the user, the session...).
    #[arg(long = "key", value_name = "TARGETING_KEY")]
    targeting_key: Option<String>,
    /// A context attribute, `NAME=VALUE` (repeatable); numbers and true/false are typed.
    #[arg(long = "context", value_name = "NAME=VALUE")]
    context: Vec<String>,
}

/// `weir flag ...`.
pub fn flag(args: &FlagArgs) -> Result<ExitCode> {
    match &args.action {
        FlagAction::Create(args) => create(args),
        FlagAction::Get(args) => get(args),
        FlagAction::List(args) => list(args),
        FlagAction::Set(args) => set(args),
        FlagAction::Delete(args) => delete(args),
        FlagAction::Eval(args) => eval(args),
        FlagAction::Rollouts(args) => rollouts(args),
        FlagAction::History(args) => history(args),
        FlagAction::Trigger(TriggerCommand::Create(args)) => trigger_create(args),
        FlagAction::Trigger(TriggerCommand::List(args)) => trigger_list(args),
        FlagAction::Trigger(TriggerCommand::Revoke(args)) => trigger_revoke(args),
    }
}

fn history(args: &HistoryArgs) -> Result<ExitCode> {
    let client = Client::new(&args.flag.server)?;
    let base = format!("{}/history", args.flag.path());
    runtime()?.block_on(async {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        while items.len() < args.limit {
            let limit = (args.limit - items.len()).min(crate::cmd_client::LIST_PAGE);
            let mut path = format!("{base}?limit={limit}");
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={cursor}"));
            }
            let page = match client.call::<Value>(Method::GET, &path, None).await? {
                Ok(page) => page,
                Err(refusal) => {
                    return Ok(refused(&format!("flag {}", args.flag.key), &refusal));
                }
            };
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        if args.flag.output == OutputFormat::Json {
            for item in &items {
                println!("{item}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        if items.is_empty() {
            println!("flag {} has no recorded change", args.flag.key);
            return Ok(ExitCode::SUCCESS);
        }
        print_columns(&history_rows(&items));
        Ok(ExitCode::SUCCESS)
    })
}

fn print_columns(rows: &[[String; 5]]) {
    crate::cmd_client::print_columns(&["WHEN", "ACTOR", "ACTION", "VERSION", "CHANGES"], rows);
}

/// One row per changed field; the first row of a change says when, who and what.
fn history_rows(items: &[Value]) -> Vec<[String; 5]> {
    let text = |value: &Value| value.as_str().unwrap_or("-").to_string();
    let mut rows = Vec::new();
    for item in items {
        let mut who = text(&item["actor"]);
        if let Some(address) = item["address"].as_str() {
            who.push_str(&format!(" from {address}"));
        }
        let summary: Vec<String> = item["summary"]
            .as_array()
            .map(|lines| lines.iter().map(text).collect())
            .unwrap_or_default();
        let mut lines = summary.into_iter();
        rows.push([
            text(&item["at"]),
            who,
            text(&item["action"]),
            item["version"]
                .as_u64()
                .map_or_else(|| "-".to_string(), |version| version.to_string()),
            lines.next().unwrap_or_else(|| "-".to_string()),
        ]);
        for line in lines {
            rows.push([
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                line,
            ]);
        }
    }
    rows
}

fn trigger_create(args: &TriggerCreateArgs) -> Result<ExitCode> {
    let client = Client::new(&args.flag.server)?;
    let path = format!("{}/triggers", args.flag.path());
    let body = json!({"action": args.action, "description": args.description});
    runtime()?.block_on(async {
        let created = match client
            .call::<Value>(Method::POST, &path, Some(body))
            .await?
        {
            Ok(created) => created,
            Err(refusal) => return Ok(refused(&format!("flag {}", args.flag.key), &refusal)),
        };
        if args.flag.output == OutputFormat::Json {
            println!("{}", serde_json::to_string_pretty(&created)?);
            return Ok(ExitCode::SUCCESS);
        }
        let url = format!(
            "{}{}",
            args.flag.server.server.trim_end_matches('/'),
            created["path"].as_str().unwrap_or_default()
        );
        println!(
            "trigger {} created: POST to it to turn flag {} {}",
            created["trigger"]["id"].as_str().unwrap_or("?"),
            args.flag.key,
            args.action
        );
        println!("{url}");
        println!("(the URL holds the trigger's secret and is shown only this once)");
        Ok(ExitCode::SUCCESS)
    })
}

fn trigger_list(args: &KeyArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let path = format!("{}/triggers", args.path());
    runtime()?.block_on(async {
        let list = match client.call::<Value>(Method::GET, &path, None).await? {
            Ok(list) => list,
            Err(refusal) => return Ok(refused(&format!("flag {}", args.key), &refusal)),
        };
        let items = list["items"].as_array().cloned().unwrap_or_default();
        if args.output == OutputFormat::Json {
            for item in &items {
                println!("{item}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        let text = |value: &Value| value.as_str().unwrap_or("-").to_string();
        let rows: Vec<[String; 6]> = items
            .iter()
            .map(|item| {
                [
                    text(&item["id"]),
                    text(&item["action"]),
                    text(&item["description"]),
                    item["uses"].to_string(),
                    text(&item["lastUsedAt"]),
                    text(&item["createdBy"]),
                ]
            })
            .collect();
        crate::cmd_client::print_columns(
            &[
                "ID",
                "ACTION",
                "DESCRIPTION",
                "USES",
                "LAST USED",
                "CREATED BY",
            ],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn trigger_revoke(args: &TriggerRevokeArgs) -> Result<ExitCode> {
    let client = Client::new(&args.flag.server)?;
    let path = format!("{}/triggers/{}", args.flag.path(), args.id);
    runtime()?.block_on(async {
        match client.call::<Value>(Method::DELETE, &path, None).await? {
            Ok(_) => {
                println!("trigger {} of flag {} revoked", args.id, args.flag.key);
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => Ok(refused(&format!("flag {}", args.flag.key), &refusal)),
        }
    })
}

fn refused(what: &str, refusal: &crate::cmd_client::Refused) -> ExitCode {
    eprint!("{what}: ");
    print_refusal(refusal);
    ExitCode::from(1)
}

fn create(args: &CreateArgs) -> Result<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let documents = weir_core::document::parse_values(&bytes)
        .map_err(|error| anyhow::anyhow!("{}: {error}", args.file.display()))?;
    if documents.is_empty() {
        bail!("{} holds no document", args.file.display());
    }
    let client = Client::new(&args.server)?;
    let path = if args.update {
        "/api/v1/flags".to_string()
    } else {
        "/api/v1/flags?expectedVersion=0".to_string()
    };
    runtime()?.block_on(async {
        let mut status = ExitCode::SUCCESS;
        for document in documents {
            let key = document["metadata"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            match client
                .call::<Value>(Method::POST, &path, Some(document))
                .await?
            {
                Ok(applied) => println!(
                    "flag {key} {} (version {})",
                    applied["outcome"].as_str().unwrap_or("applied"),
                    applied["flag"]["version"]
                ),
                Err(refusal) => status = refused(&format!("flag {key}"), &refusal),
            }
        }
        Ok(status)
    })
}

fn get(args: &KeyArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        match client
            .call::<Value>(Method::GET, &args.path(), None)
            .await?
        {
            Ok(flag) => {
                match args.output {
                    OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&flag)?),
                    OutputFormat::Text => print!("{}", serde_saphyr::to_string(&flag)?),
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => Ok(refused(&format!("flag {}", args.key), &refusal)),
        }
    })
}

/// `on` / `off=80% on=20%`: what everyone outside targets and rules gets.
fn default_strategy(flag: &Value) -> String {
    let strategy = &flag["spec"]["defaultStrategy"];
    if let Some(variation) = strategy["variation"].as_str() {
        return variation.to_string();
    }
    strategy["weights"]
        .as_object()
        .map(|weights| {
            weights
                .iter()
                .map(|(name, weight)| format!("{name}={weight}%"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn list(args: &ListArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let mut query = vec![
        format!("order={}", args.order),
        format!("limit={}", crate::cmd_client::LIST_PAGE),
    ];
    if let Some(namespace) = &args.namespace {
        query.push(format!("namespace={namespace}"));
    }
    if let Some(search) = &args.search {
        query.push(format!("search={search}"));
    }
    for tag in &args.tags {
        query.push(format!("tag={tag}"));
    }
    runtime()?.block_on(async {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/v1/flags?{}", query.join("&"));
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={cursor}"));
            }
            let page = match client.call::<Value>(Method::GET, &path, None).await? {
                Ok(page) => page,
                Err(refusal) => return Ok(refused("listing flags", &refusal)),
            };
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        if args.output == OutputFormat::Json {
            for item in &items {
                println!("{item}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<[String; 6]> = items
            .iter()
            .map(|flag| {
                [
                    flag["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_string(),
                    flag["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                    if flag["spec"]["enabled"] == false {
                        "off"
                    } else {
                        "on"
                    }
                    .to_string(),
                    flag["version"].to_string(),
                    flag["rolledOutBy"].as_str().unwrap_or("-").to_string(),
                    default_strategy(flag),
                ]
            })
            .collect();
        crate::cmd_client::print_columns(
            &["NAMESPACE", "KEY", "STATE", "VERSION", "ROLLOUT", "DEFAULT"],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn set(args: &SetArgs) -> Result<ExitCode> {
    let client = Client::new(&args.flag.server)?;
    let path = args.flag.path();
    runtime()?.block_on(async {
        let mut flag = match client.call::<Value>(Method::GET, &path, None).await? {
            Ok(flag) => flag,
            Err(refusal) => return Ok(refused(&format!("flag {}", args.flag.key), &refusal)),
        };
        let version = flag["version"].as_u64().unwrap_or(0);
        let spec = &mut flag["spec"];
        if args.enable {
            spec["enabled"] = json!(true);
        }
        if args.disable {
            spec["enabled"] = json!(false);
        }
        if let Some(variation) = &args.variation {
            spec["defaultStrategy"] = json!({"variation": variation});
        }
        if let Some(weights) = &args.weights {
            let mut parsed = Map::new();
            for pair in weights.split(',').filter(|pair| !pair.trim().is_empty()) {
                let Some((name, percent)) = pair.split_once('=') else {
                    bail!("--weights {weights:?}: each entry is NAME=PERCENT, e.g. on=20,off=80");
                };
                let percent: f64 = percent
                    .trim()
                    .trim_end_matches('%')
                    .parse()
                    .with_context(|| format!("--weights: {percent:?} is not a percentage"))?;
                parsed.insert(name.trim().to_string(), json!(percent));
            }
            spec["defaultStrategy"] = json!({"weights": parsed});
        }
        // Only the version read: a concurrent change is a conflict, not lost.
        let path = format!("{path}?expectedVersion={version}");
        match client.call::<Value>(Method::PUT, &path, Some(flag)).await? {
            Ok(applied) => {
                println!(
                    "flag {} {} (version {}): {}, default {}",
                    args.flag.key,
                    applied["outcome"].as_str().unwrap_or("applied"),
                    applied["flag"]["version"],
                    if applied["flag"]["spec"]["enabled"] == false {
                        "off"
                    } else {
                        "on"
                    },
                    default_strategy(&applied["flag"])
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => Ok(refused(&format!("flag {}", args.flag.key), &refusal)),
        }
    })
}

fn delete(args: &KeyArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    runtime()?.block_on(async {
        match client
            .call::<Value>(Method::DELETE, &args.path(), None)
            .await?
        {
            Ok(_) => {
                println!("flag {} deleted", args.key);
                Ok(ExitCode::SUCCESS)
            }
            Err(refusal) => Ok(refused(&format!("flag {}", args.key), &refusal)),
        }
    })
}

/// A context value as typed as the command line allows: numbers and booleans, else text.
fn typed(value: &str) -> Value {
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => serde_json::from_str::<serde_json::Number>(value)
            .map(Value::Number)
            .unwrap_or_else(|_| Value::String(value.to_string())),
    }
}

fn eval(args: &EvalArgs) -> Result<ExitCode> {
    let client = Client::new(&args.flag.server)?;
    let (namespace, key) = args.flag.parts();
    let mut context = Map::new();
    if let Some(targeting_key) = &args.targeting_key {
        context.insert("targetingKey".into(), json!(targeting_key));
    }
    for pair in &args.context {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--context {pair:?}: write NAME=VALUE, e.g. --context country=DE");
        };
        context.insert(name.to_string(), typed(value));
    }
    let path = if namespace == weir_api::OFREP_DEFAULT_NAMESPACE {
        format!("/ofrep/v1/evaluate/flags/{key}")
    } else {
        format!("/ns/{namespace}/ofrep/v1/evaluate/flags/{key}")
    };
    runtime()?.block_on(async {
        let answer = client
            .call::<Value>(Method::POST, &path, Some(json!({"context": context})))
            .await?;
        let (result, code) = match answer {
            Ok(result) => (result, ExitCode::SUCCESS),
            Err(refusal) if refusal.raw.get("errorCode").is_some() => {
                (refusal.raw, ExitCode::from(1))
            }
            Err(refusal) => return Ok(refused(&format!("flag {key}"), &refusal)),
        };
        match args.flag.output {
            OutputFormat::Json => println!("{result}"),
            OutputFormat::Text => match result.get("errorCode") {
                Some(error) => println!(
                    "{key}: {} ({})",
                    error.as_str().unwrap_or("error"),
                    result["errorDetails"].as_str().unwrap_or_default()
                ),
                None => println!(
                    "{key}: variant {} value {} reason {}",
                    result["variant"].as_str().unwrap_or("?"),
                    result["value"],
                    result["reason"].as_str().unwrap_or("?")
                ),
            },
        }
        Ok(code)
    })
}

/// `weir flag rollouts`: every page of `GET /api/v1/flag-rollouts`, as a table.
fn rollouts(args: &RolloutsArgs) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("order", &args.order);
    query.append_pair("limit", "500");
    if let Some(namespace) = &args.namespace {
        query.append_pair("namespace", namespace);
    }
    for flag in &args.flags {
        query.append_pair("flag", flag);
    }
    for state in &args.states {
        query.append_pair("status", state);
    }
    if let Some(schedule_type) = &args.schedule_type {
        query.append_pair("type", schedule_type);
    }
    if let Some(search) = &args.search {
        query.append_pair("search", search);
    }
    let query = query.finish();
    runtime()?.block_on(async {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/v1/flag-rollouts?{query}");
            if let Some(cursor) = &cursor {
                path.push('&');
                path.push_str(
                    &form_urlencoded::Serializer::new(String::new())
                        .append_pair("cursor", cursor)
                        .finish(),
                );
            }
            let page = match client
                .call::<FlagRolloutPage>(Method::GET, &path, None)
                .await?
            {
                Ok(page) => page,
                Err(refusal) => return Ok(refused("listing flag rollouts", &refusal)),
            };
            items.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if args.output == OutputFormat::Json {
            for item in &items {
                println!("{}", serde_json::to_string(item)?);
            }
            return Ok(ExitCode::SUCCESS);
        }
        let now = jiff::Timestamp::now();
        let rows: Vec<[String; 8]> = items.iter().map(|item| rollout_row(item, now)).collect();
        crate::cmd_client::print_columns(
            &[
                "NAMESPACE/NAME",
                "FLAG",
                "CONTROL->VARIATION",
                "TYPE",
                "STATE",
                "PROGRESS",
                "WEIGHT",
                "NEXT",
            ],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// One row of `weir flag rollouts`. A rollout of a flag by canary steps (no schedule) shows its
/// strategy as the type and its phase as the state.
fn rollout_row(item: &FlagRolloutView, now: jiff::Timestamp) -> [String; 8] {
    let rollout = &item.rollout.document;
    let target = rollout.spec.target.flag();
    let setting = |value: Option<&Option<String>>| {
        value.and_then(Option::as_deref).unwrap_or("?").to_string()
    };
    let name = format!(
        "{}/{}",
        rollout.metadata.namespace_or_default(),
        rollout.metadata.name
    );
    let flag = setting(target.map(|target| &target.flag));
    let moves = format!(
        "{}->{}",
        setting(target.map(|target| &target.control)),
        setting(target.map(|target| &target.variation))
    );
    match &item.schedule {
        Some(schedule) => [
            name,
            flag,
            moves,
            schedule.schedule_type.as_str().to_string(),
            schedule.state.as_str().to_string(),
            format!(
                "{} {}/{}",
                bar(schedule.done as u64, schedule.total as u64, 10),
                schedule.done,
                schedule.total
            ),
            schedule.weight.to_string(),
            schedule.next.map_or_else(
                || "-".to_string(),
                |next| format!("{} {}", next.weight, due(next.at, now)),
            ),
        ],
        None => {
            let status = rollout.status.clone().unwrap_or_default();
            [
                name,
                flag,
                moves,
                rollout.spec.plan.strategy_name().to_string(),
                format!("{:?}", status.phase),
                "-".to_string(),
                status.canary_weight.to_string(),
                "-".to_string(),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use weir_api::types::FlagRolloutView;

    use super::rollout_row;

    fn view(
        plan: serde_json::Value,
        status: serde_json::Value,
        schedule: Option<serde_json::Value>,
    ) -> FlagRolloutView {
        let mut item = json!({
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "banner-green", "namespace": "shop"},
            "spec": {
                "target": {"kind": "flag", "flag": "banner", "control": "blue", "variation": "green"},
                "plan": plan,
            },
            "status": status,
            "version": 3,
            "generation": 1,
            "lastEventSeq": 4,
            "createdAt": "2026-12-01T08:00:00Z",
            "updatedAt": "2026-12-01T09:00:00Z",
        });
        if let Some(schedule) = schedule {
            item["schedule"] = schedule;
        }
        serde_json::from_value(item).unwrap()
    }

    #[test]
    fn a_schedule_row_shows_its_progress_and_the_next_entry() {
        let item = view(
            json!({"schedule": {"manual": [
                {"at": "2026-12-01T09:00:00Z", "weight": 5},
                {"at": "2026-12-02T09:00:00Z", "weight": 25},
            ]}}),
            json!({"phase": "Progressing", "canaryWeight": 5}),
            Some(json!({
                "type": "manual",
                "state": "RUNNING",
                "entries": [
                    {"at": "2026-12-01T09:00:00Z", "weight": 5, "triggeredAt": "2026-12-01T09:00:00Z"},
                    {"at": "2026-12-02T09:00:00Z", "weight": 25},
                ],
                "done": 1,
                "total": 2,
                "next": {"at": "2026-12-02T09:00:00Z", "weight": 25},
                "weight": 5,
            })),
        );
        let now: jiff::Timestamp = "2026-12-01T12:30:00Z".parse().unwrap();
        assert_eq!(
            rollout_row(&item, now),
            [
                "shop/banner-green",
                "banner",
                "blue->green",
                "manual",
                "RUNNING",
                "[#####-----] 1/2",
                "5%",
                "25% in 20h 30m",
            ]
        );
    }

    #[test]
    fn a_row_without_a_schedule_shows_the_strategy_and_the_phase() {
        let item = view(
            json!({"canary": {"stepWeight": 50}}),
            json!({"phase": "Succeeded"}),
            None,
        );
        let row = rollout_row(&item, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(
            row[3..],
            ["canary", "Succeeded", "-", "0%", "-"].map(String::from)
        );
    }
}
