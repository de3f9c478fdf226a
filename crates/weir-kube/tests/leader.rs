//! Leader election through a Lease on the in-memory API server: one leader among contenders, a
//! takeover after the leader dies without releasing, a quick handover on release, and fencing
//! of a leader that can no longer renew.
//!
//! Durations are short (a 3 s lease renewed every second) to keep the tests fast; the bounds
//! asserted on times are generous: they check the protocol (who may act when), not speed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use weir_kube::leader::{Leadership, LeaseConfig};
use weir_testkit::fixtures::TempDb;
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::{no_hang, wait_for, wait_for_ok_within, wait_for_within};

const NAMESPACE: &str = "weir-system";
const LEASE: &str = "weir-operator";
/// How long a test waits for something the protocol promises within a few seconds.
const PATIENCE: Duration = Duration::from_secs(60);

struct Cluster {
    server: KubeServer,
    config: kube::Config,
    _dir: TempDb,
}

impl Cluster {
    /// The server with namespace `weir-system`, and the client settings from the kubeconfig
    /// the testkit writes (as `weir operator` reads `KUBECONFIG`).
    async fn start() -> Cluster {
        let server = KubeServer::start().await;
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        let dir = TempDb::new();
        std::fs::create_dir_all(dir.file("kube")).unwrap();
        let kubeconfig = Kubeconfig::read_from(server.kubeconfig(&dir.file("kube"))).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        Cluster {
            server,
            config,
            _dir: dir,
        }
    }

    fn client(&self) -> Client {
        Client::try_from(self.config.clone()).unwrap()
    }

    /// A client that reaches the server through `proxy`.
    fn client_via(&self, proxy: &Proxy) -> Client {
        let mut config = self.config.clone();
        config.cluster_url = format!("http://{}", proxy.addr).parse().unwrap();
        Client::try_from(config).unwrap()
    }

    fn contend(&self, client: Client, config: LeaseConfig) -> Leadership {
        Leadership::start(client, config).unwrap()
    }

    fn spec(&self) -> Value {
        self.server
            .get("coordination.k8s.io/v1", "leases", NAMESPACE, LEASE)
            .map(|lease| lease["spec"].clone())
            .unwrap_or(Value::Null)
    }

    fn holder(&self) -> Option<String> {
        self.spec()["holderIdentity"].as_str().map(str::to_owned)
    }

    fn time(&self, field: &str) -> Timestamp {
        self.spec()[field]
            .as_str()
            .unwrap_or_else(|| panic!("the lease has no {field}: {}", self.spec()))
            .parse()
            .unwrap()
    }
}

/// `lease` seconds, renewed every `renew`, retried every `retry`, fenced `margin` early.
fn settings(
    identity: &str,
    lease: u64,
    renew_ms: u64,
    retry_ms: u64,
    margin_ms: u64,
) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(lease),
        renew_period: Duration::from_millis(renew_ms),
        retry_period: Duration::from_millis(retry_ms),
        safety_margin: Duration::from_millis(margin_ms),
        ..LeaseConfig::new(NAMESPACE, LEASE, identity)
    }
}

/// A TCP proxy in front of the server that can be cut: from then on it forwards nothing in
/// either direction and keeps every connection open, so requests hang without an answer (a
/// replica cut off from the API server, or paused).
struct Proxy {
    addr: SocketAddr,
    cut: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, cut_seen) = watch::channel(false);
        let accept = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if *cut_seen.borrow() {
                    held.push(inbound);
                    continue;
                }
                let mut cut_seen = cut_seen.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = async { cut_seen.wait_for(|cut| *cut).await.is_ok() } => {
                            // Hold both ends open, silent, until the test's runtime ends.
                            std::future::pending::<()>().await;
                        }
                    }
                });
            }
        });
        Proxy { addr, cut, accept }
    }

    fn cut(&self) {
        self.cut.send_replace(true);
    }
}

async fn leader_within(what: &str, leadership: &Leadership) -> Instant {
    wait_for_within(PATIENCE, what, || async {
        leadership.is_leader().then(Instant::now)
    })
    .await
}

