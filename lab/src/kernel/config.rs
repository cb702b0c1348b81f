//! Config fragments and the post-`olddefconfig` check. Kconfig silently drops a requested option
//! whose dependencies are unmet (or that this kernel does not have), so every line of every lab
//! fragment is compared with the resulting `.config` and a difference fails the build.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::arch::Arch;

/// One requested setting: `CONFIG_X=value` or `# CONFIG_X is not set` (value `n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    pub symbol: String,
    pub value: String,
    pub fragment: String,
    pub line: usize,
}

/// A symbol that did not end up with the requested value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config symbol {symbol}: {fragment}:{line} asks for {wanted}, but after olddefconfig it is {got}{hint}")]
pub(crate) struct ConfigMismatch {
    pub symbol: String,
    pub wanted: String,
    pub got: String,
    pub fragment: String,
    pub line: usize,
    /// Why, when known (symbol unknown to this kernel, or dependencies unmet).
    pub hint: String,
}

/// One thing the lab does in a guest and the kernel config it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    /// Who needs it (the lab module, device kind or test), for messages.
    pub who: &'static str,
    /// The architecture it applies to; `None`: every one.
    pub arch: Option<Arch>,
    /// `(symbol without CONFIG_, value)`: `y`, or `m` for what the lab loads with modprobe.
    pub symbols: &'static [(&'static str, &'static str)],
}

