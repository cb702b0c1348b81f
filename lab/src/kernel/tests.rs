//! The kernel build logic against a tiny fake kernel source (`lab/tests/fixtures/fake-kernel`):
//! a tarball whose Makefile implements the targets the lab calls (defconfig, a fragment target,
//! olddefconfig dropping one symbol, bzImage, modules, modules_install). Fast: no compiler runs.
//! Real builds are exercised by the scenario tests in `tests/kernels.rs`; a `lab kernel build`
//! killed during make by `lab/tests/kernel_recipes.rs`.

use std::fs;
use std::path::PathBuf;

use crate::cache::{sha256_file, Cache};
use crate::kernel::{self, BuildOptions, RecipeDirs};
use crate::variant::Variant;

include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/fake-kernel/tarball.rs"
));

const GOOD_PATCH: &str = "From 0 Mon Sep 17 00:00:00 2001\nFrom: t <t@example.invalid>\nSubject: [PATCH] follow the irq\n\n---\n\
diff --git a/sched.c b/sched.c\n--- a/sched.c\n+++ b/sched.c\n@@ -1,6 +1,6 @@\n int wake_affine_idle(void)\n {\n\
-\tif (idle(this) && share_cache(this, prev))\n-\t\treturn prev;\n+\tif (idle(this))\n+\t\treturn this;\n \treturn -1;\n }\n-- \n2.39\n";

const STALE_PATCH: &str = "--- a/sched.c\n+++ b/sched.c\n@@ -1,6 +1,6 @@ int wake_affine_idle(void)\n int wake_affine_idle(void)\n {\n\
-\tif (old_condition(this))\n+\tif (new_condition(this))\n \t\treturn prev;\n \treturn -1;\n }\n";

const MISSING_FILE_PATCH: &str =
    "--- a/kernel/sched/gone.c\n+++ b/kernel/sched/gone.c\n@@ -1 +1 @@\n-a\n+b\n";

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cache: Cache,
    opts: BuildOptions,
    counter: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let counter = root.join("compiles");
        let tarball =
            fake_kernel_tarball(&crate::repo_path("lab/tests/fixtures/fake-kernel"), &root);
        let recipes = root.join("kernels");
        fs::create_dir_all(recipes.join("patches")).unwrap();
        fs::create_dir_all(recipes.join("config")).unwrap();
        fs::write(recipes.join("patches/good.patch"), GOOD_PATCH).unwrap();
        fs::write(recipes.join("patches/stale.patch"), STALE_PATCH).unwrap();
        fs::write(recipes.join("patches/missing.patch"), MISSING_FILE_PATCH).unwrap();
        fs::write(
            recipes.join("config/lab.config"),
            "CONFIG_DMA=m\n# CONFIG_BASE is not set\n",
        )
        .unwrap();
        fs::write(
            recipes.join("config/bad.config"),
            "# ok\nCONFIG_DROPPED=y\n",
        )
        .unwrap();
        fs::write(
            recipes.join("config/unknown.config"),
            "CONFIG_NOT_IN_KCONFIG=y\n",
        )
        .unwrap();
        let sha = sha256_file(&tarball).unwrap();
        let base = format!(
            "description = \"fake\"\nconfig = [\"lab.config\"]\n[source]\ntarball = \"{}\"\nsha256 = \"{sha}\"\n\
             [boot]\ncmdline = [\"nokaslr\"]\n",
            tarball.display()
        );
        fs::write(recipes.join("base.toml"), base).unwrap();
        fs::write(recipes.join("base+good.toml"), "base = \"base\"\npatches = [\"good.patch\"]\n[boot]\nsched_features = [\"NO_RUN_TO_PARITY\"]\n").unwrap();
        fs::write(
            recipes.join("base+stale.toml"),
            "base = \"base\"\npatches = [\"good.patch\", \"stale.patch\"]\n",
        )
        .unwrap();
        fs::write(
            recipes.join("base+missing.toml"),
            "base = \"base\"\npatches = [\"missing.patch\"]\n",
        )
        .unwrap();
        fs::write(
            recipes.join("base+bad.toml"),
            "base = \"base\"\nconfig = [\"bad.config\"]\n",
        )
        .unwrap();
        fs::write(
            recipes.join("base+unknown.toml"),
            "base = \"base\"\nconfig = [\"unknown.config\"]\n",
        )
        .unwrap();
        let cache = Cache::at(root.join("cache")).unwrap();
        let opts = BuildOptions {
            dirs: RecipeDirs::at(&recipes),
            lock_path: root.join("lock.toml"),
            jobs: 1,
            nice: None,
            progress: false,
            keep_tree: true,
        };
        Fixture {
            _dir: dir,
            root,
            cache,
            opts,
            counter,
        }
    }

    fn recipe(&self, name: &str, text: &str) {
        fs::write(self.opts.dirs.recipes.join(format!("{name}.toml")), text).unwrap();
    }

    fn compiles(&self) -> usize {
        fs::read_to_string(&self.counter).map_or(0, |t| t.lines().count())
    }

    /// Complete entries and anything left in staging.
    fn cache_state(&self) -> (Vec<String>, usize) {
        let keys = kernel::list(&self.cache)
            .unwrap()
            .into_iter()
            .map(|k| k.key)
            .collect();
        let staging =
            fs::read_dir(self.cache.dir(kernel::KIND).join(".staging")).map_or(0, |d| d.count());
        (keys, staging)
    }
}

