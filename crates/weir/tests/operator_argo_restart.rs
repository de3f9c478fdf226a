//! `kubectl argo rollouts restart` (here `weir argo restart`) run by `weir operator` against the
//! in-memory API server: the pods of the Rollout's ReplicaSets created before `spec.restartAt`
//! are evicted through the Eviction API (`pods/eviction`) and `status.restartedAt` records the
//! restart once none is left. The server runs no pods, so the test creates them as the
//! ReplicaSet controller would; nothing recreates them once evicted.
//!
//! Also kube-rs's own `Api::<Pod>::evict` (what the operator calls) against the server's
//! eviction subresource.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, PostParams};
use serde_json::{Value, json};
use weir_testkit::argo_cluster::{
    API_VERSION, argo_kube_cluster, create_pods_of, replica_sets_of, rollout_yaml,
    wait_rollout_status,
};
use weir_testkit::kube_cluster::{NAMESPACE, text};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::{no_hang, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_weir");

const CANARY: &str = "    canary:
      steps:
        - setWeight: 50
        - pause: {}
";

fn field<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn pod_exists(server: &KubeServer, name: &str) -> bool {
    server.get("v1", "Pod", NAMESPACE, name).is_some()
}

#[test]
fn restart_evicts_the_pods_created_before_restart_at_then_records_restarted_at() {
    let cluster = argo_kube_cluster(BIN);
    let server = &cluster.server;
    cluster.apply(&rollout_yaml(NAMESPACE, "web", 2, "web:1", CANARY));
    let _operator = cluster.start_operator(&[]);
    let healthy = wait_rollout_status(server, NAMESPACE, "web", "web healthy", |status| {
        field(status, "/phase") == "Healthy"
    });
    assert!(healthy.get("restartedAt").is_none(), "{healthy}");
    let hash = field(&healthy, "/stableRS").to_owned();
    assert!(!hash.is_empty(), "{healthy}");
    let replica_set = wait_until("web's ReplicaSet of the stable hash", || {
        replica_sets_of(server, NAMESPACE, "web")
            .into_iter()
            .find(|rs| {
                field(rs, "/metadata/labels/rollouts-pod-template-hash") == hash
                    && rs.pointer("/spec/replicas") == Some(&json!(2))
            })
    });

    // Two pods of the ReplicaSet, as its controller would make them, and a pod of nobody's,
    // which no restart of web may touch.
    let pods: Vec<String> = create_pods_of(server, &replica_set, 2)
        .iter()
        .map(|pod| field(pod, "/metadata/name").to_owned())
        .collect();
    assert_eq!(pods.len(), 2);
    let rs_name = field(&replica_set, "/metadata/name");
    assert!(
        pods.iter()
            .all(|pod| pod.starts_with(&format!("{rs_name}-"))),
        "{pods:?}"
    );
    let bystander = server
        .create(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bystander", "namespace": NAMESPACE, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "web:1"}]}}))
        .unwrap();
    // restartAt is written to the second and only pods created before it are restarted: the
    // restart is asked once the clock has left the second the pods were created in.
    let created: jiff::Timestamp = field(&bystander, "/metadata/creationTimestamp")
        .parse()
        .unwrap();
    wait_until("the clock past the pods' creation second", || {
        (jiff::Timestamp::now().as_second() > created.as_second()).then_some(())
    });

    let restarted = std::process::Command::new(BIN)
        .args(["argo", "restart", "web", "-n", NAMESPACE])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        restarted.status.success(),
        "weir argo restart: {}",
        text(&restarted.stderr)
    );
    assert_eq!(
        text(&restarted.stdout).trim(),
        "rollout 'web' restarts in 0s"
    );
    let rollout = server
        .get(API_VERSION, "Rollout", NAMESPACE, "web")
        .unwrap();
    let restart_at = field(&rollout, "/spec/restartAt").to_owned();
    let at: jiff::Timestamp = restart_at
        .parse()
        .unwrap_or_else(|error| panic!("spec.restartAt {restart_at:?}: {error}"));
    assert!(at > created, "restartAt {at} after the pods ({created})");

    wait_until("both pods of web evicted", || {
        pods.iter()
            .all(|pod| !pod_exists(server, pod))
            .then_some(())
    });
    let done = wait_rollout_status(
        server,
        NAMESPACE,
        "web",
        "status.restartedAt = spec.restartAt",
        |status| field(status, "/restartedAt") == restart_at,
    );
    println!("restarted at {restart_at}: {done}");
    let healthy = wait_rollout_status(server, NAMESPACE, "web", "web healthy again", |status| {
        field(status, "/phase") == "Healthy"
    });
    assert_eq!(field(&healthy, "/restartedAt"), restart_at);
    assert_eq!(
        field(&healthy, "/stableRS"),
        hash,
        "a restart is no new revision"
    );
    assert!(
        pod_exists(server, "bystander"),
        "a pod of no ReplicaSet of web is not restarted"
    );
    // Through the Eviction API, never a plain DELETE.
    let counts = server.request_counts();
    let evictions = counts.get("create pods/eviction").copied().unwrap_or(0);
    assert!(evictions >= 2, "{counts:?}");
    assert_eq!(counts.get("delete pods"), None, "{counts:?}");
}

#[test]
fn kube_rs_evict_deletes_the_pod_and_a_missing_pod_is_not_found() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(no_hang(async {
        let server = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig =
            kube::config::Kubeconfig::read_from(server.kubeconfig(dir.path())).unwrap();
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "web:1"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        assert!(pods.get_opt("web-1").await.unwrap().is_some());

        let status = pods.evict("web-1", &EvictParams::default()).await.unwrap();
        assert!(status.is_success(), "{status:?}");
        assert_eq!(status.code, 201, "{status:?}");
        assert!(pods.get_opt("web-1").await.unwrap().is_none());

        match pods.evict("web-1", &EvictParams::default()).await {
            Err(kube::Error::Api(status)) => {
                assert!(status.is_not_found(), "{status:?}");
                assert_eq!(status.code, 404, "{status:?}");
                assert_eq!(status.message, "pods \"web-1\" not found");
            }
            other => panic!("evicting a missing pod: {other:?}"),
        }
        let counts = server.request_counts();
        assert_eq!(counts.get("create pods/eviction"), Some(&2), "{counts:?}");
    }));
}
