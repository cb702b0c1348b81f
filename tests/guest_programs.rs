//! The `sched` guest image end to end: hackbench (rt-tests) and numactl, taken from their Debian
//! packages with only their shared libraries and loader, run in a booted guest.
//!
//! Like every VM test it runs after nextest's setup script (`lab prepare`) has built the
//! default kernels; a host where the lab cannot start fails it, saying why.

mod common;

use std::time::Duration;

use lab::guest::GuestCommand;
use lab::topology::Topology;
use lab::BootOptions;

const TOPOLOGY: &str = "ci-2node-4llc";

#[tokio::test]
async fn sched_image_runs_hackbench_and_numactl() {
    let lab = common::lab().await;

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
        .boot(
            BootOptions::named("image-sched-programs")
                .topology(TOPOLOGY)
                .image("sched"),
        )
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
