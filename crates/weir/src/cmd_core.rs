//! `weir validate`, `weir convert` and `weir plan`: the commands over weir-core alone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use weir_core::document::{self, Document, LoadResult, Origin};
use weir_core::plan::{self, Timeline};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// For people.
    Text,
    /// For programs: one JSON document.
    Json,
}

/// Arguments of `weir validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Files to check (YAML or JSON; `-` reads standard input).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print only problems, not the documents that passed.
    #[arg(short, long)]
    quiet: bool,
}

/// Arguments of `weir convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// A Flagger Canary or MetricTemplate, or an Argo Rollout, manifest (YAML or JSON; `-` reads
    /// standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// Arguments of `weir plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A weir Rollout or a Flagger Canary (YAML or JSON; `-` reads standard input).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// When the run starts (RFC 3339). Schedules default to their first entry, other plans to
    /// offsets from 0.
    #[arg(long, value_name = "TIME")]
    start: Option<jiff::Timestamp>,
}

fn read_input(path: &Path) -> Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .context("cannot read standard input")?;
        return Ok(bytes);
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn print_refusal(file: &Path, refused: &document::Refused) {
    eprintln!(
        "{}: {} is invalid ({} {}):",
        file.display(),
        refused.subject,
        refused.errors.len(),
        if refused.errors.len() == 1 {
            "error"
        } else {
            "errors"
        }
    );
    for error in &refused.errors {
        eprintln!("  - {error}");
    }
}

