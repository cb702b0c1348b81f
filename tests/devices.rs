//! The device seam with QEMU's own devices: an NVMe controller with a chosen number of I/O
//! queues and a virtio-net NIC bind their guest drivers, list their vectors, and IRQ pinning
//! works the same as for the lab's DMA engines, except that vectors the kernel manages (NVMe's
//! I/O queues) are reported as managed and refuse a pin with a message that says so.

mod common;

use lab::devices::{bind_and_pin, DeviceSpec};
use lab::BootOptions;

#[tokio::test]
async fn nvme_and_nic_bind_and_report_their_vectors() {
    let lab = common::lab().await;
    // ci-2node-4llc has 8 CPUs: 4 I/O queues give each queue's vector a 2-CPU mask.
    let nvme = DeviceSpec::nvme(4, 64 << 20);
    // Vector 1 of the NIC is its first virtqueue's: not managed, so it can be pinned.
    let nic = DeviceSpec::nic().irq_on_cpus(1, &[5]);
    let vm = lab
        .boot(
            BootOptions::named("devices-nvme-nic")
                .device(nvme)
                .device(nic),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let scratch_file = vm.devices()[0].files[0].clone();
    assert!(scratch_file.is_file());
    let bound = bind_and_pin(&vm, vm.devices())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    println!("{bound:#?}");
    let (nvme, nic) = (&bound[0], &bound[1]);
    assert_eq!(nvme.driver, "nvme");
    // The admin queue's vector plus one per I/O queue.
    assert_eq!(nvme.vectors.len(), 5, "{nvme:?}");
    assert!(!nvme.vectors[0].managed, "the admin vector is not managed");
    let io = &nvme.vectors[1..];
    assert!(
        io.iter().all(|v| v.managed),
        "I/O vectors are managed: {io:?}"
    );
    // The kernel spread the managed masks over every CPU, each CPU once.
    let mut covered: Vec<u32> = io.iter().flat_map(|v| v.affinity.clone()).collect();
    covered.sort_unstable();
    assert_eq!(covered, (0..8).collect::<Vec<u32>>(), "{io:?}");
    let ns = vm.sh("cat /sys/block/nvme0n1/size").await.unwrap();
    assert_eq!(ns.trim(), (64u64 << 20 >> 9).to_string());

    assert_eq!(nic.driver, "virtio-pci");
    assert!(nic.vectors.len() >= 3, "config + rx + tx: {nic:?}");
    assert_eq!(nic.vectors[1].affinity, [5]);
    assert!(!nic.vectors[1].managed);
    vm.shutdown().await.unwrap();
    assert!(!scratch_file.exists(), "the backing file went with the VM");
}

#[tokio::test]
async fn pinning_a_managed_vector_is_an_error_that_says_so() {
    let lab = common::lab().await;
    let vm = lab
        .boot(
            BootOptions::named("devices-nvme-managed")
                .device(DeviceSpec::nvme(2, 16 << 20).irq_on_cpus(1, &[3])),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let err = format!("{:#}", bind_and_pin(&vm, vm.devices()).await.unwrap_err());
    assert!(
        err.contains("vector 1") && err.contains("managed by the kernel"),
        "{err}"
    );
    vm.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_mask_naming_a_missing_cpu_fails_before_boot() {
    let lab = common::lab().await;
    let err = lab
        .boot(BootOptions::named("devices-bad-mask").device(DeviceSpec::nic().irq_on_cpus(0, &[8])))
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("irq_cpus[0] names CPU 8") && err.contains("0-7"),
        "{err}"
    );
}

#[tokio::test]
async fn a_namespace_larger_than_the_free_space_fails_before_boot() {
    let lab = common::lab().await;
    let err = lab
        .boot(BootOptions::named("devices-huge-namespace").device(DeviceSpec::nvme(2, 1 << 60)))
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    // Refused while creating the backing file (before QEMU starts), naming the field and the
    // space; the file is never written and the VM's scratch dir goes with the error.
    assert!(
        err.contains("starting device 0")
            && err.contains("nvme namespaces need 1152921504606846976 bytes")
            && err.contains("free"),
        "{err}"
    );
}
