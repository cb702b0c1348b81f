//! `lab-agent`: the guest's `/init` and the lab's command server.
//!
//! As PID 1 it mounts the pseudo filesystems, forks a server child that speaks
//! `lab_agent::protocol` over the virtio-serial port named `lab.agent`, reaps every zombie and
//! powers the machine off when the server exits. With `--serve-unix PATH` it serves one
//! connection on a unix socket instead, so the protocol can be tested on a host.

use lab_agent::protocol::{
    self, read_frame, ExecRequest, Hello, Request, ResourceUse, Response, MAX_PAYLOAD_LEN,
    PORT_NAME, PROTOCOL_VERSION,
};
use std::collections::HashSet;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: lab-agent                     (as PID 1: the guest's init)
       lab-agent --serve-unix PATH   (serve one connection on a unix socket, for tests)
       lab-agent --version";

/// How long after a command exits its output pipes may stay open (held by a background
/// child) before `exit` is sent anyway.
const PIPE_DRAIN_GRACE: Duration = Duration::from_millis(250);

/// How long to wait for the virtio port to show up in sysfs.
const PORT_WAIT: Duration = Duration::from_secs(30);

/// Set when this process (or its parent) is the guest's init.
static AS_INIT: AtomicBool = AtomicBool::new(false);

/// Kernel uptime (ms) when this agent started; inherited by the forked server.
static STARTED_MS: AtomicU64 = AtomicU64::new(0);

/// Process groups of commands still running, killed when a `--serve-unix` server ends.
static RUNNING: Mutex<Option<HashSet<libc::pid_t>>> = Mutex::new(None);

fn main() {
    STARTED_MS.store(uptime_ms(), Ordering::Relaxed);
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The kernel may pass unknown command-line words to init as arguments: ignore them as PID 1.
    if std::process::id() == 1 {
        pid1_main();
    }
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--serve-unix", path] => match serve_unix(Path::new(path)) {
            Ok(()) => {}
            Err(e) => {
                eprintln!("lab-agent: {e}");
                std::process::exit(1);
            }
        },
        ["--version"] => println!("lab-agent {}", env!("CARGO_PKG_VERSION")),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

fn log(msg: &str) {
    // One write per line so concurrent lines do not interleave on the console.
    let _ = io::stderr().write_all(format!("lab-agent: {msg}\n").as_bytes());
}

// ---------------------------------------------------------------------------------------------
// PID 1

fn pid1_main() -> ! {
    AS_INIT.store(true, Ordering::Relaxed);
    // Kernel-provided init environment is nearly empty; commands expect a PATH.
    std::env::set_var(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    std::env::set_var("HOME", "/root");
    mount_pseudo_filesystems();
    attach_console();
    install_busybox_links();

    // Safety: single-threaded here, so the child may run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match serve_guest() {
            Ok(()) => 0,
            Err(e) => {
                log(&format!("server failed: {e}"));
                1
            }
        };
        std::process::exit(code);
    }
    if pid < 0 {
        log(&format!(
            "fork failed ({}); serving without a reaper",
            io::Error::last_os_error()
        ));
        if let Err(e) = serve_guest() {
            log(&format!("server failed: {e}"));
        }
        power_off();
    }
    reap_until_exit(pid);
    power_off();
}

/// Reaps every child (orphans are re-parented to PID 1) until the server child exits.
fn reap_until_exit(server: libc::pid_t) {
    loop {
        let mut status = 0;
        // Safety: plain syscall with a valid out-pointer.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == server {
            let st = ExitStatus::from_raw(status);
            if !st.success() {
                log(&format!("server exited with {st}"));
            }
            return;
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            log(&format!("waitpid: {e}"));
            return;
        }
    }
}

