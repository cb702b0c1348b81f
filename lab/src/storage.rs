//! Storage stacks built in the guest on a block device, per boot: the device itself, ext4
//! directly on it, or ext4 on a dm-thin volume (the seed S3 reports' LVM thin pool, made with
//! `dmsetup` tables: the guest has no LVM, and a thin pool is what LVM would build). Each stack
//! is created by one shell script whose last line names what a workload should use. The guest
//! runs no udev, so `dmsetup mknodes` makes the `/dev/mapper` nodes.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::workload::FioTarget;

/// What sits between a workload and the block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum StorageStack {
    /// The raw block device.
    Raw,
    /// ext4 on the device.
    Ext4,
    /// ext4 on a thin volume of a dm-thin pool on the device (metadata in its first
    /// `THIN_METADATA_MIB`, data in the rest, no block zeroing like the seed's `lvconvert
    /// -Zn`).
    Ext4OnThin,
}

/// Where the file systems are mounted in the guest.
pub(crate) const MOUNT_POINT: &str = "/mnt/lab";

/// The thin pool's metadata device (LVM sizes it ~0.1% of the pool; 16 MiB covers the lab's
/// namespaces with room).
pub(crate) const THIN_METADATA_MIB: u64 = 16;

/// The thin pool's block size in 512-byte sectors: LVM's default chunk of 64 KiB.
const THIN_BLOCK_SECTORS: u64 = 128;

impl StorageStack {
    /// The script that builds the stack on `device` (`/dev/nvme0n1`) and prints
    /// `target dir PATH` or `target dev PATH` as its last line.
    pub(crate) fn setup_script(&self, device: &str) -> String {
        let check = format!(
            "set -e\n[ -b {device} ] || {{ echo '{device} is not a block device' >&2; ls /dev >&2; exit 1; }}\n"
        );
        // The file system's UUID and directory hash seed from the kernel's own UUIDs: left to
        // make them, mke2fs got time-based UUIDs (no random ones this early in a guest without
        // a hardware entropy source; TCG has no RDRAND) and spent 4.1 s of every S3 boot's 4.7
        // s of storage set-up getting them, sleeping (measured in the guest, 2-core Xeon: 4.07
        // s real, 0.05 s CPU, the same for 512 MiB and 2 GiB; 0.11 s with both given).
        let mkfs = "mkfs.ext4 -q -F -U \"$(cat /proc/sys/kernel/random/uuid)\" \
                    -E lazy_itable_init=0,lazy_journal_init=0,hash_seed=$(cat /proc/sys/kernel/random/uuid)";
        match self {
            StorageStack::Raw => format!("{check}echo target dev {device}\n"),
            StorageStack::Ext4 => format!(
                "{check}{mkfs} {device}\nmkdir -p {MOUNT_POINT}\nmount -t ext4 {device} {MOUNT_POINT}\n\
                 echo target dir {MOUNT_POINT}\n"
            ),
            StorageStack::Ext4OnThin => {
                let name = device.rsplit('/').next().unwrap_or(device);
                let meta = THIN_METADATA_MIB * 2048;
                format!(
                    "{check}sectors=$(cat /sys/class/block/{name}/size)\n\
                     meta={meta}\n\
                     data=$((sectors - meta))\n\
                     [ $data -gt {min} ] || {{ echo \"{device} has $sectors sectors, too few for a thin pool\" >&2; exit 1; }}\n\
                     dmsetup create lab-meta --table \"0 $meta linear {device} 0\"\n\
                     dmsetup create lab-data --table \"0 $data linear {device} $meta\"\n\
                     dmsetup mknodes\n\
                     [ -b /dev/mapper/lab-meta ] || {{ echo 'dmsetup made no /dev/mapper/lab-meta' >&2; exit 1; }}\n\
                     dd if=/dev/zero of=/dev/mapper/lab-meta bs=4096 count=1 2>/dev/null\n\
                     dmsetup create lab-pool --table \"0 $data thin-pool /dev/mapper/lab-meta /dev/mapper/lab-data {block} 0 1 skip_block_zeroing\"\n\
                     dmsetup mknodes\n\
                     dmsetup message /dev/mapper/lab-pool 0 'create_thin 0'\n\
                     dmsetup create lab-thin --table \"0 $data thin /dev/mapper/lab-pool 0\"\n\
                     dmsetup mknodes\n\
                     {mkfs} /dev/mapper/lab-thin\n\
                     mkdir -p {MOUNT_POINT}\n\
                     mount -t ext4 /dev/mapper/lab-thin {MOUNT_POINT}\n\
                     echo target dir {MOUNT_POINT}\n",
                    min = 64 * 2048,
                    block = THIN_BLOCK_SECTORS,
                )
            }
        }
    }

    /// The workload target the setup script's output names.
    pub(crate) fn parse_target(output: &str) -> Result<FioTarget> {
        let line = output
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("target "))
            .with_context(|| format!("the storage set-up printed no target line:\n{output}"))?;
        match line.split_once(' ') {
            Some(("dir", path)) => Ok(FioTarget::Directory(path.trim().to_string())),
            Some(("dev", path)) => Ok(FioTarget::Device(path.trim().to_string())),
            _ => bail!("bad target line {line:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_is_valid_shell_and_names_its_target() {
        for stack in [
            StorageStack::Raw,
            StorageStack::Ext4,
            StorageStack::Ext4OnThin,
        ] {
            let script = stack.setup_script("/dev/nvme0n1");
            let status = std::process::Command::new("sh")
                .args(["-n", "-c", &script])
                .status()
                .unwrap();
            assert!(status.success(), "{stack:?}:\n{script}");
        }
        let thin = StorageStack::Ext4OnThin.setup_script("/dev/nvme0n1");
        assert!(thin.contains(
            "thin-pool /dev/mapper/lab-meta /dev/mapper/lab-data 128 0 1 skip_block_zeroing"
        ));
        assert!(thin.contains("/sys/class/block/nvme0n1/size"));
        assert_eq!(
            StorageStack::parse_target("mke2fs noise\ntarget dir /mnt/lab\n").unwrap(),
            FioTarget::Directory("/mnt/lab".into())
        );
        assert_eq!(
            StorageStack::parse_target("target dev /dev/nvme0n1").unwrap(),
            FioTarget::Device("/dev/nvme0n1".into())
        );
        assert!(StorageStack::parse_target("nothing").is_err());
    }
}
