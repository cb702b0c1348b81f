//! How many boots a comparison runs, and in which order.
//!
//! - [`Repetitions`]: a fixed count per variant, or adaptive: start with a few boots per
//!   variant and, while a primary verdict is UNKNOWN, bring the variants it involves up to the
//!   next step, up to a cap.
//! - [`BootOrder`]: the order of the boots, randomized from a recorded seed and balanced: each
//!   stage is made of rounds of a Williams design (every variant once per round; over a cycle
//!   of rounds each variant takes each position, and follows each other variant, equally
//!   often), with the variants relabelled at random and the rounds shuffled in every cycle.
//!   The same seed and the same stages give the same order.

use serde::{Deserialize, Serialize};

use super::{Decision, Verdict};

/// When an adaptive run stops booting for a pair: when its verdict is settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    /// DIFFERENT or SAME: a comparison (`lab compare`) asks whether a change matters.
    #[default]
    Verdict,
    /// A change shown either way, whatever its size (significant), or SAME: a bisect's probe
    /// and verification ask whether a change is there at all.
    Shown,
}

impl Until {
    /// Whether `verdict` needs no more boots.
    pub fn settles(self, verdict: &Verdict) -> bool {
        match self {
            Until::Verdict => verdict.decision != Decision::Unknown,
            Until::Shown => verdict.decision != Decision::Unknown || verdict.significant,
        }
    }
}

/// How many boots per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Repetitions {
    /// Exactly this many per variant (`--repetitions N`).
    Fixed(usize),
    /// Start with `initial` per variant; while a primary verdict is UNKNOWN, add boots to the
    /// variants it involves (the base and that variant): up to 5, the fewest at which the rank
    /// tests can reach p <= 0.01, then 2 more per step, never past `cap`.
    Adaptive {
        /// Boots per variant of the first stage.
        initial: usize,
        /// The most boots per variant.
        cap: usize,
    },
}

impl Default for Repetitions {
    /// 5 per variant, the fewest at which DIFFERENT can be decided (a complete separation is
    /// p = 2/252); SAME needs 9. At most 10 (a run raises it where SAME needs more:
    /// [`Repetitions::reaching`]).
    fn default() -> Repetitions {
        Repetitions::Adaptive {
            initial: 5,
            cap: 10,
        }
    }
}

impl Repetitions {
    /// Boots per variant of the first stage.
    pub fn initial(self) -> usize {
        match self {
            Repetitions::Fixed(n) => n,
            Repetitions::Adaptive { initial, .. } => initial,
        }
    }

    /// The most boots a variant can get.
    pub fn cap(self) -> usize {
        match self {
            Repetitions::Fixed(n) => n,
            Repetitions::Adaptive { cap, .. } => cap,
        }
    }

    /// The next stage's count per variant for variants that now have `have`; `None` when no
    /// more boots may be added. Up to 5 (the fewest at which DIFFERENT can be decided), then 2
    /// more a step up to 9 (the fewest SAME needs), then half as many again a step: every look
    /// takes a share of the 1% (`sequential`), and past 9 a look every two boots would leave
    /// each too little to show a change under the magnitude (a bisect's verification runs to
    /// 30).
    pub fn next_target(self, have: usize) -> Option<usize> {
        match self {
            Repetitions::Fixed(_) => None,
            Repetitions::Adaptive { cap, .. } => {
                let next = match have {
                    0..5 => 5,
                    5..9 => have + 2,
                    _ => have + have.div_ceil(2),
                };
                (have < cap).then_some(next.min(cap))
            }
        }
    }

    /// This schedule with an adaptive cap raised to `boots` where it is lower, so that SAME's
    /// minimum on a primary metric ([`crate::same_min_boots`]) can be reached; a fixed count
    /// and a higher cap are kept.
    pub fn reaching(self, boots: usize) -> Repetitions {
        match self {
            Repetitions::Adaptive { initial, cap } => Repetitions::Adaptive {
                initial,
                cap: cap.max(boots),
            },
            fixed => fixed,
        }
    }