fn power_off() -> ! {
    log("powering off");
    // Safety: plain syscalls; PID 1 must never return from here (the kernel would panic).
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_POWER_OFF);
    }
    log(&format!(
        "reboot(RB_POWER_OFF) failed: {}",
        io::Error::last_os_error()
    ));
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn mount_pseudo_filesystems() {
    let nosuid_nodev_noexec = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    let mounts: &[(&str, &str, &str, libc::c_ulong, &str)] = &[
        ("proc", "/proc", "proc", nosuid_nodev_noexec, ""),
        ("sysfs", "/sys", "sysfs", nosuid_nodev_noexec, ""),
        ("devtmpfs", "/dev", "devtmpfs", libc::MS_NOSUID, "mode=0755"),
        (
            "devpts",
            "/dev/pts",
            "devpts",
            libc::MS_NOSUID | libc::MS_NOEXEC,
            "ptmxmode=0666,mode=0620",
        ),
        (
            "tmpfs",
            "/dev/shm",
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            "mode=1777",
        ),
        (
            "tmpfs",
            "/tmp",
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            "mode=1777",
        ),
        (
            "tmpfs",
            "/run",
            "tmpfs",
            libc::MS_NOSUID | libc::MS_NODEV,
            "mode=0755",
        ),
        (
            "debugfs",
            "/sys/kernel/debug",
            "debugfs",
            nosuid_nodev_noexec,
            "",
        ),
        (
            "tracefs",
            "/sys/kernel/tracing",
            "tracefs",
            nosuid_nodev_noexec,
            "",
        ),
        (
            "cgroup2",
            "/sys/fs/cgroup",
            "cgroup2",
            nosuid_nodev_noexec,
            "",
        ),
    ];
    for &(src, target, fstype, flags, data) in mounts {
        if let Err(e) = mount(src, target, fstype, flags, data) {
            log(&format!("mount {fstype} on {target}: {e}"));
        }
    }
}

fn mount(
    src: &str,
    target: &str,
    fstype: &str,
    flags: libc::c_ulong,
    data: &str,
) -> io::Result<()> {
    // The initramfs may lack the mount point; sysfs ones already exist once sysfs is mounted.
    if !Path::new(target).is_dir() {
        fs::create_dir_all(target)?;
    }
    let c = |s: &str| CString::new(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
    let (src, tgt, fst, dat) = (c(src)?, c(target)?, c(fstype)?, c(data)?);
    // Safety: all pointers are valid NUL-terminated strings for the duration of the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            tgt.as_ptr(),
            fst.as_ptr(),
            flags,
            dat.as_ptr().cast(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    // The kernel may have mounted devtmpfs itself (CONFIG_DEVTMPFS_MOUNT).
    if e.raw_os_error() == Some(libc::EBUSY) {
        return Ok(());
    }
    Err(e)
}

/// Points stdout/stderr at the console (the kernel leaves them closed when the initramfs has no
/// /dev/console) and stdin at /dev/null.
fn attach_console() {
    if let Ok(con) = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open("/dev/console")
    {
        use std::os::fd::AsRawFd;
        // Safety: dup2 onto the standard descriptors with a valid source fd.
        unsafe {
            libc::dup2(con.as_raw_fd(), 1);
            libc::dup2(con.as_raw_fd(), 2);
        }
    }
    if let Ok(null) = File::open("/dev/null") {
        use std::os::fd::AsRawFd;
        // Safety: as above.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
    }
}

fn install_busybox_links() {
    let bb = Path::new("/bin/busybox");
    if !bb.exists() || fs::symlink_metadata("/bin/sh").is_ok() {
        return;
    }
    for d in ["/bin", "/sbin", "/usr/bin", "/usr/sbin"] {
        let _ = fs::create_dir_all(d);
    }
    match Command::new(bb)
        .args(["--install", "-s"])
        .stdin(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => log(&format!("busybox --install -s: {s}")),
        Err(e) => log(&format!("busybox --install -s: {e}")),
    }
}

/// Finds `/dev/vportNpM` whose sysfs name is `lab.agent`, waiting for the driver to publish it.
fn find_port() -> io::Result<PathBuf> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        seen.clear();
        if let Ok(entries) = fs::read_dir("/sys/class/virtio-ports") {
            for e in entries.flatten() {
                let name = fs::read_to_string(e.path().join("name")).unwrap_or_default();
                let dev = Path::new("/dev").join(e.file_name());
                if name.trim() == PORT_NAME && dev.exists() {
                    return Ok(dev);
                }
                seen.push(format!(
                    "{}={:?}",
                    e.file_name().to_string_lossy(),
                    name.trim()
                ));
            }
        }
        if start.elapsed() > PORT_WAIT {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no virtio-serial port named {PORT_NAME:?} after {PORT_WAIT:?} (ports seen: [{}]); \
                     is the VM started with -device virtserialport,name={PORT_NAME} and \
                     CONFIG_VIRTIO_CONSOLE built in?",
                    seen.join(", ")
                ),
            ));
        }
        thread::sleep(Duration::from_millis(2));
    }
}

