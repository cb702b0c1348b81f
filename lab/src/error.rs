//! The conditions a caller of the lab acts on, as one type. The lab's functions return
//! `anyhow` errors with context chains; where one of these conditions is the cause, the chain
//! holds an [`Error`], which [`Error::find`] (or `anyhow::Error::downcast_ref`) gives back, so a
//! caller tells "no KVM" from "device in use" from "slot wait timed out" without matching text.

use std::path::PathBuf;
use std::time::Duration;

/// What went wrong, for the conditions a caller may handle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// KVM was required (`LAB_ACCEL=kvm`, `LAB_REQUIRE_KVM=1`, a `..._on_real_hardware` test),
    /// and it does not boot guests here; the probe's reason says why.
    #[error("{what} needs KVM, and KVM does not boot guests here: {reason}")]
    NoKvm {
        /// What needed it.
        what: String,
        /// The accelerator probe's reason.
        reason: String,
    },

    /// A host device a guest was to be given is in use by the host (or its IOMMU group is).
    #[error("{device}: refused: {users}")]
    DeviceInUse {
        /// The device, as the host file names it, with its address.
        device: String,
        /// Who uses it, and what else its group holds.
        users: String,
    },

    /// No CPU slot came free within the wait allowed (`LAB_SLOT_WAIT`).
    #[error(
        "waited {waited:?} for {wanted} of the host's {total} CPU slots, held by other guests \
         (LAB_SLOT_WAIT sets the wait)"
    )]
    SlotWaitTimeout {
        /// Slots the guest needs.
        wanted: usize,
        /// Slots the host has.
        total: usize,
        /// How long it waited.
        waited: Duration,
    },

    /// The guest kernel panicked (the console's panic line quoted).
    #[error("guest {vm} panicked: {line}\nlast lines of {log}:\n{tail}")]
    GuestPanic {
        /// The guest's name.
        vm: String,
        /// The console line that shows the panic.
        line: String,
        /// The serial log.
        log: String,
        /// Its last lines.
        tail: String,
    },

    /// The guest did not become ready in time.
    #[error(
        "guest {vm} did not become ready within {timeout:?} (hang?)\nlast lines of {log}:\n{tail}"
    )]
    GuestHang {
        /// The guest's name.
        vm: String,
        /// The boot time limit.
        timeout: Duration,
        /// The serial log.
        log: String,
        /// Its last lines.
        tail: String,
    },

    /// QEMU exited before the guest was ready.
    #[error(
        "QEMU for {vm} exited ({status}) before the guest was ready\nQEMU said: {stderr}\nlast lines of {log}:\n{tail}"
    )]
    QemuExited {
        /// The guest's name.
        vm: String,
        /// QEMU's exit status.
        status: String,
        /// What QEMU wrote to stderr.
        stderr: String,
        /// The serial log.
        log: String,
        /// Its last lines.
        tail: String,
    },

    /// The guest kernel logged a WARNING, BUG, RCU stall, lockup or hung task, or is tainted
    /// (each problem quoting its log line): its boot is not a sample.
    #[error("guest {vm}: {}", problems.join("; "))]
    GuestFault {
        /// The guest's name.
        vm: String,
        /// What the kernel log and taint mask show, one line each.
        problems: Vec<String>,
    },

    /// Bad input: the file, the field in it and what is wrong.
    #[error("{}: {field}: {message}", file.display())]
    BadInput {
        /// The file (or the command-line flag's name, for input given there).
        file: PathBuf,
        /// The field, key or line.
        field: String,
        /// What is wrong, and what would be right.
        message: String,
    },
}

impl Error {
    /// The lab's typed error anywhere in `error`'s chain (context added on the way keeps it).
    pub fn find(error: &anyhow::Error) -> Option<&Error> {
        error.chain().find_map(|e| e.downcast_ref::<Error>())
    }
}

/// An [`Error::BadInput`] as the `anyhow` error the lab's functions return.
pub(crate) fn bad_input(
    file: impl Into<PathBuf>,
    field: impl Into<String>,
    message: impl Into<String>,
) -> anyhow::Error {
    Error::BadInput {
        file: file.into(),
        field: field.into(),
        message: message.into(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_typed_error_is_found_under_context() {
        let e: anyhow::Result<()> = Err(Error::SlotWaitTimeout {
            wanted: 2,
            total: 2,
            waited: Duration::from_secs(5),
        }
        .into());
        let e = e.context("booting guest a").unwrap_err();
        assert!(matches!(
            Error::find(&e),
            Some(Error::SlotWaitTimeout { wanted: 2, .. })
        ));
        assert!(format!("{e:#}").contains("waited 5s for 2 of the host's 2 CPU slots"));
        assert!(Error::find(&anyhow::anyhow!("something else")).is_none());
        let bad = Error::BadInput {
            file: "topologies/x.toml".into(),
            field: "nodes[0].cpus".into(),
            message: "CPU 3 twice".into(),
        };
        assert_eq!(
            bad.to_string(),
            "topologies/x.toml: nodes[0].cpus: CPU 3 twice"
        );
    }
}
