//! The kinds the server knows: the built-in ones and the ones a CRD adds, with their table
//! columns and the fields they may carry.

use serde_json::{Value, json};

/// How one table cell is computed.
#[derive(Clone, Debug)]
pub(crate) enum Cell {
    /// `metadata.name`.
    Name,
    /// The age of `metadata.creationTimestamp`.
    Age,
    /// A simple `.a.b` path; a `date` column turns a timestamp into an age.
    Path(String),
    /// Computed from the object.
    Computed(fn(&Value) -> Value),
}

/// One column of a Table.
#[derive(Clone, Debug)]
pub(crate) struct Column {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub cell: Cell,
}

impl Column {
    fn new(name: &str, kind: &str, cell: Cell) -> Column {
        Column {
            name: name.to_owned(),
            kind: kind.to_owned(),
            format: if matches!(cell, Cell::Name) {
                "name".to_owned()
            } else {
                String::new()
            },
            description: String::new(),
            priority: 0,
            cell,
        }
    }
}

/// What fields an object of the kind may carry (for `fieldValidation` and pruning).
#[derive(Clone, Debug)]
pub(crate) enum Fields {
    /// A built-in kind: only its top-level fields are known (nested fields are not checked).
    TopLevel(&'static [&'static str]),
    /// A custom resource: the version's `openAPIV3Schema`.
    Schema(Value),
}

/// One served resource at one version.
#[derive(Clone, Debug)]
pub(crate) struct ResourceType {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `status` subresource.
    pub status: bool,
    /// Keeps `metadata.generation`.
    pub generation: bool,
    pub columns: Vec<Column>,
    pub fields: Fields,
    /// Defined by a CRD (a custom resource).
    pub custom: bool,
}

impl ResourceType {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// Has the `scale` subresource (an `autoscaling/v1` `Scale` over `spec.replicas`): built-in
    /// Deployments.
    pub fn scale(&self) -> bool {
        !self.custom && self.group == "apps" && self.plural == "deployments"
    }

    /// Has the `eviction` subresource (a POST of a `policy/v1` `Eviction` deletes the object):
    /// built-in Pods.
    pub fn evictable(&self) -> bool {
        !self.custom && self.group.is_empty() && self.plural == "pods"
    }

