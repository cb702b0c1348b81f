//! Host side of the guest agent: run commands and move files over the agent's framed protocol
//! (`lab_agent::protocol`), usually carried by a virtio-serial port whose QEMU chardev connects
//! to a unix socket the host listens on.
//!
//! One [`Guest`] multiplexes any number of concurrent calls over one connection: a reader task
//! routes every response to the call with its id, a writer task serialises frames. When the
//! connection drops (the guest died or powered off), every pending and later call fails at once
//! with [`GuestError::Disconnected`].

use lab_agent::protocol::{self, ExecRequest, ProtocolError, Request, Response, PREFIX_LEN};
use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

pub(crate) use lab_agent::protocol::PROTOCOL_VERSION;
pub use lab_agent::protocol::{Hello, ResourceUse};

pub(crate) use crate::agent::NUMA01_GUEST_PATH;
mod command;
mod lines;
pub use command::{ExitStatus, GuestCommand, GuestOutput};
use lines::Lines;
pub use lines::OUTPUT_KEPT;

/// Default command timeout of [`GuestCommand::new`].
pub(crate) const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(120);

/// How long file operations, pings and power-off may take before the agent is declared
/// unresponsive.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Extra time the host gives the agent, beyond a command's own timeout, to report its end.
const EXEC_REPLY_GRACE: Duration = Duration::from_secs(30);

/// How much of stdout/stderr a timeout or failure error quotes.
const TAIL_BYTES: usize = 4096;
const TAIL_LINES: usize = 30;

/// Errors of guest calls. A command exiting non-zero is not one of them (see
/// [`Guest::exec_ok`] for that).
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// The command ran past its timeout and was killed.
    #[error(
        "guest command {argv:?} timed out after {timeout:?}; its process group was killed\n\
         --- stdout (tail) ---\n{stdout_tail}\n--- stderr (tail) ---\n{stderr_tail}"
    )]
    Timeout {
        /// The command.
        argv: Vec<String>,
        /// Its timeout.
        timeout: Duration,
        /// The end of what it wrote to stdout.
        stdout_tail: String,
        /// The end of what it wrote to stderr.
        stderr_tail: String,
    },
    /// The command exited non-zero or was killed by a signal ([`Guest::exec_ok`] only).
    #[error(
        "guest command {argv:?} failed with {status}\n\
         --- stdout (tail) ---\n{stdout_tail}\n--- stderr (tail) ---\n{stderr_tail}"
    )]
    Failed {
        /// The command.
        argv: Vec<String>,
        /// How it ended.
        status: ExitStatus,
        /// The end of what it wrote to stdout.
        stdout_tail: String,
        /// The end of what it wrote to stderr.
        stderr_tail: String,
    },
    /// The agent refused or could not carry out a request (no such file, program not found...).
    #[error("guest agent could not {what}: {message}")]
    Agent {
        /// The request.
        what: String,
        /// The agent's answer.
        message: String,
    },
    /// The connection to the agent closed while a request was in flight (the guest died).
    #[error("guest agent connection lost during {what}: {reason}")]
    Disconnected {
        /// The request.
        what: String,
        /// Why the connection closed.
        reason: String,
    },
    /// The agent did not answer in time.
    #[error("guest agent did not answer {what} within {after:?} (guest hung?)")]
    NoReply {
        /// The request.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// The agent did not say hello within the boot time limit.
    #[error("guest agent did not say hello within {0:?}")]
    NotReady(Duration),
    /// The agent speaks another protocol version than the host (an image of another build).
    #[error("guest agent speaks protocol {got}, the host speaks {expected}")]
    ProtocolVersion {
        /// The agent's version.
        got: u32,
        /// The host's.
        expected: u32,
    },
    /// The request itself is malformed (an empty command line, a bad path).
    #[error("invalid guest request: {0}")]
    Invalid(String),
    /// The agent answered with something that is not an answer to the request.
    #[error("guest agent sent {got} in answer to {what}")]
    Unexpected {
        /// The request.
        what: String,
        /// What came back.
        got: String,
    },
    /// A frame that does not decode.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

type Routed = (Response, Vec<u8>);

#[derive(Default)]
struct Calls {
    pending: HashMap<u64, mpsc::UnboundedSender<Routed>>,
    closed: Option<String>,
}

#[derive(Clone, Default)]
struct Status {
    hello: Option<Hello>,
    closed: Option<String>,
}

/// State shared with the reader and writer tasks.
struct Shared {
    calls: Mutex<Calls>,
    status: watch::Sender<Status>,
    log: Option<Mutex<std::fs::File>>,
    started: Instant,
}

impl Shared {
    fn close(&self, reason: String) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if calls.closed.is_some() {
            return;
        }
        tracing::debug!(target: "guest", "agent connection closed: {reason}");
        calls.closed = Some(reason.clone());
        // Dropping the senders wakes every pending call.
        calls.pending.clear();
        drop(calls);
        self.status.send_modify(|s| s.closed = Some(reason));
    }

    fn closed_reason(&self) -> String {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .closed
            .clone()
            .unwrap_or_else(|| "connection closed".into())
    }

    fn route(&self, resp: Response, payload: Vec<u8>) {
        if let Response::Hello(h) = &resp {
            let h = h.clone();
            self.status.send_modify(|s| s.hello = Some(h));
        }
        let Some(id) = resp.id() else {
            if let Response::Error { message, .. } = &resp {
                tracing::warn!(target: "guest", "agent error: {message}");
            }
            return;
        };
        let tx = {
            let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            calls.pending.get(&id).cloned()
        };
        match tx {
            Some(tx) => {
                let _ = tx.send((resp, payload));
            }
            // Late output of a cancelled call, or a ping answered after wait_ready returned.
            None => tracing::trace!(target: "guest", id, "response for no pending call"),
        }
    }

    fn log_line(&self, line: &str) {
        if let Some(f) = &self.log {
            let t = self.started.elapsed().as_secs_f64();
            let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(f, "[{t:10.3}] {line}");
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    reader: AbortHandle,
    next_id: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The writer task ends by itself once `tx` is gone.
        self.reader.abort();
    }
}

/// Runs shell scripts in a booted guest: the seam through which devices bind and kernel
/// settings are applied without knowing the VM type. `sh` fails unless the script exits 0 and
/// returns its stdout.
// Static dispatch only (no `dyn Shell`), so `async fn` in the trait is fine; callers are
// single-threaded or hold the future locally.
#[allow(async_fn_in_trait)]
pub trait Shell {
    /// Runs `script` with `sh -c`; its stdout, or an error with its output if it fails.
    async fn sh(&self, script: &str) -> anyhow::Result<String>;
}

/// A connection to a guest agent. Cheap to clone; all clones share the connection and any
/// number of calls may run at once.
#[derive(Clone)]
pub struct Guest {
    inner: Arc<Inner>,
}

impl fmt::Debug for Guest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guest")
            .field("hello", &self.hello())
            .field("closed", &self.inner.shared.status.borrow().closed)
            .finish()
    }
}

