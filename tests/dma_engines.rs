//! The emulated DMA engines in real guests: the unmodified upstream drivers bind, dmatest passes
//! with the seed parameters (and noverify, polled, 4 threads, 4 channels), completions follow the
//! pinned interrupt, and a guest scribbling over the BAR cannot break the device.
//!
//! These are correctness tests, so they run the seed's buffer and transfer sizes with fewer
//! iterations than the seed's 1000 (see [`seed`]).

mod common;

use std::time::Duration;

use lab::devices::{bind_and_pin, DeviceSpec};
use lab::observe::Interrupts;
use lab::workload::Dmatest;
use lab::BootOptions;

/// The seed's dmatest parameters with 300 iterations instead of 1000: enough to wrap ioatdma's
/// 256-descriptor ring and PTDMA's 32-entry queue several times per thread, at under a third of
/// the time (with verification on, each copy checks 2 MiB of buffers: ~40 ms of TCG time).
fn seed() -> Dmatest {
    Dmatest::seed_parameters().iterations(300)
}

/// Boots the default kernel with `device`, binds its driver and returns the VM.
async fn boot_with(name: &str, device: DeviceSpec) -> (lab::Lab, lab::vm::Vm) {
    let lab = common::lab().await;
    let vm = lab
        .boot(BootOptions::named(name).device(device))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    (lab, vm)
}

async fn dmatest_ok(vm: &lab::vm::Vm, params: Dmatest, threads: usize) {
    let result = params
        .run(vm)
        .await
        .unwrap_or_else(|e| panic!("dmatest {params:?}: {e:#}"));
    assert_eq!(result.threads.len(), threads, "{result:?}");
    for t in &result.threads {
        assert_eq!(
            (t.tests, t.failures),
            (u64::from(params.iterations), 0),
            "{t:?}"
        );
    }
    println!(
        "{}: {} threads x {} tests, 0 failures, {:.0} iops",
        params.module_args(),
        threads,
        params.iterations,
        result.total_iops()
    );
}

#[tokio::test]
async fn ioatdma_binds_and_dmatest_passes() {
    let (_lab, vm) = boot_with("dma-ioat", DeviceSpec::ioat(1)).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(bound[0].driver, "ioatdma");
    let dmesg = vm
        .sh("dmesg | grep -i ioat; ls /sys/class/dma")
        .await
        .unwrap();
    assert!(dmesg.contains("dma0chan0"), "no channel:\n{dmesg}");
    assert!(!dmesg.contains("failed"), "driver complained:\n{dmesg}");
    let driver = vm
        .sh(&format!(
            "basename $(readlink /sys/bus/pci/devices/{}/driver)",
            bound[0].pci_address
        ))
        .await
        .unwrap();
    assert_eq!(driver.trim(), "ioatdma");

    let seed = seed();
    dmatest_ok(&vm, seed.clone(), 1).await;
    dmatest_ok(&vm, seed.clone().noverify(true), 1).await;
    dmatest_ok(&vm, seed.clone().polled(true), 1).await;
    dmatest_ok(&vm, seed.threads_per_chan(4), 4).await;
    vm.shutdown().await.unwrap();
}

#[tokio::test]
async fn ioatdma_four_channels_at_once() {
    let (_lab, vm) = boot_with("dma-ioat-4ch", DeviceSpec::ioat(4)).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(
        bound[0].irqs.len(),
        4,
        "one MSI-X vector per channel: {bound:?}"
    );
    let before = Interrupts::read(&vm).await.unwrap();
    let all = seed().channel("").max_channels(4);
    let per_channel = u64::from(all.iterations);
    dmatest_ok(&vm, all, 4).await;
    let after = Interrupts::read(&vm).await.unwrap();
    for irq in &bound[0].irqs {
        let total: u64 = after.delta(&before, &irq.to_string()).iter().sum();
        assert!(
            total >= per_channel,
            "channel IRQ {irq} took only {total} completions"
        );
    }
    vm.shutdown().await.unwrap();
}

#[tokio::test]
async fn ptdma_binds_and_dmatest_passes() {
    let (_lab, vm) = boot_with("dma-ptdma", DeviceSpec::ptdma()).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(bound[0].driver, "ptdma");
    let seed = seed();
    dmatest_ok(&vm, seed.clone(), 1).await;
    dmatest_ok(&vm, seed.clone().noverify(true), 1).await;
    dmatest_ok(&vm, seed.polled(true), 1).await;
    // threads_per_chan=4 runs on the fixed driver below: v6.12's pt_tx_status() acknowledges
    // completions without a lock against its interrupt handler, so two threads can consume one
    // completion (seen here as 'data error' and a list-corruption oops in pt_handle_active_desc,
    // 2 of 5 runs). Emulated register access widens that window; it is a driver race, not a
    // device-model fault. See lab/dma/README.md.
    vm.shutdown().await.unwrap();
}

