#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

//! Argo objects read, validated and converted: small fixtures of our own.

use crate::document::{self, Document, Origin};
use crate::model::Plan;

use super::{ArgoObject, UNMAPPED_ANNOTATION, convert};

fn load_one(yaml: &str) -> document::LoadResult {
    let mut results = document::load(yaml.as_bytes());
    assert_eq!(results.len(), 1, "{results:?}");
    results.remove(0)
}

fn errors_of(yaml: &str) -> Vec<String> {
    match load_one(yaml) {
        Ok(loaded) => panic!("accepted: {loaded:?}"),
        Err(refused) => refused.errors.iter().map(ToString::to_string).collect(),
    }
}

fn argo(yaml: &str) -> super::ArgoDocument {
    match load_one(yaml) {
        Ok(loaded) => {
            assert_eq!(loaded.origin, Origin::Argo);
            match loaded.document {
                Document::Argo(document) => *document,
                other => panic!("not an Argo document: {other:?}"),
            }
        }
        Err(refused) => panic!("refused: {:?}", refused.errors),
    }
}

const CANARY: &str = "
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: shop
  namespace: web
spec:
  replicas: 5
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers:
      - name: shop
        image: shop:2
  strategy:
    canary:
      canaryService: shop-canary
      stableService: shop-stable
      trafficRouting:
        istio:
          virtualService: {name: shop, routes: [primary]}
      steps:
      - setWeight: 10
      - pause: {duration: 30}
      - setWeight: 40
      - pause: {duration: 5m}
      - setWeight: 80
      - pause: {}
";

#[test]
fn a_canary_rollout_reads_and_converts_to_the_same_plan() {
    let document = argo(CANARY);
    assert_eq!(document.describe(), "Argo Rollout web/shop");
    assert!(matches!(document.object, ArgoObject::Rollout(_)));
    let converted = convert(&document).unwrap();
    let rollout = converted.value;
    assert_eq!(rollout.metadata.name, "shop");
    assert_eq!(rollout.metadata.namespace.as_deref(), Some("web"));
    let Plan::Canary(plan) = &rollout.spec.plan else {
        panic!("not a canary plan: {:?}", rollout.spec.plan);
    };
    let steps = plan.steps.as_ref().unwrap();
    let shown: Vec<String> = steps
        .iter()
        .map(|step| {
            format!(
                "{}:{}",
                step.weight.percent(),
                step.pause
                    .as_ref()
                    .map(|pause| pause
                        .duration
                        .map_or("until resumed".to_string(), |duration| duration.to_string()))
                    .unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(shown, ["10:30s", "40:5m", "80:until resumed"]);
    let yaml = serde_saphyr::to_string(&rollout).unwrap();
    assert!(yaml.contains("provider: istio"), "{yaml}");
    assert!(yaml.contains("mode: managed"), "{yaml}");
    // The Services and the VirtualService are kept, each with a warning naming its path.
    let annotation = &rollout.metadata.annotations[UNMAPPED_ANNOTATION];
    assert!(annotation.contains("shop-canary"), "{annotation}");
    let warned: Vec<&str> = converted
        .warnings
        .iter()
        .map(|warning| warning.path.as_str())
        .collect();
    assert!(
        warned.contains(&"spec.strategy.canary.canaryService"),
        "{warned:?}"
    );
    assert!(
        warned.contains(&"spec.strategy.canary.trafficRouting.istio"),
        "{warned:?}"
    );
    assert!(warned.contains(&"spec.selector"), "{warned:?}");
}

#[test]
fn the_basic_canary_without_routing_gets_provider_kubernetes_and_workload_ref_copy_mode() {
    let yaml = "
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: api}
spec:
  selector: {matchLabels: {app: api}}
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: api, scaleDown: onsuccess}
  strategy:
    canary:
      maxSurge: '25%'
      maxUnavailable: 0
      steps:
      - setWeight: 20
      - pause: {duration: 1h}
";
    let rollout = convert(&argo(yaml)).unwrap().value;
    let text = serde_saphyr::to_string(&rollout).unwrap();
    assert!(text.contains("provider: kubernetes"), "{text}");
    assert!(text.contains("mode: copy"), "{text}");
    assert!(text.contains("name: api"), "{text}");
}

#[test]
fn max_traffic_weight_scales_the_steps() {
    let yaml = CANARY
        .replace(
            "istio:\n          virtualService: {name: shop, routes: [primary]}",
            "maxTrafficWeight: 1000\n        nginx: {stableIngress: shop}",
        )
        .replace("setWeight: 10", "setWeight: 5");
    let rollout = convert(&argo(&yaml)).unwrap().value;
    let Plan::Canary(plan) = &rollout.spec.plan else {
        panic!("not a canary plan");
    };
    let first = &plan.steps.as_ref().unwrap()[0];
    assert_eq!(first.weight.percent(), 0.5);
}

#[test]
fn features_the_plan_cannot_carry_refuse_the_conversion_by_field() {
    let yaml = CANARY.replace(
        "      - setWeight: 40\n",
        "      - setWeight: 40\n      - analysis: {templates: [{templateName: rate}]}\n      - setCanaryScale: {replicas: 2}\n",
    );
    let document = argo(&yaml);
    let errors = convert(&document).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.strategy.canary.steps[3].analysis",
            "spec.strategy.canary.steps[4].setCanaryScale"
        ],
        "{errors:?}"
    );
    // The pause after the analysis step belongs to setWeight 40's step: no error for it.
}