/// A registered call: receives the responses for its id; unregisters on drop (so a cancelled
/// call leaks nothing).
struct Call {
    id: u64,
    rx: mpsc::UnboundedReceiver<Routed>,
    shared: Arc<Shared>,
    what: String,
}

impl Drop for Call {
    fn drop(&mut self) {
        let mut calls = self.shared.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.pending.remove(&self.id);
    }
}

impl Call {
    async fn next(&mut self, deadline: Instant, after: Duration) -> Result<Routed, GuestError> {
        match tokio::time::timeout_at(deadline.into(), self.rx.recv()).await {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(GuestError::Disconnected {
                what: self.what.clone(),
                reason: self.shared.closed_reason(),
            }),
            Err(_) => Err(GuestError::NoReply {
                what: self.what.clone(),
                after,
            }),
        }
    }

    fn unexpected(&self, got: &Response) -> GuestError {
        GuestError::Unexpected {
            what: self.what.clone(),
            got: format!("{got:?}"),
        }
    }
}

impl Guest {
    /// Takes over a connected stream to the agent (the accepted chardev connection, or a
    /// `lab-agent --serve-unix` socket). Must be called inside a tokio runtime.
    pub(crate) fn new(stream: UnixStream) -> Guest {
        Self::build(stream, None)
    }

