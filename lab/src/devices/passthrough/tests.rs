//! Passthrough against a fake sysfs tree whose bind/unbind/driver_override writes are acted
//! out as the kernel would ([`Sysfs::emulated`]); the killed-lab tests take a device in a child
//! process (this test binary, re-run) and SIGKILL it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use crate::devices::sysfs::fake::FakeSys;
use crate::devices::{resolve, DeviceSpec, Passthrough};
use crate::hosts::{PciId, StandIn};

const IOAT: &str = "0000:00:04.0";
const IOAT2: &str = "0000:00:04.1";
const BRIDGE: &str = "0000:00:1c.0";
const NVME: &str = "0000:41:00.0";
const NIC: &str = "0000:41:00.1";

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn host_device(name: &str, addr: &str, id: &str, stands_in: StandIn) -> HostDevice {
    HostDevice {
        name: name.into(),
        bdf: bdf(addr),
        id: id.parse::<PciId>().unwrap(),
        stands_in,
        declared_at: "hosts/test.toml:3".into(),
    }
}

fn ioat() -> HostDevice {
    host_device("ioat0", IOAT, "8086:2021", StandIn::Ioatdma)
}

/// Group 7: the I/OAT function on ioatdma (channel idle), a second function unbound with an
/// override of its own, a bridge on pcieport. Group 30: an NVMe drive and a NIC.
fn host() -> FakeSys {
    let f = FakeSys::new();
    f.device(IOAT, "8086:2021", 0x088000, "7", Some("ioatdma"))
        .under(IOAT, "dma/dma0chan0", Some(("in_use", "0")))
        .device(IOAT2, "8086:2021", 0x088000, "7", None)
        .device(BRIDGE, "8086:a110", 0x060400, "7", Some("pcieport"))
        .device(NVME, "144d:a808", 0x010802, "30", Some("nvme"))
        .under(NVME, "nvme/nvme0/nvme0n1/nvme0n1p1/holders", None)
        .under(NVME, "nvme/nvme0/nvme0n1/holders", None)
        .device(NIC, "8086:1533", 0x020000, "30", Some("igb"))
        .under(NIC, "net/eth1", Some(("operstate", "down")))
        .driver("vfio-pci");
    std::fs::write(
        f.root()
            .join("bus/pci/devices")
            .join(IOAT2)
            .join("driver_override"),
        "ioatdma\n",
    )
    .unwrap();
    f
}

fn state(s: &Sysfs, addr: &str) -> (Option<String>, Option<String>) {
    (s.driver(&bdf(addr)), s.driver_override(&bdf(addr)).unwrap())
}

fn some(a: &str, b: Option<&str>) -> (Option<String>, Option<String>) {
    (Some(a.to_string()), b.map(str::to_string))
}

#[test]
fn a_claim_binds_the_group_to_vfio_and_release_restores_it() {
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let claim = Claim::take(&s, &journals, &ioat(), &[]).unwrap();
    assert_eq!(claim.group, "7");
    assert_eq!(state(&s, IOAT), some("vfio-pci", Some("vfio-pci")));
    assert_eq!(state(&s, IOAT2), some("vfio-pci", Some("vfio-pci")));
    assert_eq!(state(&s, BRIDGE), some("pcieport", None), "bridges stay");
    // The journal holds what each member was, the bridge not.
    let journal = read_journal(claim.journal_path()).unwrap();
    assert_eq!(journal.group, "7");
    assert_eq!(journal.sysfs, f.root());
    assert_eq!(
        journal.members,
        [
            JournalEntry {
                bdf: bdf(IOAT),
                driver: Some("ioatdma".into()),
                driver_override: None
            },
            JournalEntry {
                bdf: bdf(IOAT2),
                driver: None,
                driver_override: Some("ioatdma".into())
            },
        ]
    );
    // Another lab cannot take the group while this one holds it.
    let err = Claim::take(&s, &journals, &ioat(), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("taken by another lab process"), "{err}");
    let path = claim.journal_path().to_path_buf();
    claim.release().unwrap();
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
    assert_eq!(state(&s, IOAT2), (None, Some("ioatdma".into())));
    assert_eq!(state(&s, BRIDGE), some("pcieport", None));
    assert!(!path.exists(), "journal removed");
    let writes = f.writes();
    let order: Vec<&str> = writes.lines().collect();
    assert_eq!(
        order[..3],
        [
            "bus/pci/devices/0000:00:04.0/driver_override <- vfio-pci",
            "bus/pci/drivers/ioatdma/unbind <- 0000:00:04.0",
            "bus/pci/drivers/vfio-pci/bind <- 0000:00:04.0",
        ],
        "{writes}"
    );
    assert!(!writes.contains("pcieport"), "{writes}");
}