/// Two replicas started together race for a Lease that does not exist yet; from the moment one
/// leads until the Lease has been renewed four times, exactly one of them is the leader at every
/// look, always the same one, and the Lease names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_contenders_have_exactly_one_leader() {
    no_hang(async {
        let cluster = Cluster::start().await;
        // fence after 4 s with a renewal every second: a loaded machine may delay renewals by 3 s.
        let a = cluster.contend(cluster.client(), settings("replica-a", 6, 1000, 1000, 2000));
        let b = cluster.contend(cluster.client(), settings("replica-b", 6, 1000, 1000, 2000));
        let first = wait_for_within(PATIENCE, "one of the replicas to lead", || async {
            match (a.is_leader(), b.is_leader()) {
                (true, true) => panic!("both replicas lead at once"),
                (true, false) => Some("replica-a"),
                (false, true) => Some("replica-b"),
                (false, false) => None,
            }
        })
        .await;
        let mut renewals = BTreeSet::new();
        let mut samples = 0;
        wait_for_ok_within(PATIENCE, "four renewals of the lease", || {
            let (a_leads, b_leads) = (a.is_leader(), b.is_leader());
            samples += 1;
            assert!(
                a_leads != b_leads,
                "sample {samples}: replica-a leads: {a_leads}, replica-b leads: {b_leads}"
            );
            let leader = if a_leads { "replica-a" } else { "replica-b" };
            assert_eq!(leader, first, "the leader changed at sample {samples}");
            let spec = cluster.spec();
            assert_eq!(spec["holderIdentity"], first, "{spec}");
            renewals.insert(spec["renewTime"].as_str().unwrap_or("").to_owned());
            let seen = renewals.len();
            async move {
                if seen > 4 {
                    Ok(())
                } else {
                    Err(format!("{seen} renewTimes seen"))
                }
            }
        })
        .await;
        assert_eq!(cluster.spec()["leaseTransitions"], 0, "{}", cluster.spec());
        assert_eq!(cluster.spec()["leaseDurationSeconds"], 6);
        println!(
            "{first} led alone through {} renewals ({samples} samples)",
            renewals.len() - 1
        );
    })
    .await;
}

/// The leader dies without releasing (its renewal task is aborted, as SIGKILL would): the other
/// replica takes the Lease once it has expired, not before, and within lease duration + renew
/// period + retry period + slack of the death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_replica_takes_over_after_the_leader_dies() {
    no_hang(async {
        let cluster = Cluster::start().await;
        // A 6 s lease renewed every second: replica-a's renewals would have to slip by 5 s on a
        // loaded machine before replica-b could take over while replica-a is alive.
        let (lease, renew, retry) = (6, 1000, 1000);
        let mut a = cluster.contend(cluster.client(), settings("replica-a", lease, renew, retry, 2000));
        a.wait_until_leader().await;
        let b = cluster.contend(cluster.client(), settings("replica-b", lease, renew, retry, 2000));
        // Wait until the lease has been renewed once since replica-b started.
        let renewed = cluster.time("renewTime");
        wait_for("a renewal by replica-a", || async { (cluster.time("renewTime") > renewed).then_some(()) }).await;
        assert!(!b.is_leader());

        // Dropping a Leadership aborts its renewal task and releases nothing.
        let killed = Instant::now();
        drop(a);
        assert_eq!(cluster.holder().as_deref(), Some("replica-a"));
        let last_renewal = cluster.time("renewTime");

        let took_over = leader_within("replica-b to take over", &b).await;
        let takeover = took_over - killed;
        println!("takeover after the leader died: {takeover:?} (lease {lease} s, renew {renew} ms, retry {retry} ms)");
        let bound = Duration::from_secs(lease) + Duration::from_millis(renew + retry) + Duration::from_secs(10);
        assert!(takeover <= bound, "takeover took {takeover:?}, more than {bound:?}");

        let spec = cluster.spec();
        assert_eq!(spec["holderIdentity"], "replica-b", "{spec}");
        assert_eq!(spec["leaseTransitions"], 1, "{spec}");
        let acquired = cluster.time("acquireTime");
        let expiry = last_renewal + SignedDuration::from_secs(lease as i64);
        assert!(
            acquired >= expiry,
            "replica-b acquired the lease at {acquired}, before it expired at {expiry}"
        );
    })
    .await;
}