fn have_tools() -> bool {
    let all = fake_kernel_tools();
    if !all {
        crate::skip::host_lacks(
            "fake kernel builds",
            "make, patch, tar, gcc or ld is missing",
            "Install them (`apt-get install build-essential patch`).",
        );
    }
    all
}

#[test]
fn base_then_variant_builds_incrementally_with_distinct_identity() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let base = kernel::build(&f.cache, "base", &f.opts).unwrap();
    assert_eq!(base.manifest.build.incremental_from, None);
    assert_eq!(f.compiles(), 1);
    let variant = kernel::build(&f.cache, "base+good", &f.opts).unwrap();
    assert_eq!(
        variant.manifest.build.incremental_from.as_deref(),
        Some(base.manifest.key.as_str())
    );
    // Only the patched file was recompiled in the copied object tree.
    assert_eq!(f.compiles(), 2);

    assert_ne!(base.manifest.key, variant.manifest.key);
    assert_ne!(base.manifest.release, variant.manifest.release);
    assert_eq!(
        base.manifest.release,
        format!("1.2.3{}", kernel::key::local_version(&base.manifest.key))
    );
    assert!(
        variant.manifest.uts_version.starts_with("#1-base+good "),
        "{}",
        variant.manifest.uts_version
    );
    let patches: Vec<_> = variant
        .manifest
        .patches
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(patches, ["good.patch"]);
    assert_eq!(
        variant.manifest.patches[0].sha256,
        sha256_file(&f.opts.dirs.patches.join("good.patch")).unwrap()
    );
    assert_eq!(variant.manifest.boot.cmdline, ["nokaslr"]);
    assert_eq!(variant.manifest.boot.sched_features, ["NO_RUN_TO_PARITY"]);

    let image = fs::read_to_string(variant.image()).unwrap();
    assert!(image.contains("if (idle(this))") && image.contains(&variant.manifest.release));
    let base_image = fs::read_to_string(base.image()).unwrap();
    assert!(
        base_image.contains("share_cache"),
        "the variant's patch leaked into the base"
    );
    assert!(fs::read_to_string(base.dir.join("tree/sched.c"))
        .unwrap()
        .contains("share_cache"));

    assert!(variant.modules_dir().join("modules.dep").is_file());
    assert!(variant
        .modules_dir()
        .join("build")
        .symlink_metadata()
        .is_err());
    let config = fs::read_to_string(variant.config()).unwrap();
    assert!(config.contains("CONFIG_DMA=m") && !config.contains("CONFIG_BASE=y"));
    let log = fs::read_to_string(variant.build_log()).unwrap();
    assert!(log.contains("good.patch"));
    // Same defconfig and fragments as the base: its .config is reused, not regenerated.
    assert!(log.contains("the base's .config"), "{log}");
    assert!(!log.contains("$ make O=obj x86_64_defconfig"), "{log}");
    assert!(!log.contains("$ make O=obj olddefconfig"), "{log}");

    // Cached now: no more compiles, same entry.
    let again = kernel::build(&f.cache, "base+good", &f.opts).unwrap();
    assert_eq!(again.dir, variant.dir);
    assert_eq!(f.compiles(), 2);
    assert_eq!(kernel::list(&f.cache).unwrap().len(), 2);
}

