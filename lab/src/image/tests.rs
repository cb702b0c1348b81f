use super::*;

#[test]
fn newc_archive_is_reproducible_and_well_formed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::write(root.join("bin/hello"), b"hi there").unwrap();
    std::os::unix::fs::symlink("hello", root.join("bin/hi")).unwrap();
    let mut a = Vec::new();
    write_newc(&root, &mut a).unwrap();
    let mut b = Vec::new();
    write_newc(&root, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.len() % 4, 0);
    assert!(a.starts_with(b"070701"));
    let text = String::from_utf8_lossy(&a);
    assert!(text.contains("bin/hello") && text.contains("hi there") && text.contains("TRAILER!!!"));
}

#[test]
fn module_closure_follows_modules_dep() {
    let dir = tempfile::tempdir().unwrap();
    let mods = dir.path().join("mods");
    fs::create_dir_all(mods.join("kernel/drivers/dma/ioat")).unwrap();
    fs::create_dir_all(mods.join("kernel/drivers/dca")).unwrap();
    fs::write(mods.join("kernel/drivers/dma/ioat/ioatdma.ko"), b"ioat").unwrap();
    fs::write(mods.join("kernel/drivers/dca/dca.ko"), b"dca").unwrap();
    fs::write(
            mods.join("modules.dep"),
            "kernel/drivers/dma/ioat/ioatdma.ko: kernel/drivers/dca/dca.ko\nkernel/drivers/dca/dca.ko:\n",
        )
        .unwrap();
    fs::write(
        mods.join("modules.builtin"),
        "kernel/drivers/virtio/virtio_pci.ko\n",
    )
    .unwrap();
    let root = dir.path().join("root");
    let (copied, missing) = copy_modules(
        &mods,
        &root,
        "6.12-test",
        &["ioatdma".into(), "ptdma".into(), "virtio_pci".into()],
    )
    .unwrap();
    assert_eq!(copied, vec!["dca".to_string(), "ioatdma".to_string()]);
    assert_eq!(missing, vec!["ptdma".to_string()]);
    let dep = fs::read_to_string(root.join("lib/modules/6.12-test/modules.dep")).unwrap();
    assert!(dep.contains("kernel/drivers/dma/ioat/ioatdma.ko: kernel/drivers/dca/dca.ko"));
}

#[test]
fn recipe_programs_parse_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.toml");
    let load = |text: &str| {
        fs::write(&path, text).unwrap();
        ImageRecipe::load(&path)
    };
    let recipe = load(
        "name = \"sched\"\npackages = [\"busybox-static\"]\n\
             [programs]\nrt-tests = [\"hackbench\"]\nnumactl = [\"numactl\"]\n",
    )
    .unwrap();
    assert_eq!(recipe.programs["rt-tests"], vec!["hackbench".to_string()]);
    let bundle = recipe.programs_bundle(Arch::X86_64).unwrap();
    assert_eq!(bundle.name, "guest-sched-programs");
    assert_eq!(bundle.roots, vec!["numactl", "rt-tests"]);
    assert_eq!(recipe.packages_bundle(Arch::X86_64).name, "guest-sched");
    let plain = load("name = \"default\"\npackages = [\"busybox-static\"]\n").unwrap();
    assert!(plain.programs.is_empty() && plain.programs_bundle(Arch::X86_64).is_none());
    let err = format!(
        "{:#}",
        load("name = \"x\"\npackages = []\n[programs]\nfio = [\"usr/bin/fio\"]\n").unwrap_err()
    );
    assert!(
        err.contains("\"usr/bin/fio\" is not a program name"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        load("name = \"x\"\npackages = []\nprogram = {}\n").unwrap_err()
    );
    assert!(err.contains("unknown field `program`"), "{err}");
}