    /// Like [`Guest::new`], also appending every command, output line and exit to `log`
    /// (kept with a test's results).
    #[cfg(test)]
    pub(crate) fn with_log(stream: UnixStream, log: &std::path::Path) -> std::io::Result<Guest> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", log.display())))?;
        Ok(Self::build(stream, Some(f)))
    }

    fn build(stream: UnixStream, log: Option<std::fs::File>) -> Guest {
        let (rd, mut wr) = stream.into_split();
        let shared = Arc::new(Shared {
            calls: Mutex::new(Calls::default()),
            status: watch::Sender::new(Status::default()),
            log: log.map(Mutex::new),
            started: Instant::now(),
        });
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();

        // Whole frames only: a cancelled caller can never leave half a frame on the wire.
        let wshared = shared.clone();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if let Err(e) = wr.write_all(&frame).await {
                    wshared.close(format!("write to the agent failed: {e}"));
                    return;
                }
            }
        });

        let rshared = shared.clone();
        let reader = tokio::spawn(async move {
            let mut rd = rd;
            let reason = loop {
                match read_frame_async(&mut rd).await {
                    Ok(Some((resp, payload))) => rshared.route(resp, payload),
                    Ok(None) => break "the agent closed the connection".to_string(),
                    Err(e) if !e.is_desync() => {
                        tracing::warn!(target: "guest", "ignoring a frame from the agent: {e}")
                    }
                    Err(e) => break e.to_string(),
                }
            };
            rshared.close(reason);
        })
        .abort_handle();

        // Ids start at a time-derived offset so replies queued for an earlier client of the
        // same port cannot be mistaken for ours.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
        Guest {
            inner: Arc::new(Inner {
                shared,
                tx,
                reader,
                next_id: AtomicU64::new((seed << 16) + 1),
            }),
        }
    }

    /// The agent's latest hello, if one arrived.
    pub(crate) fn hello(&self) -> Option<Hello> {
        self.inner.shared.status.borrow().hello.clone()
    }

    /// Why the connection is gone, or `None` while it is up.
    #[cfg(test)]
    pub(crate) fn closed(&self) -> Option<String> {
        self.inner.shared.status.borrow().closed.clone()
    }

    /// Resolves when the connection is lost, with the reason.
    #[cfg(test)]
    pub(crate) async fn disconnected(&self) -> String {
        let mut rx = self.inner.shared.status.subscribe();
        let reason = match rx.wait_for(|s| s.closed.is_some()).await {
            Ok(s) => s.closed.clone().unwrap_or_default(),
            Err(_) => "connection dropped".into(),
        };
        reason
    }

    /// Waits until the agent has said hello (it does so unsolicited when its port opens; a
    /// ping every second covers a greeting sent before this host connected). Checks the
    /// protocol version.
    pub(crate) async fn wait_ready(&self, timeout: Duration) -> Result<Hello, GuestError> {
        let deadline = Instant::now() + timeout;
        let mut rx = self.inner.shared.status.subscribe();
        loop {
            {
                let s = rx.borrow_and_update();
                if let Some(h) = &s.hello {
                    return check_version(h.clone());
                }
                if let Some(reason) = &s.closed {
                    return Err(GuestError::Disconnected {
                        what: "waiting for the agent's hello".into(),
                        reason: reason.clone(),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(GuestError::NotReady(timeout));
            }
            let id = self.next_id();
            self.send(&Request::Ping { id }, &[], "ping")?;
            let wake = deadline.min(Instant::now() + Duration::from_secs(1));
            let _ = tokio::time::timeout_at(wake.into(), rx.changed()).await;
        }
    }

    /// One round trip: returns the agent's fresh hello (guest uptime included).
    pub async fn ping(&self) -> Result<Hello, GuestError> {
        let mut call = self.call(|id| Request::Ping { id }, &[], "ping".into())?;
        let (resp, _) = call
            .next(Instant::now() + REQUEST_TIMEOUT, REQUEST_TIMEOUT)
            .await?;
        match resp {
            Response::Hello(h) => check_version(h),
            other => Err(call.unexpected(&other)),
        }
    }

    /// Runs a command. Its output is streamed, line by line, to tracing (target `guest`) and
    /// to the log file as it arrives. A non-zero exit is returned as output, not as an error;
    /// exceeding `cmd.timeout` is [`GuestError::Timeout`].
    pub async fn exec(&self, cmd: &GuestCommand) -> Result<GuestOutput, GuestError> {
        if cmd.argv.is_empty() {
            return Err(GuestError::Invalid("exec with an empty argv".into()));
        }
        let argv = cmd.argv.clone();
        let timeout_ms = u64::try_from(cmd.timeout.as_millis()).unwrap_or(u64::MAX);
        let stdin = cmd.stdin.as_deref().unwrap_or_default();
        let mut call = self.call(
            |id| {
                Request::Exec(ExecRequest {
                    id,
                    argv: argv.clone(),
                    env: cmd.env.clone(),
                    cwd: cmd.cwd.clone(),
                    stdin: cmd.stdin.is_some(),
                    timeout_ms: Some(timeout_ms),
                })
            },
            stdin,
            format!("exec {argv:?}"),
        )?;
        let id = call.id;
        let shared = self.inner.shared.clone();
        let label = format!("{}#{id}", short_name(&argv[0]));
        tracing::debug!(target: "guest", id, "exec {argv:?}");
        shared.log_line(&format!("{label} $ {}", shell_words(&argv)));

        let after = cmd.timeout + EXEC_REPLY_GRACE;
        let deadline = Instant::now() + after;
        let mut stdout = Lines::new(&label, "stdout");
        let mut stderr = Lines::new(&label, "stderr");
        loop {
            let (resp, payload) = call.next(deadline, after).await?;
            match resp {
                Response::Stdout { .. } => stdout.push(&payload, &shared),
                Response::Stderr { .. } => stderr.push(&payload, &shared),
                Response::Exit {
                    code,
                    signal,
                    timed_out,
                    duration_us,
                    usage,
                    ..
                } => {
                    stdout.finish(&shared);
                    stderr.finish(&shared);
                    let status = ExitStatus { code, signal };
                    let duration = Duration::from_micros(duration_us);
                    shared.log_line(&format!(
                        "{label} {} after {duration:?}",
                        if timed_out {
                            format!("timed out ({status})")
                        } else {
                            status.to_string()
                        }
                    ));
                    if timed_out {
                        tracing::warn!(target: "guest", id, "{argv:?} timed out after {:?}", cmd.timeout);
                        return Err(GuestError::Timeout {
                            argv,
                            timeout: cmd.timeout,
                            stdout_tail: stdout.tail(),
                            stderr_tail: stderr.tail(),
                        });
                    }
                    tracing::debug!(target: "guest", id, "{argv:?}: {status} after {duration:?}");
                    return Ok(GuestOutput {
                        status,
                        dropped: stdout.dropped + stderr.dropped,
                        stdout: stdout.all,
                        stderr: stderr.all,
                        duration,
                        usage,
                    });
                }
                Response::Error { message, .. } => {
                    shared.log_line(&format!("{label} error: {message}"));
                    return Err(GuestError::Agent {
                        what: format!("run {argv:?}"),
                        message,
                    });
                }
                other => return Err(call.unexpected(&other)),
            }
        }
    }

    /// [`exec`](Self::exec), but a command that does not exit with 0 is
    /// [`GuestError::Failed`] quoting its output.
    pub async fn exec_ok(&self, cmd: &GuestCommand) -> Result<GuestOutput, GuestError> {
        let out = self.exec(cmd).await?;
        if out.success() {
            return Ok(out);
        }
        Err(GuestError::Failed {
            argv: cmd.argv.clone(),
            status: out.status,
            stdout_tail: tail(&out.stdout),
            stderr_tail: tail(&out.stderr),
        })
    }

    /// Reads a whole guest file (also /proc and /sys files).
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>, GuestError> {
        let what = format!("read {path}");
        let mut call = self.call(
            |id| Request::ReadFile {
                id,
                path: path.to_string(),
            },
            &[],
            what.clone(),
        )?;
        let (resp, payload) = call
            .next(Instant::now() + REQUEST_TIMEOUT, REQUEST_TIMEOUT)
            .await?;
        match resp {
            Response::FileData { .. } => Ok(payload),
            Response::Error { message, .. } => Err(GuestError::Agent { what, message }),
            other => Err(call.unexpected(&other)),
        }
    }

    /// Creates or truncates a guest file (mode 0644 when created) and writes `contents` with
    /// one write, as sysfs/procfs attributes need.
    pub async fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), GuestError> {
        self.write(path, contents, None).await
    }

    /// [`write_file`](Self::write_file), then sets the file's mode (e.g. `0o755`).
    pub async fn write_file_mode(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), GuestError> {
        self.write(path, contents, Some(mode)).await
    }

    async fn write(
        &self,
        path: &str,
        contents: &[u8],
        mode: Option<u32>,
    ) -> Result<(), GuestError> {
        let what = format!("write {path}");
        let mut call = self.call(
            |id| Request::WriteFile {
                id,
                path: path.to_string(),
                mode,
            },
            contents,
            what.clone(),
        )?;
        let (resp, _) = call
            .next(Instant::now() + REQUEST_TIMEOUT, REQUEST_TIMEOUT)
            .await?;
        match resp {
            Response::Done { .. } => Ok(()),
            Response::Error { message, .. } => Err(GuestError::Agent { what, message }),
            other => Err(call.unexpected(&other)),
        }
    }

    /// Asks the agent to power the guest off (sync, then poweroff). Returns once the agent has
    /// acknowledged or the connection has closed; the VM layer waits for QEMU to exit.
    #[cfg(test)]
    pub(crate) async fn shutdown(&self) -> Result<(), GuestError> {
        let mut call = match self.call(|id| Request::PowerOff { id }, &[], "power off".into()) {
            Ok(c) => c,
            // Already gone: nothing left to shut down through the agent.
            Err(GuestError::Disconnected { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        match call
            .next(Instant::now() + REQUEST_TIMEOUT, REQUEST_TIMEOUT)
            .await
        {
            Ok((Response::Done { .. }, _)) | Err(GuestError::Disconnected { .. }) => Ok(()),
            Ok((Response::Error { message, .. }, _)) => Err(GuestError::Agent {
                what: "power off".into(),
                message,
            }),
            Ok((other, _)) => Err(call.unexpected(&other)),
            Err(e) => Err(e),
        }
    }

    fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn send(&self, req: &Request, payload: &[u8], what: &str) -> Result<(), GuestError> {
        let frame = protocol::encode_frame(req, payload)?;
        self.inner
            .tx
            .send(frame)
            .map_err(|_| GuestError::Disconnected {
                what: what.to_string(),
                reason: self.inner.shared.closed_reason(),
            })
    }

    /// Registers a call, then sends its request (registering first: the answer may be fast).
    fn call(
        &self,
        make: impl FnOnce(u64) -> Request,
        payload: &[u8],
        what: String,
    ) -> Result<Call, GuestError> {
        let id = self.next_id();
        let req = make(id);
        let frame = protocol::encode_frame(&req, payload)?;
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut calls = self
                .inner
                .shared
                .calls
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(reason) = &calls.closed {
                return Err(GuestError::Disconnected {
                    what,
                    reason: reason.clone(),
                });
            }
            calls.pending.insert(id, tx);
        }
        let call = Call {
            id,
            rx,
            shared: self.inner.shared.clone(),
            what,
        };
        if self.inner.tx.send(frame).is_err() {
            return Err(GuestError::Disconnected {
                what: call.what.clone(),
                reason: self.inner.shared.closed_reason(),
            });
        }
        Ok(call)
    }
}

fn check_version(h: Hello) -> Result<Hello, GuestError> {
    if h.protocol != PROTOCOL_VERSION {
        return Err(GuestError::ProtocolVersion {
            got: h.protocol,
            expected: PROTOCOL_VERSION,
        });
    }
    Ok(h)
}

/// Reads one frame; `Ok(None)` on a clean end of stream at a frame boundary.
async fn read_frame_async<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<(Response, Vec<u8>)>, ProtocolError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let mut got = 0;
    while got < PREFIX_LEN {
        let n = r.read(&mut prefix[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(ProtocolError::Truncated {
                what: "frame length prefix",
                expected: PREFIX_LEN,
                got,
            });
        }
        got += n;
    }
    let (hlen, plen) = protocol::parse_prefix(&prefix)?;
    let total = hlen + plen;
    let mut body = Vec::with_capacity(total.min(64 << 10));
    r.take(total as u64).read_to_end(&mut body).await?;
    if body.len() < total {
        return Err(ProtocolError::Truncated {
            what: "frame body",
            expected: total,
            got: body.len(),
        });
    }
    protocol::decode_body(hlen, body).map(Some)
}

/// The last lines of some output, for error messages.
fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(TAIL_BYTES);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(TAIL_LINES);
    let mut out = lines[skip..].join("\n");
    if start > 0 || skip > 0 {
        out.insert_str(0, "[...]\n");
    }
    out
}

fn short_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
