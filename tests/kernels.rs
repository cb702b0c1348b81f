//! Kernels as recipes: two lab-built kernels boot side by side and each guest reports its own
//! identity; a scheduler-feature variant is in effect in the guest; the default (lab-minimal)
//! kernel has, and serves, everything the lab reads in a guest.
//!
//! What the default kernel must do for each device kind is exercised where the devices are:
//! NVMe and the NIC bind and get pinned in `tests/devices.rs`, ioatdma and ptdma bind and pass
//! dmatest with their completions on the pinned CPU in `tests/dma_engines.rs`; topology (nodes,
//! distances, LLCs, SMT) is checked in `tests/topology.rs`.

mod common;

use lab::observe::{parse_trace, TaskTrace};
use lab::variant::Variant;
use lab::BootOptions;

#[tokio::test]
async fn base_and_patched_kernels_boot_side_by_side_with_their_identities() {
    let lab = common::lab().await;
    let base = lab.prepare(&Variant::kernel("v6.12")).await.unwrap().kernel;
    let patched = lab
        .prepare(&Variant::kernel("v6.12+wake-affine-idle-revert"))
        .await
        .unwrap()
        .kernel;
    assert_ne!(
        base.release, patched.release,
        "two recipes built to the same release"
    );

    // Both guests at once: the side-by-side unit of the lab.
    let (vm_base, vm_patched) = tokio::join!(
        lab.boot(BootOptions::named("kernels-base").kernel(base.clone())),
        lab.boot(BootOptions::named("kernels-patched").kernel(patched.clone())),
    );
    let (vm_base, vm_patched) = (vm_base.unwrap(), vm_patched.unwrap());
    let uname_base = vm_base.sh("uname -r; uname -v").await.unwrap();
    let uname_patched = vm_patched.sh("uname -r; uname -v").await.unwrap();
    println!("base:    {uname_base}patched: {uname_patched}");
    assert!(
        uname_base.starts_with(&base.release),
        "{uname_base} is not {}",
        base.release
    );
    assert!(
        uname_patched.starts_with(&patched.release),
        "{uname_patched} is not {}",
        patched.release
    );
    assert_ne!(uname_base, uname_patched);

    // The build manifest of the variant (`manifest.json` beside its bzImage) lists the applied
    // patch, with its checksum.
    let patches_of = |kernel: &lab::kernel::BootKernel| -> Vec<String> {
        let path = kernel.image.parent().unwrap().join("manifest.json");
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["patches"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no patches list", path.display()))
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    let patches = patches_of(&patched);
    assert!(
        patches
            .iter()
            .any(|p| p.contains("wake-affine-idle-revert")),
        "manifest patches: {patches:?}"
    );
    assert!(
        patches_of(&base).is_empty(),
        "v6.12 should carry no patches"
    );

    // Modules of each kernel are in its own image: the DMA drivers and dmatest load.
    for vm in [&vm_base, &vm_patched] {
        vm.sh("modprobe ioatdma && modprobe ptdma && modprobe dmatest && lsmod | grep -q dmatest")
            .await
            .unwrap();
    }
    vm_base.shutdown().await.unwrap();
    vm_patched.shutdown().await.unwrap();
}

#[tokio::test]
async fn sched_feature_variant_is_in_effect_in_the_guest() {
    let lab = common::lab().await;
    let variant = Variant::kernel("v6.12").with_sched_feature("NO_RUN_TO_PARITY");
    assert_eq!(variant.name, "v6.12@feature=NO_RUN_TO_PARITY");
    let ready = lab.prepare(&variant).await.unwrap();
    // The same kernel without the variant's settings boots with the default.
    let plain = lab
        .boot(BootOptions::named("kernels-sched-default").kernel(ready.kernel.clone()))
        .await
        .unwrap();
    let default = plain
        .sh("cat /sys/kernel/debug/sched/features")
        .await
        .unwrap();
    assert!(
        default.split_whitespace().any(|f| f == "RUN_TO_PARITY"),
        "{default}"
    );
    plain.shutdown().await.unwrap();
    // With them, the boot itself applies the feature: nothing for the caller to remember.
    let vm = lab
        .boot(BootOptions::named("kernels-sched-feature").ready_kernel(ready))
        .await
        .unwrap();
    let features = vm.sh("cat /sys/kernel/debug/sched/features").await.unwrap();
    let words: Vec<&str> = features.split_whitespace().collect();
    assert!(words.contains(&"NO_RUN_TO_PARITY"), "{features}");
    assert!(!words.contains(&"RUN_TO_PARITY"), "{features}");
    vm.shutdown().await.unwrap();
}

/// `lab run --kernel RECIPE` boots the recipe as a comparison does: a recipe whose `[boot]`
/// table sets a scheduler feature and a sysctl has both in effect in the guest. (v6.12's own
/// recipe, copied with its settings changed: settings are not part of the build key, so the
/// cached kernel is used.)
#[tokio::test]
async fn lab_run_applies_the_recipes_boot_settings() {
    drop(common::lab().await);
    let Some(lab_bin) = common::lab_binary("lab run with a recipe's settings") else {
        return;
    };
    let recipes = tempfile::tempdir().unwrap();
    let shipped = lab::repo_path("images/kernels");
    let copy = std::process::Command::new("cp")
        .arg("-r")
        .arg(shipped.join("."))
        .arg(recipes.path())
        .status()
        .unwrap();
    assert!(copy.success());
    let recipe = recipes.path().join("v6.12.toml");
    let text = std::fs::read_to_string(&recipe).unwrap();
    let changed = text
        .replace(
            "sched_features = []",
            "sched_features = [\"NO_RUN_TO_PARITY\"]",
        )
        .replace(
            "sysctls = {}",
            "sysctls = { \"kernel.sched_rt_runtime_us\" = \"900000\" }",
        );
    assert_ne!(text, changed, "v6.12.toml's [boot] table changed shape");
    std::fs::write(&recipe, changed).unwrap();
    let out = std::process::Command::new(lab_bin)
        .env("LAB_KERNEL_RECIPES", recipes.path())
        .args(["run", "--kernel", "v6.12", "--", "sh", "-c"])
        .arg("cat /sys/kernel/debug/sched/features; cat /proc/sys/kernel/sched_rt_runtime_us")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let words: Vec<&str> = stdout.split_whitespace().collect();
    assert!(words.contains(&"NO_RUN_TO_PARITY"), "{stdout}");
    assert!(!words.contains(&"RUN_TO_PARITY"), "{stdout}");
    assert_eq!(words.last(), Some(&"900000"), "{stdout}");
}

/// The default kernel's own config (`/proc/config.gz`) has every symbol of
/// the lab's kernel needs (`lab::kernel::unmet_needs`), and what the lab reads works: the agent's mounts, cgroup v2
/// controllers, the scheduler's debugfs and sysctl files, IRQ affinity files, and the four
/// tracefs events `lab::observe` records.
#[tokio::test]
async fn the_default_kernel_has_and_serves_what_the_lab_reads() {
    default_kernel_serves_the_lab(lab::DEFAULT_TOPOLOGY).await;
}

/// The same of the arm64 default kernel (`v6.12-arm64`, cross-built) on the aarch64 topology.
#[tokio::test]
async fn the_arm64_default_kernel_has_and_serves_what_the_lab_reads() {
    default_kernel_serves_the_lab("ci-arm64-2node").await;
}

/// Under TCG on an x86 host an x86 guest's delay loop gets the host's TSC rate as `lpj=`
/// (lab/src/vm/delay.rs) instead of being calibrated again on every CPU: the kernel must take
/// it (its "preset value" line), every CPU must have it, and it must be the guest's own TSC
/// cycles per jiffy (its detected TSC rate over `CONFIG_HZ`, within 0.5%). Elsewhere the guest
/// calibrates for itself and no `lpj=` is given.
async fn assert_delay_loop(lab: &lab::Lab, vm: &lab::vm::Vm, config: &str) {
    let accel = lab.accelerator_for(lab::arch::Arch::X86_64);
    let host_constant_tsc = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "constant_tsc"));
    let preset = lab::arch::Arch::host() == lab::arch::Arch::X86_64
        && ["tcg-single", "tcg-multi"].contains(&accel)
        && host_constant_tsc;
    let out = vm
        .sh("cat /proc/cmdline\n\
             dmesg | grep -E 'Calibrating delay loop|tsc: Detected'\n\
             echo distinct_bogomips $(grep bogomips /proc/cpuinfo | sort -u | wc -l)\n")
        .await
        .unwrap();
    let lpj: Option<u64> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("lpj="))
        .map(|v| v.parse().unwrap());
    if !preset {
        assert_eq!(lpj, None, "{accel}: the guest calibrates for itself\n{out}");
        return;
    }
    let lpj = lpj.unwrap_or_else(|| panic!("{accel} on an x86 host: no lpj= given\n{out}"));
    assert!(out.contains("(skipped) preset value"), "{out}");
    assert!(out.contains("distinct_bogomips 1\n"), "{out}");
    let hz: f64 = config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .unwrap()
        .parse()
        .unwrap();
    let mhz: f64 = out
        .lines()
        .find_map(|l| l.split("tsc: Detected ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no detected TSC rate\n{out}"))
        .parse()
        .unwrap();
    let given = lpj as f64 * hz / 1e6;
    assert!(
        (given / mhz - 1.0).abs() < 0.005,
        "lpj={lpj} at HZ={hz} is {given:.3} MHz, the guest's TSC {mhz} MHz\n{out}"
    );
}

