//! weir-kube's integration tests, one module per file beside this one, built as one test binary
//! (`cargo nextest run -p weir-kube --test integration compat::` runs one file's tests).

mod argo_analysis;
mod argo_experiments;
mod argo_traffic;
mod basic_canary;
mod chart;
mod compat;
mod leader;
mod retired_meshes;
mod route_crds;
mod store;
mod target;
mod target_daemonset;
mod target_knative;
mod target_providers;