#[test]
fn image_key_covers_programs_and_their_packages() {
    let kernel = BootKernel {
        name: "v6.12".into(),
        release: "6.12.0-lab".into(),
        arch: crate::arch::Arch::X86_64,
        image: PathBuf::from("/nonexistent"),
        modules: None,
        identity: "recipe v6.12 key k".into(),
        hz: Some(1000),
    };
    let bundle = |name: &str, version: &str| debian::ResolvedBundle {
        name: name.into(),
        packages: vec![debian::PackageRef {
            name: name.into(),
            version: version.into(),
            sha256: "ab".repeat(32),
        }],
        substitutions: vec![],
    };
    let whole = bundle("busybox-static", "1");
    let agent = ProgramFile::embedded(&crate::agent::AGENT);
    let mut recipe = ImageRecipe {
        name: "sched".into(),
        description: String::new(),
        packages: vec!["busybox-static".into()],
        programs: BTreeMap::new(),
        modules: vec![],
        lab_programs: vec![],
    };
    let plain = image_key(&whole, None, &agent, &[], &recipe, &kernel);
    recipe
        .programs
        .insert("rt-tests".into(), vec!["hackbench".into()]);
    let rt = bundle("rt-tests", "2.6-1.1");
    let with = image_key(&whole, Some(&rt), &agent, &[], &recipe, &kernel);
    assert_ne!(plain, with);
    assert_ne!(
        with,
        image_key(
            &whole,
            Some(&bundle("rt-tests", "2.7-1")),
            &agent,
            &[],
            &recipe,
            &kernel
        ),
        "another version of a program's package is another image"
    );
    recipe.programs.insert(
        "rt-tests".into(),
        vec!["hackbench".into(), "cyclictest".into()],
    );
    assert_ne!(
        with,
        image_key(&whole, Some(&rt), &agent, &[], &recipe, &kernel)
    );
    // A lab program is part of the key of the images that carry it only.
    let numa01 = &ProgramFile::embedded(crate::agent::listable_program("lab-numa01").unwrap());
    let with_numa01 = image_key(&whole, Some(&rt), &agent, &[numa01], &recipe, &kernel);
    assert_ne!(
        with_numa01,
        image_key(&whole, Some(&rt), &agent, &[], &recipe, &kernel)
    );
    assert_ne!(
        image_key(&whole, None, &agent, &[numa01], &recipe, &kernel),
        image_key(&whole, None, &agent, &[], &recipe, &kernel)
    );
}

#[test]
fn recipe_lab_programs_parse_and_unknown_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("numa.toml");
    let load = |text: &str| {
        fs::write(&path, text).unwrap();
        ImageRecipe::load(&path)
    };
    let recipe = load(
        "name = \"numa\"\npackages = [\"busybox-static\"]\n\
             lab_programs = [\"lab-numa01\", \"lab-numa01\"]\n",
    )
    .unwrap();
    assert_eq!(recipe.lab_programs, ["lab-numa01", "lab-numa01"]);
    let listed = recipe.listed_lab_programs().unwrap();
    assert_eq!(listed.len(), 1, "listed twice, carried once");
    assert_eq!(listed[0].guest_path, "/usr/bin/lab-numa01");
    let plain = load("name = \"x\"\npackages = []\n").unwrap();
    assert!(plain.listed_lab_programs().unwrap().is_empty());
    // The file, the field, the name and the names the lab knows.
    for unknown in ["numa01", "lab-agent"] {
        let err = format!(
            "{:#}",
            load(&format!(
                "name = \"x\"\npackages = []\nlab_programs = [\"{unknown}\"]\n"
            ))
            .unwrap_err()
        );
        assert!(
            err.contains("numa.toml")
                && err.contains(&format!("lab_programs: \"{unknown}\" is not a lab program"))
                && err.contains("the known ones are lab-numa01"),
            "{err}"
        );
    }
}

#[test]
fn every_shipped_recipe_loads() {
    let dir = crate::repo_path("images/guest");
    let mut loaded = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            ImageRecipe::load(&path).unwrap();
            loaded += 1;
        }
    }
    assert!(loaded > 0, "no recipe in {}", dir.display());
}