#[test]
fn dropping_a_claim_restores_too_and_restoring_twice_changes_nothing() {
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let claim = Claim::take(&s, &journals, &ioat(), &[]).unwrap();
    let journal = claim.journal.clone();
    drop(claim);
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
    let before = f.writes();
    restore(&s, &journal).unwrap();
    restore(&s, &journal).unwrap();
    assert_eq!(f.writes(), before, "an idempotent restore writes nothing");
    assert!(restore_all(&s, &journals).unwrap().is_empty());
}

#[test]
fn a_device_the_host_uses_is_refused_naming_why_and_nothing_changes() {
    let journals_of = |f: &FakeSys| f.dir.path().join("journal");
    let refuse = |f: &FakeSys, device: &HostDevice| {
        let err = format!(
            "{:#}",
            Claim::take(&f.sysfs(), &journals_of(f), device, &[]).unwrap_err()
        );
        assert_eq!(f.writes(), "", "nothing written before refusing: {err}");
        let left = std::fs::read_dir(journals_of(f))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(left, 0, "no journal left: {err}");
        err
    };
    let nvme = host_device("disk", NVME, "144d:a808", StandIn::Nvme);

    // A dmaengine channel a client holds.
    let f = host();
    f.under(IOAT, "dma/dma0chan0", Some(("in_use", "1")));
    let e = refuse(&f, &ioat());
    assert!(
        e.contains("0000:00:04.0 is in use by the host (driver ioatdma)"),
        "{e}"
    );
    assert!(e.contains("dma0chan0 is in use"), "{e}");

    // A mounted NVMe partition.
    let f = host();
    f.mount("/dev/nvme0n1p1 / ext4 rw 0 0");
    let e = refuse(&f, &nvme);
    assert!(e.contains("nvme0n1p1 is mounted on /"), "{e}");

    // A namespace held by device mapper.
    let f = host();
    f.under(NVME, "nvme/nvme0/nvme0n1/holders/dm-3", None);
    let e = refuse(&f, &nvme);
    assert!(e.contains("nvme0n1 is held by dm-3"), "{e}");

    // A swap partition, and a namespace a process holds open without a mount.
    let f = host();
    f.under(NVME, "nvme/nvme0/nvme0n1/nvme0n1p2/holders", None)
        .swap("nvme0n1p2");
    let e = refuse(&f, &nvme);
    assert!(e.contains("nvme0n1p2 is a swap area"), "{e}");
    let f = host();
    f.open_by(4242, "fio", 7, "nvme0n1");
    let e = refuse(&f, &nvme);
    assert!(e.contains("nvme0n1 is open in process 4242 (fio)"), "{e}");

    // Native multipath: the path device under the controller, the namespace in block/.
    let f = host();
    f.under(NVME, "nvme/nvme0/nvme1c0n1", None);
    std::fs::create_dir_all(f.root().join("block/nvme1n1/holders")).unwrap();
    f.mount("/dev/nvme1n1 /data xfs rw 0 0");
    let e = refuse(&f, &nvme);
    assert!(e.contains("nvme1n1 is mounted on /data"), "{e}");

    // Another member of the group in use: the NIC beside the drive is up.
    let f = host();
    f.under(NIC, "net/eth1", Some(("operstate", "up")));
    let e = refuse(&f, &nvme);
    assert!(
        e.contains("IOMMU group 30 also holds 0000:41:00.1 (driver igb)")
            && e.contains("network interface eth1 is up"),
        "{e}"
    );

    // The wrong device at the address.
    let f = host();
    let e = refuse(
        &f,
        &host_device("ioat0", IOAT, "8086:0b00", StandIn::Ioatdma),
    );
    assert!(
        e.contains("id = 8086:0b00 but 0000:00:04.0 holds 8086:2021")
            && e.contains("hosts/test.toml:3"),
        "{e}"
    );

    // No such address.
    let f = host();
    let e = refuse(
        &f,
        &host_device("ioat9", "0000:00:05.0", "8086:2021", StandIn::Ioatdma),
    );
    assert!(e.contains("no PCI device 0000:00:05.0"), "{e}");

    // IOMMU off: no groups.
    let f = FakeSys::new();
    f.device(IOAT, "8086:2021", 0x088000, "7", Some("ioatdma"));
    std::fs::remove_dir_all(f.root().join("kernel/iommu_groups")).unwrap();
    std::fs::create_dir_all(f.root().join("kernel/iommu_groups")).unwrap();
    let e = refuse(&f, &ioat());
    assert!(
        e.contains("IOMMU is off") && e.contains("intel_iommu=on"),
        "{e}"
    );
}

