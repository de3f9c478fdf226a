//! `weir flag`: feature flags on a running `weir serve` (create, get, list, set, delete) and
//! evaluating one as an application would, over OFREP.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use http::Method;
use serde_json::{Map, Value, json};

use crate::cmd_client::{Client, ServerArgs, print_refusal, runtime};
use crate::cmd_core::OutputFormat;

const FLAG_HELP: &str = "\
Examples:
  weir flag create -f examples/flags/new-checkout.yaml
  weir flag list -n shop
  weir flag eval new-checkout -n shop --key user-42 --context country=DE
  weir flag set new-checkout -n shop --weights on=20,off=80
  weir flag set new-checkout -n shop --disable
  weir flag get new-checkout -n shop -o json
  weir flag delete new-checkout -n shop

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
    /// Only flags whose key (or a variation's description) contains this.
    #[arg(long)]
    search: Option<String>,
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
    }
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
    let client = Client::new(&args.server);
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
    let client = Client::new(&args.server);
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
    let client = Client::new(&args.server);
    let mut query = vec![format!("order={}", args.order), "limit=1000".to_string()];
    if let Some(namespace) = &args.namespace {
        query.push(format!("namespace={namespace}"));
    }
    if let Some(search) = &args.search {
        query.push(format!("search={search}"));
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
    let client = Client::new(&args.flag.server);
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
    let client = Client::new(&args.server);
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
    let client = Client::new(&args.flag.server);
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
