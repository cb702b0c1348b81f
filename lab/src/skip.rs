//! Parts of tests that only mean something under KVM (a time or throughput bound), and whole
//! tests that need it. Under TCG such a part is skipped where everyone can see it: one line
//! starting with `MARKER` on stdout and stderr, which the nextest profiles show at the end of
//! the run and keep in the JUnit report (`.config/nextest.toml`). With `LAB_REQUIRE_KVM=1` (the
//! hardware CI job) every such skip is a failure instead, so a host whose KVM stopped booting
//! guests cannot pass by falling back to TCG. Parts a host lacks for other reasons (hugepages,
//! `unshare -n`, gpg) are skipped the same way, and `LAB_REQUIRE_HOST=1` (set by `.ci/run`,
//! which provides them) makes those skips failures.

use crate::Lab;

/// Set to `1` where KVM must work: a KVM-only part that would be skipped fails instead.
pub(crate) const REQUIRE_KVM_ENV: &str = "LAB_REQUIRE_KVM";

/// Set to `1` where the host provides everything [`host_lacks`] checks for (CI): a part that
/// would be skipped fails instead.
pub(crate) const REQUIRE_HOST_ENV: &str = "LAB_REQUIRE_HOST";

/// How a skipped part's line starts (`LAB-SKIP <test>: <part>: <why>`); the JUnit marking
/// (`report::junit`) owns it, as the reader of those lines.
pub(crate) use crate::report::junit::MARKER;

/// Whether `LAB_REQUIRE_KVM` asks for KVM (`1`, `true` or `yes`).
pub fn kvm_required() -> bool {
    requires(std::env::var(REQUIRE_KVM_ENV).ok().as_deref())
}

/// Whether `LAB_REQUIRE_HOST` asks for every host capability (`1`, `true` or `yes`).
pub(crate) fn host_required() -> bool {
    requires(std::env::var(REQUIRE_HOST_ENV).ok().as_deref())
}

fn requires(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        v == "1" || v == "true" || v == "yes"
    })
}

/// What a KVM-only part does on this lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KvmOnly {
    /// The lab runs guests under KVM: check the part.
    Run,
    /// Not under KVM and not required: the part is skipped; the line says so.
    Skip(String),
    /// Not under KVM but `LAB_REQUIRE_KVM=1`: the part must fail; the message says why.
    Fail(String),
}

/// Decides a KVM-only `part` of the running test. `accel` and `reason` are the lab's accelerator
/// and why it was chosen; `why` says what the part checks and why TCG cannot; `required` is
/// [`kvm_required`].
pub(crate) fn decide(
    accel: crate::toolchain::Accel,
    reason: &str,
    part: &str,
    why: &str,
    required: bool,
) -> KvmOnly {
    if accel.is_kvm() {
        return KvmOnly::Run;
    }
    let test = current_test();
    if required {
        return KvmOnly::Fail(format!(
            "{test}: {part} needs KVM, and {REQUIRE_KVM_ENV}=1 makes its skip a failure: the \
             accelerator is {} ({reason}). {why}",
            accel.name()
        ));
    }
    KvmOnly::Skip(format!(
        "{MARKER} {test}: {part}: the accelerator is {} ({reason}). {why} It runs where KVM boots \
         guests (LAB_ACCEL=kvm forces it; {REQUIRE_KVM_ENV}=1 fails instead of skipping).",
        accel.name()
    ))
}

/// Whether the KVM-only `part` of the calling test runs here. Under KVM: `true`. Otherwise the
/// skip is printed as one `MARKER` line on stdout and stderr and this returns `false`, or,
/// with `LAB_REQUIRE_KVM=1`, it panics.
pub fn kvm_only(lab: &Lab, part: &str, why: &str) -> bool {
    kvm_only_for(lab, crate::arch::Arch::host(), part, why)
}

