//! The guest's delay-loop calibration, given to it where the lab knows the answer (`lpj=`).
//!
//! QEMU's default x86 CPU under TCG (qemu64) has no constant-TSC flag, so the kernel calibrates
//! the delay loop again on every secondary CPU (`calibrate_delay_direct`, several jiffies each,
//! one after the other while the CPUs come up): about 0.45 s of an 8-vCPU boot under
//! single-threaded TCG on the 2-core Xeon, a sixth of the boot. The boot CPU takes its value
//! from the TSC instead (`lpj_fine`: TSC cycles per jiffy), and under TCG the guest's TSC is the
//! host's counter (QEMU's RDTSC reads it), so the lab passes that same value as `lpj=` and every
//! CPU takes it. Not under KVM (its CPUs have a constant TSC and skip the calibration already),
//! nor with `-icount` (the guest's TSC then counts instructions), nor where the host's TSC does
//! not tick at a constant rate or the kernel's `CONFIG_HZ` is unknown.

use std::sync::OnceLock;

use crate::arch::Arch;
use crate::toolchain::Accel;

/// `lpj=N` for a guest of `arch` under `accel` whose kernel ticks at `hz`, on a host whose
/// counter runs at `host_tsc_hz`; `None` where the guest calibrates for itself.
pub(crate) fn lpj_arg(
    accel: Accel,
    arch: Arch,
    hz: Option<u32>,
    host_tsc_hz: Option<u64>,
) -> Option<String> {
    let tcg_on_host_time = matches!(accel, Accel::TcgSingle | Accel::TcgMulti);
    if !tcg_on_host_time || arch != Arch::X86_64 || arch != Arch::host() {
        return None;
    }
    let lpj = host_tsc_hz? / u64::from(hz?);
    (lpj > 0).then(|| format!("lpj={lpj}"))
}

/// The host's TSC rate in Hz, measured once per process (about 20 ms); `None` on other
/// architectures and where `/proc/cpuinfo` does not say `constant_tsc`.
pub(crate) fn host_tsc_hz() -> Option<u64> {
    static RATE: OnceLock<Option<u64>> = OnceLock::new();
    *RATE.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        if !constant_tsc(&cpuinfo) {
            return None;
        }
        measure_tsc_hz()
    })
}

fn constant_tsc(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "constant_tsc"))
}

/// TSC ticks over about 20 ms of the monotonic clock. Each end reads the TSC between two clock
/// reads less than 20 us apart (retried otherwise), so a preemption cannot skew the rate by
/// more than 0.2%; the guest's own calibration is no closer than that.
#[cfg(target_arch = "x86_64")]
fn measure_tsc_hz() -> Option<u64> {
    use std::time::{Duration, Instant};
    fn stamp() -> Option<(Instant, u64)> {
        for _ in 0..100 {
            let before = Instant::now();
            // SAFETY: RDTSC exists on every x86_64 CPU and only reads the counter.
            let tsc = unsafe { std::arch::x86_64::_rdtsc() };
            let after = Instant::now();
            let gap = after - before;
            if gap < Duration::from_micros(20) {
                return Some((before + gap / 2, tsc));
            }
        }
        None
    }
    let (t0, c0) = stamp()?;
    std::thread::sleep(Duration::from_millis(20));
    let (t1, c1) = stamp()?;
    let nanos = (t1 - t0).as_nanos();
    let hz = u128::from(c1.checked_sub(c0)?) * 1_000_000_000 / nanos;
    u64::try_from(hz).ok().filter(|&hz| hz > 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_tsc_hz() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lpj_is_given_only_to_x86_guests_under_tcg_on_host_time() {
        let tsc = Some(2_100_000_000);
        let hz = Some(1000);
        let on_x86 = Arch::host() == Arch::X86_64;
        let expected = on_x86.then(|| "lpj=2100000".to_string());
        assert_eq!(lpj_arg(Accel::TcgSingle, Arch::X86_64, hz, tsc), expected);
        assert_eq!(lpj_arg(Accel::TcgMulti, Arch::X86_64, hz, tsc), expected);
        assert_eq!(lpj_arg(Accel::Kvm, Arch::X86_64, hz, tsc), None);
        assert_eq!(lpj_arg(Accel::TcgIcount, Arch::X86_64, hz, tsc), None);
        assert_eq!(lpj_arg(Accel::TcgSingle, Arch::Aarch64, hz, tsc), None);
        assert_eq!(lpj_arg(Accel::TcgSingle, Arch::X86_64, None, tsc), None);
        assert_eq!(lpj_arg(Accel::TcgSingle, Arch::X86_64, hz, None), None);
        assert_eq!(
            lpj_arg(Accel::TcgSingle, Arch::X86_64, Some(250), tsc),
            on_x86.then(|| "lpj=8400000".to_string())
        );
    }

    #[test]
    fn a_constant_tsc_is_read_from_the_flags_line() {
        assert!(constant_tsc(
            "processor : 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n"
        ));
        assert!(!constant_tsc("flags\t\t: fpu tsc\n"));
        assert!(!constant_tsc("processor : 0\n"));
    }

    #[test]
    fn the_host_tsc_rate_is_measured_where_the_host_has_one() {
        let Some(hz) = host_tsc_hz() else {
            // Another architecture, or a host TSC without a constant rate: nothing to check.
            return;
        };
        // Any x86 CPU of the last twenty years: 0.5 to 6 GHz.
        assert!((500_000_000..6_000_000_000).contains(&hz), "{hz} Hz");
        assert_eq!(host_tsc_hz(), Some(hz), "measured once per process");
    }
}
