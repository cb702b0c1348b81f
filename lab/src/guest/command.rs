//! What a guest runs and what comes back: [`GuestCommand`] (argv, environment, stdin, timeout),
//! [`ExitStatus`] and [`GuestOutput`].

use std::fmt;
use std::time::Duration;

use super::{ResourceUse, DEFAULT_EXEC_TIMEOUT};

/// A command to run in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCommand {
    pub(crate) argv: Vec<String>,
    /// Added to the agent's environment (which has PATH, HOME).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: Option<String>,
    /// Written to the command's stdin; `None` gives it /dev/null.
    pub(crate) stdin: Option<Vec<u8>>,
    /// After this the command's whole process group is killed and exec fails with
    /// [`GuestError::Timeout`].
    pub(crate) timeout: Duration,
}

impl GuestCommand {
    /// The program and its arguments, run without a shell, with the default timeout (120 s).
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        GuestCommand {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            timeout: DEFAULT_EXEC_TIMEOUT,
        }
    }

    /// `sh -c SCRIPT`.
    pub fn shell(script: impl Into<String>) -> Self {
        Self::new(["sh".to_string(), "-c".to_string(), script.into()])
    }

    /// One more environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The working directory (default: `/`).
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// What the command reads on stdin (default: nothing, `/dev/null`).
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// How long it may run before its whole process group is killed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => write!(f, "unknown status"),
        }
    }
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOutput {
    /// How it ended.
    pub status: ExitStatus,
    /// Everything it wrote to stdout, up to [`super::OUTPUT_KEPT`] bytes.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr, up to the same bound.
    pub stderr: Vec<u8>,
    /// Bytes of stdout and stderr past [`super::OUTPUT_KEPT`] each, not kept: a parser of the
    /// output should refuse it when this is not 0.
    pub dropped: u64,
    /// From spawn to exit, measured in the guest.
    pub duration: Duration,
    /// What the command and its threads used (user/system time, context switches, faults).
    pub usage: Option<ResourceUse>,
}

impl GuestOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// "exit code N" or "signal N".
    pub fn status_text(&self) -> String {
        self.status.to_string()
    }

    /// The status as a shell reports it: the exit code, or 128 + signal number.
    pub fn exit_code(&self) -> i32 {
        match (self.status.code, self.status.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 255,
        }
    }

    /// Stdout as text (invalid UTF-8 replaced).
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Stderr as text (invalid UTF-8 replaced).
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// An error quoting the status and both outputs unless the command succeeded: `what`
    /// names the program, `vm` the guest ("fio failed in vm-3 (exit code 1): ...").
    pub fn require_success(&self, what: &str, vm: &str) -> anyhow::Result<()> {
        if self.success() {
            return Ok(());
        }
        anyhow::bail!(
            "{what} failed in {vm} ({}):\n{}{}",
            self.status_text(),
            self.stdout_str(),
            self.stderr_str()
        )
    }
}