#[test]
fn a_member_on_a_host_driver_the_host_file_does_not_list_is_refused() {
    // The NIC is down (idle), but on igb and not in the host file: default deny, nothing
    // changes.
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let nvme = host_device("disk", NVME, "144d:a808", StandIn::Nvme);
    let before = (state(&s, NVME), state(&s, NIC));
    let e = format!(
        "{:#}",
        Claim::take(&s, &journals, &nvme, &[bdf(NVME)]).unwrap_err()
    );
    assert!(
        e.contains("IOMMU group 30 also holds 0000:41:00.1 (driver igb), which the host file does not list"),
        "{e}"
    );
    assert!(e.contains("list it in the host file"), "{e}");
    assert_eq!((state(&s, NVME), state(&s, NIC)), before, "nothing changed");
    assert!(!journals.join("group-30.json").exists());
}

#[test]
fn idle_members_go_along_and_free_ones_stay() {
    // The NIC is down and listed: the group goes to vfio-pci whole, the drive's driver comes
    // back after.
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let nvme = host_device("disk", NVME, "144d:a808", StandIn::Nvme);
    let listed = [bdf(NVME), bdf(NIC)];
    let claim = Claim::take(&s, &journals, &nvme, &listed).unwrap();
    assert_eq!(state(&s, NVME).0.as_deref(), Some("vfio-pci"));
    assert_eq!(state(&s, NIC).0.as_deref(), Some("vfio-pci"));
    claim.release().unwrap();
    assert_eq!(state(&s, NVME), some("nvme", None));
    assert_eq!(state(&s, NIC), some("igb", None));
    // A member on pci-stub is left where it is (vfio accepts it).
    let f = host();
    std::fs::remove_file(f.root().join("bus/pci/devices").join(NIC).join("driver")).unwrap();
    f.driver("pci-stub");
    std::os::unix::fs::symlink(
        f.root().join("bus/pci/drivers/pci-stub"),
        f.root().join("bus/pci/devices").join(NIC).join("driver"),
    )
    .unwrap();
    let s = f.sysfs();
    let claim = Claim::take(&s, &journals, &nvme, &[]).unwrap();
    assert_eq!(state(&s, NIC), some("pci-stub", None));
    drop(claim);
}

#[test]
fn a_failed_bind_restores_at_once() {
    let f = host();
    std::fs::remove_dir_all(f.root().join("bus/pci/drivers/vfio-pci")).unwrap();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let e = format!(
        "{:#}",
        Claim::take(&s, &journals, &ioat(), &[]).unwrap_err()
    );
    assert!(
        e.contains("modprobe vfio-pci") && e.contains("host drivers restored"),
        "{e}"
    );
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
    assert!(!journals.join("group-7.json").exists());
}

#[test]
fn journals_of_other_roots_are_left_alone() {
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    std::fs::create_dir_all(&journals).unwrap();
    let foreign = Journal {
        sysfs: "/sys".into(),
        group: "7".into(),
        device: "ioat0 0000:00:04.0".into(),
        pid: 1,
        members: vec![],
    };
    write_journal(&journals.join("group-7.json"), &foreign).unwrap();
    let done = restore_all(&s, &journals).unwrap();
    assert!(
        matches!(done.as_slice(), [Replayed::OtherRoot { .. }]),
        "{done:?}"
    );
    assert!(journals.join("group-7.json").exists());
}