#[test]
fn a_variant_with_a_fragment_of_its_own_configures_from_the_defconfig() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    fs::write(f.opts.dirs.config.join("extra.config"), "CONFIG_EXTRA=y\n").unwrap();
    f.recipe(
        "base+extra",
        "base = \"base\"\npatches = [\"good.patch\"]\nconfig = [\"extra.config\"]\n",
    );
    kernel::build(&f.cache, "base", &f.opts).unwrap();
    let variant = kernel::build(&f.cache, "base+extra", &f.opts).unwrap();
    assert!(variant.manifest.build.incremental_from.is_some());
    let config = fs::read_to_string(variant.config()).unwrap();
    assert!(
        config.contains("CONFIG_EXTRA=y") && config.contains("CONFIG_DMA=m"),
        "{config}"
    );
    assert!(!config.contains("CONFIG_BASE=y"), "{config}");
    let log = fs::read_to_string(variant.build_log()).unwrap();
    assert!(log.contains("$ make O=obj x86_64_defconfig"), "{log}");
}

#[test]
fn a_patch_that_does_not_apply_names_patch_file_and_hunk_and_caches_nothing() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let err = kernel::build(&f.cache, "base+stale", &f.opts).unwrap_err();
    match err.downcast_ref::<kernel::patch::PatchError>() {
        Some(kernel::patch::PatchError::HunkFailed {
            patch, file, hunk, ..
        }) => {
            assert_eq!(
                (patch.as_str(), file.as_str(), *hunk),
                ("stale.patch", "sched.c", 1)
            );
        }
        other => panic!("expected a HunkFailed, got {other:?}: {err:#}"),
    }
    let err = format!("{err:#}");
    assert!(err.contains("stale.patch"), "{err}");
    assert!(err.contains("sched.c"), "{err}");
    assert!(
        err.contains("hunk #1") && err.contains("@@ -1,6 +1,6 @@"),
        "{err}"
    );
    assert!(err.contains("build log: "), "{err}");
    // The base built fine and stays; nothing of the variant is cached or left in staging.
    let (keys, staging) = f.cache_state();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(staging, 0);

    let err = format!(
        "{:#}",
        kernel::build(&f.cache, "base+missing", &f.opts).unwrap_err()
    );
    assert!(
        err.contains("missing.patch")
            && err.contains("kernel/sched/gone.c")
            && err.contains("not found"),
        "{err}"
    );
    assert_eq!(f.cache_state(), (keys, 0));
}

#[test]
fn a_config_symbol_that_cannot_be_set_is_named() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let err = format!(
        "{:#}",
        kernel::build(&f.cache, "base+bad", &f.opts).unwrap_err()
    );
    assert!(
        err.contains("CONFIG_DROPPED") && err.contains("bad.config:2"),
        "{err}"
    );
    assert!(err.contains("dependency is unmet"), "{err}");
    let err = format!(
        "{:#}",
        kernel::build(&f.cache, "base+unknown", &f.opts).unwrap_err()
    );
    assert!(
        err.contains("CONFIG_NOT_IN_KCONFIG") && err.contains("removed or renamed"),
        "{err}"
    );
    let (keys, staging) = f.cache_state();
    assert_eq!(
        (keys.len(), staging),
        (1, 0),
        "only the base may be cached: {keys:?}"
    );
}

#[test]
fn missing_source_and_checksum_mismatch_are_named_and_cache_nothing() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let gone = f.root.join("nope.tar.gz");
    f.recipe(
        "gone",
        &format!(
            "[source]\ntarball = \"{}\"\nsha256 = \"{}\"\n",
            gone.display(),
            "0".repeat(64)
        ),
    );
    let err = format!(
        "{:#}",
        kernel::build(&f.cache, "gone", &f.opts).unwrap_err()
    );
    assert!(
        err.contains("nope.tar.gz") && err.contains("source.tarball"),
        "{err}"
    );

    let tarball = f.root.join("linux-fake.tar.gz");
    let wrong = "ab".repeat(32);
    f.recipe(
        "wrongsum",
        &format!(
            "[source]\ntarball = \"{}\"\nsha256 = \"{wrong}\"\n",
            tarball.display()
        ),
    );
    let err = format!(
        "{:#}",
        kernel::build(&f.cache, "wrongsum", &f.opts).unwrap_err()
    );
    let actual = sha256_file(&tarball).unwrap();
    assert!(
        err.contains("checksum mismatch") && err.contains(&wrong) && err.contains(&actual),
        "{err}"
    );
    assert_eq!(f.cache_state(), (vec![], 0));
}

