//! The verdict of a `kafka consume` over its partitions' results.

use idem_sim::check::Verdict;

/// The verdict no figure of the broker's can back: a partition's records passed its end
/// offset.
pub const UNVERIFIED: &str = "unverified";

/// The verdict of a `kafka consume`: the store's `total` against the true total `truth`
/// of the distinct message ids read (`exact`, `over` or `under`), unless a partition's
/// records passed the broker's end offset (one `true` in `short_reads`): `unverified`.
pub fn verdict(
    short_reads: impl IntoIterator<Item = bool>,
    total: i64,
    truth: i64,
) -> &'static str {
    if short_reads.into_iter().any(|short| short) {
        UNVERIFIED
    } else {
        Verdict::of(total, truth).name()
    }
}

/// The partitions' figures added up, or none when they pass a 64-bit total.
pub fn sum(figures: impl IntoIterator<Item = i64>) -> Option<i64> {
    figures.into_iter().try_fold(0i64, i64::checked_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_against_the_truth() {
        assert_eq!(verdict([false, false], 8, 8), "exact");
        assert_eq!(verdict([false], 13, 8), "over");
        assert_eq!(verdict([false, false, false], 5, 8), "under");
        assert_eq!(verdict([], 0, 0), "exact");
    }

    #[test]
    fn one_short_read_makes_it_unverified() {
        assert_eq!(verdict([false, true], 8, 8), UNVERIFIED);
        assert_eq!(verdict([true], 13, 8), "unverified");
    }

    #[test]
    fn the_partitions_add_up_within_64_bits() {
        assert_eq!(sum([5, 3, -2]), Some(6));
        assert_eq!(sum([]), Some(0));
        assert_eq!(sum([i64::MAX, 1]), None);
        assert_eq!(sum([i64::MIN, -1]), None);
        assert_eq!(
            sum([i64::MAX, 1, -1]),
            None,
            "the sum passes the bound on its way"
        );
    }
}
