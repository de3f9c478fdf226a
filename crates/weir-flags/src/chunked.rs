//! The snapshot's map of flags: ordered by key, immutable, and cheap to change as a copy.
//!
//! Every change of a flag (a person's edit, and every step of a flag rollout) publishes a new
//! snapshot. Copying a `BTreeMap` of every flag for that costs time in proportion to the number
//! of flags - at 10,000 flags that copy, not the store, was what a step cost. Here the entries
//! sit in sorted chunks of at most [`MAX_CHUNK`], each behind an `Arc`: a copy with one flag
//! changed shares every chunk but the one holding it, so a change copies that chunk and the list
//! of chunk pointers (about `n / 64` of them), and a lookup is two binary searches.

use std::sync::Arc;

use weir_store::FlagKey;

/// The most entries a chunk holds; a fuller one is split in two.
const MAX_CHUNK: usize = 128;

/// An ordered, immutable map of flag keys to `V`, shared chunk by chunk between copies.
#[derive(Debug, Clone)]
pub(crate) struct ChunkedMap<V> {
    /// Non-empty chunks, each sorted by key; every key of a chunk sorts before every key of the
    /// next one.
    chunks: Vec<Arc<Vec<(FlagKey, V)>>>,
}

impl<V> Default for ChunkedMap<V> {
    fn default() -> Self {
        ChunkedMap { chunks: Vec::new() }
    }
}

impl<V: Clone> ChunkedMap<V> {
    /// A map of `entries` (in any order; of equal keys the last one counts).
    pub(crate) fn from_entries(mut entries: Vec<(FlagKey, V)>) -> ChunkedMap<V> {
        entries.reverse();
        // Stable: of equal keys, the last one given comes first now and is kept.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        let mut chunks = Vec::new();
        let mut rest = entries.into_iter().peekable();
        while rest.peek().is_some() {
            let chunk: Vec<(FlagKey, V)> = rest.by_ref().take(MAX_CHUNK / 2).collect();
            chunks.push(Arc::new(chunk));
        }
        ChunkedMap { chunks }
    }

    /// The chunk that holds `key` or would: the last one whose first key is not after it.
    fn chunk_of(&self, key: &FlagKey) -> usize {
        self.chunks
            .partition_point(|chunk| chunk.first().is_some_and(|(first, _)| first <= key))
            .saturating_sub(1)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &FlagKey) -> Option<&V> {
        let chunk = self.chunks.get(self.chunk_of(key))?;
        let index = chunk.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        chunk.get(index).map(|(_, value)| value)
    }

    /// A copy of this map with `key` set to `value`, or removed when `value` is `None`.
    pub(crate) fn with(&self, key: FlagKey, value: Option<V>) -> ChunkedMap<V> {
        let mut chunks = self.chunks.clone();
        if chunks.is_empty() {
            if let Some(value) = value {
                chunks.push(Arc::new(vec![(key, value)]));
            }
            return ChunkedMap { chunks };
        }
        let at = self.chunk_of(&key);
        let mut chunk: Vec<(FlagKey, V)> = chunks[at].as_ref().clone();
        match (chunk.binary_search_by(|(k, _)| k.cmp(&key)), value) {
            (Ok(index), Some(value)) => chunk[index].1 = value,
            (Ok(index), None) => {
                chunk.remove(index);
            }
            (Err(index), Some(value)) => chunk.insert(index, (key, value)),
            (Err(_), None) => return self.clone(),
        }
        if chunk.is_empty() {
            chunks.remove(at);
        } else if chunk.len() > MAX_CHUNK {
            let tail = chunk.split_off(chunk.len() / 2);
            chunks[at] = Arc::new(chunk);
            chunks.insert(at + 1, Arc::new(tail));
        } else {
            chunks[at] = Arc::new(chunk);
        }
        ChunkedMap { chunks }
    }

