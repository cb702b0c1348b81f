//! The guest module's tests. The agent's protocol is checked end to end without a VM: the
//! static agent binary that goes into the initramfs runs here as `lab-agent --serve-unix SOCK`
//! and a [`Guest`] drives it (`Guest::new` on a socket and the agent's build path are the
//! module's own, not the library's).

use super::*;
use lab_agent::protocol::{self, Request, Response};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// A `--serve-unix` agent process; killed on drop.
struct Agent {
    child: Child,
    dir: tempfile::TempDir,
}

/// The agent the build script left in `OUT_DIR`: the runner's `OUT_DIR` (nextest sets it, remapped
/// when the tests run from an archive on another machine), else the build's.
fn agent_binary() -> PathBuf {
    std::env::var_os("OUT_DIR")
        .map(|dir| Path::new(&dir).join("lab-agent"))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| crate::agent::AGENT_BINARY_PATH.into())
}

impl Agent {
    async fn spawn() -> (Agent, UnixStream) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("agent.sock");
        let binary = agent_binary();
        let child = Command::new(&binary)
            .arg("--serve-unix")
            .arg(&sock)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let mut agent = Agent { child, dir };
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(&sock).await {
                Ok(s) => break s,
                Err(e) => {
                    if let Ok(Some(st)) = agent.child.try_wait() {
                        panic!("agent exited ({st}) before listening on {}", sock.display());
                    }
                    assert!(
                        start.elapsed() < Duration::from_secs(10),
                        "agent did not listen on {} within 10 s: {e}",
                        sock.display()
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        (agent, stream)
    }

    async fn start() -> (Agent, Guest) {
        let (agent, stream) = Self::spawn().await;
        let guest = Guest::new(stream);
        let hello = guest
            .wait_ready(Duration::from_secs(10))
            .await
            .expect("agent hello");
        assert_eq!(hello.protocol, PROTOCOL_VERSION);
        assert!(!hello.pid1, "a --serve-unix agent is not init");
        (agent, guest)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn path_str(&self, name: &str) -> String {
        self.path(name)
            .to_str()
            .expect("utf-8 temp path")
            .to_string()
    }

    /// Waits for the agent process to exit by itself.
    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            assert!(
                start.elapsed() < within,
                "agent still running after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True once `pid` is gone or a zombie (waiting for its new parent to reap it).
fn process_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            matches!(state, Some("Z") | Some("X"))
        }
    }
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid in {}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_reports_exit_codes_signals_and_output() {
    let (_agent, guest) = Agent::start().await;

    let out = guest
        .exec(&GuestCommand::shell("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(out.status.code, Some(3));
    assert_eq!(out.status.signal, None);
    assert!(!out.success());
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    assert!(out.duration > Duration::ZERO && out.duration < Duration::from_secs(10));

    let out = guest
        .exec(&GuestCommand::shell("kill -9 $$"))
        .await
        .unwrap();
    assert_eq!(out.status.code, None);
    assert_eq!(out.status.signal, Some(9));
    assert_eq!(out.exit_code(), 137);

    let out = guest.exec(&GuestCommand::new(["true"])).await.unwrap();
    assert!(out.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty());

    let err = guest
        .exec_ok(&GuestCommand::shell("echo why >&2; exit 4"))
        .await
        .unwrap_err();
    match &err {
        GuestError::Failed {
            status,
            stderr_tail,
            ..
        } => {
            assert_eq!(status.code, Some(4));
            assert_eq!(stderr_tail, "why");
        }
        other => panic!("expected Failed, got {other:?}"),
    }

    let err = guest
        .exec(&GuestCommand::new(["/nonexistent/program", "x"]))
        .await
        .unwrap_err();
    match &err {
        GuestError::Agent { message, .. } => {
            assert!(message.contains("/nonexistent/program"), "{message}")
        }
        other => panic!("expected Agent error, got {other:?}"),
    }

    let err = guest.exec(&GuestCommand::new(Vec::<String>::new())).await;
    assert!(matches!(err, Err(GuestError::Invalid(_))), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_passes_env_cwd_and_stdin() {
    let (agent, guest) = Agent::start().await;
    let cwd = agent.path_str("");
    let cmd = GuestCommand::shell("printf '%s|%s|' \"$LAB_A\" \"$LAB_B\"; pwd; cat")
        .env("LAB_A", "one two")
        .env("LAB_B", "x=y")
        .cwd(cwd.trim_end_matches('/'))
        .stdin(b"in\x00\xffput".to_vec());
    let out = guest.exec(&cmd).await.unwrap();
    assert!(out.success(), "{out:?}");
    let want = format!("one two|x=y|{}\nin\x00", cwd.trim_end_matches('/'));
    assert_eq!(&out.stdout[..want.len()], want.as_bytes());
    assert_eq!(&out.stdout[want.len()..], b"\xffput");

    // Without stdin the command reads /dev/null: `cat` ends at once instead of hanging.
    let out = guest
        .exec(
            &GuestCommand::shell("cat; readlink /proc/self/fd/0").timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "/dev/null\n");

    let err = guest
        .exec(&GuestCommand::new(["true"]).cwd("/nonexistent-dir"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/nonexistent-dir"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_streams_large_and_binary_output() {
    let (_agent, guest) = Agent::start().await;
    let out = guest
        .exec(&GuestCommand::shell(
            "seq 1 200000; seq 1 1000 >&2; printf '\\377\\000\\001'",
        ))
        .await
        .unwrap();
    assert!(out.success(), "{}", out.stderr_str());
    let mut want: Vec<u8> = (1..=200000)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into();
    want.extend_from_slice(b"\xff\x00\x01");
    assert_eq!(out.stdout.len(), want.len());
    assert!(out.stdout == want, "stdout differs");
    let want_err: String = (1..=1000).map(|i| format!("{i}\n")).collect();
    assert_eq!(out.stderr_str(), want_err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_whole_process_group() {
    let (agent, guest) = Agent::start().await;
    let pidfile = agent.path_str("bg.pid");
    let cmd = GuestCommand::shell(format!(
        "sleep 60 & echo $! > {pidfile}; echo started; echo on-stderr >&2; sleep 60"
    ))
    .timeout(Duration::from_millis(800));
    let start = Instant::now();
    let err = guest.exec(&cmd).await.unwrap_err();
    let took = start.elapsed();
    match &err {
        GuestError::Timeout {
            argv,
            timeout,
            stdout_tail,
            stderr_tail,
        } => {
            assert_eq!(argv, &cmd.argv);
            assert_eq!(*timeout, Duration::from_millis(800));
            assert_eq!(stdout_tail, "started");
            assert_eq!(stderr_tail, "on-stderr");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(took < Duration::from_secs(5), "timeout took {took:?}");

    // The background sleep was in the command's process group: it must be gone too.
    let bg = read_pid(Path::new(&pidfile));
    let start = Instant::now();
    while !process_dead(bg) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "background process {bg} survived the timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The agent keeps serving after a timeout.
    let out = guest
        .exec(&GuestCommand::new(["echo", "still here"]))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "still here\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_execs_run_in_parallel() {
    let (_agent, guest) = Agent::start().await;
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..8 {
        let g = guest.clone();
        set.spawn(async move {
            let cmd =
                GuestCommand::shell(format!("sleep 1; echo job-$N; echo err-$N >&2; exit {i}"))
                    .env("N", i.to_string())
                    .timeout(Duration::from_secs(30));
            (i, g.exec(&cmd).await)
        });
    }
    let mut seen = 0;
    while let Some(r) = set.join_next().await {
        let (i, out) = r.expect("task");
        let out = out.unwrap_or_else(|e| panic!("job {i}: {e}"));
        assert_eq!(out.stdout_str(), format!("job-{i}\n"));
        assert_eq!(out.stderr_str(), format!("err-{i}\n"));
        assert_eq!(out.status.code, Some(i));
        seen += 1;
    }
    assert_eq!(seen, 8);
    let took = start.elapsed();
    // One after the other would take 8 s.
    assert!(
        took < Duration::from_secs(5),
        "8 parallel 1 s jobs took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_files() {
    let (agent, guest) = Agent::start().await;
    let path = agent.path_str("data.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();

    guest.write_file_mode(&path, &data, 0o750).await.unwrap();
    assert!(std::fs::read(&path).unwrap() == data);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    assert!(guest.read_file(&path).await.unwrap() == data);

    // Overwrite truncates; the mode stays unless asked.
    guest.write_file(&path, b"short").await.unwrap();
    assert_eq!(guest.read_file(&path).await.unwrap(), b"short");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);

    let empty = agent.path_str("empty");
    guest.write_file(&empty, b"").await.unwrap();
    assert_eq!(guest.read_file(&empty).await.unwrap(), b"");

    let missing = agent.path_str("missing");
    match guest.read_file(&missing).await.unwrap_err() {
        GuestError::Agent { what, message } => {
            assert!(what.contains(&missing), "{what}");
            assert!(
                message.contains(&missing) && message.contains("No such file"),
                "{message}"
            );
        }
        other => panic!("expected Agent error, got {other:?}"),
    }
    let nodir = agent.path_str("no/such/dir/file");
    let err = guest.write_file(&nodir, b"x").await.unwrap_err();
    assert!(err.to_string().contains(&nodir), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_fails_pending_calls_promptly() {
    let (mut agent, guest) = Agent::start().await;
    let pidfile = agent.path_str("cmd.pid");
    let g = guest.clone();
    let cmd = GuestCommand::shell(format!("echo $$ > {pidfile}; exec sleep 30"));
    let pending = tokio::spawn(async move { g.exec(&cmd).await });
    let read = guest.clone();
    let start = Instant::now();
    while !Path::new(&pidfile).exists() || std::fs::read(&pidfile).unwrap().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "command did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let orphan = read_pid(Path::new(&pidfile));

    // The "guest" dies.
    agent.child.kill().unwrap();
    let killed = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("pending exec did not fail within 5 s of the connection loss")
        .expect("task")
        .unwrap_err();
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        killed.elapsed()
    );
    match &err {
        GuestError::Disconnected { what, reason } => {
            assert!(what.contains("exec"), "{what}");
            assert!(reason.contains("closed"), "{reason}");
        }
        other => panic!("expected Disconnected, got {other:?}"),
    }
    let reason = tokio::time::timeout(Duration::from_secs(1), guest.disconnected())
        .await
        .expect("disconnected() resolves");
    assert!(guest.closed().is_some() && !reason.is_empty());

    // Later calls fail at once.
    let start = Instant::now();
    assert!(matches!(
        read.read_file("/etc/hostname").await,
        Err(GuestError::Disconnected { .. })
    ));
    assert!(matches!(
        read.exec(&GuestCommand::new(["true"])).await,
        Err(GuestError::Disconnected { .. })
    ));
    assert!(start.elapsed() < Duration::from_millis(500));
    // Shutting down a dead guest is not an error.
    read.shutdown().await.unwrap();

    // SIGKILL left the command's process group behind (a real guest takes it down with it).
    // SAFETY: plain kill(2) of a process this test started.
    unsafe { libc::kill(-orphan, libc::SIGKILL) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_log_file_and_shutdown() {
    let (mut agent, stream) = Agent::spawn().await;
    let log = agent.path("guest.log");
    let guest = Guest::with_log(stream, &log).unwrap();
    guest.wait_ready(Duration::from_secs(10)).await.unwrap();
    let hello = guest.ping().await.unwrap();
    assert_eq!(hello.protocol, PROTOCOL_VERSION);
    assert!(hello.id.is_some(), "a ping's hello carries its id");
    let uname = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .unwrap();
    assert_eq!(
        hello.kernel_release,
        String::from_utf8_lossy(&uname.stdout).trim()
    );
    assert!(hello.uptime_ms > 0);

    guest
        .exec(&GuestCommand::shell(
            "echo 'hello log'; echo oops >&2; printf partial",
        ))
        .await
        .unwrap();
    guest.shutdown().await.unwrap();
    let st = agent.wait_exit(Duration::from_secs(5));
    assert!(st.success(), "agent exit after power_off: {st}");

    let text = std::fs::read_to_string(&log).unwrap();
    for want in [
        "sh#",
        "$ sh -c 'echo '\\''hello log'\\''; echo oops >&2; printf partial'",
        "stdout: hello log",
        "stderr: oops",
        "stdout: partial",
        "exit code 0 after",
    ] {
        assert!(text.contains(want), "log lacks {want:?}:\n{text}");
    }
}

/// Bad frames from the host get an error reply (or close the connection when framing is lost),
/// never an agent crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_survives_garbage_frames() {
    let (mut agent, mut s) = Agent::spawn().await;
    let mut buf = Vec::new();

    let (first, _) = next_frame(&mut s, &mut buf).await;
    assert!(
        matches!(first, Response::Hello(ref h) if h.id.is_none()),
        "{first:?}"
    );

    // Well framed but bad JSON, then a ping: an error without id, then the ping's hello.
    let junk = b"{not json";
    let mut frame = (junk.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(junk);
    frame.extend_from_slice(&protocol::encode_frame(&Request::Ping { id: 42 }, b"").unwrap());
    s.write_all(&frame).await.unwrap();
    match next_frame(&mut s, &mut buf).await.0 {
        Response::Error { id: None, message } => assert!(message.contains("not json"), "{message}"),
        other => panic!("expected an error reply, got {other:?}"),
    }
    match next_frame(&mut s, &mut buf).await.0 {
        Response::Hello(h) => assert_eq!(h.id, Some(42)),
        other => panic!("expected the ping's hello, got {other:?}"),
    }

    // An unknown request type is refused the same way.
    let junk = br#"{"type":"format_disk","id":7}"#;
    let mut frame = (junk.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(junk);
    s.write_all(&frame).await.unwrap();
    match next_frame(&mut s, &mut buf).await.0 {
        Response::Error { id: None, message } => {
            assert!(message.contains("format_disk"), "{message}")
        }
        other => panic!("expected an error reply, got {other:?}"),
    }

    // An absurd length loses framing: the agent drops the connection and exits cleanly.
    s.write_all(&[0xff; 8]).await.unwrap();
    let st = agent.wait_exit(Duration::from_secs(5));
    assert!(st.success(), "{st}");
}

/// Reads one frame, keeping bytes of the following ones in `buf`.
async fn next_frame(s: &mut UnixStream, buf: &mut Vec<u8>) -> (Response, Vec<u8>) {
    loop {
        if let Some((r, p, used)) = protocol::decode_frame::<Response>(buf).expect("agent frame") {
            buf.drain(..used);
            return (r, p);
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("agent reply within 10 s")
            .expect("read");
        assert!(n > 0, "agent closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The embedded agent must run in an initramfs without a dynamic loader or libc.
#[test]
fn embedded_agent_is_a_static_x86_64_elf() {
    let b = crate::agent::AGENT.bytes;
    assert!(b.len() > 64, "agent binary is only {} bytes", b.len());
    assert_eq!(&b[..4], b"\x7fELF", "agent binary is not ELF");
    assert_eq!(b[4], 2, "agent binary is not 64-bit ELF");
    assert_eq!(b[5], 1, "agent binary is not little-endian");
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(u16_at(18), 62, "agent binary is not x86_64 (e_machine)");
    let e_type = u16_at(16);
    assert!(
        e_type == 2 || e_type == 3,
        "agent binary e_type {e_type} is not EXEC or DYN"
    );
    let phoff = u64_at(32) as usize;
    let phentsize = u16_at(54) as usize;
    let phnum = u16_at(56) as usize;
    assert!(phnum > 0 && phoff + phnum * phentsize <= b.len());
    for i in 0..phnum {
        let p_type = u32_at(phoff + i * phentsize);
        // PT_INTERP: would need ld-linux from the (absent) guest libc.
        assert_ne!(
            p_type, 3,
            "agent binary has PT_INTERP: it is dynamically linked"
        );
    }
}

#[test]
fn tail_keeps_the_end() {
    let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let t = tail(text.as_bytes());
    assert!(t.starts_with("[...]\n"), "{t}");
    assert!(t.ends_with("line 99"), "{t}");
    assert_eq!(t.lines().count(), TAIL_LINES + 1);
    assert_eq!(tail(b"short\n"), "short");
}

#[test]
fn shell_words_quote_what_needs_it() {
    let argv = ["sh", "-c", "echo 'hi' there", ""].map(String::from);
    assert_eq!(shell_words(&argv), r#"sh -c 'echo '\''hi'\'' there' ''"#);
}

#[test]
fn exit_status_display() {
    let s = |code, signal| ExitStatus { code, signal }.to_string();
    assert_eq!(s(Some(3), None), "exit code 3");
    assert_eq!(s(None, Some(9)), "signal 9");
}