#[test]
fn blue_green_reads_but_does_not_convert() {
    let yaml = "
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: bg}
spec:
  selector: {matchLabels: {app: bg}}
  template:
    metadata: {labels: {app: bg}}
    spec: {containers: [{name: bg, image: bg:1}]}
  strategy:
    blueGreen:
      activeService: bg-active
      previewService: bg-preview
      autoPromotionEnabled: false
      prePromotionAnalysis:
        templates: [{templateName: smoke}]
        args: [{name: hash, valueFrom: {podTemplateHashValue: Latest}}]
      scaleDownDelaySeconds: 30
";
    let document = argo(yaml);
    let errors = convert(&document).unwrap_err();
    assert_eq!(errors[0].path, "spec.strategy.blueGreen");
}

#[test]
fn unknown_fields_are_refused_with_their_path() {
    let yaml = CANARY.replace("canaryService:", "canarySevice: x\n      canaryService:");
    let errors = errors_of(&yaml);
    assert!(
        errors.iter().any(|error| error.starts_with(
            "spec.strategy.canary.canarySevice: unknown field (did you mean `canaryService`?)"
        )),
        "{errors:?}"
    );
    let step = CANARY.replace("- setWeight: 40", "- setWeight: 40\n        pauses: {}");
    let errors = errors_of(&step);
    assert!(
        errors
            .iter()
            .any(|error| error.starts_with("spec.strategy.canary.steps[2].pauses: unknown field")),
        "{errors:?}"
    );
}

#[test]
fn routers_weir_does_not_drive_are_refused_by_name() {
    let yaml = CANARY.replace(
        "istio:\n          virtualService: {name: shop, routes: [primary]}",
        "alb: {ingress: shop, servicePort: 80}",
    );
    let errors = errors_of(&yaml);
    assert!(
        errors.iter().any(|error| error
            .starts_with("spec.strategy.canary.trafficRouting.alb: not supported: ")
            && error.contains("istio, nginx, smi")),
        "{errors:?}"
    );
    let two = CANARY.replace("istio:\n", "smi: {}\n        istio:\n");
    let errors = errors_of(&two);
    assert!(
        errors.iter().any(|error| error
            .starts_with("spec.strategy.canary.trafficRouting: not supported: 2 routers")),
        "{errors:?}"
    );
}