/// What the lab's guests use, as kernel config: a kernel without one of these boots but fails
/// the part of the lab named in `who` (often as a boot timeout or a missing sysfs file). The
/// default recipe's fragments ask for every symbol here that Kconfig lets one set (a unit test
/// below checks that, and the build's line-by-line check then guarantees the built config);
/// `tests/kernels.rs` checks the running guest's `/proc/config.gz` against the whole table;
/// builds of other recipes log what they lack. `SCHED_DEBUG` (debugfs `sched/features`, up to
/// 6.15) is not listed: from 6.16 on the interface exists without it, so `sched-debug.config`
/// asks for it in the recipes of the series that have it and `tests/kernels.rs` checks the
/// file itself.
pub(crate) const LAB_NEEDS: &[Need] = &[
    Need {
        arch: None,
        who: "the agent as PID 1 (lab/agent: mounts, pipes, threads, busybox)",
        symbols: &[
            ("BLK_DEV_INITRD", "y"),
            ("BINFMT_ELF", "y"),
            ("BINFMT_SCRIPT", "y"),
            ("PROC_FS", "y"),
            ("SYSFS", "y"),
            ("DEVTMPFS", "y"),
            ("TMPFS", "y"),
            ("UNIX98_PTYS", "y"),
            ("CGROUPS", "y"),
            ("FUTEX", "y"),
            ("EPOLL", "y"),
            ("MULTIUSER", "y"),
        ],
    },
    Need {
        arch: None,
        who: "the agent's channel (virtio-serial port lab.agent, lab::vm)",
        symbols: &[
            ("PCI", "y"),
            ("VIRTIO_PCI", "y"),
            ("VIRTIO_CONSOLE", "y"),
        ],
    },
    Need {
        arch: Some(Arch::X86_64),
        who: "the serial console (console=ttyS0, panic detection in lab::vm)",
        symbols: &[
            ("PRINTK", "y"),
            ("SERIAL_8250", "y"),
            ("SERIAL_8250_CONSOLE", "y"),
        ],
    },
    Need {
        arch: Some(Arch::X86_64),
        who: "guest power-off (lab bench boot's hand-written QEMU line ends with poweroff -f)",
        symbols: &[("ACPI", "y"), ("ACPI_SYSTEM_POWER_STATES_SUPPORT", "y")],
    },
    Need {
        arch: Some(Arch::Aarch64),
        who: "the serial console (console=ttyAMA0, panic detection in lab::vm)",
        symbols: &[
            ("PRINTK", "y"),
            ("SERIAL_AMBA_PL011", "y"),
            ("SERIAL_AMBA_PL011_CONSOLE", "y"),
        ],
    },
    Need {
        arch: Some(Arch::Aarch64),
        who: "guest power-off through PSCI (lab bench boot's hand-written QEMU line ends with poweroff -f)",
        symbols: &[("ARM_PSCI_FW", "y")],
    },
    Need {
        arch: Some(Arch::Aarch64),
        who: "PCIe MSI-X on QEMU virt (the generic host bridge, the GICv3 and its ITS)",
        symbols: &[
            ("PCI_HOST_GENERIC", "y"),
            ("ARM_GIC_V3", "y"),
            ("ARM_GIC_V3_ITS", "y"),
        ],
    },
    Need {
        arch: Some(Arch::Aarch64),
        who: "topologies on aarch64 (NUMA nodes and distances from the device tree, cluster, LLC and SMT domains)",
        symbols: &[
            ("NUMA", "y"),
            ("OF_NUMA", "y"),
            ("SCHED_MC", "y"),
            ("SCHED_CLUSTER", "y"),
            ("SCHED_SMT", "y"),
        ],
    },
    Need {
        arch: Some(Arch::X86_64),
        who: "topologies (tests/topology.rs: NUMA nodes and distances from ACPI SRAT/SLIT, LLC and SMT domains)",
        symbols: &[
            ("SMP", "y"),
            ("NUMA", "y"),
            ("X86_64_ACPI_NUMA", "y"),
            ("SCHED_MC", "y"),
            ("SCHED_SMT", "y"),
        ],
    },
    Need {
        arch: Some(Arch::X86_64),
        who: "devices::lab_dma (ioatdma, ptdma and dmatest, loaded with modprobe)",
        symbols: &[
            ("PCI_MSI", "y"),
            ("MODULES", "y"),
            ("MODULE_UNLOAD", "y"),
            ("DMADEVICES", "y"),
            ("DMA_ENGINE", "y"),
            ("INTEL_IOATDMA", "m"),
            ("AMD_PTDMA", "m"),
            ("DMATEST", "m"),
        ],
    },
    Need {
        arch: None,
        who: "devices::Nvme (QEMU's nvme controller)",
        symbols: &[("BLOCK", "y"), ("BLK_DEV_NVME", "y")],
    },
    Need {
        arch: None,
        who: "devices::Nic (virtio-net-pci)",
        symbols: &[("NET", "y"), ("INET", "y"), ("VIRTIO_NET", "y")],
    },
    Need {
        arch: None,
        who: "IRQ pinning (lab::devices: /proc/irq/N/smp_affinity_list, effective_affinity_list)",
        symbols: &[("GENERIC_IRQ_EFFECTIVE_AFF_MASK", "y")],
    },
    Need {
        arch: None,
        who: "tests/dma_engines.rs (busybox devmem on a device's BAR)",
        symbols: &[("DEVMEM", "y")],
    },
    Need {
        arch: None,
        who: "lab::observe (tracefs: sched_switch, sched_waking, sched_wakeup, sched_migrate_task, irq_handler_entry)",
        symbols: &[
            ("FTRACE", "y"),
            ("TRACING", "y"),
            ("EVENT_TRACING", "y"),
            ("TRACEPOINTS", "y"),
        ],
    },
    Need {
        arch: None,
        who: "scheduler settings (lab::kernel::boot: debugfs features, /proc/sys sysctls)",
        symbols: &[
            ("DEBUG_FS", "y"),
            ("PROC_SYSCTL", "y"),
            ("SCHEDSTATS", "y"),
            ("NUMA_BALANCING", "y"),
        ],
    },
];

/// The architecture a `.config` is for (`CONFIG_ARM64=y`, else x86_64).
pub(crate) fn arch_of(dot_config: &HashMap<String, String>) -> Arch {
    if dot_config.get("CONFIG_ARM64").is_some_and(|v| v == "y") {
        Arch::Aarch64
    } else {
        Arch::X86_64
    }
}

/// Every [`LAB_NEEDS`] symbol of the config's architecture that `dot_config` does not have at
/// the needed value, with who needs it: `(who, CONFIG_SYMBOL, wanted, got)`.
pub(crate) fn unmet_needs(
    dot_config: &HashMap<String, String>,
) -> Vec<(&'static str, String, &'static str, String)> {
    let arch = arch_of(dot_config);
    let mut out = Vec::new();
    for need in LAB_NEEDS
        .iter()
        .filter(|n| n.arch.is_none_or(|a| a == arch))
    {
        for (sym, wanted) in need.symbols {
            let symbol = format!("CONFIG_{sym}");
            let got = dot_config
                .get(&symbol)
                .cloned()
                .unwrap_or_else(|| "not set".to_string());
            if got != *wanted {
                out.push((need.who, symbol, *wanted, got));
            }
        }
    }
    out
}