fn serve_guest() -> io::Result<()> {
    let path = find_port()?;
    let port = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    let writer = port.try_clone()?;
    log("ready");
    serve(port, writer, Mode::Guest)
}

fn serve_unix(path: &Path) -> io::Result<()> {
    let listener = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))?;
    let (stream, _) = listener.accept()?;
    let writer = stream.try_clone()?;
    let r = serve(stream, writer, Mode::Unix);
    // Unlike a guest, a host outlives the server: leave no command behind.
    let groups = RUNNING.lock().map(|g| g.clone()).unwrap_or_default();
    for pgid in groups.into_iter().flatten() {
        kill_group(pgid);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Serving

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// virtio-serial port: end of stream means "host not connected now", not "done".
    Guest,
    /// One unix socket connection: end of stream ends the server.
    Unix,
}

enum Out {
    Frame(Vec<u8>),
    /// Acknowledged once every frame queued before it has been written.
    Flush(mpsc::Sender<()>),
}

/// Queue of frames to the single writer thread, so handler threads never interleave frames.
#[derive(Clone)]
struct Outbox(mpsc::Sender<Out>);

impl Outbox {
    fn send(&self, resp: &Response, payload: &[u8]) {
        match protocol::encode_frame(resp, payload) {
            Ok(buf) => {
                let _ = self.0.send(Out::Frame(buf));
            }
            Err(e) => {
                let id = resp.id();
                let msg = format!("cannot send reply: {e}");
                if let Ok(buf) = protocol::encode_frame(&Response::Error { id, message: msg }, &[])
                {
                    let _ = self.0.send(Out::Frame(buf));
                }
            }
        }
    }

    fn error(&self, id: Option<u64>, message: String) {
        self.send(&Response::Error { id, message }, &[]);
    }

    fn flush(&self) {
        let (tx, rx) = mpsc::channel();
        if self.0.send(Out::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        }
    }
}

fn hello(id: Option<u64>) -> Response {
    Response::Hello(Hello {
        id,
        protocol: PROTOCOL_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        uptime_ms: uptime_ms(),
        started_ms: STARTED_MS.load(Ordering::Relaxed),
        kernel_release: kernel_release(),
        pid1: AS_INIT.load(Ordering::Relaxed),
    })
}

/// Time since boot (what /proc/uptime shows), readable before /proc is mounted.
fn uptime_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn kernel_release() -> String {
    // Safety: uname fills a zeroed struct; release is NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

fn serve<R: Read, W: Write + Send + 'static>(
    reader: R,
    mut writer: W,
    mode: Mode,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<Out>();
    let writer_thread = thread::spawn(move || {
        for out in rx {
            match out {
                Out::Frame(buf) => {
                    if let Err(e) = writer.write_all(&buf).and_then(|()| writer.flush()) {
                        // Guest: the port refuses writes only when unplugged; the frame is lost.
                        log(&format!("write to host failed: {e}"));
                        if mode == Mode::Unix {
                            return;
                        }
                    }
                }
                Out::Flush(ack) => {
                    let _ = ack.send(());
                }
            }
        }
    });
    let out = Outbox(tx);
    out.send(&hello(None), &[]);

    let mut reader = BufReader::with_capacity(256 << 10, reader);
    loop {
        match read_frame::<_, Request>(&mut reader) {
            Ok(Some((req, payload))) => {
                if let Request::PowerOff { id } = req {
                    out.send(&Response::Done { id }, &[]);
                    break;
                }
                dispatch(req, payload, &out);
            }
            Ok(None) => {
                if mode == Mode::Unix {
                    break;
                }
                // No host connected to the chardev right now: wait for one.
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) if !e.is_desync() => out.error(None, format!("request ignored: {e}")),
            Err(e) => {
                log(&format!("host stream broken: {e}"));
                if mode == Mode::Unix {
                    break;
                }
                out.error(
                    None,
                    format!("stream broken, discarding input until reconnect: {e}"),
                );
                drain_until_eof(&mut reader);
            }
        }
    }
    out.flush();
    // Handler threads still running hold senders, so the writer thread is not joined.
    drop(writer_thread);
    Ok(())
}