    /// The boots per variant at which the verdicts are looked at, in order: every stage target
    /// of an adaptive run (the plan its decisions split their error over), none for a fixed
    /// count (one look at all the boots).
    pub fn looks(self) -> Vec<usize> {
        let Repetitions::Adaptive { initial, .. } = self else {
            return Vec::new();
        };
        let mut looks = vec![initial];
        while let Some(next) = self.next_target(*looks.last().expect("one look")) {
            looks.push(next);
        }
        looks
    }

    /// At least one boot, and an adaptive cap not below its start.
    pub fn check(self) -> Result<(), String> {
        match self {
            Repetitions::Fixed(0) => Err("repetitions must be at least 1".into()),
            Repetitions::Adaptive { initial: 0, .. } => {
                Err("the initial boots per variant must be at least 1".into())
            }
            Repetitions::Adaptive { initial, cap } if cap < initial => Err(format!(
                "the cap of {cap} boots per variant is below the initial {initial}"
            )),
            _ => Ok(()),
        }
    }
}

/// What an adaptive run boots next, given `have[v]` valid boots per variant (0 is the base)
/// and the variants whose primary verdict is still UNKNOWN: those variants below the cap and
/// the base, brought up to the step after the undecided variants' count (the base's own count
/// does not set it: booted on for other variants, it may be ahead); `None` when the run stops
/// (fixed, nothing undecided below the cap).
pub fn next_stage(
    repetitions: Repetitions,
    have: &[usize],
    undecided: &[usize],
) -> Option<(Vec<usize>, usize)> {
    if matches!(repetitions, Repetitions::Fixed(_)) {
        return None;
    }
    let cap = repetitions.cap();
    let open: Vec<usize> = undecided
        .iter()
        .copied()
        .filter(|&v| v != 0 && have[v] < cap)
        .collect();
    let most = open.iter().map(|&v| have[v]).max()?;
    let target = repetitions.next_target(most)?;
    Some((std::iter::once(0).chain(open).collect(), target))
}

/// The seeded, balanced order of a run's boots.
#[derive(Debug, Clone)]
pub struct BootOrder {
    seed: u64,
    rng: SplitMix64,
    /// Rounds left of the current cycle, and the variants they are for.
    pending: Vec<Vec<usize>>,
    pending_for: Vec<usize>,
}

impl BootOrder {
    /// The order `seed` gives.
    pub fn new(seed: u64) -> BootOrder {
        BootOrder {
            seed,
            rng: SplitMix64(seed),
            pending: Vec::new(),
            pending_for: Vec::new(),
        }
    }

    /// A seed for a run that was not given one: from the clock and the process id, so two runs
    /// started at once differ. It is recorded; pass it back to get the same order.
    pub fn fresh_seed() -> u64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut mix = SplitMix64(nanos ^ (u64::from(std::process::id()) << 32));
        mix.next_u64()
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// One stage: boots that bring every variant in `active` from `have[v]` up to `target`.
    /// Variants with fewer boots catch up first (fewest first), then whole rounds of the design
    /// follow.
    pub fn stage(&mut self, active: &[usize], have: &[usize], target: usize) -> Vec<usize> {
        let mut need: Vec<(usize, usize)> = active
            .iter()
            .map(|&v| (v, target.saturating_sub(have[v])))
            .filter(|&(_, n)| n > 0)
            .collect();
        let mut order = Vec::new();
        // Catch up: while needs differ, the variant needing most (fewest boots) goes next.
        loop {
            let Some(&(_, most)) = need.iter().max_by_key(|(_, n)| *n) else {
                return order;
            };
            let least = need.iter().map(|(_, n)| *n).min().unwrap_or(0);
            if most == least {
                break;
            }
            let (v, n) = need
                .iter_mut()
                .filter(|(_, n)| *n == most)
                .min_by_key(|(v, _)| have[*v])
                .expect("a variant with the largest need");
            order.push(*v);
            *n -= 1;
        }
        let rounds = need[0].1;
        let variants: Vec<usize> = need.iter().map(|(v, _)| *v).collect();
        for _ in 0..rounds {
            order.extend(self.round(&variants));
        }
        order
    }

