//! A boot's sample that is not a sample: the kernel logged a WARNING or was tainted, a trace
//! lost events, a workload ran short. Whoever finds such a cause (the runner's kernel-log
//! check, an observer, a workload's parser) returns [`reject`]'s error; the runner keeps the
//! boot's logs, records the cause in the run record and boots a replacement instead of
//! counting the sample (and gives up, quoting every cause, when a variant keeps failing).

use std::fmt;

/// Why a boot's sample was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejected {
    /// What was wrong, quoting the log line or the counter.
    pub cause: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a valid sample: {}", self.cause)
    }
}

impl std::error::Error for Rejected {}

/// The error that refuses a boot's sample because of `cause`: return it from a scenario's
/// `measure` and the runner keeps the boot's logs, records the cause and boots a replacement
/// (re-exported as `lab::experiment::reject_sample`).
pub fn reject(cause: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Rejected {
        cause: cause.into(),
    })
}

/// The rejection anywhere in `error`'s chain (context added on the way keeps it findable): a
/// [`reject`]ed sample, or a guest whose kernel log or taint mask showed a fault
/// ([`crate::Error::GuestFault`]).
pub(crate) fn rejection(error: &anyhow::Error) -> Option<Rejected> {
    error.chain().find_map(|e| {
        if let Some(r) = e.downcast_ref::<Rejected>() {
            return Some(r.clone());
        }
        match e.downcast_ref::<crate::Error>() {
            Some(fault @ crate::Error::GuestFault { .. }) => Some(Rejected {
                cause: fault.to_string(),
            }),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn a_rejection_is_found_under_context() {
        let e: anyhow::Result<()> = Err(reject("the trace lost 3 events"));
        let e = e.context("measuring boot 4").unwrap_err();
        assert_eq!(
            rejection(&e).map(|r| r.cause),
            Some("the trace lost 3 events".to_string())
        );
        let fault: anyhow::Error = crate::Error::GuestFault {
            vm: "a".into(),
            problems: vec!["the kernel log shows a WARNING: WARNING: CPU: 0".into()],
        }
        .into();
        assert_eq!(
            rejection(&fault.context("measuring")).map(|r| r.cause),
            Some("guest a: the kernel log shows a WARNING: WARNING: CPU: 0".to_string())
        );
        assert!(format!("{e:#}").contains("not a valid sample: the trace lost 3 events"));
        assert!(rejection(&anyhow::anyhow!("QEMU exited")).is_none());
    }
}