#[test]
fn two_threads_asking_for_one_kernel_build_it_once() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let dirs: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| s.spawn(|| kernel::build(&f.cache, "base+good", &f.opts).unwrap().dir))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(dirs.windows(2).all(|w| w[0] == w[1]));
    // One compile for the base, one for the variant, whichever thread got there first.
    assert_eq!(f.compiles(), 2);
}

#[test]
fn a_variant_adds_boot_settings_to_its_kernel_without_a_rebuild() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let plain = Variant::kernel("base+good")
        .prepare(&f.cache, &f.opts, None)
        .unwrap();
    let v = Variant::kernel("base+good")
        .with_sched_feature("NO_DELAY_DEQUEUE")
        .with_sysctl("kernel.sched_autogroup_enabled", "0");
    assert_eq!(
        v.name,
        "base+good@feature=NO_DELAY_DEQUEUE@sysctl=kernel.sched_autogroup_enabled=0"
    );
    let ready = v.prepare(&f.cache, &f.opts, None).unwrap();
    // Same kernel build: boot settings are not part of the key.
    assert_eq!(ready.kernel.image, plain.kernel.image);
    assert_eq!(f.compiles(), 2);
    assert_eq!(ready.settings.cmdline, ["nokaslr"]);
    assert_eq!(
        ready.settings.sched_features,
        ["NO_RUN_TO_PARITY", "NO_DELAY_DEQUEUE"]
    );
    let script = kernel::apply_script(&ready.settings).unwrap();
    assert!(script.contains("echo NO_DELAY_DEQUEUE > /sys/kernel/debug/sched/features"));
    assert!(script.contains("echo '0' > /proc/sys/kernel/sched_autogroup_enabled"));
    let wrong = Variant::kernel("no-such-kernel");
    let err = format!("{:#}", wrong.prepare(&f.cache, &f.opts, None).unwrap_err());
    assert!(err.contains("no-such-kernel"), "{err}");
}

#[test]
fn gc_removes_entries_no_recipe_maps_to_and_can_drop_trees() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let base = kernel::build(&f.cache, "base", &f.opts).unwrap();
    let old = kernel::build(&f.cache, "base+good", &f.opts).unwrap();
    // Editing the patch gives the recipe a new key; the old entry is garbage now.
    let patch = f.opts.dirs.patches.join("good.patch");
    let text = fs::read_to_string(&patch).unwrap();
    fs::write(
        &patch,
        text.replace(
            "Subject: [PATCH] follow the irq",
            "Subject: [PATCH v2] follow the irq",
        ),
    )
    .unwrap();
    let gc = |all, drop_trees, keep_trees: &[&str], dry_run| {
        let request = kernel::GcRequest {
            all,
            drop_trees,
            keep_trees: keep_trees.iter().map(|s| s.to_string()).collect(),
            dry_run,
        };
        kernel::gc_unused(&f.cache, &f.opts, &request)
    };
    let dry = gc(false, false, &[], true).unwrap();
    assert_eq!(
        dry.removed,
        vec![("base+good".to_string(), old.manifest.key.clone())]
    );
    assert!(old.dir.is_dir(), "a dry run removed something");
    // A tree asked to stay stays; a recipe that does not exist is named.
    let err = format!("{:#}", gc(false, true, &["no-such"], true).unwrap_err());
    assert!(err.contains("--keep-tree no-such"), "{err}");
    let kept = gc(false, true, &["base"], true).unwrap();
    assert!(kept.trees_dropped.is_empty(), "{kept:?}");
    let report = gc(false, true, &[], false).unwrap();
    assert_eq!(report.removed.len(), 1);
    assert!(!old.dir.exists());
    let left = kernel::list(&f.cache).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key, base.manifest.key);
    assert!(!left[0].has_tree && base.image().is_file());
    assert!(kernel::list_table(&f.cache).unwrap().contains("base"));
    // Without the base's tree the variant builds cold, and still correctly.
    let new = kernel::build(&f.cache, "base+good", &f.opts).unwrap();
    assert_eq!(new.manifest.build.incremental_from, None);
    assert!(fs::read_to_string(new.image())
        .unwrap()
        .contains("if (idle(this))"));
    let all = gc(true, false, &[], false).unwrap();
    assert_eq!(all.removed.len(), 2);
    assert!(kernel::list(&f.cache).unwrap().is_empty());
}

