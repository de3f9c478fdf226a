//! `weir get --argo FILE`: Argo Rollouts' objects shown as `kubectl argo rollouts get rollout`,
//! `get experiment` and `list rollouts` show them, from objects in files.
//!
//! weir's operator does not run Argo Rollouts yet, so there is no server to ask: the objects come
//! with their status from files (`kubectl get rollouts,replicasets,pods,experiments,analysisruns
//! -o yaml`, for instance) and are rendered by `weir_core::argo::printer`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::Value;
use weir_core::argo::printer::{self, Objects, Options};

use crate::stdout::print;

/// The `--argo` flags of `weir get`.
#[derive(Debug, Args)]
pub struct ArgoGetArgs {
    /// Show Argo Rollouts objects read from FILE (repeatable; YAML or JSON, several documents or
    /// a `kind: List`; `-` for standard input) as `kubectl argo rollouts` does: with NAME, `get
    /// rollout NAME` (or `get experiment NAME` when no Rollout has that name), else `list
    /// rollouts`. The objects must carry their `status` (Rollouts, and the ReplicaSets, Pods,
    /// Experiments and AnalysisRuns they own), as `kubectl get ... -o yaml` prints them: nothing
    /// is asked of a cluster or a weir server, and weir's operator does not run Argo Rollouts
    /// yet. --output and the server flags are not used.
    #[arg(long, value_name = "FILE")]
    pub argo: Vec<PathBuf>,
    /// With --argo: no ANSI colours (`kubectl argo rollouts ... --no-color`). Colours are also
    /// off when standard output is not a terminal, NO_COLOR is set or TERM is `dumb`.
    #[arg(long, requires = "argo")]
    pub no_color: bool,
}

impl ArgoGetArgs {
    /// Whether `weir get` should render Argo objects from files.
    pub fn wanted(&self) -> bool {
        !self.argo.is_empty()
    }
}

fn read(path: &Path) -> Result<Vec<Value>> {
    let bytes = if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .context("cannot read standard input")?;
        bytes
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let values = weir_core::document::parse_values(&bytes)
        .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
    let mut docs = Vec::new();
    for value in values {
        flatten(value, &mut docs);
    }
    Ok(docs)
}

/// A `kind: List` (or `RolloutList`, ...) contributes its items.
fn flatten(value: Value, docs: &mut Vec<Value>) {
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"));
    match value.get("items") {
        Some(Value::Array(items)) if is_list => {
            for item in items.clone() {
                flatten(item, docs);
            }
        }
        _ => docs.push(value),
    }
}

fn field<'a>(doc: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = doc;
    for key in path {
        match cur.get(key) {
            Some(v) => cur = v,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn namespace_of(doc: &Value) -> &str {
    match field(doc, &["metadata", "namespace"]) {
        "" => "default",
        ns => ns,
    }
}

fn argo_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| {
            field(d, &["kind"]) == kind && field(d, &["apiVersion"]).starts_with("argoproj.io/")
        })
        .collect()
}

/// `weir get --argo FILE [NAME]`.
pub fn get(args: &ArgoGetArgs, name: Option<&str>, namespace: Option<&str>) -> Result<ExitCode> {
    let mut docs = Vec::new();
    for path in &args.argo {
        docs.extend(read(path)?);
    }
    let color = !args.no_color
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let options = Options {
        now: jiff::Timestamp::now(),
        color,
    };

    let Some(name) = name else {
        let mut rollouts: Vec<Value> = argo_kind(&docs, "Rollout")
            .into_iter()
            .filter(|r| namespace.is_none_or(|ns| namespace_of(r) == ns))
            .cloned()
            .collect();
        if rollouts.is_empty() {
            eprintln!("No resources found.");
            return Ok(ExitCode::SUCCESS);
        }
        rollouts.sort_by(|a, b| {
            (namespace_of(a), field(a, &["metadata", "name"]))
                .cmp(&(namespace_of(b), field(b, &["metadata", "name"])))
        });
        print!("{}", printer::list_rollouts(&rollouts));
        return Ok(ExitCode::SUCCESS);
    };

    let (namespace, name) = match name.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (namespace, name),
    };
    let find = |kind: &str| -> Result<Option<&Value>> {
        let found: Vec<&Value> = argo_kind(&docs, kind)
            .into_iter()
            .filter(|d| field(d, &["metadata", "name"]) == name)
            .filter(|d| namespace.is_none_or(|ns| namespace_of(d) == ns))
            .collect();
        if found.len() > 1 {
            bail!(
                "{found_len} {kind}s are named {name:?} in the files: give NAMESPACE/NAME",
                found_len = found.len()
            );
        }
        Ok(found.first().copied())
    };
    let same_namespace = |object: &Value| {
        let ns = namespace_of(object);
        Objects::from_documents(docs.iter().filter(|d| namespace_of(d) == ns))
    };
    if let Some(rollout) = find("Rollout")? {
        let objects = same_namespace(rollout);
        print!("{}", printer::get_rollout(rollout, &objects, &options));
    } else if let Some(experiment) = find("Experiment")? {
        let objects = same_namespace(experiment);
        print!(
            "{}",
            printer::get_experiment(experiment, &objects, &options)
        );
    } else {
        eprintln!("Error: rollout.argoproj.io {name:?} not found in the files");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
