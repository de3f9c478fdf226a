//! The `weir` command: argument parsing and wiring. The logic lives in the library crates.

#![forbid(unsafe_code)]

mod cmd_argo;
mod cmd_bench;
mod cmd_client;
mod cmd_core;
mod cmd_demo;
mod cmd_flag;
mod cmd_operator;
mod cmd_router;
mod cmd_run;
mod cmd_serve;
mod cmd_token;
mod cmd_tools;
mod http_server;
mod integrations;
mod listening;
mod progress;
mod schedule_text;
mod stdout;
mod tls;

use std::process::ExitCode;

/// mimalloc rather than the system allocator: the router makes about ten small allocations per
/// request, and glibc's `malloc`/`free` were several percent of its CPU time (docs/BENCHMARKS.md,
/// "Router").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use weir_core::machine::Command as Verb;

/// weir: progressive delivery for any service, on any platform.
///
/// weir moves traffic (or a feature flag's audience) from a stable version (the primary) to a new
/// one (the canary) step by step, judges the canary against the primary, and promotes or rolls
/// back on its own. Rollouts are written as `weir.dev/v1alpha1` Rollout documents; Flagger
/// `flagger.app/v1beta1` Canary manifests are accepted wherever a file is.
#[derive(Debug, Parser)]
#[command(name = "weir", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check rollout files and report every problem with its field path.
    ///
    /// Each file may hold several YAML documents (separated by `---`) or JSON. weir Rollouts,
    /// MetricTemplates and AlertProviders, Flagger Canaries, MetricTemplates and AlertProviders,
    /// and Kubernetes Secrets are accepted. Every error names the field (e.g.
    /// `spec.plan.canary.stepWeights[2]`), the value and what is allowed. References between
    /// documents (a templateRef, an alert's providerRef, a secretRef) are checked across all the
    /// files given; one that none of them defines is a warning, since `weir serve --catalog` may
    /// provide it. A metric query with a placeholder weir cannot fill (`{{ namespce }}`) makes
    /// its rollout invalid.
    ///
    /// Exit status: 0 when every document is valid, 1 when any is not (or a file cannot be read).
    Validate(cmd_core::ValidateArgs),
    /// Convert a Flagger Canary (or MetricTemplate, or AlertProvider) into a weir document.
    ///
    /// The weir YAML goes to standard output; warnings (Flagger fields weir keeps but does not act
    /// on yet, values adjusted to Flagger's rules) go to standard error.
    ///
    /// Exit status: 0 on success, 2 when the input is invalid.
    Convert(cmd_core::ConvertArgs),
    /// Show what a healthy run of a rollout looks like: each step's time, canary weight and gate.
    ///
    /// The dry run drives weir's real state machine with every check and gate passing, and ends
    /// with the minimum duration of a run. Failed checks add an interval each; the threshold of
    /// failed checks ends the run.
    ///
    /// Exit status: 0 on success, 2 when the input is invalid.
    Plan(cmd_core::PlanArgs),
    /// Print the CustomResourceDefinitions weir installs on Kubernetes, as YAML.
    ///
    /// `rollouts.weir.dev` (short name `wro`) is generated from the same types `weir validate`
    /// reads, with a status subresource and printer columns (phase, weight, failed checks, run,
    /// age, message). `deploy/crds.yaml` in the repository is this output.
    ///
    /// Example: `weir crds | kubectl apply -f -`
    Crds,
    /// Run the embedded router alone in front of two versions of a service.
    ///
    /// Splits traffic between a primary and a canary by weight (0.01% resolution), sends
    /// requests matching --match rules to the canary, optionally pins clients with a cookie and
    /// mirrors traffic, and exposes per-version Prometheus metrics on --admin. Runs until Ctrl-C.
    ///
    /// Exit status: 0 after Ctrl-C, 2 when the flags are invalid or the address cannot be bound.
    Router(Box<cmd_router::RouterArgs>),
    /// Run a small HTTP service for trials, with a chosen version, error rate and latency.
    ///
    /// Answers every path with its version as JSON (and the `x-weir-version` header), fails
    /// --error-rate percent of requests with 500 and delays them by --latency-ms; /healthz always
    /// answers 200, so a faulty version still starts. Two of them are a primary and a canary to
    /// try weir on. Runs until Ctrl-C.
    ///
    /// Exit status: 0 after Ctrl-C, 2 when the flags are invalid or the address cannot be bound.
    SampleApp(cmd_tools::SampleAppArgs),
    /// Send HTTP load at a constant rate and summarise the outcomes and latency.
    ///
    /// Open-loop: requests leave on schedule whatever the responses do, so latency is not hidden
    /// by a slow server. Counts 2xx, other statuses, connection errors, timeouts and requests
    /// dropped at the --concurrency cap, per version (from `x-weir-version`), with p50/p90/p99.
    ///
    /// Exit status: 0 when the run completes (even if requests failed), 2 when the flags are
    /// invalid.
    Load(cmd_tools::LoadArgs),
    /// Run one rollout in the foreground, with a live progress line, until it is promoted or
    /// rolled back.
    ///
    /// weir starts the router on `spec.target.listen`, the versions that are commands, and an
    /// engine that keeps the rollout's state in a SQLite file: after a crash or Ctrl-C, the same
    /// command resumes at the step it had reached. The progress line shows the phase, the canary
    /// weight, the step, both versions' success rate and p99, and the time left.
    ///
    /// Exit status: 0 when promoted (or interrupted), 1 when rolled back, 2 when the file is
    /// invalid.
    Run(cmd_run::RunArgs),
    /// See weir promote a healthy canary (or, with --faulty, roll back a faulty one) on loopback.
    ///
    /// Starts two versions of the sample app, weir's router in front of them, steady load through
    /// the router, and a five-step canary with short intervals judged on the traffic the router
    /// sees; ends with a summary of what happened and why. Takes about 30 seconds.
    ///
    /// Exit status: 0 when the canary is promoted, 1 when it is rolled back.
    Demo(cmd_demo::DemoArgs),
    /// Run the server: the engine, the HTTP API and the routers of local rollouts.
    ///
    /// Rollouts, their status and their history live in one SQLite file; kill the server at any
    /// moment and start it again: every rollout resumes at the step it had committed. The API is
    /// REST under /api/v1 (rollouts, commands, events), Server-Sent Events at /api/v1/watch, and
    /// the OpenAPI document at /api/v1/openapi.json; weir's own metrics for Prometheus are at
    /// /metrics on the same address. The client verbs below talk to it.
    ///
    /// Judging with Prometheus: `--prometheus URL` (docs/PROMETHEUS.md). Metric templates
    /// (Prometheus, Datadog, New Relic, Graphite, CloudWatch, InfluxDB, Dynatrace, Stackdriver,
    /// Splunk: docs/METRIC-PROVIDERS.md), alert providers and secrets that rollouts name: `--catalog
    /// FILE|DIR`, read at start.
    ///
    /// Example: weir serve --prometheus http://127.0.0.1:9090 --catalog ops/weir/
    ///
    /// Exit status: 0 after Ctrl-C or SIGTERM, 2 when it cannot start (including an invalid
    /// catalog document or --prometheus URL).
    Serve(cmd_serve::ServeArgs),
    /// Run rollouts on Kubernetes: watch `rollouts.weir.dev` objects (and Flagger's Canaries)
    /// and roll out their target Deployments, Flagger's way.
    ///
    /// For a rollout with `spec.target: {kind: kubernetes, targetRef: {kind: Deployment, name:
    /// NAME}, provider: P}` weir keeps a copy `NAME-primary` that serves, the Services `NAME`,
    /// `NAME-primary` and `NAME-canary`, and the provider's routing objects (P: every provider
    /// of Flagger's: istio, gatewayapi:v1, smi, linkerd, kuma, nginx, contour, gloo, traefik,
    /// skipper, apisix, knative; kubernetes without a mesh splits by replicas); a new pod
    /// template of NAME (or new data in a ConfigMap or Secret it reads) starts a run. When Flagger's CRDs are installed, each Canary runs as a
    /// weir Rollout it owns and gets its status in Flagger's shape. Every committed step is
    /// written to the rollout's status, which is also where weir keeps its state and history:
    /// nothing lives in a local file. Install the CRDs first: `kubectl apply -f
    /// deploy/crds.yaml` (or `weir crds | kubectl apply -f -`). The cluster is the one KUBECONFIG
    /// names (or the pod's service account). docs/KUBERNETES.md has the rest.
    ///
    /// Example: weir operator --namespace shop --prometheus http://prometheus.monitoring:9090
    ///
    /// Example (in a pod, two replicas): weir operator -A --listen 0.0.0.0:7979 --leader-election
    ///
    /// Exit status: 0 after Ctrl-C or SIGTERM, 1 when the cluster cannot be reached or this
    /// replica lost the leader lease (its pod restarts as a follower).
    Operator(Box<cmd_operator::OperatorArgs>),
    /// Act on Argo Rollouts in the cluster as `kubectl argo rollouts` does: promote, abort,
    /// retry, restart, undo, pause, resume; get and list them.
    ///
    /// Each verb reads the `argoproj.io/v1alpha1` Rollout and sends the plugin's patch (status
    /// fields to the `status` subresource), then the Argo controller does the work: `promote`
    /// clears pause conditions (or skips the step), `--full` sets status.promoteFull, `abort`
    /// sets status.abort, `retry` clears it, `restart` sets spec.restartAt, `undo` puts back an
    /// earlier ReplicaSet's pod template, `pause`/`resume` set spec.paused. `get rollout` and
    /// `list rollouts` print what the cluster holds exactly as the plugin does. `weir argo VERB
    /// --help` shows each patch. The cluster is the kubeconfig's (KUBECONFIG or
    /// ~/.kube/config; --kubeconfig, --context), the namespace -n, else the context's, else
    /// `default`.
    ///
    /// Example: weir argo promote web -n shop
    ///
    /// Example: weir argo get rollout web -n shop
    ///
    /// Exit status: 0 when done, 1 when the Rollout does not exist, 2 when the cluster cannot be
    /// reached or refused a patch.
    Argo(Box<cmd_argo::ArgoArgs>),
    /// Create or update the rollouts of a file on the server (weir Rollouts or Flagger Canaries).
    ///
    /// Exit status: 0 when every document was accepted, 1 when any was refused (each error is
    /// printed with its field path), 2 when the server cannot be reached.
    Apply(cmd_client::ApplyArgs),
    /// List rollouts (or show one) with their phase, canary weight and run.
    Get(cmd_client::GetArgs),
    /// Show where a rollout stands and why, with its last events and their evidence.
    Status(cmd_client::NameArgs),
    /// Show a rollout's whole history: every transition with its evidence.
    History(cmd_client::HistoryArgs),
    /// Promote the canary now (also opens a confirm-promotion gate); with --step, take only the
    /// plan's next step now.
    Promote(cmd_client::PromoteArgs),
    /// Roll back now.
    Abort(cmd_client::CommandArgs),
    /// Hold the canary weight where it is; analysis continues.
    Pause(cmd_client::CommandArgs),
    /// Continue a paused run, pass a step's untimed pause or a closed confirm-rollout gate, or
    /// leave Held with its failed checks reset.
    Resume(cmd_client::CommandArgs),
    /// Run the failed revision again as it is, without editing anything.
    Retry(cmd_client::CommandArgs),
    /// End the run where it stands (seed 004's stop): the weights stay, or with --rollback
    /// everyone returns to the primary.
    ///
    /// Exit status: 0 when the server accepted it, 1 when it was refused (no run under way),
    /// 2 when the server cannot be reached.
    Stop(cmd_client::StopArgs),
    /// Open or close a gate of the current run by hand: `weir gate open NAME --type TYPE`.
    ///
    /// A gate is where a run waits for a yes: before it starts (confirm-rollout), before each
    /// weight increase (confirm-traffic-increase), before promotion (confirm-promotion).
    /// Webhooks of those types answer at every tick; a person can answer instead. `open` makes
    /// the gate pass whatever its hooks say, `close` makes it hold whatever they say, until
    /// changed again or the run ends (a new run starts with the hooks answering). Name the gate
    /// by --type (every hook of that type) or --hook (one webhook by name). The history records
    /// who decided (--as, default $USER).
    ///
    /// `weir promote` still promotes at once, gate or not; `weir resume` still opens a waiting
    /// confirm-rollout gate.
    ///
    /// Exit status: 0 when the server accepted it, 1 when it was refused (the reason is
    /// printed: no such gate, no run under way, ...), 2 when the server cannot be reached.
    Gate(cmd_client::GateArgs),
    /// Delete a rollout (reverting its routes first when its spec says revertOnDeletion).
    Delete(cmd_client::NameArgs),
    /// Feature flags on the server: create, get, list, set, delete, and evaluate one as an
    /// application would (over OFREP).
    ///
    /// A flag (`kind: Flag`) has variations, individual targets, rules and a default strategy
    /// (one variation, or weights to 0.001%); applications read it with any OpenFeature SDK and
    /// its OFREP provider at http://SERVER/ns/NAMESPACE.
    ///
    /// Exit status: 0 on success, 1 when the server refused (the reason is printed; for `eval`,
    /// an evaluation error), 2 when the server cannot be reached.
    Flag(cmd_flag::FlagArgs),
    /// API tokens of a server's database: create (the secret is printed once), list, revoke.
    ///
    /// Works on the SQLite file directly (`--db`, like `weir serve`), so the first admin token
    /// can be created before a server runs. Once a database holds a token, `weir serve` answers
    /// only requests that carry one (docs/SECURITY.md).
    Token(cmd_token::TokenArgs),
    /// Benchmarks that need no network: `weir bench blast-radius` simulates faulty and healthy
    /// canaries under weir and a Flagger-style controller.
    Bench(cmd_bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => cmd_core::validate(&args),
        Command::Convert(args) => cmd_core::convert(&args),
        Command::Plan(args) => cmd_core::plan(&args),
        Command::Crds => cmd_core::crds(),
        Command::Router(args) => cmd_router::router(&args),
        Command::SampleApp(args) => cmd_tools::sample_app(&args),
        Command::Load(args) => cmd_tools::load(&args),
        Command::Run(args) => cmd_run::run(&args),
        Command::Demo(args) => cmd_demo::demo(&args),
        Command::Serve(args) => cmd_serve::serve(&args),
        Command::Operator(args) => cmd_operator::operator(&args),
        Command::Argo(args) => cmd_argo::argo(&args),
        Command::Apply(args) => cmd_client::apply(&args),
        Command::Get(args) => cmd_client::get(&args),
        Command::Status(args) => cmd_client::status(&args),
        Command::History(args) => cmd_client::history(&args),
        Command::Promote(args) => cmd_client::command(
            if args.step {
                Verb::PromoteStep
            } else {
                Verb::Promote
            },
            &args.command,
        ),
        Command::Abort(args) => cmd_client::command(Verb::Abort, &args),
        Command::Pause(args) => cmd_client::command(Verb::Pause, &args),
        Command::Resume(args) => cmd_client::command(Verb::Resume, &args),
        Command::Retry(args) => cmd_client::command(Verb::Retry, &args),
        Command::Stop(args) => cmd_client::command(
            Verb::Stop {
                rollback: args.rollback,
            },
            &args.command,
        ),
        Command::Gate(args) => cmd_client::gate(&args),
        Command::Delete(args) => cmd_client::delete(&args),
        Command::Flag(args) => cmd_flag::flag(&args),
        Command::Token(args) => cmd_token::token(&args),
        Command::Bench(args) => cmd_bench::bench(&args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
