//! The destination leader epoch (DLE) rules: batches keep the source's
//! leader epoch (SLE); the DLE — what our Metadata reports and local writes
//! carry — must stay above it, or destination consumers whose committed
//! offsets carry a source epoch loop on metadata refreshes forever. Whenever
//! SLE > DLE − THRESHOLD the DLE is bumped to SLE + INCREMENT. The three
//! triggers differ only in when the check runs: reactive (a fetched batch
//! already has SLE > DLE: the partition waits in EPOCH_FENCING), proactive
//! (SLE within the threshold: bump in the background while appending),
//! periodic (on every metadata sync).
//!
//! One copy for both planes: the fetcher asks [`bump_needed`] after every
//! append (and reports a due bump), the coordinator applies [`bumped`].

/// How far above the source epoch a bump puts the destination epoch.
pub const INCREMENT: i32 = 10;
/// How close the source's leader epoch may come to the destination epoch
/// before a bump is due (KIP-1279's threshold).
pub const THRESHOLD: i32 = 3;

/// Why a bump is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A batch's epoch is above the destination epoch: appending stops
    /// until the bump lands.
    Reactive,
    /// The source epoch came within the threshold.
    Proactive,
}

/// What the rules say for a source epoch `sle` against the destination
/// epoch `dle`: `None` when nothing is due, else the trigger and the minimum
/// the new destination epoch must exceed.
pub fn bump_needed(sle: i32, dle: i32) -> Option<(Trigger, i32)> {
    // -1: the source has no epoch for the partition (nothing to stay above).
    if sle < 0 {
        return None;
    }
    let min = sle.saturating_add(INCREMENT - 1);
    if sle > dle {
        Some((Trigger::Reactive, min))
    } else if sle > dle.saturating_sub(THRESHOLD) {
        Some((Trigger::Proactive, min))
    } else {
        None
    }
}

/// Applies a bump with minimum `min` to the current epoch: `max(min + 1,
/// current)`, so a bump never lowers an epoch and a late one is a no-op.
pub fn bumped(current: i32, min: i32) -> i32 {
    current.max(min.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (SLE, DLE) → expected (trigger, new DLE), or no bump.
    type Case = (i32, i32, Option<(Trigger, i32)>);

    #[test]
    fn the_rules_table() {
        let cases: &[Case] = &[
            // Reactive: the source is ahead.
            (5, 0, Some((Trigger::Reactive, 15))),
            (12, 11, Some((Trigger::Reactive, 22))),
            // Proactive: within the threshold of 3.
            (11, 11, Some((Trigger::Proactive, 21))),
            (9, 11, Some((Trigger::Proactive, 19))),
            // Far enough below: nothing to do.
            (8, 11, None),
            (0, 10, None),
            (-1, 0, None),
        ];
        for &(sle, dle, expected) in cases {
            let got = bump_needed(sle, dle).map(|(trigger, min)| (trigger, bumped(dle, min)));
            assert_eq!(got, expected, "SLE {sle}, DLE {dle}");
            if let Some((_, new)) = got {
                assert!(
                    new > sle + THRESHOLD - 1,
                    "after a bump the source is out of the threshold"
                );
                assert_eq!(bump_needed(sle, new), None, "a bump settles it");
            }
        }
    }

    #[test]
    fn bumps_never_lower_an_epoch() {
        // A late or repeated bump (the periodic check racing a reactive
        // one) is a no-op.
        assert_eq!(bumped(30, 14), 30);
        assert_eq!(bumped(15, 14), 15);
        assert_eq!(bumped(3, 14), 15);
    }
}