#[test]
fn passthrough_devices_resolve_against_the_host_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(
        &path,
        "[devices.ioat0]\nbdf = \"00:04.0\"\nid = \"8086:2021\"\nstands_in = \"ioatdma\"\n",
    )
    .unwrap();
    let mut devices = vec![
        DeviceSpec::nic(),
        "passthrough:ioat0,irq0=2".parse::<DeviceSpec>().unwrap(),
    ];
    assert!(devices[1].validate(1, 8).is_err(), "unresolved");
    resolve(&mut devices, Some(path.to_str().unwrap())).unwrap();
    let p = devices[1].as_device::<Passthrough>().unwrap();
    assert_eq!(p.host.as_ref().unwrap().bdf.as_str(), IOAT);
    let side = devices[1].guest_driver();
    assert_eq!(side.driver, "ioatdma");
    assert_eq!(side.module.as_deref(), Some("ioatdma"));
    assert_eq!(devices[1].irq_cpus, [Some(vec![2])]);
    devices[1].validate(1, 8).unwrap();
    let mut unknown = vec!["passthrough:ioat7".parse::<DeviceSpec>().unwrap()];
    let e = format!(
        "{:#}",
        resolve(&mut unknown, Some(path.to_str().unwrap())).unwrap_err()
    );
    assert!(
        e.contains("h.toml has no device \"ioat7\" (it lists: ioat0)"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        resolve(&mut unknown, Some("/no/such/host.toml")).unwrap_err()
    );
    assert!(e.contains("/no/such/host.toml"), "{e}");
    let args = qemu_args("dev1", "0x11", &bdf(IOAT)).join(" ");
    assert!(
        args.contains(r#""driver":"vfio-pci""#) && args.contains(r#""host":"0000:00:04.0""#),
        "{args}"
    );
}

// The killed lab: a child process (this test binary, running the ignored test below) takes the
// device and waits to be killed.

const CHILD_ENV: &str = "LAB_TEST_PASSTHROUGH_CHILD";

#[test]
#[ignore = "run by the killed-lab tests as their child process"]
fn child_takes_a_device_and_waits() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let s = Sysfs::emulated(dir.join("sys"), dir.join("mounts"));
    let claim = Claim::take(&s, &dir.join("journal"), &ioat(), &[]).unwrap();
    std::fs::write(dir.join("ready"), "").unwrap();
    std::thread::sleep(Duration::from_secs(120));
    drop(claim);
}

/// Starts the child on `f`, waits until it holds the device, and returns it.
fn child_holding_the_device(f: &FakeSys) -> std::process::Child {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "devices::passthrough::tests::child_takes_a_device_and_waits",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, f.dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !f.dir.path().join("ready").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child never took the device"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn kill(mut child: std::process::Child) {
    // SAFETY: plain syscall on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed, not finished");
}

#[test]
fn a_killed_labs_journal_is_replayed_by_the_next_start_and_restore() {
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let child = child_holding_the_device(&f);
    assert_eq!(state(&s, IOAT), some("vfio-pci", Some("vfio-pci")));
    // While the child lives, its journal is left alone.
    let done = restore_all(&s, &journals).unwrap();
    assert!(
        matches!(done.as_slice(), [Replayed::InUse { group, .. }] if group == "7"),
        "{done:?}"
    );
    assert_eq!(state(&s, IOAT).0.as_deref(), Some("vfio-pci"));
    kill(child);
    // Killed: still on vfio-pci, the journal says what to give back.
    assert_eq!(state(&s, IOAT).0.as_deref(), Some("vfio-pci"));
    assert!(journals.join("group-7.json").exists());
    let done = restore_all(&s, &journals).unwrap();
    assert!(
        matches!(done.as_slice(), [Replayed::Restored { group, .. }] if group == "7"),
        "{done:?}"
    );
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
    assert_eq!(state(&s, IOAT2), (None, Some("ioatdma".into())));
    assert!(!journals.join("group-7.json").exists());
    // Idempotent: nothing left to do, nothing written.
    let before = f.writes();
    assert!(restore_all(&s, &journals).unwrap().is_empty());
    assert_eq!(f.writes(), before);
}

#[test]
fn a_new_claim_replays_a_killed_labs_journal_before_recording_its_own() {
    let f = host();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    kill(child_holding_the_device(&f));
    let claim = Claim::take(&s, &journals, &ioat(), &[]).unwrap();
    // The original driver recorded is the host's, not the dead lab's vfio-pci.
    assert_eq!(claim.journal.members[0].driver.as_deref(), Some("ioatdma"));
    claim.release().unwrap();
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
}

