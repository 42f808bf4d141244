//! The search behind every `--sweep`: the largest count (accelerators, GPUs) for which a trial
//! passes, assuming that passing is monotonic (more load never turns a fail into a pass).
//! Counts double from the start until a trial fails, then the gap between the last pass and the
//! first fail is bisected: about 2·log2(answer) trials instead of one per count.

use anyhow::Result;
use std::future::Future;

/// Outcome of a sweep: every trial in the order run, and the answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SweepOutcome {
    /// (count, passed) for each trial run.
    pub trials: Vec<(usize, bool)>,
    /// The largest count that passed, if any did.
    pub best: Option<usize>,
    /// True when `max` itself passed: the real limit may be higher.
    pub capped: bool,
}

/// Finds the largest `n` in `start..=max` for which `trial(n)` passes.
pub async fn find_max<F, Fut>(start: usize, max: usize, mut trial: F) -> Result<SweepOutcome>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let mut out = SweepOutcome::default();
    let start = start.max(1);
    if start > max {
        return Ok(out);
    }
    // Doubling phase.
    let mut n = start;
    let mut pass_at: Option<usize> = None;
    let fail_at;
    loop {
        let ok = trial(n).await?;
        out.trials.push((n, ok));
        if ok {
            pass_at = Some(n);
            if n == max {
                out.best = Some(n);
                out.capped = true;
                return Ok(out);
            }
            n = (n * 2).min(max);
        } else {
            fail_at = n;
            break;
        }
    }
    let Some(mut lo) = pass_at else {
        return Ok(out);
    };
    // Bisection: lo passes, hi fails.
    let mut hi = fail_at;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let ok = trial(mid).await?;
        out.trials.push((mid, ok));
        if ok {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    out.best = Some(lo);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: usize, max: usize, limit: usize) -> SweepOutcome {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(find_max(start, max, |n| async move { Ok(n <= limit) })).expect("sweep")
    }

    #[test]
    fn finds_the_exact_limit() {
        for limit in 1..=40 {
            let out = run(1, 64, limit);
            assert_eq!(out.best, Some(limit), "limit {limit}: {:?}", out.trials);
            assert!(!out.capped);
            // Never more than about two trials per doubling.
            assert!(out.trials.len() <= 2 * (usize::BITS - limit.leading_zeros()) as usize + 1, "{:?}", out.trials);
        }
    }

    #[test]
    fn nothing_passes_or_everything_does() {
        let none = run(1, 64, 0);
        assert_eq!(none.best, None);
        assert_eq!(none.trials, vec![(1, false)]);
        let all = run(1, 10, 100);
        assert_eq!(all.best, Some(10));
        assert!(all.capped);
        assert_eq!(all.trials, vec![(1, true), (2, true), (4, true), (8, true), (10, true)]);
    }

    #[test]
    fn starts_where_asked() {
        let out = run(4, 64, 6);
        assert_eq!(out.trials[0], (4, true));
        assert_eq!(out.best, Some(6));
        assert_eq!(run(4, 64, 3).best, None);
    }
}
