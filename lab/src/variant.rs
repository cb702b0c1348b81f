//! Variants: everything that differs between the columns of a comparison. A variant is a kernel
//! (recipe name, or `debian`), boot-time settings on top of the recipe's own (scheduler
//! features, kernel command-line arguments, sysctls) and overrides of the scenario's parameters
//! (device, IRQ-mask or workload settings), under a name that results use.
//!
//! On the command line and in tests a variant is written
//! `[NAME=]KERNEL[@feature=F][@cmdline=ARG][@sysctl=KEY=VALUE][@set=PARAM=VALUE]...`, for
//! example `v6.12@feature=NO_RUN_TO_PARITY` or `polled=v6.12@set=dmatest.polled=true`. Without a name,
//! the canonical form of the rest is the name, so equal settings give equal names.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::kernel::{BootSettings, BuildOptions, ReadyKernel};

/// One column of a comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// The column's name in tables and records (`v6.12@feature=NO_RUN_TO_PARITY`).
    pub name: String,
    /// Kernel recipe name (`images/kernels/<kernel>.toml`) or `debian`.
    pub kernel: String,
    /// Settings on top of the recipe's own `[boot]` table.
    #[serde(default)]
    pub settings: BootSettings,
    /// Scenario parameters this variant changes (`placement` -> `same-llc`); the scenario
    /// checks names and values.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

impl Variant {
    /// The kernel as its recipe boots it; the name is the recipe name.
    pub fn kernel(recipe: &str) -> Variant {
        Variant {
            name: recipe.to_string(),
            kernel: recipe.to_string(),
            settings: BootSettings::default(),
            params: BTreeMap::new(),
        }
    }

    /// Gives the variant a name of its own (kept when settings are added later).
    pub fn named(mut self, name: &str) -> Variant {
        self.name = name.to_string();
        self
    }

    /// Adds a scheduler feature (`NO_RUN_TO_PARITY`).
    pub fn with_sched_feature(self, feature: &str) -> Variant {
        self.change(|v| v.settings.sched_features.push(feature.to_string()))
    }

    /// Adds a kernel command-line argument.
    pub fn with_cmdline(self, arg: &str) -> Variant {
        self.change(|v| v.settings.cmdline.push(arg.to_string()))
    }

    /// Adds a sysctl written once the guest is up (`kernel.sched_autogroup_enabled`, `0`).
    pub fn with_sysctl(self, key: &str, value: &str) -> Variant {
        self.change(|v| {
            v.settings
                .sysctls
                .insert(key.to_string(), value.to_string());
        })
    }

    /// Overrides scenario parameter `param` for this variant.
    pub fn with_param(self, param: &str, value: &str) -> Variant {
        self.change(|v| {
            v.params.insert(param.to_string(), value.to_string());
        })
    }

    /// Applies a change and keeps a default name in step with it.
    fn change(mut self, f: impl FnOnce(&mut Variant)) -> Variant {
        let default = self.name == self.spec();
        f(&mut self);
        if default {
            self.name = self.spec();
        }
        self
    }

    /// The canonical written form without the name: kernel, then features, sysctls (sorted),
    /// command-line arguments and parameters (sorted).
    pub fn spec(&self) -> String {
        let mut s = self.kernel.clone();
        for f in &self.settings.sched_features {
            s.push_str(&format!("@feature={f}"));
        }
        for (k, v) in &self.settings.sysctls {
            s.push_str(&format!("@sysctl={k}={v}"));
        }
        for a in &self.settings.cmdline {
            s.push_str(&format!("@cmdline={a}"));
        }
        for (k, v) in &self.params {
            s.push_str(&format!("@set={k}={v}"));
        }
        s
    }

    /// Checks the kernel name, settings, parameter names and the name; the runner calls it
    /// before building anything.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.kernel != crate::kernel::DEBIAN {
            crate::kernel::recipe::validate_name(&self.kernel)
                .map_err(|e| e.context(format!("variant {}", self.name)))?;
        }
        self.settings.validate(&format!("variant {}", self.name))?;
        for (k, v) in &self.params {
            if k.is_empty()
                || !k
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            {
                bail!(
                    "variant {}: parameter name {k:?}: letters, digits, '_' and '.' (nested) only",
                    self.name
                );
            }
            if v.is_empty() || v.contains('@') {
                bail!(
                    "variant {}: parameter {k}: value {v:?} is empty or contains '@'",
                    self.name
                );
            }
        }
        if self.name.is_empty()
            || self.name.len() > 160
            || self.name.chars().any(|c| c == '/' || c.is_whitespace())
        {
            bail!(
                "variant name {:?}: 1-160 characters, no '/' or whitespace",
                self.name
            );
        }
        Ok(())
    }

    /// Finds or builds the variant's kernel and merges its settings onto the recipe's, for
    /// `arch`'s guests when given (a recipe for another is refused before anything is built).
    /// Blocking.
    pub(crate) fn prepare(
        &self,
        cache: &Cache,
        opts: &BuildOptions,
        arch: Option<crate::arch::Arch>,
    ) -> Result<ReadyKernel> {
        self.validate()?;
        crate::kernel::prepare(cache, &self.kernel, &self.settings, opts, arch)
            .map_err(|e| e.context(format!("variant {}", self.name)))
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = self.spec();
        if self.name == spec {
            f.write_str(&spec)
        } else {
            write!(f, "{}={spec}", self.name)
        }
    }
}

