//! Host files (`hosts/NAME.toml`): which of this host's PCI devices the lab may take from the
//! host and pass to a guest with `vfio-pci`, by PCI address, with the vendor:device ID the
//! address must hold and what the device stands in for in a scenario (an `ioatdma` channel, a
//! `ptdma` queue, an NVMe controller).
//!
//! ```toml
//! description = "2-socket Xeon Gold 6132, one I/OAT function"
//!
//! [devices.ioat0]
//! bdf = "0000:00:04.0"
//! id = "8086:2021"
//! stands_in = "ioatdma"
//! ```
//!
//! Which file: `--host NAME` (or `LAB_HOST=NAME`) picks `hosts/NAME.toml`, a value with a `/`
//! or ending in `.toml` is a path; without either, `hosts/<hostname>.toml` if it exists. A
//! device is written `passthrough:NAME` on the command line ([`crate::devices`]); taking it is
//! [`crate::devices::passthrough`]'s job.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A PCI address, `DDDD:BB:DD.F` (the domain may be left out: `00:04.0`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Bdf(String);

impl Bdf {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Bdf {
    type Err = String;

    fn from_str(text: &str) -> Result<Bdf, String> {
        let bad = || {
            format!("{text:?} is not a PCI address (DDDD:BB:DD.F, e.g. 0000:00:04.0, hex digits)")
        };
        let full = match text.matches(':').count() {
            1 => format!("0000:{text}"),
            2 => text.to_string(),
            _ => return Err(bad()),
        };
        let (rest, function) = full.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
        if parts.len() != 3 || !hex(parts[0], 4) || !hex(parts[1], 2) || !hex(parts[2], 2) {
            return Err(bad());
        }
        let device = u8::from_str_radix(parts[2], 16).map_err(|_| bad())?;
        if device > 0x1f {
            return Err(format!(
                "{text:?}: PCI device number {device:#x} is above 0x1f"
            ));
        }
        if !matches!(function, "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7") {
            return Err(format!("{text:?}: PCI function {function:?} is not 0-7"));
        }
        Ok(Bdf(full.to_ascii_lowercase()))
    }
}

impl TryFrom<String> for Bdf {
    type Error = String;
    fn try_from(text: String) -> Result<Bdf, String> {
        text.parse()
    }
}

impl From<Bdf> for String {
    fn from(bdf: Bdf) -> String {
        bdf.0
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A PCI vendor:device ID, `8086:2021`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl FromStr for PciId {
    type Err = String;

    fn from_str(text: &str) -> Result<PciId, String> {
        let bad =
            || format!("{text:?} is not a vendor:device ID (4 hex digits each, e.g. 8086:2021)");
        let (v, d) = text.split_once(':').ok_or_else(bad)?;
        let word = |s: &str| {
            (s.len() == 4)
                .then(|| u16::from_str_radix(s, 16).ok())
                .flatten()
                .ok_or_else(bad)
        };
        Ok(PciId {
            vendor: word(v)?,
            device: word(d)?,
        })
    }
}

impl TryFrom<String> for PciId {
    type Error = String;
    fn try_from(text: String) -> Result<PciId, String> {
        text.parse()
    }
}

impl From<PciId> for String {
    fn from(id: PciId) -> String {
        id.to_string()
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

/// What a passed-through device stands in for: which guest driver binds it, and which of the
/// lab's emulated devices it can replace in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum StandIn {
    /// An Intel I/OAT (CBDMA) function: `ioatdma` in the guest.
    Ioatdma,
    /// An AMD PTDMA queue: `ptdma` in the guest.
    Ptdma,
    /// An NVMe controller: `nvme` in the guest.
    Nvme,
}

impl StandIn {
    /// The guest driver that binds it.
    pub(crate) fn driver(self) -> &'static str {
        match self {
            StandIn::Ioatdma => "ioatdma",
            StandIn::Ptdma => "ptdma",
            StandIn::Nvme => "nvme",
        }
    }
}

/// One device of a host file, resolved: what a [`crate::devices::Passthrough`]
/// spec carries into the VM (and the run's manifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostDevice {
    /// The device's name in the host file (`passthrough:NAME`).
    pub name: String,
    pub bdf: Bdf,
    /// The vendor:device ID `bdf` must hold.
    pub id: PciId,
    pub stands_in: StandIn,
    /// Where it was declared, `hosts/NAME.toml:LINE` (errors name it).
    pub declared_at: String,
}

/// A host file, read and checked.
#[derive(Debug, Clone)]
pub(crate) struct HostFile {
    pub path: PathBuf,
    pub description: String,
    pub devices: BTreeMap<String, HostDevice>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    description: String,
    #[serde(default)]
    devices: BTreeMap<String, toml::Spanned<RawDevice>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    bdf: Bdf,
    id: PciId,
    stands_in: StandIn,
}

/// Where host files live in the checkout.
pub(crate) fn hosts_dir() -> PathBuf {
    crate::repo_path("hosts")
}

/// This machine's name (`/proc/sys/kernel/hostname`, else `uname`'s node name).
pub(crate) fn hostname() -> String {
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let name = name.trim();
        if !name.is_empty() {
            return name.to_string();
        }
    }
    // SAFETY: uname fills the zeroed struct; nodename is NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) == 0 {
            return std::ffi::CStr::from_ptr(u.nodename.as_ptr())
                .to_string_lossy()
                .into_owned();
        }
    }
    "localhost".into()
}

