//! Exact two-sample rank statistics: the Mann-Whitney and Kolmogorov-Smirnov tests, and the
//! Hodges-Lehmann shift with its distribution-free (Moses) confidence interval.
//!
//! Everything is exact at any sample size, ties included, by counting arrangements with
//! dynamic programming instead of enumerating or sampling them: a boot costs tens of seconds,
//! so the lab compares 3 to about 30 samples a side, where normal approximations are poor and
//! enumeration (C(40, 20) = 1.4e11 splits) is too slow. Written here because no well-kept Rust
//! crate offers exact two-sample tests with ties (statrs has distributions, not tests); the
//! counting recursions are the textbook ones (Mann and Whitney 1947; for the KS lattice with
//! ties, Schröer and Trenkler 1995), each checked against hand counts in the tests below.
//! Counts are kept as `f64`: exact up to 2^53 and within 1e-15 relative beyond, so
//! probabilities are exact to the digits a table shows.

/// Ranks 1..=n of the values, ties getting the mean of the ranks they span, doubled so that
/// every midrank is an integer.
fn doubled_midranks(values: &[f64]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        // Ranks start+1..=end share their mean (start+1+end)/2; doubled, an integer.
        let doubled = (start + 1 + end) as u64;
        for &i in &order[start..end] {
            ranks[i] = doubled;
        }
        start = end;
    }
    ranks
}

/// C(n, k) as f64 (exact while it fits 53 bits).
pub fn choose(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64)
}

/// [`subset_sum_counts`] remembered per thread: a comparison's looks and `lab bench`'s
/// hundreds of thousands of simulated ones ask for the same few null distributions again and
/// again (without ties they depend only on the sample sizes). Bounded: the memory is dropped
/// when it holds too many.
fn remembered_counts(weights: &[u64], k: usize) -> std::rc::Rc<Vec<f64>> {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::rc::Rc;
    type Memory = HashMap<(Vec<u64>, usize), Rc<Vec<f64>>>;
    thread_local! {
        static MEMORY: RefCell<Memory> = RefCell::new(HashMap::new());
    }
    const MOST: usize = 4096;
    let mut key = weights.to_vec();
    key.sort_unstable();
    let key = (key, k);
    if let Some(hit) = MEMORY.with(|m| m.borrow().get(&key).cloned()) {
        return hit;
    }
    let counts = Rc::new(subset_sum_counts(&key.0, k));
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() >= MOST {
            m.clear();
        }
        m.insert(key, Rc::clone(&counts));
    });
    counts
}

/// How many `k`-subsets of `weights` have each total weight: `counts[s]` for total `s`.
fn subset_sum_counts(weights: &[u64], k: usize) -> Vec<f64> {
    let max_total: u64 = {
        let mut w = weights.to_vec();
        w.sort_unstable_by(|a, b| b.cmp(a));
        w.iter().take(k).sum()
    };
    let width = max_total as usize + 1;
    // by_size[j][s]: j-subsets of the weights seen so far summing to s.
    let mut by_size = vec![vec![0.0_f64; width]; k + 1];
    by_size[0][0] = 1.0;
    for (seen, &w) in weights.iter().enumerate() {
        let w = w as usize;
        for j in (1..=k.min(seen + 1)).rev() {
            let (lower, upper) = by_size.split_at_mut(j);
            let (from, to) = (&lower[j - 1], &mut upper[0]);
            for s in (w..width).rev() {
                if from[s - w] != 0.0 {
                    to[s] += from[s - w];
                }
            }
        }
    }
    by_size.swap_remove(k)
}

/// Two-sided exact Mann-Whitney (Wilcoxon rank-sum) p-value of `a` against `b`: the share of
/// all C(n, n_a) splits of the pooled samples whose rank sum for the first group lies at least
/// as far from its expectation as the observed one. Ties get midranks and are counted exactly.
/// 1.0 when either side is empty.
pub fn mann_whitney_p(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let ranks = doubled_midranks(&pooled);
    let (n, k) = (pooled.len(), a.len());
    let observed: u64 = ranks[..k].iter().sum();
    // Expected doubled rank sum: k * (n + 1).
    let expected = (k * (n + 1)) as i64;
    let deviation = (observed as i64 - expected).abs();
    let counts = remembered_counts(&ranks, k);
    let extreme: f64 = counts
        .iter()
        .enumerate()
        .filter(|(s, _)| (*s as i64 - expected).abs() >= deviation)
        .map(|(_, c)| c)
        .sum();
    (extreme / choose(n, k)).min(1.0)
}

