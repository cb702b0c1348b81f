//! QEMU's own NVMe controller, with sparse raw backing files in the VM's scratch dir. It needs no
//! host process.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{Attached, Attachment, Device, GuestDriver};

/// QEMU's emulated NVMe controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Nvme {
    /// I/O queue pairs the controller offers (`max_ioqpairs`); with as many as the guest's CPUs
    /// each queue's interrupt gets a one-CPU mask, with fewer the masks span several CPUs.
    pub io_queues: u16,
    /// Namespace sizes in bytes, one sparse raw file each.
    pub namespaces: Vec<u64>,
}

/// QEMU's limit on `max_ioqpairs` in its nvme model.
const MAX_IO_QUEUES: u16 = 128;

impl Nvme {
    pub(crate) fn validate(&self) -> Result<()> {
        if !(1..=MAX_IO_QUEUES).contains(&self.io_queues) {
            bail!(
                "nvme io_queues = {}: QEMU's controller takes 1 to {MAX_IO_QUEUES}",
                self.io_queues
            );
        }
        if self.namespaces.is_empty() {
            bail!("nvme namespaces: give at least one size");
        }
        for (i, bytes) in self.namespaces.iter().enumerate() {
            if *bytes < 1 << 20 || bytes % 4096 != 0 {
                bail!("nvme namespaces[{i}] = {bytes} bytes: at least 1 MiB, a multiple of 4096");
            }
        }
        Ok(())
    }

    /// Creates one sparse raw file per namespace in `dir` (removed with the VM's scratch dir),
    /// after checking the file system can hold them once written.
    pub(crate) fn create_backing_files(&self, index: usize, dir: &Path) -> Result<Vec<PathBuf>> {
        let total: u64 = self.namespaces.iter().sum();
        let free = free_bytes(dir)?;
        if total > free {
            bail!(
                "nvme namespaces need {total} bytes but {} has {free} free",
                dir.display()
            );
        }
        let mut files = Vec::new();
        for (ns, bytes) in self.namespaces.iter().enumerate() {
            let path = dir.join(format!("dev{index}-ns{}.raw", ns + 1));
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            file.set_len(*bytes)
                .with_context(|| format!("sizing {}", path.display()))?;
            files.push(path);
        }
        Ok(files)
    }

    /// The controller at slot `addr` plus one `nvme-ns` per backing file.
    pub(crate) fn qemu_args(&self, id: &str, addr: &str, files: &[PathBuf]) -> Vec<String> {
        let mut args = vec![
            "-device".into(),
            format!(
                "nvme,id={id},serial=lab{id},addr={addr},max_ioqpairs={q},msix_qsize={v}",
                q = self.io_queues,
                // One vector for the admin queue and one per I/O queue.
                v = self.io_queues + 1,
            ),
        ];
        for (ns, file) in files.iter().enumerate() {
            let drive = format!("{id}-ns{}", ns + 1);
            args.extend([
                "-drive".into(),
                format!(
                    "file={},if=none,id={drive},format=raw,cache=unsafe",
                    crate::qemu_opt_path(file)
                ),
                "-device".into(),
                format!("nvme-ns,drive={drive},bus={id},nsid={}", ns + 1),
            ]);
        }
        args
    }
}

#[async_trait::async_trait]
impl Device for Nvme {
    fn label(&self) -> String {
        "nvme".to_string()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "nvme": self })
    }

    fn validate(&self) -> Result<()> {
        Nvme::validate(self)
    }

    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
        let files = self.create_backing_files(at.index, at.scratch)?;
        Ok(Attached {
            qemu_args: self.qemu_args(&at.id, &at.slot, &files),
            files,
            ..Attached::default()
        })
    }

    fn guest_driver(&self) -> GuestDriver {
        GuestDriver::new("nvme", None, NVME_READY)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// nvme allocates its I/O vectors after probe returns, before it scans namespaces: a namespace
/// block device means the vectors are there.
pub(crate) const NVME_READY: &str = "exists $dev/nvme/nvme*/nvme*n*";

/// Free bytes on the file system holding `dir`.
fn free_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_arguments_name_queues_vectors_and_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let nvme = Nvme {
            io_queues: 3,
            namespaces: vec![64 << 20, 8 << 20],
        };
        nvme.validate().unwrap();
        let files = nvme.create_backing_files(1, dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        // Sparse: sized, but no blocks written.
        let meta = std::fs::metadata(&files[0]).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        assert!(std::os::unix::fs::MetadataExt::blocks(&meta) < 16);
        let args = nvme.qemu_args("dev1", "0x11", &files).join(" ");
        assert!(
            args.contains("nvme,id=dev1,serial=labdev1,addr=0x11,max_ioqpairs=3,msix_qsize=4"),
            "{args}"
        );
        assert!(
            args.contains("nvme-ns,drive=dev1-ns2,bus=dev1,nsid=2"),
            "{args}"
        );
    }

    #[test]
    fn bad_nvme_specs_name_the_field() {
        let bad = |q, ns: Vec<u64>| {
            Nvme {
                io_queues: q,
                namespaces: ns,
            }
            .validate()
            .unwrap_err()
            .to_string()
        };
        assert!(bad(0, vec![1 << 20]).contains("io_queues = 0"));
        assert!(bad(129, vec![1 << 20]).contains("io_queues = 129"));
        assert!(bad(2, vec![]).contains("namespaces"));
        assert!(bad(2, vec![4097]).contains("namespaces[0]"));
        let dir = tempfile::tempdir().unwrap();
        let huge = Nvme {
            io_queues: 1,
            namespaces: vec![1 << 62],
        };
        let err = huge
            .create_backing_files(0, dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("free"), "{err}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing left behind"
        );
    }
}