/// A leader that releases on shutdown hands over at once: the other replica takes the Lease
/// long before it would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_at_once() {
    no_hang(async {
        let cluster = Cluster::start().await;
        // A 10 s lease: an expiry-based takeover would take 9 s or more; a retry every 500 ms.
        let mut a = cluster.contend(cluster.client(), settings("replica-a", 10, 1000, 500, 2000));
        a.wait_until_leader().await;
        let mut b = cluster.contend(cluster.client(), settings("replica-b", 10, 1000, 500, 2000));
        let mut b_leading = b.subscribe();

        let released = Instant::now();
        let last_renewal = cluster.time("renewTime");
        a.release().await.unwrap();
        assert!(!a.is_leader(), "replica-a still leads after release");
        assert!(!*a.subscribe().borrow());
        assert_ne!(cluster.holder().as_deref(), Some("replica-a"), "{}", cluster.spec());

        b.wait_until_leader().await;
        let handover = released.elapsed();
        assert!(*b_leading.borrow_and_update());
        println!("handover after release: {handover:?} (lease 10 s, retry 500 ms)");
        let spec = cluster.spec();
        assert_eq!(spec["holderIdentity"], "replica-b", "{spec}");
        assert_eq!(spec["leaseTransitions"], 1, "{spec}");
        let acquired = cluster.time("acquireTime");
        let expiry = last_renewal + SignedDuration::from_secs(10);
        assert!(
            acquired < expiry,
            "replica-b acquired the lease at {acquired}, not before it expired at {expiry}: release did not hand it over"
        );
        // A second release is harmless and does not touch replica-b's lease.
        a.release().await.unwrap();
        assert_eq!(cluster.holder().as_deref(), Some("replica-b"));
    })
    .await;
}

/// A leader cut off from the API server (its requests hang, no answer ever comes) stops
/// reporting itself the leader within the lease duration, without any answer, and before the
/// other replica becomes the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_is_fenced_before_another_takes_over() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let proxy = Proxy::start(cluster.server.addr()).await;
        let lease = Duration::from_secs(3);
        let mut a = cluster.contend(cluster.client_via(&proxy), settings("replica-a", 3, 1000, 1000, 1000));
        a.wait_until_leader().await;
        let b = cluster.contend(cluster.client(), settings("replica-b", 3, 1000, 1000, 1000));
        let renewed = cluster.time("renewTime");
        wait_for("a renewal by replica-a", || async { (cluster.time("renewTime") > renewed).then_some(()) }).await;

        let cut = Instant::now();
        proxy.cut();
        let mut fence = a.valid_until().expect("replica-a leads");
        let fenced = wait_for_within(PATIENCE, "replica-a to stop leading", || {
            // A renewal answered just before the cut may still move the fence: keep the latest.
            fence = a.valid_until().map_or(fence, |until| until.max(fence));
            let leading = a.is_leader();
            async move { (!leading).then(Instant::now) }
        })
        .await;
        let mut a_leading = a.subscribe();
        a.wait_until_lost().await;
        assert!(!*a_leading.borrow_and_update());
        assert_eq!(cluster.holder().as_deref(), Some("replica-a"), "the lease moved before replica-a was fenced");

        let took_over = leader_within("replica-b to take over", &b).await;
        println!(
            "cut off at 0: replica-a fenced at {:?}, replica-b leader at {:?} (lease 3 s, margin 1 s)",
            fenced - cut,
            took_over - cut
        );
        // The fence is computed, so it is checked rather than the moment a poll saw it pass
        // (which a starved test task can see late).
        assert!(fence - cut < lease, "replica-a could act {:?} after it was cut off", fence - cut);
        assert!(fenced >= fence, "is_leader turned false before the fence it announced");
        assert!(
            fence < took_over,
            "replica-a could act until {:?} after the cut, replica-b led from {:?}",
            fence - cut,
            took_over - cut
        );
        assert!(a.valid_until().is_none());
        assert_eq!(cluster.spec()["leaseTransitions"], 1);
    })
    .await;
}

/// Someone else takes the Lease behind the leader's back (written straight into the server):
/// at its next renewal the leader sees it, steps down instead of overwriting the fresh Lease, and
/// says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_was_taken_steps_down() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let mut a = cluster.contend(cluster.client(), settings("replica-a", 3, 1000, 1000, 1000));
        a.wait_until_leader().await;

        let taken = Instant::now();
        let now = Timestamp::now();
        cluster
            .server
            .merge_patch(
                "coordination.k8s.io/v1",
                "leases",
                NAMESPACE,
                LEASE,
                &json!({"spec": {"holderIdentity": "intruder", "acquireTime": format!("{now:.6}"), "renewTime": format!("{now:.6}"), "leaseTransitions": 1}}),
                false,
            )
            .unwrap();
        a.wait_until_lost().await;
        let noticed = taken.elapsed();
        assert!(!a.is_leader());
        println!("replica-a noticed the lease was taken after {noticed:?} (renew 1 s)");
        // Renewals come every second; the bound only catches a leader that never notices.
        assert!(noticed < Duration::from_secs(30), "replica-a noticed only after {noticed:?}");
        // The intruder's lease is fresh: replica-a did not overwrite it.
        assert_eq!(cluster.holder().as_deref(), Some("intruder"), "{}", cluster.spec());
    })
    .await;
}

