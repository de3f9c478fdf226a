//! Argo Rollouts compatibility: every `argoproj.io` document of the upstream examples is either
//! accepted or refused with errors that name a field path, and every accepted canary Rollout
//! either converts into a weir Rollout or names the field that prevents it. The tallies are
//! printed (run with `--nocapture`) and pinned, so a change in what weir reads shows up here.
//!
//! The corpus is third-party material kept beside the project, not in it: its directory comes
//! from `WEIR_ARGO_COMPAT_DIR` (set by `.ci/run`), or `../shared/compat/argo` beside the
//! repository. Without it these tests print SKIPPED and pass.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use weir_core::FieldError;
use weir_core::argo::expr::{Expr, Val};
use weir_core::argo::types::Metric;
use weir_core::argo::{self, ArgoObject};
use weir_core::document::{self, Document};

/// Whole manifests: documents of the argoproj.io group.
const DOCUMENTS: usize = 317;
const ACCEPTED: usize = 237;
/// Files that do not parse as YAML at all (upstream's own mistakes).
const UNPARSED_FILES: usize = 3;
/// Accepted canary Rollouts that convert into weir Rollouts.
const CONVERTED: usize = 68;
const NOT_CONVERTED: usize = 65;
/// Fragments (docs snippets with elisions, no template or selector): documents read, how
/// many are accepted, and files that do not parse at all (`...` lines).
const FRAGMENT_DOCUMENTS: usize = 38;
const FRAGMENTS_ACCEPTED: usize = 0;
const FRAGMENTS_UNPARSED: usize = 23;

fn corpus_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("WEIR_ARGO_COMPAT_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_dir() {
            return Some(dir);
        }
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/argo");
    beside.is_dir().then_some(beside)
}

/// The corpus directory, or `None` after printing why the test is skipped.
fn corpus() -> Option<PathBuf> {
    let dir = corpus_dir();
    if dir.is_none() {
        println!(
            "SKIPPED: the Argo Rollouts corpus (WEIR_ARGO_COMPAT_DIR or ../shared/compat/argo) is not there"
        );
    }
    dir
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    files
}

/// `<what> <path with indices dropped>`: the tally's key for an error.
fn reason(error: &FieldError) -> String {
    let path: String = {
        let mut shown = String::new();
        let mut in_index = false;
        for c in error.path.chars() {
            match c {
                '[' => {
                    in_index = true;
                    shown.push_str("[]");
                }
                ']' => in_index = false,
                _ if in_index => {}
                c => shown.push(c),
            }
        }
        shown
    };
    let message = &error.message;
    let what = if message.contains("not supported") {
        "not supported"
    } else if message.contains("not converted") {
        "not converted"
    } else if message.starts_with("unknown field") {
        "unknown field"
    } else if message.contains("is required") {
        "missing"
    } else {
        "invalid"
    };
    format!("{what}: {path}")
}

fn is_path_named(error: &FieldError) -> bool {
    !error.path.is_empty() && error.path != "(document)"
}

#[derive(Default)]
struct Tally {
    documents: usize,
    accepted: usize,
    unparsed_files: Vec<String>,
    refused: BTreeMap<String, usize>,
    refusals: Vec<String>,
    accepted_by_kind: BTreeMap<&'static str, usize>,
    converted: usize,
    not_converted: BTreeMap<String, usize>,
    conversions_refused: Vec<String>,
    /// Inputs upstream expects to fail that weir accepts: their failure is at run time.
    expected_failures_accepted: Vec<String>,
    /// Conditions of accepted documents, evaluated against sample results.
    conditions_evaluated: usize,
}

/// Upstream's names for inputs it expects to be rejected or to fail.
const EXPECTED_FAILURES: [&str; 4] = [
    "expectedfailures",
    "lint-testdata-invalid",
    "step-plugin-invalid",
    "rollout-invalid",
];

/// Results a metric provider may give: a scalar, a vector, NaN, nothing, a web answer.
fn sample_results() -> Vec<Val> {
    let json = |value: Value| Val::from_json(&value);
    vec![
        Val::Num(0.97),
        Val::Num(f64::NAN),
        Val::Nil,
        json(serde_json::json!([0.5, 0.99])),
        json(serde_json::json!([])),
        json(serde_json::json!({"ok": true, "status": "ok", "Status": 200, "values": [1, 2]})),
        json(serde_json::json!("It worked!")),
    ]
}