    /// The entries from `from` on, in key order.
    pub(crate) fn range_from<'a>(
        &'a self,
        from: &FlagKey,
    ) -> impl Iterator<Item = (&'a FlagKey, &'a V)> + use<'a, V> {
        let at = self.chunk_of(from);
        let skip = self
            .chunks
            .get(at)
            .map_or(0, |chunk| chunk.partition_point(|(key, _)| key < from));
        self.chunks
            .iter()
            .skip(at)
            .flat_map(|chunk| chunk.iter())
            .skip(skip)
            .map(|(key, value)| (key, value))
    }

    /// Every entry, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&FlagKey, &V)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .map(|(key, value)| (key, value))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn key(namespace: u32, index: u32) -> FlagKey {
        FlagKey::new(format!("ns{namespace}"), format!("f{index:05}"))
    }

    /// A small deterministic generator (SplitMix64), so a failure replays.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE5_E9B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn entries(map: &ChunkedMap<u64>) -> Vec<(FlagKey, u64)> {
        map.iter()
            .map(|(key, value)| (key.clone(), *value))
            .collect()
    }

    fn entries_of(model: &BTreeMap<FlagKey, u64>) -> Vec<(FlagKey, u64)> {
        model
            .iter()
            .map(|(key, value)| (key.clone(), *value))
            .collect()
    }

    #[test]
    fn it_behaves_as_an_ordered_map_under_random_changes_and_copies_share_the_rest() {
        let mut state = 7;
        let mut model: BTreeMap<FlagKey, u64> = BTreeMap::new();
        let mut map: ChunkedMap<u64> = ChunkedMap::default();
        for round in 0..20_000u64 {
            let draw = next(&mut state);
            let key = key((draw % 3) as u32, ((draw >> 8) % 700) as u32);
            let (map_before, model_before) = (map.clone(), model.clone());
            if draw.is_multiple_of(5) {
                model.remove(&key);
                map = map.with(key, None);
            } else {
                model.insert(key.clone(), round);
                map = map.with(key, Some(round));
            }
            if round.is_multiple_of(997) {
                assert_eq!(entries(&map), entries_of(&model), "round {round}");
                // The copy taken before the change did not move.
                assert_eq!(entries(&map_before), entries_of(&model_before));
                for chunk in &map.chunks {
                    assert!(!chunk.is_empty() && chunk.len() <= MAX_CHUNK);
                }
            }
        }
        assert!(map.chunks.len() > 10, "{} chunks", map.chunks.len());
        for namespace in 0..4 {
            for index in [0, 1, 350, 699, 700] {
                let probe = key(namespace, index);
                assert_eq!(map.get(&probe), model.get(&probe), "{probe}");
                let from: Vec<&FlagKey> = map.range_from(&probe).map(|(k, _)| k).collect();
                let expected: Vec<&FlagKey> =
                    model.range(probe.clone()..).map(|(k, _)| k).collect();
                assert_eq!(from, expected, "from {probe}");
            }
        }
    }

    #[test]
    fn a_change_leaves_the_map_it_was_made_from_as_it_was() {
        let map = ChunkedMap::from_entries((0..1000).map(|index| (key(0, index), index)).collect());
        let changed = map.with(key(0, 500), Some(9999)).with(key(0, 7), None);
        assert_eq!(map.get(&key(0, 500)), Some(&500));
        assert_eq!(map.get(&key(0, 7)), Some(&7));
        assert_eq!(changed.get(&key(0, 500)), Some(&9999));
        assert_eq!(changed.get(&key(0, 7)), None);
        // Only the chunks holding the changed keys were copied.
        let shared = map
            .chunks
            .iter()
            .filter(|chunk| changed.chunks.iter().any(|other| Arc::ptr_eq(chunk, other)))
            .count();
        assert_eq!(shared, map.chunks.len() - 2);
    }

    #[test]
    fn of_equal_keys_given_at_once_the_last_counts() {
        let map = ChunkedMap::from_entries(vec![(key(0, 1), 1), (key(0, 1), 2), (key(0, 0), 0)]);
        let all: Vec<u64> = map.iter().map(|(_, value)| *value).collect();
        assert_eq!(all, vec![0, 2]);
    }
}
