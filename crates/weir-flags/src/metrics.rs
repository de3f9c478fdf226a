//! Flags' counters as weir's own metrics (`weir_flag_*`, labels `namespace`, `flag`,
//! `variant`), read at scrape time from the snapshot's counters: nothing is copied between
//! scrapes, and a scrape is as fresh as the last evaluation.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use weir_engine::telemetry::ScrapedMetrics;

use crate::Snapshot;

/// The flags' exposures and reported outcomes, for weir's `/metrics`.
pub(crate) struct FlagMetrics {
    snapshot: Arc<ArcSwap<Snapshot>>,
}

impl FlagMetrics {
    pub(crate) fn new(snapshot: Arc<ArcSwap<Snapshot>>) -> FlagMetrics {
        FlagMetrics { snapshot }
    }
}

impl fmt::Debug for FlagMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlagMetrics").finish_non_exhaustive()
    }
}

/// Which count of a variation a family shows.
type Count = fn(&crate::VariationCounts) -> u64;

/// The families, each a counter per flag and variant: name, help, which count.
const FAMILIES: [(&str, &str, Count); 3] = [
    (
        "weir_flag_exposures",
        "OFREP evaluations that served this variant since the server started.",
        |counts| counts.exposures,
    ),
    (
        "weir_flag_reported_requests",
        "Requests applications reported for this variant (POST .../outcomes) since the server started.",
        |counts| counts.requests,
    ),
    (
        "weir_flag_reported_errors",
        "Errors applications reported for this variant since the server started.",
        |counts| counts.errors,
    ),
];

impl ScrapedMetrics for FlagMetrics {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let snapshot = self.snapshot.load();
        let flags: Vec<_> = snapshot
            .all()
            .map(|entry| (entry, entry.counters.read()))
            .collect();
        if flags.is_empty() {
            return Ok(());
        }
        for (name, help, count) in FAMILIES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (entry, counts) in &flags {
                for (variant, counts) in counts {
                    let labels = [
                        ("namespace", entry.stored.key.namespace.as_str()),
                        ("flag", entry.stored.key.key.as_str()),
                        ("variant", variant.as_str()),
                    ];
                    family
                        .encode_family(&labels)?
                        .encode_counter::<NoLabelSet, _, u64>(&count(counts), None)?;
                }
            }
        }
        Ok(())
    }
}