impl HostFile {
    /// Reads a host file; every error names the file, and a field's error its line.
    pub(crate) fn load(path: &Path) -> Result<HostFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading host file {}", path.display()))?;
        HostFile::parse(&text, path)
    }

    pub(crate) fn parse(text: &str, path: &Path) -> Result<HostFile> {
        let raw: RawFile = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("host file {}: {e}", path.display()))?;
        let mut devices = BTreeMap::new();
        for (name, spanned) in raw.devices {
            let line = text[..spanned.span().start].matches('\n').count() + 1;
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
            {
                bail!(
                    "host file {}:{line}: device name {name:?}: use [A-Za-z0-9_-]",
                    path.display()
                );
            }
            let raw = spanned.into_inner();
            devices.insert(
                name.clone(),
                HostDevice {
                    name,
                    bdf: raw.bdf,
                    id: raw.id,
                    stands_in: raw.stands_in,
                    declared_at: format!("{}:{line}", path.display()),
                },
            );
        }
        let mut seen: BTreeMap<&Bdf, &str> = BTreeMap::new();
        for d in devices.values() {
            if let Some(other) = seen.insert(&d.bdf, &d.name) {
                bail!(
                    "host file {}: devices {other} and {} both name {}",
                    path.display(),
                    d.name,
                    d.bdf
                );
            }
        }
        Ok(HostFile {
            path: path.to_path_buf(),
            description: raw.description,
            devices,
        })
    }

    /// The host file `name` picks (see the module docs): `name`, else `LAB_HOST`, else
    /// `hosts/<hostname>.toml` when it exists.
    pub(crate) fn select(name: Option<&str>) -> Result<HostFile> {
        let env = std::env::var("LAB_HOST").ok().filter(|s| !s.is_empty());
        let path = match name.or(env.as_deref()) {
            Some(name) => host_file_path(name),
            None => {
                let host = hostname();
                let path = hosts_dir().join(format!("{host}.toml"));
                if !path.is_file() {
                    bail!(
                        "no host file names this host's passthrough devices: pass --host NAME or \
                         set LAB_HOST=NAME (hosts/NAME.toml, or a path), or write {} (see \
                         hosts/example-xeon-ioat.toml)",
                        path.display()
                    );
                }
                path
            }
        };
        HostFile::load(&path)
    }

    /// The device `name`, or an error naming the file and the devices it has.
    pub(crate) fn device(&self, name: &str) -> Result<&HostDevice> {
        self.devices.get(name).with_context(|| {
            format!(
                "host file {} has no device {name:?} (it lists: {})",
                self.path.display(),
                if self.devices.is_empty() {
                    "none".to_string()
                } else {
                    self.devices.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )
        })
    }
}

