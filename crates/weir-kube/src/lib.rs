//! weir-kube: weir on Kubernetes.
//!
//! Everything that talks to the Kubernetes API lives here, and weir-core stays free of it:
//! `crd` (the `rollouts.weir.dev` CRD generated from weir-core's types, which `weir crds` prints
//! and `deploy/crds.yaml` holds), `workload` and `routes` (Flagger's objects and the traffic
//! providers' routes, pure), `target` (the `kubernetes` target that applies them), `store` (the
//! engine's state in each rollout's status), `flagger` (a Canary as the Rollout it owns, and
//! Flagger's status shape), `leader` (leader election through a Lease, with fencing),
//! `status_to` (a rollout's status written onto an object the user names, e.g. an OAM
//! Application), `basic_canary` (the canary without a mesh: replica counts that split traffic
//! by pod ratio, as Argo Rollouts' basic canary does; pure), `controller` (the operator's loop:
//! watch -> reconcile -> error policy over rollouts, Flagger's Canaries and its catalog objects,
//! and status changes published as Kubernetes Events), `metrics` (metric providers that read
//! Kubernetes APIs: `externalmetrics`, `keptn`).

#![forbid(unsafe_code)]

pub mod argo_analysis;
pub mod argo_experiments;
pub mod argo_rollouts;
pub mod argo_shell;
pub mod argo_traffic;
pub mod basic_canary;
pub mod controller;
pub mod crd;
pub mod flagger;
pub mod leader;
pub mod metrics;
pub mod routes;
pub mod status_to;
pub mod store;
pub mod target;
pub mod workload;
