//! The guest kernel's own word on a boot: a boot whose kernel log shows a WARNING, a BUG, an
//! RCU stall, a soft or hard lockup or a hung task, or whose taint mask is not 0, gives no
//! sample (the console only shows errors at the lab's `loglevel=4`, and `oops=panic` already
//! turns oopses into panics, so the rest is read from the log after the workload).

use anyhow::{Context, Result};

use super::Vm;

/// What a line of the kernel log must contain to make the boot's sample invalid.
const SIGNS: &[(&str, &str)] = &[
    ("WARNING:", "a WARNING"),
    ("BUG:", "a BUG"),
    ("detected stalls on CPUs", "an RCU stall"),
    ("self-detected stall on CPU", "an RCU stall"),
    ("detected hard LOCKUP", "a hard lockup"),
    ("blocked for more than", "a hung task"),
];

/// The letters `/proc/sys/kernel/tainted`'s bits stand for (kernel/panic.c, `taint_flags`).
const TAINT_LETTERS: &[(u32, char, &str)] = &[
    (0, 'P', "proprietary module"),
    (1, 'F', "module force-loaded"),
    (2, 'S', "out-of-spec system"),
    (3, 'R', "module force-unloaded"),
    (4, 'M', "machine check"),
    (5, 'B', "bad page"),
    (6, 'U', "tainted by user"),
    (7, 'D', "kernel died (oops or BUG)"),
    (8, 'A', "ACPI table overridden"),
    (9, 'W', "WARNING issued"),
    (10, 'C', "staging driver"),
    (11, 'I', "firmware bug worked around"),
    (12, 'O', "out-of-tree module"),
    (13, 'E', "unsigned module"),
    (14, 'L', "soft lockup"),
    (15, 'K', "live-patched"),
    (16, 'X', "auxiliary taint"),
    (17, 'T', "randstruct plugin"),
    (18, 'N', "test module"),
];

/// Why the kernel log or taint mask make a boot's sample invalid; empty when they do not.
pub(crate) fn problems(tainted: u64, log: &str) -> Vec<String> {
    let mut found = Vec::new();
    if tainted != 0 {
        let letters: Vec<String> = TAINT_LETTERS
            .iter()
            .filter(|(bit, _, _)| tainted & (1 << bit) != 0)
            .map(|(_, letter, what)| format!("{letter} ({what})"))
            .collect();
        found.push(format!(
            "the kernel is tainted ({tainted}: {})",
            if letters.is_empty() {
                "unknown bits".to_string()
            } else {
                letters.join(", ")
            }
        ));
    }
    for line in log.lines() {
        if let Some((_, what)) = SIGNS.iter().find(|(sign, _)| line.contains(sign)) {
            found.push(format!("the kernel log shows {what}: {}", line.trim()));
        }
    }
    found
}

/// Reads the guest's taint mask and kernel log; `Err` with a [`crate::Error::GuestFault`]
/// naming every problem when there is one (a refused sample to the runner).
pub(crate) async fn check(vm: &Vm) -> Result<()> {
    let out = vm
        .sh("cat /proc/sys/kernel/tainted; dmesg")
        .await
        .context("reading the guest's taint mask and kernel log")?;
    let (first, log) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    let tainted: u64 = first
        .trim()
        .parse()
        .with_context(|| format!("/proc/sys/kernel/tainted in {} reads {first:?}", vm.name))?;
    let found = problems(tainted, log);
    if found.is_empty() {
        return Ok(());
    }
    Err(crate::Error::GuestFault {
        vm: vm.name.clone(),
        problems: found,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_boot_has_no_problems() {
        let log = "[    1.504478] PCI: Using host bridge windows from ACPI; if necessary, use \
                   \"pci=nocrs\" and report a bug\n[    0.0] Linux version 6.12.117\n";
        assert!(problems(0, log).is_empty());
    }

    #[test]
    fn warnings_stalls_and_taints_are_named_with_their_line() {
        let log = "\
[   12.1] ------------[ cut here ]------------
[   12.1] WARNING: CPU: 3 PID: 88 at kernel/sched/fair.c:5280 place_entity+0x1a/0x1f0
[   20.0] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[   31.2] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [dmatest:97]
[   40.0] INFO: task kworker/0:1:12 blocked for more than 122 seconds.
[   41.0] Watchdog detected hard LOCKUP on cpu 2
";
        let found = problems(1 << 9 | 1 << 14, log);
        assert_eq!(found.len(), 6, "{found:#?}");
        assert_eq!(
            found[0],
            "the kernel is tainted (16896: W (WARNING issued), L (soft lockup))"
        );
        assert!(found[1]
            .contains("a WARNING: [   12.1] WARNING: CPU: 3 PID: 88 at kernel/sched/fair.c:5280"));
        assert!(found[2].contains("an RCU stall"));
        assert!(found[3].contains("a BUG") && found[3].contains("soft lockup"));
        assert!(found[4].contains("a hung task"));
        assert!(found[5].contains("a hard lockup"));
        assert_eq!(
            problems(1 << 30, ""),
            vec!["the kernel is tainted (1073741824: unknown bits)".to_string()]
        );
    }
}