/// `weir validate`.
pub fn validate(args: &ValidateArgs) -> Result<ExitCode> {
    let mut invalid = 0usize;
    let mut valid = 0usize;
    // Other APIs' objects in the same manifests (the Deployments of an example, say).
    let mut skipped = 0usize;
    // Documents rollouts refer to by name, from every file given, and the rollouts themselves,
    // so references can be checked across files once all are read.
    let mut catalog = weir_core::catalog::Catalog::default();
    let mut rollouts = Vec::new();
    for file in &args.files {
        let bytes = match read_input(file) {
            Ok(bytes) => bytes,
            Err(error) => {
                eprintln!("{}: {error:#}", file.display());
                invalid += 1;
                continue;
            }
        };
        let results = document::load(&bytes);
        if results.is_empty() {
            eprintln!("{}: holds no document", file.display());
            invalid += 1;
        }
        for result in results {
            match result {
                Ok(loaded) => {
                    valid += 1;
                    if !args.quiet {
                        let origin = match loaded.origin {
                            Origin::Weir => "",
                            Origin::Flagger => " (converted from Flagger)",
                            Origin::Argo => " (Argo Rollouts, read as it is)",
                        };
                        println!(
                            "{}: {} is valid{origin}",
                            file.display(),
                            loaded.document.describe()
                        );
                    }
                    for warning in &loaded.warnings {
                        eprintln!("  warning: {warning}");
                    }
                    if let Some(Document::Rollout(rollout)) = catalog.add(loaded.document) {
                        rollouts.push((file.clone(), rollout));
                    }
                }
                Err(refused) if refused.foreign => {
                    skipped += 1;
                    if !args.quiet {
                        println!(
                            "{}: {} skipped: not a weir document",
                            file.display(),
                            refused.subject
                        );
                    }
                }
                Err(refused) => {
                    invalid += 1;
                    print_refusal(file, &refused);
                }
            }
        }
    }
    // A reference may be satisfied by a file not given here (`weir serve --catalog`), so an
    // unresolved one is a warning, not an error.
    for (file, rollout) in &rollouts {
        for problem in catalog.check_rollout(rollout) {
            eprintln!(
                "{}: Rollout {}: warning: {problem} (give the file that defines it too, or to `weir serve --catalog`)",
                file.display(),
                rollout.metadata.name
            );
        }
        // A query whose placeholders cannot be filled is refused when the rollout is applied;
        // say so now.
        let problems = query_problems(&catalog, rollout);
        if !problems.is_empty() {
            // It was counted valid on its own; with its templates it is not.
            valid -= 1;
            invalid += 1;
        }
        for problem in problems {
            eprintln!(
                "{}: Rollout {} is invalid: {problem}",
                file.display(),
                rollout.metadata.name
            );
        }
    }
    if !args.quiet || invalid > 0 {
        if skipped > 0 {
            println!("{valid} valid, {invalid} invalid, {skipped} skipped (not weir's)");
        } else {
            println!("{valid} valid, {invalid} invalid");
        }
    }
    Ok(if invalid == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Loads a file whose documents weir reads (its own, Flagger's, Argo Rollouts') must all be
/// valid, printing every error otherwise; documents of other APIs are skipped with a note.
fn load_valid(file: &Path) -> Result<Option<Vec<document::Loaded>>> {
    let bytes = read_input(file)?;
    let results: Vec<LoadResult> = document::load(&bytes);
    if results.is_empty() {
        eprintln!("{}: holds no document", file.display());
        return Ok(None);
    }
    let mut loaded = Vec::new();
    let mut ok = true;
    for result in results {
        match result {
            Ok(document) => loaded.push(document),
            // A manifest holds a rollout beside its Services and the like: those are not
            // weir's to read, and not errors.
            Err(refused) if refused.foreign => {
                eprintln!(
                    "{}: {} skipped: not a weir document",
                    file.display(),
                    refused.subject
                );
            }
            Err(refused) => {
                ok = false;
                print_refusal(file, &refused);
            }
        }
    }
    if ok && loaded.is_empty() {
        eprintln!("{}: holds no document weir reads", file.display());
        return Ok(None);
    }
    Ok(ok.then_some(loaded))
}

/// The metrics whose query (inline, or of a template among the files given) uses a
/// placeholder weir cannot fill, each with its path.
fn query_problems(
    catalog: &weir_core::catalog::Catalog,
    rollout: &weir_core::model::Rollout,
) -> Vec<String> {
    let namespace = rollout.metadata.namespace_or_default();
    let mut problems = Vec::new();
    for (index, metric) in rollout.spec.analysis.metrics.iter().enumerate() {
        let (field, query) = match (&metric.query, &metric.template_ref) {
            (Some(query), _) => ("query", query.as_str()),
            (None, Some(reference)) => match catalog
                .metric_template(reference, namespace)
                .and_then(|template| template.spec.query.as_deref())
            {
                Some(query) => ("templateRef", query),
                None => continue,
            },
            (None, None) => continue,
        };
        let variables = weir_core::query::variables(rollout, metric);
        if let Err(error) = weir_core::query::render(query, &variables) {
            problems.push(format!("spec.analysis.metrics[{index}].{field}: {error}"));
        }
    }
    problems
}

/// `weir convert`.
pub fn convert(args: &ConvertArgs) -> Result<ExitCode> {
    let Some(documents) = load_valid(&args.file)? else {
        return Ok(ExitCode::from(2));
    };
    // Argo Rollouts are converted here, all of them before anything is printed.
    let Some(argo) = argo_converted(&args.file, &documents) else {
        return Ok(ExitCode::from(2));
    };
    let mut out = std::io::stdout().lock();
    for (index, loaded) in documents.iter().enumerate() {
        if loaded.origin == Origin::Weir {
            eprintln!(
                "note: {} is already a weir document; printed as weir reads it",
                loaded.document.describe()
            );
        }
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
        let yaml = match &loaded.document {
            Document::Rollout(rollout) => serde_saphyr::to_string(rollout.as_ref()),
            Document::MetricTemplate(template) => serde_saphyr::to_string(template.as_ref()),
            Document::AlertProvider(provider) => serde_saphyr::to_string(provider.as_ref()),
            Document::Secret(secret) => serde_saphyr::to_string(secret.as_ref()),
            Document::Flag(flag) => serde_saphyr::to_string(flag.as_ref()),
            Document::Argo(read) => match argo.get(index).and_then(Option::as_ref) {
                Some(rollout) => serde_saphyr::to_string(rollout),
                None => serde_saphyr::to_string(&read.source),
            },
        }
        .context("cannot write YAML")?;
        if index > 0 {
            writeln!(out, "---")?;
        }
        write!(out, "{yaml}")?;
        if !yaml.ends_with('\n') {
            writeln!(out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each document's weir Rollout when it is an Argo Rollout (`None` for any other document,
/// printed as it is), or `None` after printing every field that prevents a conversion.
fn argo_converted(
    file: &Path,
    documents: &[document::Loaded],
) -> Option<Vec<Option<weir_core::model::Rollout>>> {
    let mut converted = Vec::with_capacity(documents.len());
    let mut ok = true;
    for loaded in documents {
        let Document::Argo(argo) = &loaded.document else {
            converted.push(None);
            continue;
        };
        if !matches!(argo.object, weir_core::argo::ArgoObject::Rollout(_)) {
            eprintln!(
                "note: {} is not converted: weir reads it with the Rollouts that refer to it; \
                 printed as it is",
                argo.describe()
            );
            converted.push(None);
            continue;
        }
        match weir_core::argo::convert(argo) {
            Ok(rollout) => {
                for warning in &rollout.warnings {
                    eprintln!("warning: {warning}");
                }
                converted.push(Some(rollout.value));
            }
            Err(errors) => {
                ok = false;
                print_refusal(
                    file,
                    &document::Refused {
                        subject: argo.describe(),
                        errors,
                        foreign: false,
                    },
                );
                converted.push(None);
            }
        }
    }
    ok.then_some(converted)
}

/// `weir plan`.
pub fn plan(args: &PlanArgs) -> Result<ExitCode> {
    let Some(documents) = load_valid(&args.file)? else {
        return Ok(ExitCode::from(2));
    };
    let mut timelines = Vec::new();
    for loaded in &documents {
        let Document::Rollout(rollout) = &loaded.document else {
            continue;
        };
        let start = args.start.unwrap_or_else(|| {
            weir_core::machine::schedule_entries(&rollout.spec)
                .first()
                .map(|entry| entry.0)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        });
        timelines.push((
            loaded.document.describe(),
            plan::dry_run(&rollout.spec, start),
        ));
    }
    if timelines.is_empty() {
        eprintln!(
            "{}: holds no Rollout or Canary to plan",
            args.file.display()
        );
        return Ok(ExitCode::from(2));
    }
    let mut out = std::io::stdout().lock();
    match args.output {
        OutputFormat::Json => {
            let json: Vec<serde_json::Value> = timelines
                .iter()
                .map(|(subject, timeline)| serde_json::json!({"rollout": subject, "timeline": timeline}))
                .collect();
            let single = if json.len() == 1 {
                json[0].clone()
            } else {
                serde_json::Value::Array(json)
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&single)?)?;
        }
        OutputFormat::Text => {
            for (subject, timeline) in &timelines {
                write_timeline(&mut out, subject, timeline)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_timeline(out: &mut impl Write, subject: &str, timeline: &Timeline) -> Result<()> {
    writeln!(
        out,
        "{subject}: {} plan, interval {}, threshold {}",
        timeline.strategy, timeline.interval, timeline.threshold
    )?;
    let with_clock = timeline.steps.iter().any(|step| step.at.is_some());
    let rows: Vec<[String; 5]> = timeline
        .steps
        .iter()
        .map(|step| {
            let when = match step.at {
                Some(at) if with_clock => format!("{} ({})", step.offset, at),
                _ => step.offset.to_string(),
            };
            let mut traffic = step.canary_weight.to_string();
            if let Some(mirror) = step.mirror_weight {
                traffic.push_str(&format!(" +{mirror} mirror"));
            }
            if step.match_active {
                traffic.push_str(" +match");
            }
            [
                when,
                step.phase.to_string(),
                traffic,
                step.gate.clone().unwrap_or_else(|| "-".into()),
                step.description.clone(),
            ]
        })
        .collect();
    let headers = ["OFFSET", "PHASE", "CANARY", "GATE", "WHAT HAPPENS"];
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let print_row = |out: &mut dyn Write, cells: [&str; 5]| -> std::io::Result<()> {
        let mut line = String::from(" ");
        for (index, cell) in cells.iter().enumerate() {
            if index + 1 == cells.len() {
                line.push_str(&format!(" {cell}"));
            } else {
                line.push_str(&format!(" {cell:<width$}", width = widths[index]));
            }
        }
        writeln!(out, "{}", line.trim_end())
    };
    print_row(out, headers)?;
    for row in &rows {
        print_row(out, [&row[0], &row[1], &row[2], &row[3], &row[4]])?;
    }
    match timeline.minimum_duration {
        Some(duration) => writeln!(
            out,
            "minimum duration: {duration} (a healthy run; each failed check adds {}; {} roll{} back)",
            timeline.interval,
            match timeline.threshold {
                1 => "one failed check".to_string(),
                count => format!("{count} failed checks"),
            },
            if timeline.threshold == 1 { "s" } else { "" },
        )?,
        None => writeln!(
            out,
            "the run does not finish on its own: it ends in {}",
            timeline.final_phase
        )?,
    }
    for manual in &timeline.manual_steps {
        writeln!(out, "manual: {manual}")?;
    }
    writeln!(out)?;
    Ok(())
}

/// `weir crds`: the CustomResourceDefinitions, one YAML document each.
pub fn crds() -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for crd in weir_kube::crd::crds()? {
        writeln!(out, "---")?;
        write!(out, "{}", serde_saphyr::to_string(&crd)?)?;
    }
    Ok(ExitCode::SUCCESS)
}