#[test]
fn a_failed_restore_keeps_the_journal_for_lab_host_restore() {
    // vfio-pci is not loaded (the bind fails after the unbind) and ioatdma's driver directory
    // is gone (giving the device back fails too): the journal, written before the first change,
    // stays on disk, and a later restore puts everything back.
    let f = host();
    let drivers = f.root().join("bus/pci/drivers");
    std::fs::remove_dir_all(drivers.join("vfio-pci")).unwrap();
    std::fs::rename(drivers.join("ioatdma"), f.dir.path().join("ioatdma-away")).unwrap();
    let s = f.sysfs();
    let journals = f.dir.path().join("journal");
    let e = format!(
        "{:#}",
        Claim::take(&s, &journals, &ioat(), &[]).unwrap_err()
    );
    assert!(e.contains("run `lab host restore`"), "{e}");
    assert_eq!(state(&s, IOAT), (None, None), "unbound, override cleared");
    let kept = read_journal(&journals.join("group-7.json")).unwrap();
    assert_eq!(kept.members[0].driver.as_deref(), Some("ioatdma"));
    std::fs::rename(f.dir.path().join("ioatdma-away"), drivers.join("ioatdma")).unwrap();
    let done = restore_all(&s, &journals).unwrap();
    assert!(
        matches!(done.as_slice(), [Replayed::Restored { .. }]),
        "{done:?}"
    );
    assert_eq!(state(&s, IOAT), some("ioatdma", None));
}

#[test]
fn lab_host_show_describes_each_listed_device_and_restore_says_when_there_is_nothing() {
    let f = host();
    let s = f.sysfs();
    let gone = host_device("gone", "0000:99:00.0", "8086:2021", StandIn::Ioatdma);
    let file = HostFile {
        path: "hosts/test.toml".into(),
        description: "a test host".into(),
        devices: [("gone".to_string(), gone), ("ioat0".to_string(), ioat())]
            .into_iter()
            .collect(),
    };
    let report = HostReport::read(&s, &file);
    let text = report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "hosts/test.toml (a test host)");
    assert_eq!(lines[1], "IOMMU: on");
    assert!(lines[2].starts_with("gone ") && lines[2].ends_with(": no such device here"));
    assert!(
        lines[3].starts_with(
            "ioat0      0000:00:04.0 8086:2021 (ioatdma): id ok, driver ioatdma, group 7"
        ),
        "{text}"
    );
    assert_eq!(lines.len(), 4, "{text}");
    let off = HostReport {
        iommu_on: false,
        ..report
    };
    assert!(off
        .to_string()
        .contains("\nIOMMU: off (intel_iommu=on / amd_iommu=on)\n"));

    let journals = f.dir.path().join("journal");
    let nothing = Restoration(restore_all(&s, &journals).unwrap());
    assert_eq!(nothing.to_string(), "nothing to restore\n");
    let restored = Restoration(vec![Replayed::Restored {
        group: "7".into(),
        device: IOAT.into(),
    }]);
    assert_eq!(
        restored.to_string(),
        "IOMMU group 7 (0000:00:04.0): host drivers restored\n"
    );
}

#[test]
fn a_journal_naming_a_driver_outside_the_drivers_directory_is_refused() {
    let f = host();
    let journals = f.dir.path().join("journal");
    std::fs::create_dir_all(&journals).unwrap();
    let path = journals.join("group-7.json");
    let journal = Journal {
        sysfs: f.root().to_path_buf(),
        group: "7".into(),
        device: "ioat0 0000:00:04.0".into(),
        pid: 1,
        members: vec![JournalEntry {
            bdf: bdf(IOAT),
            driver: Some("../../../../tmp/x".into()),
            driver_override: None,
        }],
    };
    write_journal(&path, &journal).unwrap();
    let e = format!("{:#}", read_journal(&path).unwrap_err());
    assert!(
        e.contains("\"../../../../tmp/x\" is not a driver name: refused"),
        "{e}"
    );
    let fine = Journal {
        members: vec![JournalEntry {
            bdf: bdf(IOAT),
            driver: Some("ioatdma".into()),
            driver_override: Some("vfio-pci".into()),
        }],
        ..journal
    };
    write_journal(&path, &fine).unwrap();
    assert_eq!(read_journal(&path).unwrap(), fine);
}