    /// `services` or `canaries.flagger.app`: how messages and write counts name it.
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// `v1` or `group/version`.
pub(crate) fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// Splits `apps/v1` into `("apps", "v1")` and `v1` into `("", "v1")`.
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

const SPEC_STATUS: &[&str] = &["spec", "status"];

#[allow(clippy::too_many_arguments)]
fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short_names: &[&str],
    status: bool,
    fields: &'static [&'static str],
    middle: Vec<Column>,
) -> ResourceType {
    let mut columns = vec![Column::new("Name", "string", Cell::Name)];
    columns.extend(middle);
    columns.push(Column::new("Age", "date", Cell::Age));
    let categories = if matches!(
        plural,
        "services"
            | "deployments"
            | "daemonsets"
            | "replicasets"
            | "jobs"
            | "pods"
            | "horizontalpodautoscalers"
    ) {
        vec!["all".to_owned()]
    } else {
        Vec::new()
    };
    ResourceType {
        group: group.to_owned(),
        version: version.to_owned(),
        plural: plural.to_owned(),
        singular: kind.to_lowercase(),
        kind: kind.to_owned(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short_names.iter().map(|s| (*s).to_owned()).collect(),
        categories,
        status,
        generation: matches!(
            plural,
            "deployments"
                | "daemonsets"
                | "replicasets"
                | "jobs"
                | "horizontalpodautoscalers"
                | "customresourcedefinitions"
        ),
        columns,
        fields: Fields::TopLevel(fields),
        custom: false,
    }
}

fn path(name: &str, kind: &str, path: &str) -> Column {
    Column::new(name, kind, Cell::Path(path.to_owned()))
}

fn computed(name: &str, kind: &str, f: fn(&Value) -> Value) -> Column {
    Column::new(name, kind, Cell::Computed(f))
}

fn int_at(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// A Job's STATUS column as the 1.32 server prints it: `Complete` or `Failed` once the
/// condition of that type is `True`, then `Terminating` while being deleted, `Suspended`,
/// `FailureTarget` (failed, pods still being terminated), else `Running`.
fn job_status(job: &Value) -> &'static str {
    let holds = |wanted: &str| {
        job.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|condition| {
                str_at(condition, "/type") == Some(wanted)
                    && str_at(condition, "/status") == Some("True")
            })
    };
    if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if holds("Suspended") {
        "Suspended"
    } else if holds("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// The `policy/v1` `Eviction` a POST to `pods/NAME/eviction` carries: not a served resource,
/// only its known fields (for `fieldValidation`) and names for messages.
pub(crate) fn eviction() -> ResourceType {
    builtin(
        "policy",
        "v1",
        "evictions",
        "Eviction",
        true,
        &[],
        false,
        &["deleteOptions"],
        Vec::new(),
    )
}

/// The kinds every server starts with.
pub(crate) fn builtins() -> Vec<ResourceType> {
    let mut events = builtin(
        "",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        &[
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        Vec::new(),
    );
    events.columns = vec![
        computed("Last Seen", "string", |event| {
            let time = str_at(event, "/lastTimestamp")
                .or_else(|| str_at(event, "/eventTime"))
                .or_else(|| str_at(event, "/metadata/creationTimestamp"));
            json!(time.map_or_else(|| "<unknown>".to_owned(), super::age_of))
        }),
        path("Type", "string", ".type"),
        path("Reason", "string", ".reason"),
        computed("Object", "string", |event| {
            let kind = str_at(event, "/involvedObject/kind")
                .unwrap_or("")
                .to_lowercase();
            let name = str_at(event, "/involvedObject/name").unwrap_or("");
            json!(format!("{kind}/{name}"))
        }),
        path("Message", "string", ".message"),
    ];
    vec![
        builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            false,
            &["ns"],
            true,
            SPEC_STATUS,
            vec![path("Status", "string", ".status.phase")],
        ),
        builtin(
            "",
            "v1",
            "services",
            "Service",
            true,
            &["svc"],
            true,
            SPEC_STATUS,
            vec![
                computed("Type", "string", |svc| {
                    json!(str_at(svc, "/spec/type").unwrap_or("ClusterIP"))
                }),
                computed("Cluster-IP", "string", |svc| {
                    json!(str_at(svc, "/spec/clusterIP").unwrap_or("<none>"))
                }),
                computed("External-IP", "string", |svc| {
                    let ips: Vec<&str> = svc
                        .pointer("/spec/externalIPs")
                        .and_then(Value::as_array)
                        .map(|ips| ips.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    json!(if ips.is_empty() {
                        "<none>".to_owned()
                    } else {
                        ips.join(",")
                    })
                }),
                computed("Port(s)", "string", |svc| {
                    let ports: Vec<String> = svc
                        .pointer("/spec/ports")
                        .and_then(Value::as_array)
                        .map(|ports| {
                            ports
                                .iter()
                                .map(|port| {
                                    format!(
                                        "{}/{}",
                                        int_at(port, "/port"),
                                        str_at(port, "/protocol").unwrap_or("TCP")
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    json!(if ports.is_empty() {
                        "<none>".to_owned()
                    } else {
                        ports.join(",")
                    })
                }),
            ],
        ),
        builtin(
            "",
            "v1",
            "configmaps",
            "ConfigMap",
            true,
            &["cm"],
            false,
            &["data", "binaryData", "immutable"],
            vec![computed("Data", "integer", |cm| {
                let count = |key: &str| {
                    cm.get(key)
                        .and_then(Value::as_object)
                        .map_or(0, |m| m.len())
                };
                json!(count("data") + count("binaryData"))
            })],
        ),
        builtin(
            "",
            "v1",
            "secrets",
            "Secret",
            true,
            &[],
            false,
            &["data", "stringData", "type", "immutable"],
            vec![
                computed("Type", "string", |secret| {
                    json!(str_at(secret, "/type").unwrap_or("Opaque"))
                }),
                computed("Data", "integer", |secret| {
                    json!(
                        secret
                            .get("data")
                            .and_then(Value::as_object)
                            .map_or(0, |m| m.len())
                    )
                }),
            ],
        ),
        events,
        builtin(
            "",
            "v1",
            "pods",
            "Pod",
            true,
            &["po"],
            true,
            SPEC_STATUS,
            vec![path("Status", "string", ".status.phase")],
        ),
        builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
            true,
            SPEC_STATUS,
            vec![
                computed("Ready", "string", |deploy| {
                    let desired = deploy
                        .pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    json!(format!(
                        "{}/{desired}",
                        int_at(deploy, "/status/readyReplicas")
                    ))
                }),
                computed("Up-to-date", "integer", |deploy| {
                    json!(int_at(deploy, "/status/updatedReplicas"))
                }),
                computed("Available", "integer", |deploy| {
                    json!(int_at(deploy, "/status/availableReplicas"))
                }),
            ],
        ),
        builtin(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            true,
            &["ds"],
            true,
            SPEC_STATUS,
            vec![
                computed("Desired", "integer", |ds| {
                    json!(int_at(ds, "/status/desiredNumberScheduled"))
                }),
                computed("Current", "integer", |ds| {
                    json!(int_at(ds, "/status/currentNumberScheduled"))
                }),
                computed("Ready", "integer", |ds| {
                    json!(int_at(ds, "/status/numberReady"))
                }),
                computed("Up-to-date", "integer", |ds| {
                    json!(int_at(ds, "/status/updatedNumberScheduled"))
                }),
                computed("Available", "integer", |ds| {
                    json!(int_at(ds, "/status/numberAvailable"))
                }),
                computed("Node Selector", "string", |ds| {
                    let selector = ds
                        .pointer("/spec/template/spec/nodeSelector")
                        .and_then(Value::as_object)
                        .filter(|selector| !selector.is_empty())
                        .map(|selector| {
                            selector
                                .iter()
                                .map(|(key, value)| {
                                    format!("{key}={}", value.as_str().unwrap_or_default())
                                })
                                .collect::<Vec<_>>()
                                .join(",")
                        });
                    json!(selector.unwrap_or_else(|| "<none>".to_owned()))
                }),
            ],
        ),
        builtin(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            &["rs"],
            true,
            SPEC_STATUS,
            vec![
                computed("Desired", "integer", |rs| {
                    json!(
                        rs.pointer("/spec/replicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    )
                }),
                computed("Current", "integer", |rs| {
                    json!(int_at(rs, "/status/replicas"))
                }),
                computed("Ready", "integer", |rs| {
                    json!(int_at(rs, "/status/readyReplicas"))
                }),
            ],
        ),
        builtin(
            "batch",
            "v1",
            "jobs",
            "Job",
            true,
            &[],
            true,
            SPEC_STATUS,
            vec![
                computed("Status", "string", |job| json!(job_status(job))),
                computed("Completions", "string", |job| {
                    // Without `spec.completions` a Job is done after one success: `0/1`.
                    let completions = job
                        .pointer("/spec/completions")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    json!(format!(
                        "{}/{completions}",
                        int_at(job, "/status/succeeded")
                    ))
                }),
            ],
        ),
        builtin(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            &["hpa"],
            true,
            SPEC_STATUS,
            vec![
                computed("Reference", "string", |hpa| {
                    json!(format!(
                        "{}/{}",
                        str_at(hpa, "/spec/scaleTargetRef/kind").unwrap_or(""),
                        str_at(hpa, "/spec/scaleTargetRef/name").unwrap_or("")
                    ))
                }),
                computed("MinPods", "integer", |hpa| {
                    json!(
                        hpa.pointer("/spec/minReplicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    )
                }),
                computed("MaxPods", "integer", |hpa| {
                    json!(int_at(hpa, "/spec/maxReplicas"))
                }),
                computed("Replicas", "integer", |hpa| {
                    json!(int_at(hpa, "/status/currentReplicas"))
                }),
            ],
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            true,
            &["ing"],
            true,
            SPEC_STATUS,
            vec![
                path("Class", "string", ".spec.ingressClassName"),
                computed("Hosts", "string", |ingress| {
                    let hosts: Vec<&str> = ingress
                        .pointer("/spec/rules")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|rule| rule.get("host").and_then(Value::as_str))
                        .collect();
                    json!(if hosts.is_empty() {
                        "*".to_owned()
                    } else {
                        hosts.join(",")
                    })
                }),
            ],
        ),
        builtin(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            &[],
            false,
            &["spec"],
            vec![path("Holder", "string", ".spec.holderIdentity")],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
            SPEC_STATUS,
            vec![path("Created At", "date", ".metadata.creationTimestamp")],
        ),
    ]
}

/// The served versions a CRD object defines, or why it is invalid.
pub(crate) fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let text = |pointer: &str| {
        spec.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let group = text("/group").ok_or("spec.group: Required value")?;
    let plural = text("/names/plural").ok_or("spec.names.plural: Required value")?;
    let kind = text("/names/kind").ok_or("spec.names.kind: Required value")?;
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let singular = text("/names/singular").unwrap_or_else(|| kind.to_lowercase());
    let list_kind = text("/names/listKind").unwrap_or_else(|| format!("{kind}List"));
    let strings = |pointer: &str| -> Vec<String> {
        spec.pointer(pointer)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let namespaced = match text("/scope").as_deref() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => return Err(format!("spec.scope: Unsupported value: {other:?}")),
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions: Required value")?;
    let mut types = Vec::new();
    for version in versions {
        if version.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version_name = version
            .get("name")
            .and_then(Value::as_str)
            .ok_or("spec.versions[].name: Required value")?;
        let mut columns = vec![Column::new("Name", "string", Cell::Name)];
        for printer in version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let field = |key: &str| printer.get(key).and_then(Value::as_str).unwrap_or("");
            columns.push(Column {
                name: field("name").to_owned(),
                kind: field("type").to_owned(),
                format: field("format").to_owned(),
                description: field("description").to_owned(),
                priority: printer.get("priority").and_then(Value::as_i64).unwrap_or(0),
                cell: Cell::Path(field("jsonPath").to_owned()),
            });
        }
        // A CRD that declares its own `Age` column (as every CRD with printer columns must on
        // the real server, which adds one only when none is declared) gets it once.
        if !columns.iter().any(|column| column.name == "Age") {
            columns.push(Column::new("Age", "date", Cell::Age));
        }
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        types.push(ResourceType {
            group: group.clone(),
            version: version_name.to_owned(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strings("/names/shortNames"),
            categories: strings("/names/categories"),
            status: version.pointer("/subresources/status").is_some(),
            generation: true,
            columns,
            fields: Fields::Schema(schema),
            custom: true,
        });
    }
    if types.is_empty() {
        return Err("spec.versions: Invalid value: must have at least one served version".into());
    }
    Ok(types)
}
