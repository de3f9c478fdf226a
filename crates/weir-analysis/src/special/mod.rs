//! Special functions: log-gamma, log-beta and the regularized incomplete beta function.
//!
//! Implemented here (Lanczos approximation, Lentz's continued fraction) to keep the dependency
//! tree small; tested against known values in `tests.rs`.

#[cfg(test)]
mod tests;

use std::f64::consts::PI;

/// Lanczos coefficients for g = 7, n = 9 (relative accuracy ~1e-15 for x > 0).
const LANCZOS_G: f64 = 7.0;
const LANCZOS: [f64; 9] = [
    0.999_999_999_999_809_9,
    676.520_368_121_885_1,
    -1_259.139_216_722_402_8,
    771.323_428_777_653_1,
    -176.615_029_162_140_6,
    12.507_343_278_686_905,
    -0.138_571_095_265_720_12,
    9.984_369_578_019_572e-6,
    1.505_632_735_149_311_6e-7,
];

/// ln |Gamma(x)| for x > 0 (and by reflection for non-integer x < 0.5); NaN for NaN,
/// +inf at the poles (0, -1, -2, ...).
pub fn ln_gamma(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.5 {
        // Reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x).
        let s = (PI * x).sin().abs();
        if s == 0.0 {
            return f64::INFINITY;
        }
        return (PI / s).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = LANCZOS[0];
    for (i, c) in LANCZOS.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    let t = x + LANCZOS_G + 0.5;
    0.5 * (2.0 * PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// ln B(a, b) = ln Gamma(a) + ln Gamma(b) - ln Gamma(a + b), for a, b > 0.
pub fn ln_beta(a: f64, b: f64) -> f64 {
    ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b)
}

/// The regularized incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0
/// and x in [0, 1] (clamped).
pub fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    ln_regularized_incomplete_beta(x, a, b).exp()
}

/// ln I_x(a, b), accurate also when I_x(a, b) is tiny (the left tail is computed directly,
/// never as 1 minus something).
pub(crate) fn ln_regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x.is_nan() || a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    if x <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if x >= 1.0 {
        return 0.0;
    }
    // I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * cf(x; a, b), which converges fast for
    // x < (a + 1) / (a + b + 2); otherwise use I_x(a, b) = 1 - I_{1-x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front(x, a, b) + continued_fraction(x, a, b).ln() - a.ln()
    } else {
        let other = ln_front(1.0 - x, b, a) + continued_fraction(1.0 - x, b, a).ln() - b.ln();
        ln_one_minus_exp(other)
    }
}

/// ln(x^a (1-x)^b / B(a, b)).
fn ln_front(x: f64, a: f64, b: f64) -> f64 {
    a * x.ln() + b * (-x).ln_1p() - ln_beta(a, b)
}

/// ln(1 - e^v) for v <= 0, accurate on both ends.
pub(crate) fn ln_one_minus_exp(v: f64) -> f64 {
    if v >= 0.0 {
        f64::NEG_INFINITY
    } else if v > -std::f64::consts::LN_2 {
        (-v.exp_m1()).ln()
    } else {
        (-v.exp()).ln_1p()
    }
}

/// The continued fraction of the incomplete beta function (modified Lentz's method).
fn continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    // Converges in O(sqrt(max(a, b))) iterations; the cap is far above what any count here needs.
    for m in 1..=10_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// The x in [0, 1] with I_x(a, b) = p (bisection; I_x is increasing in x).
pub(crate) fn inverse_regularized_incomplete_beta(p: f64, a: f64, b: f64) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if regularized_incomplete_beta(mid, a, b) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// ln(sum(exp(v))) without overflow; -inf for an empty slice.
pub(crate) fn log_sum_exp(values: impl IntoIterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().into_iter().fold(f64::NEG_INFINITY, f64::max);
    if max.is_infinite() {
        return max;
    }
    max + values
        .into_iter()
        .map(|v| (v - max).exp())
        .sum::<f64>()
        .ln()
}