#[test]
fn recipe_errors_name_the_file_and_field() {
    let f = Fixture::new();
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "t1",
            "patches = 1\n[source]\ndebian = \"linux-source-6.12\"\n",
            &["t1.toml", "patches"],
        ),
        (
            "t2",
            "pathces = []\n[source]\ndebian = \"linux-source-6.12\"\n",
            &["t2.toml", "pathces"],
        ),
        ("t3", "config = []\n", &["t3.toml", "source: missing"]),
        (
            "t4",
            "[source]\ndebian = \"linux-source-6.12\"\ngit = \"/x\"\n",
            &["t4.toml", "exactly one"],
        ),
        ("t5", "[source]\ngit = \"/x\"\n", &["t5.toml", "source.ref"]),
        (
            "t6",
            "[source]\ntarball = \"x.tar\"\nsha256 = \"12\"\n",
            &["t6.toml", "source.sha256"],
        ),
        (
            "t7",
            "base = \"base\"\npatches = [\"nope.patch\"]\n",
            &["t7.toml", "patches", "nope.patch"],
        ),
        (
            "t8",
            "base = \"base\"\nconfig = [\"../escape\"]\n",
            &["t8.toml", "config"],
        ),
        ("t9", "base = \"t9\"\n", &["loops", "t9 -> t9"]),
        (
            "t10",
            "base = \"base\"\n[boot]\nsched_features = [\"x y\"]\n",
            &["t10.toml", "sched_features[0]"],
        ),
        (
            "t11",
            "base = \"base\"\n[source]\ndebian = \"linux-source-6.12\"\n",
            &["t11.toml", "takes its source from the base"],
        ),
    ];
    for (name, text, needles) in cases {
        f.recipe(name, text);
        let error = kernel::load_recipe(&f.opts.dirs, name).unwrap_err();
        let err = format!("{error:#}");
        for n in *needles {
            assert!(err.contains(n), "{name}: {n:?} not in: {err}");
        }
        // Field errors are typed: the file and the field, for a caller to act on.
        if let Some(crate::Error::BadInput { file, field, .. }) = crate::Error::find(&error) {
            assert!(file.ends_with(format!("{name}.toml")), "{name}: {file:?}");
            assert!(err.contains(field.as_str()), "{name}: {field}");
        }
    }
    let err = format!(
        "{:#}",
        kernel::load_recipe(&f.opts.dirs, "no-such").unwrap_err()
    );
    assert!(err.contains("no-such.toml"), "{err}");
    let missing_source = kernel::load_recipe(&f.opts.dirs, "t3").unwrap_err();
    assert!(matches!(
        crate::Error::find(&missing_source),
        Some(crate::Error::BadInput { field, .. }) if field == "source"
    ));
    assert!(kernel::load_recipe(&f.opts.dirs, "../etc/passwd").is_err());
}

#[test]
fn shipped_recipes_load() {
    let dirs = RecipeDirs::at(crate::repo_path("images/kernels"));
    let names = kernel::recipe_names(&dirs).unwrap();
    for required in ["v6.12", "v6.12+wake-affine-idle-revert", "v7.3"] {
        assert!(
            names.iter().any(|n| n == required),
            "{required} missing from {names:?}"
        );
    }
    for name in &names {
        let r = kernel::load_recipe(&dirs, name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!r.config.is_empty(), "{name} has no lab config fragment");
    }
    let revert = kernel::load_recipe(&dirs, "v6.12+wake-affine-idle-revert").unwrap();
    assert_eq!(revert.base.as_ref().unwrap().name, "v6.12");
    assert_eq!(revert.own_patches().len(), 1);
}

