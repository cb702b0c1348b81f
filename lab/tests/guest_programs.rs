//! The `sched` guest image end to end: hackbench (rt-tests) and numactl, taken from their Debian
//! packages with only their shared libraries and loader, run in a booted guest.
//!
//! Needs the default kernel built (`lab prepare`; minutes cold) and QEMU: without either it
//! prints SKIPPED and why, rather than building a kernel inside a library test.

use std::time::Duration;

use lab::cache::Cache;
use lab::guest::GuestCommand;
use lab::kernel::{self, BuildOptions};
use lab::topology::Topology;
use lab::{BootOptions, Lab};

const TOPOLOGY: &str = "ci-2node-4llc";

/// Why the default kernel cannot be booted without building it, if it cannot.
fn default_kernel_missing(cache: &Cache) -> Option<String> {
    let name =
        std::env::var("LAB_DEFAULT_KERNEL").unwrap_or_else(|_| kernel::DEFAULT_RECIPE.into());
    if name == kernel::DEBIAN {
        return None;
    }
    let keys = match kernel::current_keys(cache, &BuildOptions::default()) {
        Ok(keys) => keys,
        Err(e) => return Some(format!("cannot tell whether kernel {name} is built: {e:#}")),
    };
    match keys.iter().find(|(recipe, _)| *recipe == name) {
        Some((_, key)) if cache.lookup(kernel::KIND, key).is_some() => None,
        Some((_, key)) => Some(format!("kernel {name} (key {key}) is not built")),
        None => Some(format!("no kernel recipe {name}")),
    }
}

#[tokio::test]
async fn sched_image_runs_hackbench_and_numactl() {
    lab::progress::install_for_stderr();
    let cache = Cache::from_env().expect("the lab's cache");
    if let Some(why) = default_kernel_missing(&cache) {
        eprintln!("SKIPPED: {why}; `lab prepare` builds it (minutes), then run this test again");
        return;
    }
    let lab = match Lab::from_env_async().await {
        Ok(lab) => lab,
        Err(e) => {
            eprintln!("SKIPPED: the lab cannot start on this host (QEMU, accelerator): {e:#}");
            return;
        }
    };

    let image = lab
        .image_for("sched", lab.default_kernel())
        .await
        .unwrap_or_else(|e| panic!("building the sched image: {e:#}"));
    for file in [
        "usr/bin/hackbench",
        "usr/bin/numactl",
        "lib64/ld-linux-x86-64.so.2",
    ] {
        assert!(
            image.program_files.iter().any(|f| f == file),
            "{file} not among the image's program files {:?}",
            image.program_files
        );
    }

    let vm = lab
        .boot(BootOptions {
            image: Some("sched".into()),
            ..BootOptions::named("image-sched-programs").topology(TOPOLOGY)
        })
        .await
        .unwrap_or_else(|e| panic!("booting the sched image: {e:#}"));
    let guest = vm.guest();

    let out = guest
        .exec(
            &GuestCommand::new(["hackbench", "-T", "-g", "1", "-f", "2", "-l", "10"])
                .timeout(Duration::from_secs(120)),
        )
        .await
        .unwrap();
    assert_eq!(
        out.exit_code(),
        0,
        "hackbench failed:\n{}\n{}",
        out.stdout_str(),
        out.stderr_str()
    );
    eprintln!("hackbench in the guest:\n{}", out.stdout_str());
    assert!(
        out.stdout_str().contains("Time:"),
        "hackbench printed no time:\n{}",
        out.stdout_str()
    );

    let out = guest
        .exec(&GuestCommand::new(["numactl", "--hardware"]))
        .await
        .unwrap();
    assert_eq!(
        out.exit_code(),
        0,
        "numactl --hardware failed:\n{}\n{}",
        out.stdout_str(),
        out.stderr_str()
    );
    let nodes = Topology::by_name(TOPOLOGY).unwrap().nodes().len();
    assert!(
        out.stdout_str()
            .contains(&format!("available: {nodes} nodes (0-{})", nodes - 1)),
        "numactl does not see the topology's {nodes} nodes:\n{}",
        out.stdout_str()
    );

    // Only the programs' libraries came along, not their packages' dependencies (rt-tests
    // depends on python3).
    let out = guest
        .exec(&GuestCommand::shell(
            "test ! -e /usr/bin/python3 && test -L /usr/lib/x86_64-linux-gnu/libnuma.so.1",
        ))
        .await
        .unwrap();
    assert_eq!(
        out.exit_code(),
        0,
        "python3 is in the image or libnuma's soname link is not a link"
    );
    vm.shutdown().await.unwrap();
}