async fn default_kernel_serves_the_lab(topology: &str) {
    let lab = common::lab().await;
    let vm = lab
        .boot(BootOptions::named("kernels-lab-needs").topology(topology))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let x86 = lab::topology::Topology::by_name(topology).unwrap().arch() == lab::arch::Arch::X86_64;

    let config = vm.sh("zcat /proc/config.gz").await.unwrap();
    let unmet = lab::kernel::unmet_needs(&config);
    assert!(
        unmet.is_empty(),
        "the default kernel lacks what the lab needs: {unmet:#?}"
    );

    let facts = vm
        .sh("echo mounts $(awk '{print $3}' /proc/mounts | sort -u)\n\
             echo controllers $(cat /sys/fs/cgroup/cgroup.controllers)\n\
             echo features $(wc -w < /sys/kernel/debug/sched/features)\n\
             echo schedstat $(head -1 /proc/schedstat)\n\
             echo nodes $(cat /sys/devices/system/node/online)\n\
             echo numa_balancing $(cat /proc/sys/kernel/numa_balancing)\n\
             irq=$(awk -F: '/virtio/ {print $1; exit}' /proc/interrupts | tr -d ' ')\n\
             echo effective $(cat /proc/irq/$irq/effective_affinity_list)\n\
             echo filesystems $(awk '{print $NF}' /proc/filesystems | sort -u)\n\
             echo year $(date +%Y)\n")
        .await
        .unwrap();
    println!("{facts}");
    let fact = |key: &str| -> Vec<String> {
        facts
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no {key} in {facts}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let has = |key: &str, want: &[&str]| {
        let got = fact(key);
        for w in want {
            assert!(got.iter().any(|g| g == w), "{key}: no {w} in {got:?}");
        }
    };
    // What the agent mounts as PID 1 (lab/agent/src/main.rs), each one a kernel feature.
    has(
        "mounts",
        &[
            "proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "debugfs", "tracefs", "cgroup2",
        ],
    );
    has("controllers", &["cpu", "cpuset"]);
    has("filesystems", &["ext4"]);
    assert!(fact("features")[0].parse::<u32>().unwrap() > 10, "{facts}");
    assert_eq!(fact("schedstat")[0], "version", "{facts}");
    // NUMA balancing is on by default wherever there is more than one node.
    let multi_node = fact("nodes")[0].contains(['-', ',']);
    assert_eq!(fact("numa_balancing"), [if multi_node { "1" } else { "0" }]);
    assert!(!fact("effective").is_empty(), "{facts}");
    // The wall-clock date from the CMOS clock (read by x86 setup code, no RTC driver needed);
    // lab-minimal-arm64 has no PL031 RTC driver, so an arm64 guest's clock starts at 1970.
    if x86 {
        assert!(fact("year")[0].parse::<u32>().unwrap() >= 2024, "{facts}");
        assert_delay_loop(&lab, &vm, &config).await;
    }

    // The events lab::observe records, all at once: every task, and the agent's virtio-serial
    // interrupt (each request from the host raises it). Changing the shell's CPU twice makes a
    // migration whatever CPU it started on.
    let trace = TaskTrace::of("").with_irq("virtio");
    trace.start(&vm).await.unwrap();
    vm.sh("taskset -c 2 true; taskset -c 6 true; sleep 0.05")
        .await
        .unwrap();
    let text = trace.stop(&vm).await.unwrap();
    let events = parse_trace(&text);
    for name in [
        "sched_switch",
        "sched_waking",
        "sched_wakeup",
        "sched_migrate_task",
        "irq_handler_entry",
    ] {
        let n = events.iter().filter(|e| e.name == name).count();
        assert!(n > 0, "no {name} among {} events", events.len());
    }
    vm.shutdown().await.unwrap();
}
