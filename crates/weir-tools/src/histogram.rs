//! A log-linear latency histogram in microseconds: exact below 128 µs, then 64 linear
//! sub-buckets per power of two (at most 1.6% relative error), covering the whole `u64` range
//! in a fixed 30 KiB array.

const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS; // 64
const LINEAR: u64 = 2 * SUB; // values below this are exact
const BUCKETS: usize = ((64 - SUB_BITS as usize - 1) + 1) * SUB as usize + SUB as usize;

#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    max: u64,
    sum: u128,
}

impl Histogram {
    pub(crate) fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            max: 0,
            sum: 0,
        }
    }

    pub(crate) fn record(&mut self, micros: u64) {
        let index = index_of(micros);
        if let Some(slot) = self.counts.get_mut(index) {
            *slot += 1;
        }
        self.count += 1;
        self.max = self.max.max(micros);
        self.sum += u128::from(micros);
    }

    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    pub(crate) fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The smallest bucket upper bound below which at least `quantile` of the values fall,
    /// capped at the exact maximum. 0 when empty.
    pub(crate) fn quantile(&self, quantile: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return upper_bound(index).min(self.max);
            }
        }
        self.max
    }
}

fn index_of(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros(); // >= 7
    let shift = exponent - SUB_BITS;
    let mantissa = value >> shift; // in [64, 128)
    (u64::from(shift) * SUB + mantissa) as usize
}

fn upper_bound(index: usize) -> u64 {
    let index = index as u64;
    if index < LINEAR {
        return index;
    }
    let shift = index / SUB - 1;
    let mantissa = index % SUB + SUB;
    ((mantissa + 1) << shift).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_bounded() {
        assert_eq!(index_of(127), 127);
        assert_eq!(index_of(128), 128);
        assert_eq!(index_of(255), 191);
        assert_eq!(index_of(256), 192);
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
        for value in [0, 1, 127, 128, 129, 1000, 65_535, 1_000_000, u64::MAX / 3] {
            let bound = upper_bound(index_of(value));
            assert!(bound >= value, "{value} -> {bound}");
            assert!(
                (bound - value) as f64 <= value as f64 * 0.016 + 1.0,
                "{value}"
            );
        }
    }

    #[test]
    fn quantiles() {
        let mut histogram = Histogram::new();
        assert_eq!(histogram.quantile(0.5), 0);
        for value in 1..=1000 {
            histogram.record(value);
        }
        assert_eq!(histogram.count(), 1000);
        assert_eq!(histogram.max(), 1000);
        let p50 = histogram.quantile(0.5);
        assert!((500..=508).contains(&p50), "{p50}");
        let p99 = histogram.quantile(0.99);
        assert!((990..=1000).contains(&p99), "{p99}");
        assert_eq!(histogram.quantile(1.0), 1000);
        assert!((histogram.mean() - 500.5).abs() < 1e-9);
    }
}