/// The PTDMA driver race, fixed: `v6.12+ptdma-claim-once` reads and acknowledges the status under
/// a lock, and four threads on the one queue pass. (Measured here: v6.12 failed 2 of 5 runs,
/// the fixed kernel passed 5 of 5.)
#[tokio::test]
async fn ptdma_four_threads_pass_with_the_claim_once_fix() {
    let lab = common::lab().await;
    let kernel = lab
        .prepare(&lab::variant::Variant::kernel("v6.12+ptdma-claim-once"))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
        .kernel;
    let vm = lab
        .boot(
            BootOptions::named("dma-ptdma-4threads")
                .kernel(kernel)
                .device(DeviceSpec::ptdma()),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(bound[0].driver, "ptdma");
    dmatest_ok(&vm, seed().threads_per_chan(4), 4).await;
    vm.shutdown().await.unwrap();
}

#[tokio::test]
async fn completions_follow_the_pinned_interrupt() {
    let (_lab, vm) = boot_with("dma-irq-pin", DeviceSpec::ioat(1).irq_on_cpus(0, &[2])).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    let irq = bound[0].irqs[0].to_string();
    let params = seed().noverify(true);
    let copies = u64::from(params.iterations);
    for cpu in [2u32, 5] {
        vm.sh(&format!("echo {cpu} > /proc/irq/{irq}/smp_affinity_list"))
            .await
            .unwrap();
        let before = Interrupts::read(&vm).await.unwrap();
        dmatest_ok(&vm, params.clone(), 1).await;
        let delta = Interrupts::read(&vm).await.unwrap().delta(&before, &irq);
        let total: u64 = delta.iter().sum();
        assert!(
            total >= copies,
            "only {total} completion interrupts: {delta:?}"
        );
        // x86 moves an MSI when it next fires, so the first interrupt after a re-pin may still
        // land on the old CPU; every other one must be on the new one.
        assert!(
            delta[cpu as usize] >= copies && total - delta[cpu as usize] <= 1,
            "pinned to CPU {cpu}, completions went {delta:?}"
        );
    }
    vm.shutdown().await.unwrap();
}

/// The guest writes garbage into every register of the BAR with the driver unbound; the device
/// keeps serving, and after a rebind the driver's self-test and dmatest pass again.
#[tokio::test]
async fn guest_scribbling_on_the_bar_does_not_break_the_device() {
    let (_lab, vm) = boot_with("dma-hostile", DeviceSpec::ioat(1)).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    let addr = &bound[0].pci_address;
    let script = format!(
        "set -e
         echo {addr} > /sys/bus/pci/drivers/ioatdma/unbind
         echo 1 > /sys/bus/pci/devices/{addr}/enable || true
         base=$(head -1 /sys/bus/pci/devices/{addr}/resource | cut -d' ' -f1)
         seed=12345
         for i in $(seq 400); do
           seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
           off=$(( (seed % 4096) & ~3 ))
           # Everything but the doorbell dword and the completion address: a random doorbell
           # would make the engine copy between random guest addresses, which breaks the guest
           # (as real hardware would), not the device.
           case $(( off >= 0x80 && off < 0x100 ? off - 0x80 : -1 )) in 4|24|28) continue ;; esac
           devmem $(printf 0x%x $((base + off))) 32 $seed
         done
         # Point the chain and completion addresses at memory the guest does not have and ring
         # the doorbell: the channel must halt with an error, not touch anything.
         devmem $(printf 0x%x $((base + 0x80 + 0x18))) 32 0xfffff000
         devmem $(printf 0x%x $((base + 0x80 + 0x1c))) 32 0xff
         devmem $(printf 0x%x $((base + 0x80 + 0x10))) 32 0xfffff000
         devmem $(printf 0x%x $((base + 0x80 + 0x14))) 32 0xff
         devmem $(printf 0x%x $((base + 0x80 + 0x06))) 16 1
         echo {addr} > /sys/bus/pci/drivers/ioatdma/bind
         sleep 1
         ls /sys/class/dma"
    );
    let out = vm.sh(&script).await.unwrap_or_else(|e| panic!("{e:#}"));
    assert!(out.contains("dma0chan0"), "no channel after rebind: {out}");
    dmatest_ok(&vm, seed(), 1).await;
    // The device process is still alive and serving.
    tokio::time::sleep(Duration::from_millis(100)).await;
    vm.shutdown().await.unwrap();
}