    /// The next round of the design over `variants`.
    fn round(&mut self, variants: &[usize]) -> Vec<usize> {
        if self.pending_for != variants || self.pending.is_empty() {
            self.pending = self.cycle(variants);
            self.pending_for = variants.to_vec();
        }
        self.pending.remove(0)
    }

    /// One cycle of a Williams design over `variants`, relabelled at random, rounds shuffled.
    fn cycle(&mut self, variants: &[usize]) -> Vec<Vec<usize>> {
        let mut labels = variants.to_vec();
        self.rng.shuffle(&mut labels);
        let mut rounds: Vec<Vec<usize>> = williams_cycle(labels.len())
            .into_iter()
            .map(|row| row.into_iter().map(|i| labels[i]).collect())
            .collect();
        self.rng.shuffle(&mut rounds);
        rounds
    }
}

/// The rounds of one cycle of a Williams design for `k` treatments: rotations of 0, 1, k-1, 2,
/// k-2, ...; for odd k also their mirror images. Each treatment takes each position, and
/// follows each other treatment, equally often within a round.
fn williams_cycle(k: usize) -> Vec<Vec<usize>> {
    if k == 0 {
        return Vec::new();
    }
    let first: Vec<usize> = (0..k)
        .map(|j| match j {
            0 => 0,
            j if j % 2 == 1 => j.div_ceil(2),
            j => k - j / 2,
        })
        .collect();
    let rotated = |r: usize| -> Vec<usize> { first.iter().map(|&v| (v + r) % k).collect() };
    let mut rounds: Vec<Vec<usize>> = (0..k).map(rotated).collect();
    if k % 2 == 1 {
        let mirrored: Vec<Vec<usize>> = rounds
            .iter()
            .map(|r| r.iter().rev().copied().collect())
            .collect();
        rounds.extend(mirrored);
    }
    rounds
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, sound for shuffling, and fixed forever, so a
/// recorded seed gives the same order in every version of the lab (a library PRNG's stream may
/// change between releases).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (multiply-shift; the bias, below 2^-40 here, is irrelevant).
    fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
    }

    /// Fisher-Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(order: &[usize], k: usize) -> Vec<usize> {
        order.iter().fold(vec![0; k], |mut c, &v| {
            c[v] += 1;
            c
        })
    }

    #[test]
    fn a_schedule_reaching_19_boots_looks_there_and_keeps_a_fixed_count() {
        let reaching = Repetitions::default().reaching(19);
        assert_eq!(reaching.looks(), vec![5, 7, 9, 14, 19]);
        assert_eq!(Repetitions::default().reaching(9), Repetitions::default());
        assert_eq!(Repetitions::Fixed(4).reaching(19), Repetitions::Fixed(4));
    }

    #[test]
    fn the_same_seed_gives_the_same_order() {
        let run = |seed| {
            let mut o = BootOrder::new(seed);
            let mut order = o.stage(&[0, 1, 2], &[0, 0, 0], 3);
            order.extend(o.stage(&[0, 2], &[3, 3, 3], 5));
            order
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43), "another seed, another order");
        let order = run(42);
        assert_eq!(counts(&order, 3), vec![5, 3, 5]);
    }

    #[test]
    fn each_variant_follows_each_other_equally_often_over_a_cycle() {
        for k in 2..=6_usize {
            let cycle = if k % 2 == 0 { k } else { 2 * k };
            let mut o = BootOrder::new(7 + k as u64);
            let variants: Vec<usize> = (0..k).collect();
            let order = o.stage(&variants, &vec![0; k], cycle);
            assert_eq!(counts(&order, k), vec![cycle; k]);
            let mut follows = vec![vec![0; k]; k];
            let mut position = vec![vec![0; k]; k];
            for round in order.chunks(k) {
                for (pos, &v) in round.iter().enumerate() {
                    position[v][pos] += 1;
                }
                for pair in round.windows(2) {
                    follows[pair[0]][pair[1]] += 1;
                }
            }
            let per = cycle / k;
            assert!(position.iter().flatten().all(|&c| c == per), "k={k}");
            for (a, row) in follows.iter().enumerate() {
                for (b, &n) in row.iter().enumerate() {
                    assert_eq!(n, if a == b { 0 } else { per }, "k={k}: {a} before {b}");
                }
            }
        }
    }

    #[test]
    fn the_variant_with_fewer_boots_goes_first() {
        let mut o = BootOrder::new(1);
        // Variant 1 lost a boot (rejected): it catches up before the rounds.
        let order = o.stage(&[0, 1], &[5, 4], 7);
        assert_eq!(order[0], 1);
        assert_eq!(counts(&order, 2), vec![2, 3]);
        assert!(o.stage(&[0, 1], &[7, 7], 7).is_empty());
        assert!(o.stage(&[], &[], 3).is_empty());
    }

    #[test]
    fn adaptive_steps_reach_five_then_add_two_up_to_the_cap() {
        let r = Repetitions::Adaptive {
            initial: 3,
            cap: 10,
        };
        assert_eq!(r.initial(), 3);
        assert_eq!(r.next_target(3), Some(5));
        assert_eq!(r.next_target(5), Some(7));
        assert_eq!(r.next_target(9), Some(10));
        assert_eq!(r.next_target(10), None);
        assert_eq!(Repetitions::Fixed(4).next_target(4), None);
        assert!(Repetitions::Fixed(0).check().is_err());
        assert!(Repetitions::Adaptive { initial: 5, cap: 3 }
            .check()
            .is_err());
        assert!(Repetitions::default().check().is_ok());
    }

    #[test]
    fn the_next_stage_boots_the_base_and_the_undecided() {
        let r = Repetitions::Adaptive { initial: 3, cap: 7 };
        assert_eq!(next_stage(r, &[3, 3, 3], &[2]), Some((vec![0, 2], 5)));
        assert_eq!(next_stage(r, &[5, 5, 5], &[1, 2]), Some((vec![0, 1, 2], 7)));
        // At the cap: nothing more.
        assert_eq!(next_stage(r, &[7, 7, 5], &[1]), None);
        // One variant at the cap, another below it: the other goes on with the base.
        assert_eq!(next_stage(r, &[5, 7, 5], &[1, 2]), Some((vec![0, 2], 7)));
        assert_eq!(next_stage(r, &[3, 3], &[]), None);
        assert_eq!(next_stage(Repetitions::Fixed(3), &[3, 3], &[1]), None);
        // The base at the cap (booted on for a variant decided since) does not stop a variant
        // still at 5: it goes to 7, its next step.
        let r = Repetitions::Adaptive {
            initial: 5,
            cap: 10,
        };
        assert_eq!(next_stage(r, &[10, 10, 5], &[2]), Some((vec![0, 2], 7)));
    }

    #[test]
    fn the_looks_are_the_stage_targets() {
        assert_eq!(Repetitions::default().looks(), vec![5, 7, 9, 10]);
        let long = Repetitions::Adaptive {
            initial: 7,
            cap: 30,
        };
        assert_eq!(long.looks(), vec![7, 9, 14, 21, 30]);
        let r = Repetitions::Adaptive { initial: 4, cap: 9 };
        assert_eq!(r.looks(), vec![4, 5, 7, 9]);
        assert_eq!(
            Repetitions::Adaptive { initial: 3, cap: 3 }.looks(),
            vec![3]
        );
        assert!(Repetitions::Fixed(5).looks().is_empty());
    }

    #[test]
    fn williams_rounds_hold_every_variant_once() {
        assert_eq!(williams_cycle(2), vec![vec![0, 1], vec![1, 0]]);
        for round in williams_cycle(5) {
            let mut r = round.clone();
            r.sort_unstable();
            assert_eq!(r, vec![0, 1, 2, 3, 4]);
        }
        assert!(williams_cycle(0).is_empty());
    }
}