/// `NAME` -> `hosts/NAME.toml`; a value with a `/` or ending in `.toml` is a path.
pub(crate) fn host_file_path(name: &str) -> PathBuf {
    if name.contains('/') || name.ends_with(".toml") {
        PathBuf::from(name)
    } else {
        hosts_dir().join(format!("{name}.toml"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"description = "test host"

[devices.ioat0]
bdf = "0000:00:04.0"
id = "8086:2021"
stands_in = "ioatdma"

[devices.disk]
bdf = "41:00.0"
id = "144d:a808"
stands_in = "nvme"
"#;

    #[test]
    fn a_host_file_reads_with_lines_and_normal_addresses() {
        let f = HostFile::parse(GOOD, Path::new("hosts/t.toml")).unwrap();
        assert_eq!(f.description, "test host");
        let ioat = f.device("ioat0").unwrap();
        assert_eq!(ioat.bdf.as_str(), "0000:00:04.0");
        assert_eq!(ioat.id.to_string(), "8086:2021");
        assert_eq!(ioat.stands_in, StandIn::Ioatdma);
        assert_eq!(ioat.declared_at, "hosts/t.toml:3");
        let disk = f.device("disk").unwrap();
        assert_eq!(disk.bdf.as_str(), "0000:41:00.0");
        assert_eq!(disk.declared_at, "hosts/t.toml:8");
        let err = f.device("nope").unwrap_err().to_string();
        assert!(
            err.contains("hosts/t.toml") && err.contains("\"nope\""),
            "{err}"
        );
        assert!(err.contains("disk, ioat0"), "{err}");
    }

    #[test]
    fn bad_host_files_name_the_file_line_and_field() {
        let err = |text: &str| {
            format!(
                "{:#}",
                HostFile::parse(text, Path::new("hosts/bad.toml")).unwrap_err()
            )
        };
        let bad_bdf = GOOD.replace("0000:00:04.0", "0000:00:4.0");
        let e = err(&bad_bdf);
        assert!(e.contains("hosts/bad.toml") && e.contains("line 4"), "{e}");
        assert!(e.contains("not a PCI address"), "{e}");
        let e = err(&GOOD.replace("0000:00:04.0", "0000:00:24.0"));
        assert!(e.contains("above 0x1f"), "{e}");
        let e = err(&GOOD.replace("8086:2021", "8086-2021"));
        assert!(e.contains("line 5") && e.contains("vendor:device"), "{e}");
        let e = err(&GOOD.replace("\"ioatdma\"", "\"floppy\""));
        assert!(e.contains("line 6") && e.contains("floppy"), "{e}");
        let e = err(&GOOD.replace("stands_in = \"nvme\"", "stands_in = \"nvme\"\ncolour = 1"));
        assert!(e.contains("colour"), "{e}");
        let e = err(&GOOD.replace("41:00.0", "00:04.0"));
        assert!(e.contains("both name 0000:00:04.0"), "{e}");
        assert!(HostFile::load(Path::new("/no/such/host.toml"))
            .unwrap_err()
            .to_string()
            .contains("/no/such/host.toml"));
    }

    #[test]
    fn host_names_map_to_files() {
        assert_eq!(host_file_path("xeon"), hosts_dir().join("xeon.toml"));
        assert_eq!(host_file_path("./x.toml"), PathBuf::from("./x.toml"));
        assert!(!hostname().is_empty());
    }

    #[test]
    fn the_shipped_example_host_files_parse() {
        let mut n = 0;
        for entry in std::fs::read_dir(hosts_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                HostFile::load(&path).unwrap();
                n += 1;
            }
        }
        assert!(n >= 1);
    }
}
