//! An interrupt moved before it is measured. On x86 a new affinity takes effect when the next
//! interrupt arrives (the vector is moved from the old CPU's handler), so the first interrupt
//! after a pin still lands where the line was: a placement scenario whose workload starts right
//! after the pin sees one wakeup from the wrong CPU, and `irq_on_pinned_cpu` short of 100%
//! (S5's table: 23 of 24 interrupts on the new CPU). [`warm_up_irq`] pokes the device until an
//! interrupt has landed on a CPU of the line's affinity.

use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::Interrupts;
use crate::topology::parse_cpulist;
use crate::vm::Vm;

/// How long after a poke its interrupt is looked for.
const SETTLE: Duration = Duration::from_millis(500);

/// Calls `poke` (something that makes the device raise `irq` once: a datagram into a NIC, one
/// small copy on a DMA engine) until an interrupt of `irq` lands on a CPU of its affinity
/// (`/proc/irq/IRQ/smp_affinity_list`), at most `tries` times; returns how many pokes that
/// took (2 on x86 after a move: the first lands on the old CPU).
///
/// ```no_run
/// # async fn f(vm: &lab::vm::Vm, traffic: &lab::devices::nic::Traffic, irq: u32) -> anyhow::Result<()> {
/// use lab::devices::nic::UdpFlow;
/// // One datagram to a port nothing listens on: the receive interrupt fires, the guest
/// // answers with an ICMP error.
/// let one = UdpFlow { port: 9, payload: 1, rate: 100.0, count: 1 };
/// let pokes = lab::observe::warm_up_irq(vm, irq, 10, || async {
///     traffic.send_udp(&one).await.map(drop)
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn warm_up_irq<F, Fut>(vm: &Vm, irq: u32, tries: u32, mut poke: F) -> Result<u32>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let path = format!("/proc/irq/{irq}/smp_affinity_list");
    let raw = vm.guest().read_file(&path).await?;
    let text = String::from_utf8_lossy(&raw);
    let affinity = parse_cpulist(&text).with_context(|| format!("{path}: {text:?}"))?;
    for n in 1..=tries {
        let before = Interrupts::read(vm).await?;
        poke().await.with_context(|| format!("poking IRQ {irq}"))?;
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let delta = Interrupts::read(vm).await?.delta(&before, &irq.to_string());
            let landed = |cpu: &u32| delta.get(*cpu as usize).is_some_and(|c| *c > 0);
            if affinity.iter().any(landed) {
                return Ok(n);
            }
            if delta.iter().any(|c| *c > 0) || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    bail!(
        "IRQ {irq} did not land on its CPUs {} after {tries} pokes: the pin did not take, or \
         the poke raised no interrupt",
        text.trim()
    )
}