/// Discards input until the host side disconnects (end of stream), to resynchronise framing.
fn drain_until_eof<R: Read>(r: &mut R) {
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                thread::sleep(Duration::from_millis(20));
                return;
            }
        }
    }
}

fn dispatch(req: Request, payload: Vec<u8>, out: &Outbox) {
    let out = out.clone();
    match req {
        Request::Ping { id } => out.send(&hello(Some(id)), &[]),
        Request::Exec(e) => {
            spawn_handler(move || run_exec(e, payload, &out));
        }
        Request::ReadFile { id, path } => {
            spawn_handler(move || match read_file(&path) {
                Ok(data) => out.send(&Response::FileData { id }, &data),
                Err(e) => out.error(Some(id), e),
            });
        }
        Request::WriteFile { id, path, mode } => {
            spawn_handler(move || match write_file(&path, &payload, mode) {
                Ok(()) => out.send(&Response::Done { id }, &[]),
                Err(e) => out.error(Some(id), e),
            });
        }
        Request::PowerOff { .. } => unreachable!("handled by the read loop"),
    }
}

fn spawn_handler(f: impl FnOnce() + Send + 'static) {
    if let Err(e) = thread::Builder::new().spawn(f) {
        log(&format!("cannot start a handler thread: {e}"));
    }
}

fn read_file(path: &str) -> Result<Vec<u8>, String> {
    let mut f = File::open(path).map_err(|e| format!("open {path}: {e}"))?;
    let mut data = Vec::new();
    // One byte more than allowed tells "too large" apart from "exactly the limit".
    (&mut f)
        .take(MAX_PAYLOAD_LEN as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("read {path}: {e}"))?;
    if data.len() > MAX_PAYLOAD_LEN {
        return Err(format!(
            "read {path}: file larger than the protocol's {MAX_PAYLOAD_LEN}-byte frame limit"
        ));
    }
    Ok(data)
}

fn write_file(path: &str, data: &[u8], mode: Option<u32>) -> Result<(), String> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode.unwrap_or(0o644))
        .open(path)
        .map_err(|e| format!("open {path} for writing: {e}"))?;
    if let Some(m) = mode {
        // The open mode is masked by umask and ignored for existing files.
        f.set_permissions(fs::Permissions::from_mode(m))
            .map_err(|e| format!("chmod {path} {m:o}: {e}"))?;
    }
    // A single write: sysfs/procfs attributes take their value from one write() call.
    f.write_all(data)
        .map_err(|e| format!("write {path}: {e}"))?;
    Ok(())
}

