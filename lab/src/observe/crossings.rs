//! Wakeups that cross an LLC boundary, and whether they pulled the task across
//! ([`CrossLlcWakeups`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::TaskWakeup;
use crate::topology::Topology;

/// A task's wakeups that cross an LLC boundary: issued from a CPU in another LLC than the
/// task's CPU at that moment, which the scheduler's wakeup path (`wake_affine()`) decides to
/// pull into the waker's LLC or not (S1's question). The fields keep the names S1's stored
/// records have in their `placement` details.
///
/// ```
/// use lab::observe::{parse_trace, task_wakeups, CrossLlcWakeups};
/// use lab::topology::Topology;
///
/// // Woken from CPU 2 (another LLC of ci-2node-4llc) while on CPU 0, and placed on CPU 2.
/// let trace = "\
///  kworker/2:1-40 [002] d..2. 10.000100: sched_waking: comm=copy pid=90 prio=120 target_cpu=000
///  kworker/2:1-40 [002] d..2. 10.000110: sched_wakeup: comm=copy pid=90 prio=120 target_cpu=002
/// ";
/// let topology = Topology::by_name("ci-2node-4llc").unwrap();
/// let c = CrossLlcWakeups::fold(&task_wakeups("copy", &parse_trace(trace)), &topology);
/// assert_eq!((c.wakeups_from_other_llc, c.wakeups_pulled_to_waker_llc), (1, 1));
/// assert_eq!(c.pulled_share(), Some(100.0));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CrossLlcWakeups {
    /// Wakeups issued from a CPU in another LLC than the task's CPU (from `sched_waking` on the
    /// waker's CPU to the `sched_wakeup` that placed the task).
    pub wakeups_from_other_llc: u64,
    /// Of those, the ones that placed the task in the waker's LLC: the wakeup pulled it across.
    pub wakeups_pulled_to_waker_llc: u64,
    /// Who was running on the waker's CPU for the cross-LLC wakeups that did not pull the task
    /// (`<idle>` for an interrupt on an idle CPU, `ksoftirqd/N` for deferred softirqs, ...).
    pub unpulled_wakers: BTreeMap<String, u64>,
}

impl CrossLlcWakeups {
    /// Folds the thread's wakeups by `topology`'s LLCs. A wakeup whose `sched_waking` the
    /// trace lacks, or whose target it does not show, counts in none of the figures.
    pub fn fold(wakeups: &[TaskWakeup], topology: &Topology) -> CrossLlcWakeups {
        let llc = |c: u32| topology.llc_of(c).map(|l| l.id);
        let mut out = CrossLlcWakeups::default();
        for w in wakeups {
            let (Some(waker), Some(woken_on), Some(target)) = (&w.waker, w.woken_on, w.target_cpu)
            else {
                continue;
            };
            if llc(w.waker_cpu) == llc(woken_on) {
                continue;
            }
            out.wakeups_from_other_llc += 1;
            if llc(target) == llc(w.waker_cpu) {
                out.wakeups_pulled_to_waker_llc += 1;
            } else {
                *out.unpulled_wakers.entry(waker.clone()).or_default() += 1;
            }
        }
        out
    }
}

impl CrossLlcWakeups {
    /// The share of the cross-LLC wakeups that pulled the task into the waker's LLC, in
    /// percent; `None` when there was none.
    pub fn pulled_share(&self) -> Option<f64> {
        (self.wakeups_from_other_llc > 0).then(|| {
            100.0 * self.wakeups_pulled_to_waker_llc as f64 / self.wakeups_from_other_llc as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::task_wakeups;

    /// The thread created asleep on CPU 0, then woken from CPU 2 (another LLC of node 0) and
    /// placed there; later moved 2 -> 5 by CPU 2's stopper.
    const PULLED_TRACE: &str = crate::observe::tests::TRACE;

    fn ci() -> Topology {
        Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
    }

    fn cross_llc(trace: &str) -> CrossLlcWakeups {
        let events = crate::observe::parse_trace(trace);
        CrossLlcWakeups::fold(&task_wakeups("dma0chan0-copy", &events), &ci())
    }

    #[test]
    fn a_wakeup_from_another_llc_that_placed_the_thread_there_pulled_it() {
        // Woken from CPU 2 while on CPU 0 (another LLC), placed on CPU 2: pulled across.
        let c = cross_llc(PULLED_TRACE);
        assert_eq!(
            (c.wakeups_from_other_llc, c.wakeups_pulled_to_waker_llc),
            (1, 1)
        );
        assert!(c.unpulled_wakers.is_empty());
    }

    #[test]
    fn a_queued_cross_llc_wakeup_that_stayed_is_unpulled_and_names_its_waker() {
        // The IRQ on CPU 2 wakes the task whose CPU is 0; the wakeup is queued to CPU 0 and its
        // sched_wakeup fires there, in the IPI. It stayed in its LLC: not pulled.
        let c = cross_llc(
            "\
          <idle>-0     [002] d.h1.    10.000400: irq_handler_entry: irq=24 name=ioat-msix
     ksoftirqd/2-21    [002] d.s2.    10.000440: sched_waking: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=000
          <idle>-0     [000] dNh2.    10.000450: sched_wakeup: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=000
",
        );
        assert_eq!(
            (c.wakeups_from_other_llc, c.wakeups_pulled_to_waker_llc),
            (1, 0)
        );
        assert_eq!(
            c.unpulled_wakers,
            BTreeMap::from([("ksoftirqd/2".to_string(), 1)])
        );
    }
}
