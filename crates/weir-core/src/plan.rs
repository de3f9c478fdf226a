//! Dry-run plans.