/// Parses a fragment; other lines must be comments or blank.
pub(crate) fn parse_fragment(name: &str, text: &str) -> Result<Vec<Setting>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let lineno = i + 1;
        if let Some(rest) = line.strip_prefix("# CONFIG_") {
            if let Some(sym) = rest.strip_suffix(" is not set") {
                check_symbol(name, lineno, sym)?;
                out.push(Setting {
                    symbol: format!("CONFIG_{sym}"),
                    value: "n".into(),
                    fragment: name.into(),
                    line: lineno,
                });
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix("CONFIG_") else {
            anyhow::bail!("{name}:{lineno}: expected CONFIG_X=value or a comment, got {raw:?}");
        };
        let (sym, value) = rest
            .split_once('=')
            .with_context(|| format!("{name}:{lineno}: expected CONFIG_X=value, got {raw:?}"))?;
        check_symbol(name, lineno, sym)?;
        if value.is_empty() {
            anyhow::bail!("{name}:{lineno}: CONFIG_{sym} has an empty value");
        }
        out.push(Setting {
            symbol: format!("CONFIG_{sym}"),
            value: value.to_string(),
            fragment: name.into(),
            line: lineno,
        });
    }
    Ok(out)
}

fn check_symbol(name: &str, line: usize, sym: &str) -> Result<()> {
    if sym.is_empty() || !sym.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        anyhow::bail!("{name}:{line}: {sym:?} is not a config symbol");
    }
    Ok(())
}