#[test]
fn shipped_patch_applies_to_a_copy_of_wake_affine_idle() {
    if !have_tools() {
        return;
    }
    // The context lines of 6.12's wake_affine_idle(), as the patch expects them.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kernel/sched/fair.c");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let patch = crate::repo_path("images/kernels/patches/wake-affine-idle-revert.patch");
    let text = fs::read_to_string(&patch).unwrap();
    // Rebuild the pre-image from the hunk: context and removed lines.
    let pre: String = text
        .lines()
        .skip_while(|l| !l.starts_with("@@"))
        .skip(1)
        .take_while(|l| !l.starts_with("-- "))
        .filter(|l| !l.starts_with('+'))
        .map(|l| format!("{}\n", &l[1.min(l.len())..]))
        .collect();
    let padding = "\n".repeat(7457);
    fs::write(&file, format!("{padding}{pre}")).unwrap();
    let r = kernel::recipe::PatchRef {
        name: "wake-affine-idle-revert.patch".into(),
        sha256: sha256_file(&patch).unwrap(),
        path: patch,
    };
    let mut log = Vec::new();
    kernel::patch::apply(dir.path(), &r, &mut log).unwrap();
    let after = fs::read_to_string(&file).unwrap();
    assert!(after.contains("\tif (available_idle_cpu(this_cpu))\n\t\treturn this_cpu;"));
    assert!(!after.contains("cpus_share_cache(this_cpu, prev_cpu)"));
}

/// The shipped recipes for real: v6.12 cold, then the S1 revert from its object tree (or the
/// comma-separated recipes in `LAB_KERNEL_BUILD_TESTS`). About 20 min on two busy cores when
/// nothing is cached, so it runs only when asked, and every run lists it as skipped (ignored),
/// never as a pass.
#[test]
#[ignore = "builds kernels for real (about 20 min cold on two cores): run with \
            `--run-ignored only`, LAB_KERNEL_BUILD_TESTS=RECIPE,... to pick recipes"]
fn real_builds_of_shipped_recipes() {
    let which = std::env::var("LAB_KERNEL_BUILD_TESTS").unwrap_or_default();
    let names: Vec<&str> = if which.is_empty() || which == "1" {
        vec!["v6.12", "v6.12+wake-affine-idle-revert"]
    } else {
        which.split(',').map(str::trim).collect()
    };
    let cache = Cache::from_env().unwrap();
    let opts = BuildOptions::default();
    let mut releases = Vec::new();
    for name in names {
        let k = kernel::build(&cache, name, &opts).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let recipe = kernel::load_recipe(&opts.dirs, name).unwrap();
        eprintln!(
            "{name}: {} `{}` in {} ({:.0} s, incremental from {:?})",
            k.manifest.release,
            k.manifest.uts_version,
            k.dir.display(),
            k.manifest.build.seconds,
            k.manifest.build.incremental_from
        );
        assert!(k.manifest.uts_version.starts_with(&format!("#1-{name} ")));
        assert!(k
            .manifest
            .release
            .ends_with(&kernel::key::local_version(&k.manifest.key)));
        let applied: Vec<_> = k.manifest.patches.iter().map(|p| &p.name).collect();
        let wanted: Vec<_> = recipe.patches.iter().map(|p| &p.name).collect();
        assert_eq!(applied, wanted);
        assert_eq!(
            k.manifest.build.incremental_from.is_some(),
            recipe.base.is_some(),
            "a recipe with a base builds from the base's tree"
        );
        assert!(k.image().is_file());
        let dep = fs::read_to_string(k.modules_dir().join("modules.dep")).unwrap();
        for m in ["ioatdma.ko", "ptdma.ko", "dmatest.ko"] {
            assert!(
                dep.contains(m),
                "{m} missing from {}",
                k.modules_dir().display()
            );
        }
        let config = fs::read_to_string(k.config()).unwrap();
        assert!(
            config.contains("CONFIG_VIRTIO_CONSOLE=y") && config.contains("CONFIG_SCHEDSTATS=y")
        );
        releases.push(k.manifest.release.clone());
    }
    let n = releases.len();
    releases.sort();
    releases.dedup();
    assert_eq!(releases.len(), n, "two recipes share a release string");
}
