//! bytes -> document::load -> (every Rollout that validated) plan::dry_run + YAML round-trip.
//!
//! Checks that no input makes weir-core panic (parsing, Flagger conversion, validation, the
//! dry-run simulation, serialization), and that a Rollout that loaded and validated serializes
//! to YAML that loads and validates again.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_core::document::{self, Document};

fuzz_target!(|data: &[u8]| {
    for result in document::load(data) {
        let Ok(loaded) = result else { continue };
        let Document::Rollout(rollout) = &loaded.document else {
            continue;
        };

        // The simulation must finish (it is bounded) without panicking.
        let _timeline = weir_core::plan::dry_run(&rollout.spec, jiff::Timestamp::UNIX_EPOCH);

        // A document that validated must round-trip through weir's own YAML form.
        let yaml = match serde_saphyr::to_string(rollout.as_ref()) {
            Ok(yaml) => yaml,
            Err(error) => panic!(
                "a validated Rollout ({:?} origin) does not serialize to YAML: {error}\n{rollout:#?}",
                loaded.origin
            ),
        };
        let again = document::load(yaml.as_bytes());
        assert_eq!(
            again.len(),
            1,
            "a validated Rollout ({:?} origin) serialized to {} documents:\n{yaml}",
            loaded.origin,
            again.len()
        );
        match &again[0] {
            Ok(reloaded) => assert!(
                matches!(reloaded.document, Document::Rollout(_)),
                "a validated Rollout ({:?} origin) reloaded as another kind:\n{yaml}",
                loaded.origin
            ),
            Err(refused) => panic!(
                "a validated Rollout ({:?} origin) does not load again from its own YAML\n\
                 errors: {:#?}\n--- yaml ---\n{yaml}",
                loaded.origin, refused.errors
            ),
        }
    }
});