/// [`kvm_only`] for guests of `arch`: a guest of another architecture than the host's runs
/// under TCG whatever the host's KVM does, so its KVM-only parts run only on a host of its own
/// architecture.
pub fn kvm_only_for(lab: &Lab, arch: crate::arch::Arch, part: &str, why: &str) -> bool {
    let (accel, probe) = lab.accel_for(arch);
    match decide(accel, &probe.reason, part, why, kvm_required()) {
        KvmOnly::Run => true,
        KvmOnly::Skip(line) => {
            println!("{line}");
            eprintln!("{line}");
            false
        }
        KvmOnly::Fail(message) => panic!("{message}"),
    }
}

/// A part of the calling test this host cannot run for a reason other than KVM (`what` is
/// missing; `how` enables it): printed as one `MARKER` line on stdout and stderr, like a
/// KVM-only skip, so the run shows it instead of a silent pass. With `LAB_REQUIRE_HOST=1` it
/// panics instead: where the host is meant to provide it, a missing part is a failure.
pub fn host_lacks(part: &str, what: &str, how: &str) {
    let line = host_lacks_line(part, what, how);
    if host_required() {
        panic!("{line} ({REQUIRE_HOST_ENV}=1 makes this skip a failure)");
    }
    println!("{line}");
    eprintln!("{line}");
}

fn host_lacks_line(part: &str, what: &str, how: &str) -> String {
    format!(
        "{MARKER} {}: {part}: {what}. {how} ({REQUIRE_HOST_ENV}=1 fails instead of skipping.)",
        current_test()
    )
}

/// For a test that needs KVM as a whole (named `..._on_real_hardware`, run only by the `kvm`
/// nextest profile): panics unless the lab runs guests under KVM.
pub fn require_kvm(lab: &Lab, why: &str) {
    if let Err(e) = lab.require_kvm(&current_test()) {
        panic!("{e}. {why}");
    }
}

/// The running test's name as libtest gives it to the thread (`module::test`), or the
/// thread's name.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(str::to_string)
        .or_else(|| std::env::var("NEXTEST_TEST_NAME").ok())
        .unwrap_or_else(|| "this test".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::Accel;

    #[test]
    fn runs_on_kvm_whatever_is_required() {
        for required in [false, true] {
            assert_eq!(
                decide(Accel::Kvm, "probe booted", "time part", "why", required),
                KvmOnly::Run
            );
        }
    }

    #[test]
    fn skips_visibly_under_tcg() {
        match decide(
            Accel::TcgSingle,
            "kvm hangs",
            "time part",
            "Because.",
            false,
        ) {
            KvmOnly::Skip(line) => {
                assert!(line.starts_with("LAB-SKIP "), "{line}");
                assert!(line.contains("time part"), "{line}");
                assert!(line.contains("tcg-single (kvm hangs)"), "{line}");
                assert!(line.contains("Because."), "{line}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fails_under_tcg_when_kvm_is_required() {
        match decide(Accel::TcgSingle, "kvm hangs", "time part", "Because.", true) {
            KvmOnly::Fail(message) => {
                assert!(message.contains("LAB_REQUIRE_KVM=1"), "{message}");
                assert!(message.contains("time part"), "{message}");
                assert!(message.contains("kvm hangs"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_host_skip_names_the_switch_that_fails_it() {
        let line = host_lacks_line("hugepage part", "no hugepages", "Reserve some.");
        assert!(line.starts_with("LAB-SKIP "), "{line}");
        assert!(
            line.contains("hugepage part: no hugepages. Reserve some."),
            "{line}"
        );
        assert!(line.contains("LAB_REQUIRE_HOST=1"), "{line}");
    }

    #[test]
    fn lab_require_kvm_values() {
        for (value, required) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("no"), false),
            (Some("1"), true),
            (Some(" true "), true),
            (Some("YES"), true),
        ] {
            assert_eq!(requires(value), required, "{value:?}");
        }
    }
}
