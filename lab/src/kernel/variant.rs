//! Variants without rebuild: a kernel recipe plus boot-time settings (extra command-line
//! arguments, scheduler features, sysctls), under a stable name used in results.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::build::{BuildOptions, BuiltKernel};
use super::recipe::{validate_name, BootSettings, Recipe};
use crate::cache::Cache;

/// A kernel build plus boot-time settings. Two variants with the same name are the same
/// experiment arm; the name is what results, tables and JSON files use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    /// Kernel recipe name (`images/kernels/<kernel>.toml`).
    pub kernel: String,
    /// Settings on top of the recipe's own `[boot]` table.
    #[serde(default)]
    pub extra: BootSettings,
}

impl Variant {
    /// The kernel as its recipe boots it; the name is the recipe name.
    pub fn kernel(recipe: &str) -> Variant {
        Variant {
            name: recipe.to_string(),
            kernel: recipe.to_string(),
            extra: BootSettings::default(),
        }
    }

    pub fn named(mut self, name: &str) -> Result<Variant> {
        validate_name(name)?;
        self.name = name.to_string();
        Ok(self)
    }

    /// Adds a scheduler feature (e.g. `NO_RUN_TO_PARITY`); the default name gains `@feature`.
    pub fn with_sched_feature(mut self, feature: &str) -> Variant {
        self.extra.sched_features.push(feature.to_string());
        self.rename_if_default();
        self
    }

    pub fn with_cmdline(mut self, arg: &str) -> Variant {
        self.extra.cmdline.push(arg.to_string());
        self.rename_if_default();
        self
    }

    pub fn with_sysctl(mut self, key: &str, value: &str) -> Variant {
        self.extra
            .sysctls
            .insert(key.to_string(), value.to_string());
        self.rename_if_default();
        self
    }

    fn rename_if_default(&mut self) {
        if self.name == self.kernel || self.name.starts_with(&format!("{}@", self.kernel)) {
            self.name = default_name(&self.kernel, &self.extra);
        }
    }

    /// Checks the settings and the name; call before booting.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.kernel)?;
        if self.name.is_empty() || self.name.len() > 160 || self.name.contains(['/', ' ', '\n']) {
            bail!(
                "variant name {:?}: no '/', spaces or newlines, at most 160 characters",
                self.name
            );
        }
        self.extra.validate(&format!("variant {}", self.name))
    }

    /// The settings in effect: the recipe's `[boot]` table, then this variant's.
    pub fn effective(&self, recipe: &Recipe) -> Result<BootSettings> {
        if recipe.name != self.kernel {
            bail!(
                "variant {} is for kernel {}, not {}",
                self.name,
                self.kernel,
                recipe.name
            );
        }
        self.validate()?;
        Ok(recipe.boot.merged(&self.extra))
    }
}

/// A variant with its kernel built (or found in the cache) and its settings merged.
#[derive(Debug, Clone)]
pub struct ReadyVariant {
    pub variant: Variant,
    pub kernel: BuiltKernel,
    /// The recipe's `[boot]` settings followed by the variant's.
    pub settings: BootSettings,
}

impl ReadyVariant {
    /// Extra kernel command-line arguments (append to the VM's own).
    pub fn cmdline(&self) -> String {
        self.settings.cmdline.join(" ")
    }

    /// Shell commands for the guest to run before the workload.
    pub fn guest_script(&self) -> Result<String> {
        apply_script(&self.settings)
    }
}

/// Builds (or finds) the variant's kernel and merges its settings.
pub fn prepare(cache: &Cache, variant: &Variant, opts: &BuildOptions) -> Result<ReadyVariant> {
    variant.validate()?;
    let recipe = super::recipe::load(&opts.dirs, &variant.kernel)
        .with_context(|| format!("variant {}", variant.name))?;
    let settings = variant.effective(&recipe)?;
    let kernel = super::build::build_recipe(cache, &recipe, opts)
        .with_context(|| format!("variant {}", variant.name))?;
    Ok(ReadyVariant {
        variant: variant.clone(),
        kernel,
        settings,
    })
}

/// `kernel@FEATURE,FEATURE2@key=value@cmdline-arg`: every setting appears, in a fixed order, so
/// equal settings give equal names.
pub fn default_name(kernel: &str, extra: &BootSettings) -> String {
    let mut name = kernel.to_string();
    if !extra.sched_features.is_empty() {
        name.push('@');
        name.push_str(&extra.sched_features.join(","));
    }
    let sysctls: BTreeMap<_, _> = extra.sysctls.iter().collect();
    for (k, v) in sysctls {
        name.push_str(&format!("@{k}={}", v.replace(' ', "_")));
    }
    for arg in &extra.cmdline {
        name.push('@');
        name.push_str(arg);
    }
    name
}

/// The guest-side shell commands that apply `settings` before the workload (scheduler features
/// through debugfs, sysctls through /proc/sys). Values are validated, so they need no quoting.
pub fn apply_script(settings: &BootSettings) -> Result<String> {
    settings.validate("boot settings")?;
    let mut script = String::new();
    if !settings.sched_features.is_empty() {
        script.push_str(
            "mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug\n",
        );
        for f in &settings.sched_features {
            script.push_str(&format!("echo {f} > /sys/kernel/debug/sched/features\n"));
        }
    }
    for (k, v) in &settings.sysctls {
        let path = k.replace('.', "/");
        script.push_str(&format!("echo '{v}' > /proc/sys/{path}\n"));
    }
    Ok(script)
}

/// Whether every requested feature is in effect in the contents of
/// `/sys/kernel/debug/sched/features` (`NO_X` means `X` is off).
pub fn features_in_effect(requested: &[String], features_file: &str) -> Result<()> {
    let current: Vec<&str> = features_file.split_whitespace().collect();
    for f in requested {
        if !current.contains(&f.as_str()) {
            bail!(
                "scheduler feature {f} is not in effect (features: {})",
                current.join(" ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_stable() {
        let a = Variant::kernel("v6.12")
            .with_sched_feature("NO_RUN_TO_PARITY")
            .with_sysctl("kernel.sched_autogroup_enabled", "0");
        assert_eq!(
            a.name,
            "v6.12@NO_RUN_TO_PARITY@kernel.sched_autogroup_enabled=0"
        );
        let b = Variant::kernel("v6.12")
            .with_sysctl("kernel.sched_autogroup_enabled", "0")
            .with_sched_feature("NO_RUN_TO_PARITY");
        assert_eq!(a.name, b.name);
        let named = a
            .clone()
            .named("eevdf-no-rtp")
            .unwrap()
            .with_cmdline("nosmt");
        assert_eq!(named.name, "eevdf-no-rtp");
    }

    #[test]
    fn script_and_readback() {
        let v = Variant::kernel("v6.12").with_sched_feature("NO_DELAY_DEQUEUE");
        let s = apply_script(&v.extra).unwrap();
        assert!(s.contains("echo NO_DELAY_DEQUEUE > /sys/kernel/debug/sched/features"));
        assert!(features_in_effect(
            &v.extra.sched_features,
            "PLACE_LAG NO_DELAY_DEQUEUE RUN_TO_PARITY"
        )
        .is_ok());
        let err = features_in_effect(&v.extra.sched_features, "DELAY_DEQUEUE").unwrap_err();
        assert!(err.to_string().contains("NO_DELAY_DEQUEUE"));
        let bad = Variant::kernel("v6.12").with_sched_feature("X; rm -rf /");
        assert!(bad.validate().is_err());
    }
}