/// `.config` as a map; unset symbols are absent.
pub(crate) fn parse_dot_config(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| l.starts_with("CONFIG_"))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every setting whose value differs in `dot_config` (`n` matches an unset symbol). The last
/// request for a symbol wins, as it does when Kconfig reads the merged file.
pub(crate) fn mismatches(
    settings: &[Setting],
    dot_config: &HashMap<String, String>,
) -> Vec<ConfigMismatch> {
    let mut last: HashMap<&str, &Setting> = HashMap::new();
    for s in settings {
        last.insert(&s.symbol, s);
    }
    let mut out: Vec<ConfigMismatch> = settings
        .iter()
        .filter(|s| std::ptr::eq(*last.get(s.symbol.as_str()).expect("inserted"), *s))
        .filter_map(|s| {
            let got = dot_config.get(&s.symbol).map(String::as_str).unwrap_or("n");
            (got != s.value).then(|| ConfigMismatch {
                symbol: s.symbol.clone(),
                wanted: s.value.clone(),
                got: if dot_config.contains_key(&s.symbol) {
                    got.to_string()
                } else {
                    "not set".to_string()
                },
                fragment: s.fragment.clone(),
                line: s.line,
                hint: String::new(),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.fragment, a.line).cmp(&(&b.fragment, b.line)));
    out
}

/// Fills in why a symbol was dropped: whether any Kconfig file of `tree` defines it.
pub(crate) fn explain(tree: &Path, mismatch: &mut ConfigMismatch) {
    let sym = mismatch.symbol.trim_start_matches("CONFIG_");
    let defined = kconfig_files(tree).into_iter().any(|f| {
        std::fs::read_to_string(&f).is_ok_and(|t| {
            t.lines().any(|l| {
                let l = l.trim();
                l == format!("config {sym}") || l == format!("menuconfig {sym}")
            })
        })
    });
    mismatch.hint = if defined {
        " (the symbol exists: a dependency is unmet or a `select`/choice overrides it; \
         see `make menuconfig` and search for it)"
            .to_string()
    } else {
        " (no Kconfig file of this kernel defines it: the option was removed or renamed)"
            .to_string()
    };
}

fn kconfig_files(tree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![tree.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if ft.is_dir() {
                // The object tree and VCS metadata hold no Kconfig sources.
                if !matches!(name.as_ref(), "obj" | ".git" | "Documentation" | "tools") {
                    stack.push(e.path());
                }
            } else if name.starts_with("Kconfig") {
                out.push(e.path());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragment_parsing_and_errors_name_the_line() {
        let s = parse_fragment(
            "f.config",
            "# c\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_S=\"x y\"\n",
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[1].symbol.as_str(), s[1].value.as_str(), s[1].line),
            ("CONFIG_B", "n", 3)
        );
        let err = parse_fragment("f.config", "CONFIG_A=y\nOOPS\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("f.config:2"), "{err}");
    }

    #[test]
    fn mismatch_names_symbol_and_unset_matches_n() {
        let s = parse_fragment(
            "lab.config",
            "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_D=y\n",
        )
        .unwrap();
        let dot = parse_dot_config("CONFIG_A=y\nCONFIG_B=y\n# CONFIG_C is not set\n");
        let m = mismatches(&s, &dot);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (
                m[0].symbol.as_str(),
                m[0].wanted.as_str(),
                m[0].got.as_str()
            ),
            ("CONFIG_B", "m", "y")
        );
        assert_eq!(
            (m[1].symbol.as_str(), m[1].got.as_str()),
            ("CONFIG_D", "not set")
        );
        assert!(m[1].to_string().contains("lab.config:4"));
    }

    /// The default recipe asks for everything the lab needs, so the build's line-by-line check
    /// (not repeated here) guarantees it in every built default kernel.
    #[test]
    fn the_default_recipe_asks_for_every_lab_need() {
        let dirs = crate::kernel::RecipeDirs::at(crate::repo_path("images/kernels"));
        for arch in Arch::ALL {
            let name = crate::kernel::default_recipe(arch);
            let recipe = crate::kernel::load_recipe(&dirs, name).unwrap();
            assert_eq!(recipe.arch, arch, "{name}");
            let mut requested = HashMap::new();
            // What the architecture's Kconfig sets by itself.
            if arch == Arch::Aarch64 {
                requested.insert("CONFIG_ARM64".to_string(), "y".to_string());
            }
            for f in &recipe.config {
                let text = std::fs::read_to_string(&f.path).unwrap();
                for s in parse_fragment(&f.name, &text).unwrap() {
                    requested.insert(s.symbol, s.value);
                }
            }
            let unmet = unmet_needs(&requested);
            assert!(
                unmet.is_empty(),
                "{} does not ask for: {unmet:#?}",
                recipe.name
            );
        }
    }

    #[test]
    fn unmet_needs_name_who_needs_the_symbol() {
        let mut dot = HashMap::new();
        for need in LAB_NEEDS {
            for (sym, value) in need.symbols {
                dot.insert(format!("CONFIG_{sym}"), value.to_string());
            }
        }
        assert!(unmet_needs(&dot).is_empty());
        // An arm64 config is held to arm64's needs: the console is the PL011, not the 8250.
        let mut arm = dot.clone();
        arm.insert("CONFIG_ARM64".into(), "y".into());
        arm.remove("CONFIG_SERIAL_8250");
        assert!(unmet_needs(&arm).is_empty());
        arm.remove("CONFIG_SERIAL_AMBA_PL011_CONSOLE");
        let unmet = unmet_needs(&arm);
        assert_eq!(unmet.len(), 1, "{unmet:?}");
        assert!(unmet[0].0.contains("ttyAMA0"), "{unmet:?}");
        dot.insert("CONFIG_INTEL_IOATDMA".into(), "y".into());
        dot.remove("CONFIG_VIRTIO_CONSOLE");
        let unmet = unmet_needs(&dot);
        assert_eq!(unmet.len(), 2, "{unmet:?}");
        assert!(unmet
            .iter()
            .any(|(who, sym, wanted, got)| who.contains("agent")
                && sym == "CONFIG_VIRTIO_CONSOLE"
                && *wanted == "y"
                && got == "not set"));
        assert!(unmet
            .iter()
            .any(|(who, sym, wanted, got)| who.contains("lab_dma")
                && sym == "CONFIG_INTEL_IOATDMA"
                && *wanted == "m"
                && got == "y"));
    }

    #[test]
    fn later_request_wins() {
        let mut s = parse_fragment("a", "CONFIG_A=y\n").unwrap();
        s.extend(parse_fragment("b", "# CONFIG_A is not set\n").unwrap());
        assert!(mismatches(&s, &parse_dot_config("")).is_empty());
    }
}
