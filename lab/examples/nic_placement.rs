//! S1 through a NIC in Rust (the file form: `scenarios/nic-wakeup.toml`): where a woken UDP
//! receiver runs, the receive IRQ in another LLC. `cargo run --example nic_placement -- compare nic-placement`

use anyhow::{Context, Result};
use lab::devices::{nic, DeviceSpec};
use lab::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use lab::observe::{parse_trace_off_thread, task_wakeups, warm_up_irq};
use lab::observe::{Attribution, TaskPlacement, TaskTrace};
use lab::report::{Mark, Picture};
use lab::topology::Topology;
use lab::variant::Variant;
use lab::workload::choreography::{control_shell, start_pinned_then_widen, wait_for_file};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

/// `--set start_cpu=N`, `--set placement=same-llc|cross-llc|remote-node`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Params {
    start_cpu: u32,
    placement: String,
}

impl Params {
    fn irq_cpu(&self, t: &Topology) -> Result<u32> {
        let cpu = match self.placement.as_str() {
            "same-llc" => t.same_llc_cpu(self.start_cpu),
            "cross-llc" => t.cross_llc_cpu(self.start_cpu),
            "remote-node" => t.remote_node_cpu(self.start_cpu),
            other => anyhow::bail!("placement {other:?}: same-llc, cross-llc or remote-node"),
        };
        cpu.with_context(|| format!("{} has no {} CPU", t.name(), self.placement))
    }
}

#[derive(Clone)]
struct NicPlacement(Params);
const RECEIVER: &str = "lab-udp-sink";
const FLOW: nic::UdpFlow = nic::UdpFlow {
    port: 9000,
    payload: 64,
    rate: 1000.0,
    count: 4000,
};

impl Scenario for NicPlacement {
    type Params = Params;

    fn name(&self) -> &str {
        "nic-placement"
    }

    fn description(&self) -> &str {
        "S1 through a NIC, in Rust: where a UDP receiver runs when the receive IRQ is in another LLC"
    }

    fn params(&self) -> &Params {
        &self.0
    }

    fn default_variants(&self) -> Vec<Variant> {
        vec![
            Variant::kernel("v6.12"),
            Variant::kernel("v6.12+wake-affine-idle-revert"),
        ]
    }

    fn metrics(&self) -> Vec<MetricDef> {
        vec![
            MetricDef::share("share_on_irq_cpu", 20.0).primary(),
            MetricDef::share("share_in_irq_llc", 5.0),
        ]
    }

    fn plan(&self, p: &Params, topology: &Topology) -> Result<BootPlan> {
        // Vector 1 of a virtio NIC is its receive queue.
        let nic = DeviceSpec::nic().irq_on_cpus(1, &[p.irq_cpu(topology)?]);
        Ok(BootPlan {
            devices: vec![nic],
            ..BootPlan::default()
        })
    }

    fn picture(&self) -> Option<Picture> {
        let irq = Mark {
            label: "IRQ".into(),
            cpu: "/irq_cpu".into(),
        };
        Some(Picture {
            task: RECEIVER.into(),
            quantity: "time on CPU (trace)".into(),
            per_cpu: "/placement/runtime_us".into(),
            marks: vec![irq],
        })
    }

    async fn measure(&self, p: &Params, boot: &Boot<'_>) -> Result<Measurement> {
        let (vm, topology) = (boot.vm, boot.topology);
        let (start, irq_cpu) = (p.start_cpu, p.irq_cpu(topology)?);
        let device = boot.devices.first().context("no NIC bound")?;
        let irq = *device.irqs.get(1).context("no receive vector")?;
        vm.sh(&nic::guest_setup(&device.pci_address, 0)).await?;
        let wire = vm.devices()[0]
            .host_part::<nic::Traffic>()
            .context("no wire")?;
        // x86 moves a pinned interrupt at its next arrival: one datagram to a closed port first.
        let poke = nic::UdpFlow {
            port: 9,
            count: 1,
            ..FLOW
        };
        warm_up_irq(vm, irq, 10, || async {
            wire.send_udp(&poke).await.map(drop)
        })
        .await?;
        let trace = TaskTrace::of(RECEIVER).with_irq_number(irq);
        trace.start(vm).await?;
        vm.wait_for_uptime(Duration::from_secs(3)).await;
        let control = topology.cpu_outside_llcs(&[start, irq_cpu]);
        let receiver = format!("{RECEIVER} --port 9000 --count 4000 --idle-ms 3000 --ready /tmp/r");
        let script = control_shell(control) + &start_pinned_then_widen(start, &receiver, "/tmp/r");
        let traffic = async {
            vm.sh(&wait_for_file("/tmp/r", control)).await?;
            wire.send_udp(&FLOW).await
        };
        let (out, _sent) = tokio::try_join!(vm.sh(&script), traffic)?;
        boot.keep("receiver.out", &out).await?;
        let (_, events) = parse_trace_off_thread(trace.stop(vm).await?).await?;
        let placement = TaskPlacement::from_events(RECEIVER, &events, topology);
        let attribution = Attribution::of(&task_wakeups(RECEIVER, &events), topology);
        let irq_llc = &topology.llc_of(irq_cpu).context("no LLC")?.cpus;
        let mut m = Measurement::default();
        let share = placement.share_on(&[irq_cpu]).context("never ran")?;
        m.metrics.insert("share_on_irq_cpu".into(), share);
        let in_llc = placement.share_on(irq_llc).unwrap_or(0.0);
        m.metrics.insert("share_in_irq_llc".into(), in_llc);
        // The attribution (which wakeups moved it) goes with the details onto the page.
        m.details = json!({ "irq_cpu": irq_cpu, "start_cpu": start,
            "placement": placement, "attribution": attribution });
        Ok(m)
    }
}

fn main() {
    let params = Params {
        start_cpu: 0,
        placement: "cross-llc".into(),
    };
    lab::cli::main_with(vec![lab::scenarios::Extra::new(NicPlacement(params))]);
}
