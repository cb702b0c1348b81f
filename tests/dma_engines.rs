//! The emulated DMA engines in real guests: the unmodified upstream drivers bind, dmatest passes
//! with the seed parameters (and noverify, polled, 4 threads, 4 channels), completions follow the
//! pinned interrupt, and a guest scribbling over every register of both BARs (doorbells
//! included) with the drivers unbound cannot break the devices.
//!
//! These are correctness tests, so they run the seed's transfer size with fewer iterations than
//! the seed's 1000 and smaller buffers for the guest to verify (see [`seed`]).

mod common;

use std::time::Duration;

use lab::devices::{bind_and_pin, DeviceSpec};
use lab::observe::Interrupts;
use lab::workload::Dmatest;
use lab::BootOptions;

/// The seed's dmatest parameters with 300 iterations instead of 1000, enough to wrap ioatdma's
/// 256-descriptor ring and PTDMA's 32-entry queue several times per thread, and 128 KiB buffers
/// instead of 1 MiB (as S1's tests under TCG, tests/dma_wakeup.rs): with verification on,
/// dmatest checks both whole buffers after every copy, ~40 ms of TCG time at 1 MiB, an eighth
/// of that at 128 KiB. The transfers the devices see are the seed's (64 KiB, at offsets dmatest
/// picks inside the buffers); only the guest's own checking shrinks.
fn seed() -> Dmatest {
    Dmatest::seed_parameters()
        .iterations(300)
        .test_buf_size(common::S1_TCG_BUF_SIZE)
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

/// Shell helpers for the scribbling script: a seeded generator (`rnd` updates `$seed`), a BAR's
/// physical base (`bar ADDR INDEX`), a sized write (`w BASE OFFSET WIDTH VALUE`) and a random one
/// (`rw BASE LIMIT`).
const SCRIBBLE_HELPERS: &str = r#"
seed=12345
rnd() { seed=$(( (seed * 1103515245 + 12345) % 2147483648 )); }
bar() { sed -n "$(( $2 + 1 ))p" /sys/bus/pci/devices/$1/resource | cut -d' ' -f1; }
w() { devmem $(printf 0x%x $(( $1 + $2 ))) $3 $4; }
# Random offset (aligned to a random width) below $2 in the BAR at $1, random value.
rw() { rnd; wd=$(( 8 << (seed % 3) )); rnd; off=$(( (seed % $2) & ~(wd / 8 - 1) )); rnd; w $1 $off $wd $(( seed & ((1 << wd) - 1) )); }
"#;

/// Both engines in one guest, both drivers unbound (which clears Bus Master Enable). The guest
/// writes random values into every register of both BARs, doorbells included (I/OAT: the
/// global block and the channel block, DMACOUNT and CHANCMD among them; PTDMA: every register,
/// Q_TAIL_LO and Q_CONTROL's RUN among them), several times over, then random offsets and
/// widths, then points both engines at memory the guest does not have and rings them. Without
/// bus mastering nothing may move; both devices keep serving, and after a rebind dmatest passes
/// on each. (The MSI-X tables are QEMU's and are left alone.)
/// Guest-physical base of the reserved window the hostile test builds descriptors in.
const WINDOW: u64 = 0x800_0000;

#[tokio::test]
async fn guest_scribbling_on_the_bar_does_not_break_the_device() {
    let lab = common::lab().await;
    let vm = lab
        .boot(
            BootOptions::named("dma-hostile")
                // 1 MiB of RAM the kernel leaves alone, so the guest can build descriptors in
                // it with devmem and see whether an engine copied.
                .cmdline(&format!("memmap=1M${WINDOW:#x}"))
                .device(DeviceSpec::ioat(1))
                .device(DeviceSpec::ptdma()),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(
        (bound[0].driver.as_str(), bound[1].driver.as_str()),
        ("ioatdma", "ptdma")
    );
    let (io, pt) = (&bound[0].pci_address, &bound[1].pci_address);
    let script = format!(
        "set -e
         {SCRIBBLE_HELPERS}
         echo {io} > /sys/bus/pci/drivers/ioatdma/unbind
         echo {pt} > /sys/bus/pci/drivers/ptdma/unbind
         echo 1 > /sys/bus/pci/devices/{io}/enable || true
         echo 1 > /sys/bus/pci/devices/{pt}/enable || true
         io=$(bar {io} 0)
         pt=$(bar {pt} 2)
         for round in 1 2 3; do
           off=0
           while [ $off -lt 256 ]; do rnd; w $io $off 32 $seed; off=$((off + 4)); done
           for off in 0 4 8 16 64 512 4096 4100 4104 4108 4112 4352 4356 4360 4364 4368 4372 4376 4384 24580; do
             rnd; w $pt $off 32 $seed
           done
         done
         for i in $(seq 150); do rw $io 8192; rw $pt 32768; done
         # Chain and completion at memory the guest does not have, then the doorbell.
         w $io 0x98 32 0xfffff000; w $io 0x9c 32 0xff
         w $io 0x90 32 0xfffff000; w $io 0x94 32 0xff
         w $io 0x86 16 1
         # The queue at memory the guest does not have (address bits 47:32 = 0xff), a TAIL
         # outside the ring, RUN.
         w $pt 0x1008 32 0; w $pt 0x1004 32 0x10000; w $pt 0x1000 32 0xff0021
         # Well-formed work in RAM the guest owns: a 16-byte copy on each engine (I/OAT into
         # W+0x2000 with its completion word at W+0x3000, PTDMA into W+0x4000). A device that
         # ignored Bus Master Enable would perform both.
         W={WINDOW}
         for o in 0 4 8 12; do
           w $W $((0x1000 + o)) 32 0x5a5a5a5a; w $W $((0x2000 + o)) 32 0; w $W $((0x4000 + o)) 32 0
         done
         w $W 0x3000 32 0; w $W 0x3004 32 0
         w $W 0 32 16; w $W 4 32 9; w $W 8 32 $((W + 0x1000)); w $W 12 32 0
         w $W 16 32 $((W + 0x2000)); w $W 20 32 0; w $W 24 32 $((W + 0x40)); w $W 28 32 0
         w $io 0x84 8 0x20; w $io 0x80 16 0x1d
         w $io 0x98 32 $((W + 0x3000)); w $io 0x9c 32 0
         w $io 0x90 32 $W; w $io 0x94 32 0
         w $io 0x86 16 1
         Q=$((W + 0x10000))
         w $Q 0 32 0x00500012; w $Q 4 32 16; w $Q 8 32 $((W + 0x1000)); w $Q 12 32 0
         w $Q 16 32 $((W + 0x4000)); w $Q 20 32 0
         w $pt 0x1000 32 0; w $pt 0x1008 32 $Q; w $pt 0x1004 32 $((Q + 32)); w $pt 0x1000 32 0x21
         sleep 1
         echo untouched $(devmem $((W + 0x2000)) 32) $(devmem $((W + 0x3000)) 32) $(devmem $((W + 0x4000)) 32)
         # Both devices still answer: CHANCNT and the PTDMA version.
         echo ioat-chancnt $(devmem $(printf 0x%x $io) 8) pt-version $(devmem $(printf 0x%x $((pt + 0x10))) 32)
         echo {io} > /sys/bus/pci/drivers/ioatdma/bind
         echo {pt} > /sys/bus/pci/drivers/ptdma/bind
         sleep 1
         echo ioat-chan $(ls /sys/bus/pci/devices/{io}/dma)
         echo pt-chan $(ls /sys/bus/pci/devices/{pt}/dma)"
    );
    let t = std::time::Instant::now();
    let out = vm.sh(&script).await.unwrap_or_else(|e| panic!("{e:#}"));
    println!("scribbling and rebinding took {:.1?}:\n{out}", t.elapsed());
    assert!(
        out.contains("untouched 0x00000000 0x00000000 0x00000000"),
        "an engine moved data with bus mastering off: {out}"
    );
    assert!(
        out.contains("ioat-chancnt 0x01") && out.contains("pt-version 0x00008001"),
        "a device stopped answering: {out}"
    );
    let chan = |tag: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(tag))
            .and_then(|rest| rest.split_whitespace().find(|c| c.contains("chan")))
            .unwrap_or_else(|| panic!("no {tag}channel after rebind: {out}"))
            .to_string()
    };
    let (io_chan, pt_chan) = (chan("ioat-chan "), chan("pt-chan "));
    dmatest_ok(&vm, seed().channel(&io_chan), 1).await;
    dmatest_ok(&vm, seed().channel(&pt_chan), 1).await;
    // The device processes are still alive and serving.
    tokio::time::sleep(Duration::from_millis(100)).await;
    vm.shutdown().await.unwrap();
}
