//! Guest architectures: everything that differs between an x86_64 and an aarch64 guest, as
//! data. A topology names its architecture, a kernel recipe the one it builds for; QEMU's
//! binary and machine, the console, the kernel's image and make variables, Debian's
//! architecture and multiarch directories, the Rust target of the lab's guest programs and the
//! name the interrupt controller gives MSI-X vectors all come from here, so no module outside
//! this one asks "is this arm64?".

use serde::{Deserialize, Serialize};

/// A guest CPU architecture.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86_64 on QEMU's `q35` (the lab's default).
    #[default]
    X86_64,
    /// aarch64 on QEMU's `virt` with a GICv3 and its ITS.
    Aarch64,
}

impl Arch {
    /// Every architecture the lab boots.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture of the machine the lab runs on.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::X86_64
        }
    }

    /// Reads a file's spelling: the GNU name (`x86_64`, `aarch64`) or Linux's and Debian's
    /// (`x86`, `amd64`, `arm64`).
    pub fn parse(text: &str) -> Option<Arch> {
        match text {
            "x86_64" | "x86" | "amd64" => Some(Arch::X86_64),
            "aarch64" | "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The GNU name, as topology files and records write it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Linux's `ARCH=` and its `arch/<dir>`.
    pub(crate) fn kernel_arch(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The make target of the bootable image and where kbuild leaves it (under `O=`).
    pub(crate) fn kernel_image_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "bzImage",
            Arch::Aarch64 => "Image",
        }
    }

    /// The built image in the object tree.
    pub(crate) fn kernel_image_path(self) -> String {
        format!(
            "arch/{}/boot/{}",
            self.kernel_arch(),
            self.kernel_image_target()
        )
    }

    /// The starting config a recipe gets when it names none.
    pub(crate) fn default_defconfig(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64_defconfig",
            Arch::Aarch64 => "defconfig",
        }
    }

    /// Kernel-provided fragments a recipe gets when it names none.
    pub(crate) fn default_kconfig_targets(self) -> Vec<String> {
        vec!["kvm_guest.config".to_string()]
    }

    /// Debian's name of the architecture (`dpkg --print-architecture`).
    pub(crate) fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The multiarch triplet: Debian's library directories and the GNU tool prefix.
    pub(crate) fn triplet(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The ELF machine of its binaries (`e_machine`).
    pub(crate) fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }

    /// The Rust target of the lab's static guest programs.
    pub(crate) fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// QEMU's system emulator for it.
    pub(crate) fn qemu_binary(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu-system-x86_64",
            Arch::Aarch64 => "qemu-system-aarch64",
        }
    }

    /// QEMU's machine, with the properties every lab guest gets (`virt` with a GICv3 and its
    /// ITS, where PCIe MSI-X lands; `q35` on x86). Topologies add their own properties.
    pub(crate) fn machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "q35",
            Arch::Aarch64 => "virt,gic-version=3,its=on",
        }
    }

    /// The `-cpu` model a topology of this architecture gets when it names none. On aarch64
    /// `max` is the model whose cache description QEMU's `smp-cache` can shape (a named core
    /// such as `cortex-a57` refuses an L3 level).
    pub(crate) fn default_cpu_model(self) -> &'static str {
        match self {
            Arch::X86_64 => "qemu64",
            Arch::Aarch64 => "max",
        }
    }

    /// The serial console's device name in the guest.
    pub(crate) fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    /// Kernel arguments only this architecture understands or needs under QEMU.
    pub(crate) fn cmdline(self) -> &'static [&'static str] {
        match self {
            // The TSC is unstable under TCG; without these the watchdog spends boot time on it,
            // and the i8042 probe waits for a keyboard q35 does not have.
            Arch::X86_64 => &[
                "tsc=reliable",
                "no_timer_check",
                "i8042.noaux",
                "i8042.nokbd",
            ],
            Arch::Aarch64 => &[],
        }
    }

    /// How `/proc/interrupts` names the chip of a PCI device's MSI-X vectors, before the
    /// device's address (`PCI-MSIX-0000:00:10.0`; through the GICv3 ITS on aarch64).
    pub fn msix_chip(self) -> &'static str {
        match self {
            Arch::X86_64 => "PCI-MSIX-",
            Arch::Aarch64 => "ITS-PCI-MSIX-",
        }
    }

    /// The hugepage sizes guest memory may come from (a 4 KiB granule on aarch64 has the same
    /// two block sizes as x86-64).
    pub(crate) fn hugepage_sizes(self) -> [u64; 2] {
        [2 << 20, 1 << 30]
    }

    /// Debian's prebuilt kernel metapackage for it.
    pub(crate) fn debian_kernel_package(self) -> &'static str {
        match self {
            Arch::X86_64 => "linux-image-amd64",
            Arch::Aarch64 => "linux-image-arm64",
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_reads_back_and_names_round_trip() {
        for arch in Arch::ALL {
            assert_eq!(Arch::parse(arch.name()), Some(arch));
            assert_eq!(Arch::parse(arch.debian()), Some(arch));
            assert_eq!(Arch::parse(arch.kernel_arch()), Some(arch));
            let json = serde_json::to_string(&arch).unwrap();
            assert_eq!(json, format!("\"{}\"", arch.name()));
            assert_eq!(serde_json::from_str::<Arch>(&json).unwrap(), arch);
        }
        assert_eq!(Arch::parse("riscv64"), None);
        assert_eq!(Arch::default(), Arch::X86_64);
    }

    #[test]
    fn the_two_architectures_differ_where_a_guest_sees_it() {
        let (x, a) = (Arch::X86_64, Arch::Aarch64);
        assert_eq!(x.kernel_image_path(), "arch/x86/boot/bzImage");
        assert_eq!(a.kernel_image_path(), "arch/arm64/boot/Image");
        assert_ne!(x.console(), a.console());
        assert!(a.machine().contains("gic-version=3") && a.machine().contains("its=on"));
        assert!(a.msix_chip().starts_with("ITS-") && a.msix_chip().ends_with(x.msix_chip()));
        assert!(x.cmdline().contains(&"tsc=reliable") && a.cmdline().is_empty());
    }
}
