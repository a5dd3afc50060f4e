//! Judging a run against the truth.
//!
//! A run is [`Verdict::Exact`] when the store's final total equals the true total (each
//! distinct message applied once), [`Verdict::Over`] when duplicates inflated it and
//! [`Verdict::Under`] when events were lost.

/// How a final total compares with the true total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Equal to the true total.
    Exact,
    /// Above the true total by this much.
    Over(i64),
    /// Below the true total by this much.
    Under(i64),
}

impl Verdict {
    /// Compares `final_total` with `true_total`.
    pub fn of(final_total: i64, true_total: i64) -> Self {
        match final_total.wrapping_sub(true_total) {
            0 => Self::Exact,
            d if d > 0 => Self::Over(d),
            d => Self::Under(d.wrapping_neg()),
        }
    }

    /// `exact`, `over` or `under`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Over(_) => "over",
            Self::Under(_) => "under",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(Verdict::of(110, 100), Verdict::Over(10));
        assert_eq!(Verdict::of(96, 100), Verdict::Under(4));
        assert_eq!(Verdict::of(8, 8), Verdict::Exact);
        assert_eq!(Verdict::Under(4).name(), "under");
    }
}