fn run_exec(req: ExecRequest, stdin: Vec<u8>, out: &Outbox) {
    let id = req.id;
    let Some(program) = req.argv.first() else {
        out.error(Some(id), "exec: empty argv".into());
        return;
    };
    let mut cmd = Command::new(program);
    cmd.args(&req.argv[1..])
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        // Own process group, so a timeout kills everything the command started.
        .process_group(0)
        .stdin(if req.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(cwd);
    }
    let start = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let cwd = req
                .cwd
                .as_deref()
                .map(|c| format!(" in {c}"))
                .unwrap_or_default();
            out.error(Some(id), format!("cannot run {program:?}{cwd}: {e}"));
            return;
        }
    };
    let pid = child.id() as libc::pid_t;
    if let Ok(mut g) = RUNNING.lock() {
        g.get_or_insert_with(HashSet::new).insert(pid);
    }

    if let Some(mut pipe) = child.stdin.take() {
        // Own thread: a command that does not read its stdin must not block the others.
        spawn_handler(move || {
            let _ = pipe.write_all(&stdin);
        });
    }
    let (eof_tx, eof_rx) = mpsc::channel::<()>();
    let mut pipes = 0;
    if let Some(p) = child.stdout.take() {
        pipes += 1;
        pump(p, id, false, out.clone(), eof_tx.clone());
    }
    if let Some(p) = child.stderr.take() {
        pipes += 1;
        pump(p, id, true, out.clone(), eof_tx.clone());
    }
    drop(eof_tx);

    let (st_tx, st_rx) = mpsc::channel();
    spawn_handler(move || {
        // Reaped here with wait4 (std's wait drops the rusage); `child` is only dropped after.
        let _ = st_tx.send(wait_with_usage(pid));
        drop(child);
    });
    let mut timed_out = false;
    let status = match req.timeout_ms {
        Some(ms) => match st_rx.recv_timeout(Duration::from_millis(ms)) {
            Ok(s) => s,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                kill_group(pid);
                st_rx
                    .recv()
                    .unwrap_or_else(|_| Err(io::Error::other("waiter thread lost")))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(io::Error::other("waiter thread lost"))
            }
        },
        None => st_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("waiter thread lost"))),
    };
    let duration = start.elapsed();
    if let Ok(mut g) = RUNNING.lock() {
        g.get_or_insert_with(HashSet::new).remove(&pid);
    }
    if timed_out {
        // Anything forked after the first kill.
        kill_group(pid);
    }
    // Output written just before exit is still in the pipes: let the pumps finish.
    let deadline = Instant::now() + PIPE_DRAIN_GRACE;
    for _ in 0..pipes {
        let left = deadline.saturating_duration_since(Instant::now());
        if eof_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    match status {
        Ok((st, usage)) => out.send(
            &Response::Exit {
                id,
                code: st.code(),
                signal: st.signal(),
                timed_out,
                duration_us: duration.as_micros().min(u64::MAX as u128) as u64,
                usage: Some(usage),
            },
            &[],
        ),
        Err(e) => out.error(Some(id), format!("waiting for {program:?}: {e}")),
    }
}

/// Waits for `pid` and returns its status with what it (all its threads, and the children it
/// reaped) used.
fn wait_with_usage(pid: libc::pid_t) -> io::Result<(ExitStatus, ResourceUse)> {
    loop {
        let mut status = 0;
        // Safety: zeroed rusage is a valid value of the plain C struct the kernel fills.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // Safety: plain syscall with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == pid {
            let micros =
                |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
            let count = |v: libc::c_long| v.max(0) as u64;
            return Ok((
                ExitStatus::from_raw(status),
                ResourceUse {
                    user_us: micros(ru.ru_utime),
                    system_us: micros(ru.ru_stime),
                    max_rss_kib: count(ru.ru_maxrss),
                    minor_faults: count(ru.ru_minflt),
                    major_faults: count(ru.ru_majflt),
                    voluntary_switches: count(ru.ru_nvcsw),
                    involuntary_switches: count(ru.ru_nivcsw),
                },
            ));
        }
        let e = io::Error::last_os_error();
        if r < 0 && e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Err(e);
    }
}

fn kill_group(pgid: libc::pid_t) {
    // Safety: plain syscall; pgid is the child's pid, its own group leader.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Streams one output pipe as chunks, in order, then reports end of stream.
fn pump<R: Read + Send + 'static>(
    mut pipe: R,
    id: u64,
    stderr: bool,
    out: Outbox,
    eof: mpsc::Sender<()>,
) {
    spawn_handler(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let resp = if stderr {
                        Response::Stderr { id }
                    } else {
                        Response::Stdout { id }
                    };
                    out.send(&resp, &buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = eof.send(());
    });
}