impl Tally {
    fn file(&mut self, path: &Path) {
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes =
            fs::read(path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
        let values = match document::parse_values(&bytes) {
            Ok(values) => values,
            Err(error) => {
                assert_eq!(error.path, "(document)", "{name}: {error}");
                self.unparsed_files.push(format!("{name}: {error}"));
                return;
            }
        };
        for value in &values {
            let is_argo = value
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|version| version.starts_with("argoproj.io/"));
            if !is_argo {
                continue;
            }
            self.documents += 1;
            match document::load_value(value) {
                Ok(loaded) => {
                    let Document::Argo(read) = loaded.document else {
                        panic!(
                            "{name}: an argoproj.io document read as {:?}",
                            loaded.document
                        );
                    };
                    self.accepted += 1;
                    *self.accepted_by_kind.entry(read.kind()).or_default() += 1;
                    if EXPECTED_FAILURES.iter().any(|marker| name.contains(marker)) {
                        self.expected_failures_accepted
                            .push(format!("{name}: {}", read.describe()));
                    }
                    self.evaluate_conditions(&read.object);
                    if let ArgoObject::Rollout(rollout) = &read.object
                        && rollout
                            .spec
                            .strategy
                            .as_ref()
                            .is_some_and(|strategy| strategy.canary.is_some())
                    {
                        match argo::convert(&read) {
                            Ok(_) => self.converted += 1,
                            Err(errors) => {
                                assert!(!errors.is_empty(), "{name}: refused without a reason");
                                for error in &errors {
                                    assert!(is_path_named(error), "{name}: {error}");
                                }
                                *self.not_converted.entry(reason(&errors[0])).or_default() += 1;
                                self.conversions_refused.push(format!(
                                    "{name}: {}",
                                    errors
                                        .iter()
                                        .map(ToString::to_string)
                                        .collect::<Vec<_>>()
                                        .join("; ")
                                ));
                            }
                        }
                    }
                }
                Err(refused) => {
                    assert!(
                        !refused.errors.is_empty(),
                        "{name}: refused without a reason"
                    );
                    for error in &refused.errors {
                        assert!(is_path_named(error), "{name}: {error}");
                    }
                    *self.refused.entry(reason(&refused.errors[0])).or_default() += 1;
                    self.refusals.push(format!(
                        "{name}: {}: {}",
                        refused.subject,
                        refused
                            .errors
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
            }
        }
    }

    /// Every condition of an accepted document parses, and evaluates against each sample
    /// result to a value or an error, never a panic.
    fn evaluate_conditions(&mut self, object: &ArgoObject) {
        let metrics: &[Metric] = match object {
            ArgoObject::AnalysisTemplate(template)
            | ArgoObject::ClusterAnalysisTemplate(template) => {
                template.spec.metrics.as_deref().unwrap_or_default()
            }
            ArgoObject::AnalysisRun(run) => &run.spec.metrics,
            _ => &[],
        };
        for metric in metrics {
            for condition in [&metric.success_condition, &metric.failure_condition]
                .into_iter()
                .flatten()
            {
                let parsed = Expr::parse(condition)
                    .unwrap_or_else(|error| panic!("{condition:?} was accepted: {error}"));
                for result in sample_results() {
                    let _ = parsed.evaluate_bool(&result);
                }
                self.conditions_evaluated += 1;
            }
        }
    }

    fn print(&self, title: &str) {
        println!(
            "{title}: {} argoproj.io documents: {} accepted, {} refused; {} files do not parse",
            self.documents,
            self.accepted,
            self.documents - self.accepted,
            self.unparsed_files.len()
        );
        println!("  accepted by kind: {:?}", self.accepted_by_kind);
        println!(
            "  conditions parsed and evaluated against {} sample results: {}",
            sample_results().len(),
            self.conditions_evaluated
        );
        println!(
            "  inputs upstream expects to fail that weir accepts (they fail at run time): {}",
            self.expected_failures_accepted.len()
        );
        for accepted in &self.expected_failures_accepted {
            println!("    {accepted}");
        }
        println!("  refused, by first reason:");
        let mut reasons: Vec<_> = self.refused.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (reason, count) in reasons {
            println!("    {count:4}  {reason}");
        }
        println!("  refusals:");
        for refusal in &self.refusals {
            println!("    {refusal}");
        }
        for file in &self.unparsed_files {
            println!("    unparsed: {file}");
        }
        println!(
            "  canary Rollouts accepted: {} convert to weir Rollouts, {} do not",
            self.converted,
            self.not_converted.values().sum::<usize>()
        );
        let mut reasons: Vec<_> = self.not_converted.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (reason, count) in reasons {
            println!("    {count:4}  {reason}");
        }
        for refusal in &self.conversions_refused {
            println!("    {refusal}");
        }
    }
}

#[test]
fn every_example_is_accepted_or_refused_by_path() {
    let Some(dir) = corpus() else {
        return;
    };
    let mut tally = Tally::default();
    for file in yaml_files(&dir.join("examples")) {
        tally.file(&file);
    }
    tally.print("examples");
    assert_eq!(
        (tally.documents, tally.accepted, tally.unparsed_files.len()),
        (DOCUMENTS, ACCEPTED, UNPARSED_FILES),
        "(documents, accepted, unparsed files) changed: read the tally above"
    );
    assert_eq!(
        (tally.converted, tally.not_converted.values().sum::<usize>()),
        (CONVERTED, NOT_CONVERTED),
        "(converted, not converted) changed: read the tally above"
    );
}

#[test]
fn every_fragment_is_accepted_or_refused_by_path() {
    let Some(dir) = corpus() else {
        return;
    };
    let mut tally = Tally::default();
    for file in yaml_files(&dir.join("examples/fragments")) {
        tally.file(&file);
    }
    tally.print("fragments");
    assert_eq!(
        (tally.documents, tally.accepted, tally.unparsed_files.len()),
        (FRAGMENT_DOCUMENTS, FRAGMENTS_ACCEPTED, FRAGMENTS_UNPARSED),
        "(documents, accepted, unparsed files) of the fragments changed: read the tally above"
    );
}