/// Two-sided exact two-sample Kolmogorov-Smirnov p-value: the share of splits whose largest gap
/// between the two empirical distribution functions is at least the observed one. With ties
/// the functions are compared only where the pooled values change, as the statistic is defined.
/// 1.0 when either side is empty.
pub fn kolmogorov_smirnov_p(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let (na, nb) = (a.len(), b.len());
    // Groups of equal pooled values, in order: (size, how many of them are a's).
    let mut labelled: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    labelled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    while start < labelled.len() {
        let mut end = start + 1;
        while end < labelled.len() && labelled[end].0 == labelled[start].0 {
            end += 1;
        }
        let of_a = labelled[start..end]
            .iter()
            .filter(|(_, is_a)| *is_a)
            .count();
        groups.push((end - start, of_a));
        start = end;
    }
    // The gap |i/na - j/nb| scaled by na*nb: an integer, so comparisons are exact.
    let gap = |i: usize, j: usize| (i as i64 * nb as i64 - j as i64 * na as i64).abs();
    let (mut i, mut j, mut observed) = (0, 0, 0);
    for &(size, of_a) in &groups {
        i += of_a;
        j += size - of_a;
        observed = observed.max(gap(i, j));
    }
    if observed == 0 {
        return 1.0;
    }
    // Splits of the groups so far with i a's: `inside` kept the gap below the observed one at
    // every group boundary, `crossed` reached it somewhere (counted directly, not as
    // total - inside, so a p of 1e-11 keeps its digits).
    let mut inside = vec![0.0_f64; na + 1];
    let mut crossed = vec![0.0_f64; na + 1];
    inside[0] = 1.0;
    let mut seen = 0;
    for &(size, _) in &groups {
        let mut next_inside = vec![0.0_f64; na + 1];
        let mut next_crossed = vec![0.0_f64; na + 1];
        for i0 in 0..=na {
            let (ways_in, ways_out) = (inside[i0], crossed[i0]);
            if ways_in == 0.0 && ways_out == 0.0 {
                continue;
            }
            for x in 0..=size.min(na - i0) {
                let (i1, j1) = (i0 + x, seen + size - i0 - x);
                if j1 > nb {
                    continue;
                }
                let ways = choose(size, x);
                next_crossed[i1] += ways_out * ways;
                if gap(i1, j1) >= observed {
                    next_crossed[i1] += ways_in * ways;
                } else {
                    next_inside[i1] += ways_in * ways;
                }
            }
        }
        seen += size;
        inside = next_inside;
        crossed = next_crossed;
    }
    (crossed[na] / choose(na + nb, na)).clamp(0.0, 1.0)
}

/// The Hodges-Lehmann estimate of how far `b` lies above `a`: the median of all pairwise
/// differences b_j - a_i. `None` when either side is empty.
pub fn shift_estimate(a: &[f64], b: &[f64]) -> Option<f64> {
    let d = pairwise_differences(a, b);
    if d.is_empty() {
        return None;
    }
    let m = d.len();
    Some(if m % 2 == 1 {
        d[m / 2]
    } else {
        d[m / 2 - 1] / 2.0 + d[m / 2] / 2.0
    })
}

/// The sorted differences b_j - a_i over all pairs.
fn pairwise_differences(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut d: Vec<f64> = b
        .iter()
        .flat_map(|y| a.iter().map(move |x| y - x))
        .collect();
    d.sort_by(f64::total_cmp);
    d
}

/// A confidence interval of the shift from `a` to `b` and the confidence it really has (the
/// rank statistic is discrete, so it is the smallest available level at or above the one asked).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShiftInterval {
    /// The lower end.
    pub low: f64,
    /// The upper end.
    pub high: f64,
    /// The confidence it really has.
    pub confidence: f64,
}

