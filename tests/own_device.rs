//! A device and a scenario defined here, in the test file, with nothing added to the lab: QEMU's
//! `virtio-rng-pci` as a `lab::devices::Device` of this file's own making, and a scenario that
//! pins its request queue's interrupt, reads the guest's `/dev/hwrng` and measures where the
//! device's interrupts ran. It runs through `Experiment` like a shipped scenario and gives a
//! table, a record and a page. And the lab's NIC carries traffic: UDP datagrams sent at a set
//! rate reach a receiver in the guest through the NIC's interrupt.

mod common;

use anyhow::{Context, Result};
use lab::devices::nic::{guest_setup, Traffic, UdpFlow};
use lab::devices::{bind_and_pin, Attached, Attachment, Device, DeviceSpec, GuestDriver};
use lab::experiment::{Boot, BootPlan, Experiment, Measurement, MetricDef, Scenario};
use lab::observe::Interrupts;
use lab::report::Direction;
use lab::stats::Decision;
use lab::topology::Topology;
use lab::variant::Variant;
use lab::BootOptions;
use serde::{Deserialize, Serialize};

/// QEMU's virtio RNG on PCI: one request queue, so two MSI-X vectors (configuration, requests).
#[derive(Debug)]
struct VirtioRng;

#[lab::devices::async_trait]
impl Device for VirtioRng {
    fn label(&self) -> String {
        "virtio-rng".into()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({"virtio-rng": {}})
    }

    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
        Ok(Attached {
            qemu_args: vec![
                "-device".into(),
                format!("virtio-rng-pci,id={},addr={}", at.id, at.slot),
            ],
            ..Attached::default()
        })
    }

    /// virtio_rng is built into the lab's kernels (`CONFIG_HW_RANDOM_VIRTIO`); it is ready when
    /// it has registered itself as a hardware RNG.
    fn guest_driver(&self) -> GuestDriver {
        GuestDriver::new(
            "virtio-pci",
            None,
            "grep -q virtio_rng /sys/class/misc/hw_random/rng_available",
        )
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The RNG's request vector pinned to a CPU while a reader on another CPU drains `/dev/hwrng`.
struct RngInterrupts {
    params: RngParams,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RngParams {
    /// The guest CPU the request queue's vector is pinned to.
    irq_cpu: u32,
    /// The CPU the reader runs on.
    reader_cpu: u32,
    /// Bytes read from `/dev/hwrng` per boot.
    bytes: u32,
}

/// The virtio-pci request queue's vector: MSI-X vector 1 (vector 0 is configuration changes).
const REQUEST_VECTOR: usize = 1;

impl Scenario for RngInterrupts {
    type Params = RngParams;

    fn name(&self) -> &str {
        "rng-interrupts"
    }

    fn description(&self) -> &str {
        "where a virtio RNG's request interrupts run while a reader drains /dev/hwrng"
    }

    fn params(&self) -> &RngParams {
        &self.params
    }

    fn topology(&self) -> &str {
        "ci-smt"
    }

    fn default_variants(&self) -> Vec<Variant> {
        vec![
            Variant::kernel("v6.12"),
            Variant::kernel("v6.12")
                .with_sched_feature("NO_RUN_TO_PARITY")
                .named("no-rtp"),
        ]
    }

    fn metrics(&self) -> Vec<MetricDef> {
        vec![
            // The interrupt's split: 100% on its pinned CPU whatever the scheduler does; 10
            // points the smallest change that matters.
            MetricDef::share("irq_on_pinned_cpu", 10.0).primary(),
            MetricDef::new("requests", "", Direction::Neutral, 0.0).non_negative(),
        ]
    }

    fn plan(&self, params: &RngParams, topology: &Topology) -> Result<BootPlan> {
        let cpus = topology.nr_cpus();
        anyhow::ensure!(
            params.irq_cpu < cpus && params.reader_cpu < cpus,
            "irq_cpu {} and reader_cpu {} must be CPUs of the {cpus}-CPU guest",
            params.irq_cpu,
            params.reader_cpu
        );
        Ok(BootPlan {
            devices: vec![DeviceSpec::new(VirtioRng).irq_on_cpus(REQUEST_VECTOR, &[params.irq_cpu])],
            ..BootPlan::default()
        })
    }

    async fn measure(&self, params: &RngParams, boot: &Boot<'_>) -> Result<Measurement> {
        let irq = boot.devices[0].irqs[REQUEST_VECTOR].to_string();
        let before = Interrupts::parse(&boot.vm.sh("cat /proc/interrupts").await?)?;
        // The reader's own command in the guest; hwrng hands out at most 64 bytes a request.
        boot.vm
            .sh(&format!(
                "echo virtio_rng.0 > /sys/class/misc/hw_random/rng_current 2>/dev/null || true\n\
                 taskset -c {} dd if=/dev/hwrng of=/dev/null bs=64 count={} 2>/dev/null",
                params.reader_cpu,
                params.bytes / 64
            ))
            .await?;
        let after = Interrupts::parse(&boot.vm.sh("cat /proc/interrupts").await?)?;
        let per_cpu = after.delta(&before, &irq);
        let total: u64 = per_cpu.iter().sum();
        anyhow::ensure!(total > 0, "the RNG's request IRQ {irq} never fired");
        let on_pinned = per_cpu.get(params.irq_cpu as usize).copied().unwrap_or(0);
        let mut m = Measurement::default();
        m.metrics.insert(
            "irq_on_pinned_cpu".into(),
            100.0 * on_pinned as f64 / total as f64,
        );
        m.metrics.insert("requests".into(), total as f64);
        m.details = serde_json::json!({ "irq": irq, "per_cpu": per_cpu });
        Ok(m)
    }
}

#[tokio::test]
async fn a_device_and_a_scenario_of_a_test_file_give_a_table_and_a_page() {
    let lab = common::lab().await;
    let results = tempfile::tempdir().unwrap();
    let scenario = RngInterrupts {
        params: RngParams {
            irq_cpu: 2,
            reader_cpu: 0,
            bytes: 64 * 256,
        },
    };
    let outcome = common::run_on(
        &lab,
        Experiment::new(scenario)
            .seed(20261202)
            .results_root(results.path()),
    )
    .await;
    let c = outcome.comparison();
    // The interrupt stays where it was pinned with either feature: SAME within ±10 points
    // (measured 2026-12-02: 99.6% on CPU 2 in every boot, 256-257 requests; the one elsewhere
    // is the first after pinning, which x86 still delivers to the old CPU), at 19 boots a side,
    // what SAME needs at 10 points of a share (issue V3; 100 s on the 2-core EPYC, 2026-12-07).
    let verdict = c
        .assert_same("irq_on_pinned_cpu", "no-rtp")
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(verdict.decision, Decision::Same);
    // The record keeps the device as this file describes it; the page and table were written.
    let manifest = serde_json::to_string(&outcome.record.manifest).unwrap();
    assert!(manifest.contains("virtio-rng"), "{manifest}");
    let table = std::fs::read_to_string(&outcome.table_path).unwrap();
    assert!(table.contains("irq_on_pinned_cpu"), "{table}");
    let page = outcome.html_path.as_ref().expect("a page");
    let html = std::fs::read_to_string(page).unwrap();
    assert!(html.contains("rng-interrupts") && html.contains("irq_on_pinned_cpu"));
}

#[tokio::test]
async fn udp_sent_at_a_set_rate_reaches_a_receiver_through_the_nic_interrupt() {
    let lab = common::lab().await;
    let nic_cpu = 1;
    let vm = lab
        .boot(
            BootOptions::named("nic-traffic")
                .topology("ci-smt")
                .device(DeviceSpec::nic().irq_on_cpus(1, &[nic_cpu])),
        )
        .await
        .unwrap();
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    let ifc = vm.sh(&guest_setup(&bound[0].pci_address, 0)).await.unwrap();
    let traffic = vm.devices()[0]
        .host_part::<Traffic>()
        .expect("the NIC's host side is its traffic source");
    let port = 9000;
    let flow = UdpFlow {
        port,
        payload: 256,
        rate: 500.0,
        count: 1000,
    };
    let before = Interrupts::parse(&vm.sh("cat /proc/interrupts").await.unwrap()).unwrap();
    // The receiver first (it writes its ready file once bound), then the flow.
    let receiver = lab::guest::GuestCommand::shell(format!(
        "taskset -c 3 lab-udp-sink --port {port} --count {} --idle-ms 3000 --ready /tmp/sink.ready",
        flow.count
    ));
    let sink = vm.exec(&receiver);
    let send = async {
        vm.sh("while [ ! -e /tmp/sink.ready ]; do sleep 0.05; done")
            .await
            .context("waiting for the receiver")?;
        traffic.send_udp(&flow).await
    };
    let (sink, sent) = tokio::join!(sink, send);
    let sink = sink.unwrap();
    let sent = sent.unwrap();
    assert!(sink.success(), "{}", String::from_utf8_lossy(&sink.stderr));
    let got: serde_json::Value = serde_json::from_slice(&sink.stdout).unwrap();
    let after = Interrupts::parse(&vm.sh("cat /proc/interrupts").await.unwrap()).unwrap();
    let rx_irq = bound[0].irqs[1].to_string();
    let per_cpu = after.delta(&before, &rx_irq);
    let stats = vm
        .sh(&format!(
            "cat /sys/class/net/{}/statistics/rx_packets",
            ifc.trim()
        ))
        .await
        .unwrap();
    println!(
        "sent {sent:?} ({:.0}/s), received {got}, rx_packets {}, rx IRQ {rx_irq} per CPU {per_cpu:?}, {} frames from the guest",
        sent.rate(),
        stats.trim(),
        traffic.frames_from_guest()
    );
    // Every datagram QEMU took reached the receiver, in order, at about the set rate (measured
    // 2026-12-02: 1000 of 1000 at 500/s, 995 of the 996 receive interrupts on CPU 1).
    assert_eq!(sent.frames + sent.dropped, flow.count);
    assert_eq!(got["received"], sent.frames, "{got}");
    assert_eq!(got["out_of_order"], 0, "{got}");
    assert!(
        sent.rate() > 0.8 * flow.rate && sent.rate() < 1.2 * flow.rate,
        "{sent:?}"
    );
    // Through the NIC's receive interrupt, on the CPU it was pinned to.
    let total: u64 = per_cpu.iter().sum();
    assert!(total > 0, "no receive interrupts: {per_cpu:?}");
    assert!(
        per_cpu[nic_cpu as usize] * 100 >= total * 95,
        "receive interrupts per CPU {per_cpu:?}, pinned to {nic_cpu}"
    );
    vm.shutdown().await.unwrap();
}
