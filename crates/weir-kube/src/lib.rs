//! weir-kube: weir on Kubernetes.
//!
//! Today: the `rollouts.weir.dev` CustomResourceDefinition, generated from weir-core's own types
//! (`crd`), which `weir crds` prints and `deploy/crds.yaml` holds. The `kubernetes` target, its
//! traffic providers and the operator land here too (issue 11): everything that talks to the
//! Kubernetes API lives in this crate, and weir-core stays free of it. `leader`: leader election
//! for `weir operator` replicas through a `coordination.k8s.io/v1` Lease, with fencing.

#![forbid(unsafe_code)]

pub mod crd;
pub mod flagger;
pub mod leader;
pub mod routes;
pub mod store;
pub mod target;
pub mod workload;