/// The distribution-free confidence interval of the shift (Moses): the k-th smallest and k-th
/// largest pairwise difference, k from the exact null distribution of the Mann-Whitney U, so
/// that it covers the true shift with at least `confidence` whatever the distribution (exactly
/// for continuous data; ties make it conservative). It is the set of shifts the two-sided
/// Mann-Whitney test at 1 - `confidence` does not reject, so its ends are always differences
/// of real samples and stay inside what the metric can take. `None` when the samples are too
/// few for that confidence (3 a side give at most 90%, 4 a side 97.1%).
pub fn shift_interval(a: &[f64], b: &[f64], confidence: f64) -> Option<ShiftInterval> {
    let (m, n) = (a.len(), b.len());
    if m == 0 || n == 0 || !(0.0..1.0).contains(&confidence) {
        return None;
    }
    // Null distribution of U without ties: rank sums of m-subsets of 1..=m+n, shifted.
    let ranks: Vec<u64> = (1..=(m + n) as u64).collect();
    let counts = remembered_counts(&ranks, m);
    let offset = m * (m + 1) / 2;
    let total = choose(m + n, m);
    let tail = (1.0 - confidence) / 2.0;
    // Largest k with P(U <= k - 1) <= tail.
    let mut cumulative = 0.0;
    let mut k = 0;
    for u in 0..=(m * n) {
        cumulative += counts.get(u + offset).copied().unwrap_or(0.0) / total;
        if cumulative > tail * (1.0 + 1e-12) {
            break;
        }
        k = u + 1;
    }
    if k == 0 || 2 * k > m * n {
        return None;
    }
    let below: f64 = (0..k)
        .map(|u| counts.get(u + offset).copied().unwrap_or(0.0) / total)
        .sum();
    let d = pairwise_differences(a, b);
    Some(ShiftInterval {
        low: d[k - 1],
        high: d[m * n - k],
        confidence: 1.0 - 2.0 * below,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn mann_whitney_hand_counts() {
        // 3 vs 3 apart: the observed split and its mirror of C(6,3) = 20.
        assert!(close(
            mann_whitney_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]),
            0.1
        ));
        // 5 vs 5 apart: 2 / 252, the smallest two-sided p below 0.01 with equal sides.
        let low = [1.0, 2.0, 3.0, 4.0, 5.0];
        let high = [6.0, 7.0, 8.0, 9.0, 10.0];
        assert!(close(mann_whitney_p(&low, &high), 2.0 / 252.0));
        // Ranks of a {2,3,4,5} = 14 against 18 expected; of the 70 four-subsets of 1..=8, 12
        // sum to <= 14 and 12 to >= 22.
        assert!(close(
            mann_whitney_p(&[10.0, 11.0, 12.0, 13.0], &[14.0, 15.0, 16.0, -100.0]),
            24.0 / 70.0
        ));
        // Identical samples: every split is as extreme.
        assert_eq!(mann_whitney_p(&[3.0; 4], &[3.0; 4]), 1.0);
        assert_eq!(mann_whitney_p(&[], &[1.0]), 1.0);
    }

    #[test]
    fn mann_whitney_counts_ties_exactly() {
        // Pooled {0,0,0,1,1,1}, a = {0,0,0}: doubled midranks 4,4,4,10,10,10; a's sum 12 is
        // the minimum, reached only by a = the three zeros (1 split), its mirror 30 by 1:
        // 2 of 20.
        assert!(close(
            mann_whitney_p(&[0.0, 0.0, 0.0], &[1.0, 1.0, 1.0]),
            0.1
        ));
        // {0,0,1} vs {0,1,1}: doubled ranks 0s -> 4 (three of them: ranks 1-3), 1s -> 10.
        // a's sum 18, expected 21, deviation 3: sums 12 (1 split), 18 (9), 24 (9), 30 (1)
        // are all at least 3 away: p = 1.
        assert_eq!(mann_whitney_p(&[0.0, 0.0, 1.0], &[0.0, 1.0, 1.0]), 1.0);
        // {0,0,0,0} vs {0,0,0,1}: the 1 (doubled rank 16) lies in a in 4 of 8 subsets... the
        // split is as extreme as any: p = 1.
        assert_eq!(mann_whitney_p(&[0.0; 4], &[0.0, 0.0, 0.0, 1.0]), 1.0);
    }

    #[test]
    fn kolmogorov_smirnov_hand_counts() {
        // Apart: only the two fully separated splits reach D = 1.
        assert!(close(
            kolmogorov_smirnov_p(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]),
            0.1
        ));
        let low = [1.0, 2.0, 3.0, 4.0, 5.0];
        let high = [6.0, 7.0, 8.0, 9.0, 10.0];
        assert!(close(kolmogorov_smirnov_p(&low, &high), 2.0 / 252.0));
        // 2 vs 2, a = {1,3}, b = {2,4}: D = 1/2. Of the 6 splits, {1,2} and {3,4} reach D = 1
        // and the other four D = 1/2: p = 1.
        assert_eq!(kolmogorov_smirnov_p(&[1.0, 3.0], &[2.0, 4.0]), 1.0);
        // 3 vs 3, a = {1,2,4}, b = {3,5,6}: D = 2/3 (after 2). A split reaches it when its
        // path of a's and b's is two steps apart somewhere: the 8 paths that never are (they
        // alternate within each pair of steps: 2^3) leave 12 of 20.
        assert!(close(
            kolmogorov_smirnov_p(&[1.0, 2.0, 4.0], &[3.0, 5.0, 6.0]),
            0.6
        ));
        assert_eq!(kolmogorov_smirnov_p(&[2.0; 3], &[2.0; 3]), 1.0);
        assert_eq!(kolmogorov_smirnov_p(&[1.0], &[]), 1.0);
    }

    #[test]
    fn kolmogorov_smirnov_sees_spread_the_rank_test_misses() {
        // Same centre, different spread: the rank-sum test cannot tell, KS can.
        let narrow: Vec<f64> = (0..10).map(|i| 50.0 + f64::from(i) * 0.1).collect();
        let wide: Vec<f64> = (0..5)
            .map(f64::from)
            .chain((0..5).map(|i| 96.0 + f64::from(i)))
            .collect();
        let mw = mann_whitney_p(&narrow, &wide);
        let ks = kolmogorov_smirnov_p(&narrow, &wide);
        // Every split's rank sum is as far from the middle as this one's (which is exactly
        // in it); the distribution functions part by half.
        assert_eq!(mw, 1.0);
        assert!(ks < 0.2, "{ks}");
    }

    #[test]
    fn kolmogorov_smirnov_with_ties_compares_only_where_values_change() {
        // a = {0,0,1}, b = {0,1,1}: at 0 the functions are 2/3 and 1/3, gap 1/3; at 1 both
        // are 1. Splits of the group of three 0s and three 1s: D >= 1/3 unless the 0s split
        // 1.5/1.5, impossible: every split is at least as extreme.
        assert_eq!(
            kolmogorov_smirnov_p(&[0.0, 0.0, 1.0], &[0.0, 1.0, 1.0]),
            1.0
        );
        // All zeros against all ones: the two splits that put all zeros on one side.
        assert!(close(kolmogorov_smirnov_p(&[0.0; 3], &[1.0; 3]), 0.1));
    }

    #[test]
    fn exact_at_sizes_enumeration_cannot_reach() {
        // 20 vs 20 apart: 2 / C(40, 20).
        let low: Vec<f64> = (0..20).map(f64::from).collect();
        let high: Vec<f64> = (20..40).map(f64::from).collect();
        let want = 2.0 / choose(40, 20);
        let mw = mann_whitney_p(&low, &high);
        let ks = kolmogorov_smirnov_p(&low, &high);
        assert!((mw - want).abs() / want < 1e-9, "{mw} vs {want}");
        assert!((ks - want).abs() / want < 1e-9, "{ks} vs {want}");
        // Interleaved: nothing to see.
        let odd: Vec<f64> = (0..20).map(|i| f64::from(2 * i + 1)).collect();
        let even: Vec<f64> = (0..20).map(|i| f64::from(2 * i + 2)).collect();
        // The evens sit one place above the odds: rank sums 400 against 420, p = 0.80.
        assert!((mann_whitney_p(&odd, &even) - 0.7994).abs() < 1e-3);
        assert!(kolmogorov_smirnov_p(&odd, &even) > 0.9);
    }

    #[test]
    fn shift_estimate_is_the_median_pairwise_difference() {
        assert_eq!(shift_estimate(&[1.0, 2.0], &[4.0, 6.0]), Some(3.5));
        assert_eq!(shift_estimate(&[0.0], &[5.0]), Some(5.0));
        assert_eq!(shift_estimate(&[], &[5.0]), None);
        // One wild sample moves the mean difference, not the estimate.
        let est = shift_estimate(&[10.0, 11.0, 12.0], &[20.0, 21.0, 1000.0]).unwrap();
        assert_eq!(est, 10.0);
    }

    #[test]
    fn shift_interval_hand_checked() {
        // 3 vs 3: P(U = 0) = 1/20 = 0.05, so the 90% interval is [min, max] of the nine
        // differences, with exactly 90%.
        let ci = shift_interval(&[1.0, 2.0, 3.0], &[11.0, 12.0, 14.0], 0.90).unwrap();
        assert_eq!((ci.low, ci.high), (8.0, 13.0));
        assert!(close(ci.confidence, 0.9));
        // 95% needs P(U <= k-1) <= 0.025: impossible at 3 vs 3.
        assert_eq!(
            shift_interval(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], 0.95),
            None
        );
        // 5 vs 5 at 90%: P(U <= 4) = 12/252 = 0.048 (counts of U = 0..4: 1, 1, 2, 3, 5), so k = 5:
        // the 5th smallest and 5th largest of 25 differences.
        let a = [0.0, 1.0, 2.0, 3.0, 4.0];
        let b = [10.0, 20.0, 30.0, 40.0, 50.0];
        let ci = shift_interval(&a, &b, 0.90).unwrap();
        let d = pairwise_differences(&a, &b);
        assert_eq!((ci.low, ci.high), (d[4], d[20]));
        assert!(close(ci.confidence, 1.0 - 24.0 / 252.0));
        assert_eq!(shift_interval(&[], &[1.0], 0.9), None);
    }

    #[test]
    fn shift_interval_covers_at_its_level() {
        // Two draws from one distribution (a fixed pseudo-random stream) many times: the 90%
        // interval must contain 0 at least about 90% of the time.
        let mut state = 0x5eed_u64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let (mut covered, trials) = (0, 2000);
        for _ in 0..trials {
            let a: Vec<f64> = (0..5).map(|_| uniform()).collect();
            let b: Vec<f64> = (0..6).map(|_| uniform()).collect();
            let ci = shift_interval(&a, &b, 0.90).unwrap();
            if ci.low <= 0.0 && 0.0 <= ci.high {
                covered += 1;
            }
        }
        let rate = f64::from(covered) / f64::from(trials);
        assert!(rate > 0.88, "coverage {rate}");
    }

    /// Every split of the pooled samples, counted by brute force: (Mann-Whitney p, KS p).
    fn enumerated(a: &[f64], b: &[f64]) -> (f64, f64) {
        let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
        let (n, k) = (pooled.len(), a.len());
        let ranks = doubled_midranks(&pooled);
        let rank_sum = |members: &[usize]| members.iter().map(|&i| ranks[i]).sum::<u64>() as i64;
        let ks = |members: &[usize]| {
            let first: Vec<f64> = members.iter().map(|&i| pooled[i]).collect();
            let second: Vec<f64> = (0..n)
                .filter(|i| !members.contains(i))
                .map(|i| pooled[i])
                .collect();
            let mut values = pooled.clone();
            values.sort_by(f64::total_cmp);
            values
                .iter()
                .map(|&x| {
                    let fa = first.iter().filter(|&&y| y <= x).count() as i64;
                    let fb = second.iter().filter(|&&y| y <= x).count() as i64;
                    (fa * (n - k) as i64 - fb * k as i64).abs()
                })
                .max()
                .unwrap_or(0)
        };
        let observed: Vec<usize> = (0..k).collect();
        let expected = (k * (n + 1)) as i64;
        let (rank_dev, ks_obs) = ((rank_sum(&observed) - expected).abs(), ks(&observed));
        let (mut mw_hits, mut ks_hits, mut total) = (0, 0, 0);
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != k {
                continue;
            }
            let members: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            total += 1;
            if (rank_sum(&members) - expected).abs() >= rank_dev {
                mw_hits += 1;
            }
            if ks(&members) >= ks_obs {
                ks_hits += 1;
            }
        }
        (
            f64::from(mw_hits) / f64::from(total),
            f64::from(ks_hits) / f64::from(total),
        )
    }

    #[test]
    fn counting_matches_enumeration_with_and_without_ties() {
        let mut state = 0xfeed_u64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        for trial in 0..120 {
            let na = 1 + next(6) as usize;
            let nb = 1 + next(6) as usize;
            // Few distinct values in some trials, so ties are common.
            let levels = if trial % 2 == 0 { 3 } else { 1000 };
            let a: Vec<f64> = (0..na).map(|_| next(levels) as f64).collect();
            let b: Vec<f64> = (0..nb).map(|_| next(levels) as f64).collect();
            let (mw, ks) = enumerated(&a, &b);
            assert!(
                (mann_whitney_p(&a, &b) - mw).abs() < 1e-12,
                "MW {a:?} {b:?}"
            );
            assert!(
                (kolmogorov_smirnov_p(&a, &b) - ks).abs() < 1e-12,
                "KS {a:?} {b:?}"
            );
        }
    }

    #[test]
    fn doubled_midranks_share_ties() {
        assert_eq!(
            doubled_midranks(&[10.0, 20.0, 10.0, 30.0]),
            vec![3, 6, 3, 8]
        );
        assert_eq!(doubled_midranks(&[5.0, 5.0, 5.0]), vec![4, 4, 4]);
    }
}