impl FromStr for Variant {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Variant> {
        let mut parts = text.split('@');
        let head = parts.next().unwrap_or_default();
        let (name, kernel) = match head.split_once('=') {
            Some((name, kernel)) => (Some(name), kernel),
            None => (None, head),
        };
        if kernel.is_empty() {
            bail!("variant {text:?}: no kernel (write [NAME=]KERNEL[@feature=F][@cmdline=ARG][@sysctl=K=V][@set=P=V])");
        }
        let mut v = Variant::kernel(kernel);
        for part in parts {
            let Some((kind, value)) = part.split_once('=') else {
                bail!("variant {text:?}: setting {part:?} is not KIND=VALUE (kinds: feature, cmdline, sysctl, set)");
            };
            let pair = |what: &str| match value.split_once('=') {
                Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                _ => bail!("variant {text:?}: {kind}={value:?} must be {kind}={what}=VALUE"),
            };
            v = match kind {
                "feature" => v.with_sched_feature(value),
                "cmdline" => v.with_cmdline(value),
                "sysctl" => {
                    let (k, val) = pair("KEY")?;
                    v.with_sysctl(&k, &val)
                }
                "set" => {
                    let (k, val) = pair("PARAM")?;
                    v.with_param(&k, &val)
                }
                other => bail!(
                    "variant {text:?}: unknown setting kind {other:?} (use feature=, cmdline=, sysctl= or set=)"
                ),
            };
        }
        if let Some(name) = name {
            v.name = name.to_string();
        }
        v.validate()?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_forms_round_trip_and_default_names_are_canonical() {
        let a: Variant = "v6.12@feature=NO_RUN_TO_PARITY@sysctl=kernel.sched_autogroup_enabled=0"
            .parse()
            .unwrap();
        assert_eq!(a.kernel, "v6.12");
        assert_eq!(a.settings.sched_features, ["NO_RUN_TO_PARITY"]);
        assert_eq!(a.settings.sysctls["kernel.sched_autogroup_enabled"], "0");
        assert_eq!(a.name, a.spec());
        // Built in another order: the same name.
        let b = Variant::kernel("v6.12")
            .with_sysctl("kernel.sched_autogroup_enabled", "0")
            .with_sched_feature("NO_RUN_TO_PARITY");
        assert_eq!(a, b);
        assert_eq!(a.to_string().parse::<Variant>().unwrap(), a);

        let named: Variant = "polled=v6.12@set=dmatest.polled=true@cmdline=nosmt"
            .parse()
            .unwrap();
        assert_eq!(named.name, "polled");
        assert_eq!(named.params["dmatest.polled"], "true");
        assert_eq!(named.settings.cmdline, ["nosmt"]);
        assert_eq!(
            named.to_string(),
            "polled=v6.12@cmdline=nosmt@set=dmatest.polled=true"
        );
        assert_eq!(named.to_string().parse::<Variant>().unwrap(), named);
        // A name stays when settings are added afterwards.
        assert_eq!(named.with_cmdline("quiet").name, "polled");
        // Values may contain '=' (kernel arguments do).
        let c: Variant = "v6.12@cmdline=isolcpus=2-3".parse().unwrap();
        assert_eq!(c.settings.cmdline, ["isolcpus=2-3"]);
    }

    #[test]
    fn bad_written_forms_say_what_is_wrong() {
        for (text, want) in [
            ("", "no kernel"),
            ("x=", "no kernel"),
            ("v6.12@NO_RUN_TO_PARITY", "not KIND=VALUE"),
            ("v6.12@flag=x", "unknown setting kind \"flag\""),
            ("v6.12@sysctl=novalue", "sysctl=KEY=VALUE"),
            ("v6.12@set==1", "set=PARAM=VALUE"),
            ("v6.12@feature=no; rm", "expected a feature name"),
            ("v6.12@cmdline=a b", "no spaces"),
            ("../etc", "kernel recipe name"),
            ("a/b=v6.12", "no '/'"),
        ] {
            let err = format!("{:#}", text.parse::<Variant>().unwrap_err());
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