#[test]
fn argo_rules_are_held_with_paths() {
    let yaml = CANARY
        .replace("setWeight: 40", "setWeight: 140")
        .replace("{duration: 5m}", "{duration: -5s}")
        .replace("stableService: shop-stable", "stableService: shop-canary");
    let errors = errors_of(&yaml);
    for expected in [
        "spec.strategy.canary.steps[2].setWeight: 140 is not allowed",
        "spec.strategy.canary.steps[3].pause.duration: \"-5s\" is not allowed",
        "spec.strategy.canary.stableService: \"shop-canary\" is not allowed",
    ] {
        assert!(
            errors.iter().any(|error| error.starts_with(expected)),
            "{expected}: {errors:?}"
        );
    }
    let no_template = CANARY.replace("  template:\n", "  templat:\n");
    let errors = errors_of(&no_template);
    assert!(
        errors
            .iter()
            .any(|error| error.starts_with("spec.templat: unknown field")),
        "{errors:?}"
    );
}

const TEMPLATE: &str = "
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate}
spec:
  args:
  - name: service-name
  - name: api-token
    valueFrom:
      secretKeyRef: {name: token, key: key}
  metrics:
  - name: success-rate
    interval: 5m
    count: 3
    failureLimit: 1
    successCondition: len(result) == 0 || result[0] >= 0.95
    provider:
      prometheus:
        address: http://prometheus:9090
        query: sum(rate(requests{service=\"{{args.service-name}}\",code!~\"5..\"}[5m]))
  - name: smoke
    successCondition: result.ok == true
    provider:
      web:
        url: http://smoke/{{ args.service-name }}
        headers: [{key: Authorization, value: 'Bearer {{args.api-token}}'}]
        jsonPath: '{$.data}'
  - name: job
    provider:
      job:
        spec:
          template:
            spec:
              containers: [{name: check, image: curl}]
              restartPolicy: Never
";

#[test]
fn an_analysis_template_reads_with_its_conditions_and_providers() {
    let document = argo(TEMPLATE);
    assert_eq!(
        document.describe(),
        "Argo AnalysisTemplate default/success-rate"
    );
    // Not converted: the error names kind.
    assert_eq!(convert(&document).unwrap_err()[0].path, "kind");
    let cluster = TEMPLATE.replace("kind: AnalysisTemplate", "kind: ClusterAnalysisTemplate");
    assert_eq!(
        argo(&cluster).describe(),
        "Argo ClusterAnalysisTemplate success-rate"
    );
}

#[test]
fn analysis_templates_refuse_what_weir_does_not_run_by_path() {
    let yaml = TEMPLATE
        .replace(
            "len(result) == 0 || result[0] >= 0.95",
            "result matches '^ok'",
        )
        .replace(
            "      web:\n",
            "      kayenta: {address: http://kayenta}\n      web:\n",
        )
        .replace("{{args.api-token}}", "{{args.token}}")
        .replace("count: 3", "count: 3\n    inconclusiveLimit: -1");
    let errors = errors_of(&yaml);
    for expected in [
        "spec.metrics[0].inconclusiveLimit: -1 is not allowed",
        "spec.metrics[0].successCondition: \"result matches '^ok'\" is not allowed: not supported: operator `matches`",
        "spec.metrics[1].provider: has 2 providers (web, kayenta)",
        "spec.metrics[1].provider.kayenta: not supported: ",
        "spec.metrics[1].provider.web.headers[0].value: {{args.token}}: argument \"token\" is not declared",
    ] {
        assert!(
            errors.iter().any(|error| error.starts_with(expected)),
            "{expected}: {errors:?}"
        );
    }
    let interval = TEMPLATE.replace("interval: 5m", "interval: five");
    let errors = errors_of(&interval);
    assert!(
        errors
            .iter()
            .any(|error| error.starts_with("spec.metrics[0].interval: \"five\" is not allowed")),
        "{errors:?}"
    );
    let missing = TEMPLATE.replace("    interval: 5m\n", "");
    let errors = errors_of(&missing);
    assert!(
        errors
            .iter()
            .any(|error| error.starts_with("spec.metrics[0].interval: is required")),
        "{errors:?}"
    );
}

#[test]
fn analysis_runs_and_experiments_read() {
    let run = "
apiVersion: argoproj.io/v1alpha1
kind: AnalysisRun
metadata: {name: shop-abc-1}
spec:
  args: [{name: host, value: shop}]
  metrics:
  - name: up
    successCondition: result == 'It worked!'
    provider:
      web: {url: 'http://{{args.host}}/'}
status:
  phase: Successful
";
    let loaded = load_one(run).unwrap();
    assert_eq!(loaded.warnings[0].path, "status");
    let experiment = "
apiVersion: argoproj.io/v1alpha1
kind: Experiment
metadata: {name: exp}
spec:
  duration: 10m
  templates:
  - name: baseline
    replicas: 1
    selector: {matchLabels: {app: exp}}
    template:
      metadata: {labels: {app: exp}}
      spec: {containers: [{name: app, image: app:1}]}
  analyses:
  - name: rate
    templateName: success-rate
    args: [{name: hash, value: '{{templates.baseline.podTemplateHash}}'}]
";
    assert_eq!(argo(experiment).describe(), "Argo Experiment default/exp");
    let bad = experiment.replace("duration: 10m", "duration: ten");
    assert!(errors_of(&bad)[0].starts_with("spec.duration: \"ten\" is not allowed"));
}

#[test]
fn other_kinds_and_versions_of_the_group_are_refused() {
    let errors =
        errors_of("apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: x}\n");
    assert!(
        errors[0].starts_with("kind: \"Workflow\" is not allowed"),
        "{errors:?}"
    );
    let errors = errors_of(&CANARY.replace("argoproj.io/v1alpha1", "argoproj.io/v1"));
    assert!(
        errors[0].starts_with("apiVersion: \"argoproj.io/v1\" is not allowed"),
        "{errors:?}"
    );
}

#[test]
fn malformed_input_never_panics() {
    for yaml in [
        "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nspec: 3\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nspec: {strategy: {canary: {steps: [{pause: {duration: -5}}, 7]}}}\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisTemplate\nspec: {metrics: [{name: a, provider: {}}]}\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: AnalysisRun\nspec: {}\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: Experiment\nspec: {templates: []}\n",
        "apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: a}\nspec: {selector: {matchLabels: {a: b}}, template: {}, strategy: {canary: {steps: [{setWeight: 9223372036854775807}], trafficRouting: {maxTrafficWeight: -1, nginx: {stableIngress: a}}, canaryService: a, stableService: b}}}\n",
    ] {
        let results = document::load(yaml.as_bytes());
        assert!(results.iter().all(Result::is_err), "{yaml}: {results:?}");
    }
}

#[test]
fn pod_templates_are_held_to_what_the_api_server_accepts() {
    let yaml = CANARY
        .replace("image: shop:2", "image: shop:2\n        resources: {requests: {memory: lots, cpu: 250m}, limits: {memory: 1Gi, cpu: 1.5}}\n      - name: shop");
    let errors = errors_of(&yaml);
    assert_eq!(
        errors,
        [
            "spec.template.spec.containers[0].resources.requests.memory: \"lots\" is not allowed: a Kubernetes quantity such as 128Mi, 0.5 or 500m",
            "spec.template.spec.containers[1].image: is required: the container's image",
            "spec.template.spec.containers[1].name: \"shop\" is not allowed: each container of a pod is named once",
        ],
    );
    for quantity in [
        "1", "0.5", ".5", "500m", "128Mi", "1e3", "1E-3", "+2", "-1k", "2Ei",
    ] {
        assert!(super::validate::is_quantity(quantity), "{quantity}");
    }
    for quantity in ["", "Mi", "1.2.3", "12MB", "1e", "e3", "1 Gi", "٣"] {
        assert!(!super::validate::is_quantity(quantity), "{quantity}");
    }
}

#[test]
fn provider_settings_are_typed_as_the_crd_types_them() {
    let yaml = TEMPLATE.replace(
        "      prometheus:\n        address: http://prometheus:9090\n",
        "      datadog:\n        apiVersion: v3\n        interval: 5m\n        queris: {a: 'avg:x{*}'}\n      prometheus:\n        address: http://prometheus:9090\n        rangeQuery: {start: 'now() - 1h', stepp: 1m}\n",
    );
    let errors = errors_of(&yaml);
    for expected in [
        "spec.metrics[0].provider.datadog.queris: unknown field (did you mean `queries`?)",
        "spec.metrics[0].provider.prometheus.rangeQuery.stepp: unknown field (did you mean `step`?)",
    ] {
        assert!(
            errors.iter().any(|error| error.starts_with(expected)),
            "{expected}: {errors:?}"
        );
    }
    let affinity = CANARY.replace(
        "      canaryService: shop-canary\n",
        "      canaryService: shop-canary\n      antiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: {weight: 0}}\n      replicaProgressThreshold: {type: Share, value: 50}\n",
    );
    let errors = errors_of(&affinity);
    assert_eq!(
        errors,
        [
            "spec.strategy.canary.antiAffinity.preferredDuringSchedulingIgnoredDuringExecution.weight: 0 is not allowed: from 1 to 100",
            "spec.strategy.canary.replicaProgressThreshold.type: \"Share\" is not allowed: Percent or Pods",
        ]
    );
}

#[test]
fn the_promote_on_annotation_opts_into_the_evidence_rule() {
    use crate::model::PromotionEvidence;
    let plain = convert(&argo(CANARY)).unwrap().value;
    assert_eq!(
        plain.spec.analysis.evidence.promote_on,
        PromotionEvidence::NoHarm
    );
    assert!(plain.spec.analysis.judges.is_empty());
    let health = CANARY.replace(
        "  namespace: web\n",
        "  namespace: web\n  annotations: {weir.dev/promote-on: health}\n",
    );
    let rollout = convert(&argo(&health)).unwrap().value;
    assert_eq!(
        rollout.spec.analysis.evidence.promote_on,
        PromotionEvidence::Health
    );
    assert_eq!(rollout.spec.analysis.judges, ["sequential"]);
    let wrong = health.replace("promote-on: health", "promote-on: always");
    let errors = convert(&argo(&wrong)).unwrap_err();
    assert_eq!(
        errors[0].path,
        "metadata.annotations[\"weir.dev/promote-on\"]"
    );
}

mod never_panics {
    use proptest::prelude::*;
    use serde_json::Value;

    use crate::document::{self, Document};

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z{}#\\[\\]0-9 .'<>=]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Where a random value replaces part of a valid document.
    const PLACES: [&str; 10] = [
        "/spec",
        "/spec/strategy",
        "/spec/strategy/canary",
        "/spec/strategy/canary/steps",
        "/spec/strategy/canary/steps/0",
        "/spec/strategy/canary/trafficRouting",
        "/spec/template",
        "/spec/replicas",
        "/metadata",
        "/spec/strategy/canary/steps/1/pause",
    ];

    proptest! {
        #[test]
        fn a_rollout_with_any_part_replaced_is_read_or_refused(
            place in 0..PLACES.len(),
            value in any_json(),
        ) {
            let mut document: Value = serde_saphyr::from_str(super::CANARY).unwrap();
            if let Some(slot) = document.pointer_mut(PLACES[place]) {
                *slot = value;
            }
            if let Ok(loaded) = document::load_value(&document)
                && let Document::Argo(read) = loaded.document
            {
                let _ = super::convert(&read);
            }
        }

        #[test]
        fn a_template_with_any_metric_is_read_or_refused(value in any_json()) {
            let mut document: Value = serde_saphyr::from_str(super::TEMPLATE).unwrap();
            if let Some(slot) = document.pointer_mut("/spec/metrics/0") {
                *slot = value;
            }
            let _ = document::load_value(&document);
        }
    }
}
