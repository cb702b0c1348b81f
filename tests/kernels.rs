//! Kernels as recipes: two lab-built kernels boot side by side and each guest reports its own
//! identity; a scheduler-feature variant is in effect in the guest.

mod common;

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

    // The build manifest of the variant lists the applied patch, with its checksum.
    let built = lab::kernel::BuiltKernel::open(patched.bzimage.parent().unwrap()).unwrap();
    let patches: Vec<&str> = built
        .manifest
        .patches
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert!(
        patches
            .iter()
            .any(|p| p.contains("wake-affine-idle-revert")),
        "manifest patches: {patches:?}"
    );
    let base_built = lab::kernel::BuiltKernel::open(base.bzimage.parent().unwrap()).unwrap();
    assert!(
        base_built.manifest.patches.is_empty(),
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
    let settings = ready.settings;
    let mut opts = BootOptions::named("kernels-sched-feature").kernel(ready.kernel);
    opts.cmdline = settings.cmdline.clone();
    let vm = lab.boot(opts).await.unwrap();
    let before = vm.sh("cat /sys/kernel/debug/sched/features").await.unwrap();
    assert!(
        before.split_whitespace().any(|f| f == "RUN_TO_PARITY"),
        "{before}"
    );
    lab::kernel::apply_settings(&vm, &settings).await.unwrap();
    let after = vm.sh("cat /sys/kernel/debug/sched/features").await.unwrap();
    assert!(
        after.split_whitespace().any(|f| f == "NO_RUN_TO_PARITY"),
        "{after}"
    );
    assert!(
        !after.split_whitespace().any(|f| f == "RUN_TO_PARITY"),
        "{after}"
    );
    vm.shutdown().await.unwrap();
}