/// A leader whose process is paused (its runtime's only thread is blocked, so its renewal task
/// cannot run at all) reports `is_leader() == false` by itself at the fence, within the lease
/// duration of the pause and before the other replica takes over: the answer is computed when
/// asked, not set by the renewal loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_fenced_before_another_takes_over() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let (ready, leadership) = tokio::sync::oneshot::channel();
        let (pause, paused) = tokio::sync::oneshot::channel::<()>();
        let (resume, resumed) = std::sync::mpsc::channel::<()>();
        let config = cluster.config.clone();
        let replica = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let client = Client::try_from(config).unwrap();
                let leadership = Leadership::start(client, settings("replica-a", 3, 1000, 1000, 1000)).unwrap();
                let _ = ready.send(std::sync::Arc::new(leadership));
                let _ = paused.await;
                // Blocks the runtime's only thread: nothing on it runs until resumed.
                let _ = resumed.recv();
            });
        });
        let a = leadership.await.unwrap();
        leader_within("replica-a to lead", &a).await;
        let b = cluster.contend(cluster.client(), settings("replica-b", 3, 1000, 1000, 1000));
        let renewed = cluster.time("renewTime");
        wait_for("a renewal by replica-a", || async { (cluster.time("renewTime") > renewed).then_some(()) }).await;

        let paused_at = Instant::now();
        pause.send(()).unwrap();
        let mut fence = a.valid_until().expect("replica-a leads");
        let fenced = wait_for_within(PATIENCE, "paused replica-a to stop leading", || {
            fence = a.valid_until().map_or(fence, |until| until.max(fence));
            let leading = a.is_leader();
            async move { (!leading).then(Instant::now) }
        })
        .await;
        // Still paused: the renewal loop never ran, yet the fence holds.
        assert!(*a.subscribe().borrow(), "the paused loop announced the loss itself");
        let took_over = leader_within("replica-b to take over", &b).await;
        println!(
            "paused at 0: replica-a fenced at {:?}, replica-b leader at {:?} (lease 3 s, margin 1 s)",
            fenced - paused_at,
            took_over - paused_at
        );
        assert!(
            fence - paused_at < Duration::from_secs(3),
            "replica-a could act {:?} after it was paused",
            fence - paused_at
        );
        assert!(fenced >= fence, "is_leader turned false before the fence it announced");
        assert!(fence < took_over, "replica-a could act until after replica-b led");
        resume.send(()).unwrap();
        replica.join().unwrap();
    })
    .await;
}

/// What the election relies on from the server: a Lease replaced with a resourceVersion that is
/// no longer current gets 409 Conflict and changes nothing; a second create gets 409 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_a_stale_lease_replace() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use kube::api::{Api, PostParams};
    no_hang(async {
        let cluster = Cluster::start().await;
        let api: Api<Lease> = Api::namespaced(cluster.client(), NAMESPACE);
        let mut lease = Lease::default();
        lease.metadata.name = Some(LEASE.into());
        lease.spec = Some(LeaseSpec { holder_identity: Some("one".into()), ..LeaseSpec::default() });
        let created = api.create(&PostParams::default(), &lease).await.unwrap();
        let again = api.create(&PostParams::default(), &lease).await.unwrap_err();
        assert!(matches!(&again, kube::Error::Api(status) if status.code == 409), "{again:?}");
        let mut first = created.clone();
        first.spec.as_mut().unwrap().holder_identity = Some("two".into());
        api.replace(LEASE, &PostParams::default(), &first).await.unwrap();
        let mut stale = created;
        stale.spec.as_mut().unwrap().holder_identity = Some("three".into());
        let refused = api.replace(LEASE, &PostParams::default(), &stale).await.unwrap_err();
        assert!(matches!(&refused, kube::Error::Api(status) if status.code == 409 && status.reason == "Conflict"), "{refused:?}");
        assert_eq!(cluster.holder().as_deref(), Some("two"));
    })
    .await;
}
