//! Argo Rollouts' objects as `kubectl argo rollouts` handles them.
//!
//! - `weir get --argo FILE`: shown as `get rollout`, `get experiment` and `list rollouts` show
//!   them, from objects in files (`kubectl get rollouts,replicasets,pods,experiments,analysisruns
//!   -o yaml`, for instance), with no cluster to ask.
//! - `weir argo VERB`: the plugin's verbs on the cluster of the kubeconfig (`cmd_argo/verbs.rs`
//!   patches as the plugin does; `cmd_argo/cluster.rs` is the client), and `get`/`list` read from
//!   it.
//!
//! Both render with `weir_core::argo::printer`, through the same functions here.

mod cluster;
mod verbs;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use weir_core::argo::printer::{self, Objects, Options};

use crate::stdout::print;
use cluster::{Cluster, ClusterArgs, Kind};

/// The `--argo` flags of `weir get`.
#[derive(Debug, Args)]
pub struct ArgoGetArgs {
    /// Show Argo Rollouts objects read from FILE (repeatable; YAML or JSON, several documents or
    /// a `kind: List`; `-` for standard input) as `kubectl argo rollouts` does: with NAME, `get
    /// rollout NAME` (or `get experiment NAME` when no Rollout has that name), else `list
    /// rollouts`. The objects must carry their `status` (Rollouts, and the ReplicaSets, Pods,
    /// Experiments and AnalysisRuns they own), as `kubectl get ... -o yaml` prints them: nothing
    /// is asked of a cluster or a weir server (`weir argo get rollout NAME` reads them from the
    /// kubeconfig's cluster). --output and the server flags are not used.
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

/// How to render: now, and colour unless `--no-color`, standard output is not a terminal,
/// NO_COLOR is set or TERM is `dumb` (the plugin's rules).
fn options(no_color: bool) -> Options {
    let color = !no_color
        && std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    Options {
        now: jiff::Timestamp::now(),
        color,
    }
}

/// `list rollouts` of `rollouts`, by namespace and name; "No resources found." on stderr when
/// there are none, as the plugin says it.
fn print_list(mut rollouts: Vec<Value>) -> ExitCode {
    if rollouts.is_empty() {
        eprintln!("No resources found.");
        return ExitCode::SUCCESS;
    }
    rollouts.sort_by(|a, b| {
        (namespace_of(a), field(a, &["metadata", "name"]))
            .cmp(&(namespace_of(b), field(b, &["metadata", "name"])))
    });
    print!("{}", printer::list_rollouts(&rollouts));
    ExitCode::SUCCESS
}

/// `get rollout` (or `get experiment`) of `object` with the objects of its namespace.
fn print_object(object: &Value, objects: &Objects, options: &Options) {
    if field(object, &["kind"]) == "Experiment" {
        print!("{}", printer::get_experiment(object, objects, options));
    } else {
        print!("{}", printer::get_rollout(object, objects, options));
    }
}

/// `weir get --argo FILE [NAME]`.
pub fn get(args: &ArgoGetArgs, name: Option<&str>, namespace: Option<&str>) -> Result<ExitCode> {
    let mut docs = Vec::new();
    for path in &args.argo {
        docs.extend(read(path)?);
    }
    let options = options(args.no_color);

    let Some(name) = name else {
        let rollouts: Vec<Value> = argo_kind(&docs, "Rollout")
            .into_iter()
            .filter(|r| namespace.is_none_or(|ns| namespace_of(r) == ns))
            .cloned()
            .collect();
        return Ok(print_list(rollouts));
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
    let object = match find("Rollout")? {
        Some(rollout) => Some(rollout),
        None => find("Experiment")?,
    };
    let Some(object) = object else {
        eprintln!("Error: rollout.argoproj.io {name:?} not found in the files");
        return Ok(ExitCode::from(1));
    };
    let ns = namespace_of(object);
    let objects = Objects::from_documents(docs.iter().filter(|d| namespace_of(d) == ns));
    print_object(object, &objects, &options);
    Ok(ExitCode::SUCCESS)
}

/// `weir argo`: the plugin's verbs on the cluster of the kubeconfig.
#[derive(Debug, Args)]
pub struct ArgoArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    verb: ArgoVerb,
}

/// One Rollout, by name.
#[derive(Debug, Args)]
pub struct RolloutName {
    /// The Rollout's name (in the namespace of -n, or of the kubeconfig's context).
    #[arg(value_name = "ROLLOUT")]
    name: String,
}

/// Rollouts, by name; each is patched in turn and the first missing one stops the command.
#[derive(Debug, Args)]
pub struct RolloutNames {
    /// The Rollouts' names.
    #[arg(value_name = "ROLLOUT", required = true)]
    names: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum ArgoVerb {
    /// Promote a Rollout paused at a canary step, or a paused blue-green pre-promotion; with
    /// --full, skip the remaining steps, pauses and analysis.
    ///
    /// Patches, as `kubectl argo rollouts promote` does: `{"spec":{"paused":false}}` when
    /// spec.paused is true, then on the status subresource `{"status":{"pauseConditions":null}}`
    /// when the Rollout has pause conditions (the controller then completes the pause step); for
    /// a canary without them (an analysis or experiment step under way)
    /// `{"status":{"pauseConditions":null,"currentStepIndex":I+1}}`, which skips the step; for a
    /// step analysis that was Inconclusive and paused by the controller, also
    /// `"controllerPause":false`. With --full: `{"status":{"promoteFull":true}}` (unless the
    /// current pods are already the stable ones) and the unpause.
    ///
    /// Example: weir argo promote web -n shop
    ///
    /// Example: weir argo promote web --full
    ///
    /// Prints `rollout 'web' promoted` (`fully promoted` with --full). Exit status: 0 when
    /// patched, 1 when the Rollout does not exist, 2 when the cluster cannot be reached or
    /// refused a patch.
    Promote {
        #[command(flatten)]
        rollout: RolloutName,
        /// Promote to the new version at once, skipping analysis, pauses and steps.
        #[arg(long)]
        full: bool,
    },
    /// Abort a Rollout's update: the controller goes back to the stable ReplicaSet (weight 0,
    /// canary scaled down, analysis stopped) and marks it Degraded.
    ///
    /// Patches `{"status":{"abort":true}}` on the status subresource. spec.template still holds
    /// the new version: `weir argo retry` tries it again, `weir argo undo` reverts it.
    ///
    /// Example: weir argo abort web -n shop
    ///
    /// Prints `rollout 'web' aborted`. Exit status: 0 when patched, 1 when a Rollout does not
    /// exist, 2 when the cluster cannot be reached or refused a patch.
    Abort(RolloutNames),
    /// Retry an aborted Rollout: its steps start again from the first.
    ///
    /// Patches `{"status":{"abort":false}}` on the status subresource. The plugin's form
    /// `retry rollout NAME` is accepted too.
    ///
    /// Example: weir argo retry web -n shop
    ///
    /// Prints `rollout 'web' retried`. Exit status: 0 when patched, 1 when a Rollout does not
    /// exist, 2 when the cluster cannot be reached or refused a patch.
    Retry {
        /// `ROLLOUT...`, or `rollout ROLLOUT...` as the plugin writes it.
        #[arg(value_name = "ROLLOUT", required = true)]
        names: Vec<String>,
    },
    /// Restart a Rollout's pods: the controller evicts those created before the restart time,
    /// a few at a time (PodDisruptionBudgets apply).
    ///
    /// Patches `{"spec":{"restartAt":"<now + --in, RFC 3339 UTC>"}}`.
    ///
    /// Example: weir argo restart web -n shop
    ///
    /// Example: weir argo restart web --in 30s
    ///
    /// Prints `rollout 'web' restarts in 30s` (`0s` without --in). Exit status: 0 when patched,
    /// 1 when the Rollout does not exist, 2 when the cluster cannot be reached or refused the
    /// patch.
    Restart {
        #[command(flatten)]
        rollout: RolloutName,
        /// How long from now: seconds (`30`) or a Go duration (`30s`, `5m`, `1h`).
        #[arg(long = "in", short = 'i', value_name = "DURATION", value_parser = verbs::check_in)]
        delay: Option<String>,
    },
    /// Roll a Rollout back to the pod template of an earlier revision: an update like any
    /// other, with its steps.
    ///
    /// Finds the Rollout's ReplicaSet whose `rollout.argoproj.io/revision` is --to-revision
    /// (default: the revision before the newest), removes its `rollouts-pod-template-hash`
    /// label and sends the JSON patch `[{"op":"replace","path":"/spec/template","value":
    /// TEMPLATE}]` to the Rollout (or to the Deployment, ReplicaSet or PodTemplate of its
    /// spec.workloadRef). Nothing is patched when the template already matches.
    ///
    /// Example: weir argo undo web -n shop
    ///
    /// Example: weir argo undo web --to-revision 3
    ///
    /// Prints `rollout 'web' undo`. Exit status: 0 when patched (or nothing to do), 1 when the
    /// Rollout does not exist, 2 when the revision is not found or the cluster refused the patch.
    Undo {
        #[command(flatten)]
        rollout: RolloutName,
        /// The revision to go back to. Default: the one before the newest.
        #[arg(long, value_name = "N", default_value_t = 0)]
        to_revision: i64,
    },
    /// Pause a Rollout: the controller holds it where it is until resumed or promoted.
    ///
    /// Patches `{"spec":{"paused":true}}`.
    ///
    /// Example: weir argo pause web -n shop
    ///
    /// Prints `rollout 'web' paused`. Exit status: 0 when patched, 1 when a Rollout does not
    /// exist, 2 when the cluster cannot be reached or refused a patch.
    Pause(RolloutNames),
    /// Undo `pause`: the Rollout continues from where it was held.
    ///
    /// Patches `{"spec":{"paused":false}}` and nothing else: unlike `promote`, it leaves pause
    /// conditions (a pause step, an inconclusive analysis) and the current step as they are.
    /// Not a verb of the current plugin (`promote` also unpauses): weir's name for the reverse
    /// of `pause`.
    ///
    /// Example: weir argo resume web -n shop
    ///
    /// Prints `rollout 'web' resumed`. Exit status: 0 when patched, 1 when a Rollout does not
    /// exist, 2 when the cluster cannot be reached or refused a patch.
    Resume(RolloutNames),
    /// Show a Rollout (or an Experiment) as `kubectl argo rollouts get` does: the header and
    /// the tree of revisions, ReplicaSets, Pods, Experiments and AnalysisRuns.
    ///
    /// Reads the Rollouts, ReplicaSets, Pods, AnalysisRuns and Experiments of the namespace.
    ///
    /// Example: weir argo get rollout web -n shop
    ///
    /// Example: weir argo get experiment web-6f8c4-2-0 --no-color
    ///
    /// Exit status: 0 when shown, 1 when it does not exist, 2 when the cluster cannot be
    /// reached.
    #[command(subcommand)]
    Get(GetWhat),
    /// List the Rollouts of the namespace as `kubectl argo rollouts list rollouts` does.
    ///
    /// Example: weir argo list rollouts -n shop
    ///
    /// Exit status: 0 (with "No resources found." on stderr when there are none), 2 when the
    /// cluster cannot be reached.
    #[command(subcommand)]
    List(ListWhat),
}

#[derive(Debug, Subcommand)]
enum GetWhat {
    /// One Rollout with what it owns: `weir argo get rollout web`.
    #[command(visible_alias = "ro", alias = "rollouts")]
    Rollout {
        #[command(flatten)]
        rollout: RolloutName,
        /// No ANSI colours (also off when standard output is not a terminal, NO_COLOR is set
        /// or TERM is `dumb`).
        #[arg(long)]
        no_color: bool,
    },
    /// One Experiment with what it owns: `weir argo get experiment NAME`.
    #[command(visible_alias = "exp", alias = "experiments")]
    Experiment {
        /// The Experiment's name.
        #[arg(value_name = "EXPERIMENT")]
        name: String,
        /// No ANSI colours.
        #[arg(long)]
        no_color: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ListWhat {
    /// Every Rollout of the namespace: `weir argo list rollouts`.
    #[command(visible_alias = "ro", alias = "rollout")]
    Rollouts,
}

/// `weir argo VERB`.
pub fn argo(args: &ArgoArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&args.cluster).await?;
        match &args.verb {
            ArgoVerb::Promote { rollout, full } => {
                verbs::promote(&cluster, &rollout.name, *full).await
            }
            ArgoVerb::Abort(rollouts) => {
                verbs::patch_status(&cluster, &rollouts.names, json!({"abort": true}), "aborted")
                    .await
            }
            ArgoVerb::Retry { names } => {
                // `retry rollout NAME` (the plugin's form) names the kind first.
                let names = match names.split_first() {
                    Some((kind, rest))
                        if !rest.is_empty()
                            && matches!(kind.as_str(), "rollout" | "ro" | "rollouts") =>
                    {
                        rest
                    }
                    _ => names.as_slice(),
                };
                verbs::patch_status(&cluster, names, json!({"abort": false}), "retried").await
            }
            ArgoVerb::Restart { rollout, delay } => {
                // As the plugin: the delay echoed as written, `0s` without one.
                let shown = delay.as_deref().unwrap_or("0s");
                let delay = verbs::parse_in(shown).map_err(anyhow::Error::msg)?;
                let at = verbs::restart_at(jiff::Timestamp::now(), delay)?;
                verbs::patch_spec(
                    &cluster,
                    std::slice::from_ref(&rollout.name),
                    json!({"restartAt": at}),
                    &format!("restarts in {shown}"),
                )
                .await
            }
            ArgoVerb::Undo {
                rollout,
                to_revision,
            } => verbs::undo(&cluster, &rollout.name, *to_revision).await,
            ArgoVerb::Pause(rollouts) => {
                verbs::patch_spec(&cluster, &rollouts.names, json!({"paused": true}), "paused")
                    .await
            }
            ArgoVerb::Resume(rollouts) => {
                verbs::patch_spec(
                    &cluster,
                    &rollouts.names,
                    json!({"paused": false}),
                    "resumed",
                )
                .await
            }
            ArgoVerb::Get(GetWhat::Rollout { rollout, no_color }) => {
                show(&cluster, Kind::Rollout, &rollout.name, *no_color).await
            }
            ArgoVerb::Get(GetWhat::Experiment { name, no_color }) => {
                show(&cluster, Kind::Experiment, name, *no_color).await
            }
            ArgoVerb::List(ListWhat::Rollouts) => {
                Ok(print_list(cluster.list(Kind::Rollout, None).await?))
            }
        }
    })
}

/// `weir argo get rollout|experiment NAME`: the object and what its namespace holds, read from
/// the cluster, rendered as from files.
async fn show(cluster: &Cluster, kind: Kind, name: &str, no_color: bool) -> Result<ExitCode> {
    let Some(object) = cluster.get(kind, name).await? else {
        if kind == Kind::Rollout {
            return Ok(verbs::not_found(cluster, name));
        }
        eprintln!(
            "error: {} {name:?} not found in namespace {:?}",
            kind.resource_name(),
            cluster.namespace
        );
        return Ok(ExitCode::from(1));
    };
    let objects = Objects {
        replica_sets: cluster.list(Kind::ReplicaSet, None).await?,
        pods: cluster.list(Kind::Pod, None).await?,
        experiments: cluster.list(Kind::Experiment, None).await?,
        analysis_runs: cluster.list(Kind::AnalysisRun, None).await?,
    };
    print_object(&object, &objects, &options(no_color));
    Ok(ExitCode::SUCCESS)
}
