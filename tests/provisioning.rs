//! A lab SIGKILLed while it provisions a guest image leaves nothing running and nothing half
//! made, and the next run builds the image. A locked package gone from the archive is said
//! once, when it is resolved, and recorded; a warm start (the Debian kernel's too) says it no
//! more and asks apt nothing.
//!
//! The image comes from a Debian archive of the test's own: a signed repository served on
//! loopback by a small HTTP server that can stall a package download half way (or answer
//! nothing at all), holding a stand-in `busybox-static` whose `busybox` can be made to hang
//! while the image is assembled, and for the second test a stand-in Debian kernel package.
//! The lab finds it through `LAB_DEBIAN_MIRROR`, `LAB_DEBIAN_KEYRING` and a copy of the lock file
//! without the default image's bundle; QEMU and the kernel come from the user's cache as in every
//! VM test, through a cache of the test's own that holds what the stand-ins make (images, the
//! unpacked kernel, apt states, memos), so no stand-in enters the user's cache (each test checks)
//! and neither test can remove or replace the other's entries: the old shared-cache clean-up of
//! one test removed the other's unpacked stand-in kernel while its `lab prepare` still read it,
//! the quick tier's failure of issue Q2. Every process the lab starts carries a marker in its environment, so the test counts
//! what outlived the lab (apt-get and its download method, dpkg-deb, the hanging busybox and
//! its child) whatever their names.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lab::debian::test_repo::{TestDeb, TestRepo};

/// The stand-in package: a name the default image's recipe asks for, a version Debian never had.
const PACKAGE: &str = "busybox-static";
const VERSION: &str = "1:9.9-lab1";
/// The version the second test's archive serves instead of [`VERSION`] (same upstream series).
const NEWER_VERSION: &str = "1:9.9-lab2";

/// The stand-in Debian kernel package (the `kernel-debian-6.12` bundle's only member): the
/// version the lock names, gone, and the one the archive serves, both of series 6.12.
const KERNEL_PACKAGE: &str = "linux-image-6.12.99-lab-amd64";
const KERNEL_LOCKED: &str = "6.12.99-1";
const KERNEL_SERVED: &str = "6.12.99-2";
const KERNEL_RELEASE: &str = "6.12.99-lab-amd64";

/// How long the survivors of a killed lab may take to go (the bound).
const GONE_WITHIN: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread")]
async fn a_lab_killed_while_provisioning_an_image_leaves_nothing_running_or_half_built() {
    // QEMU and the kernel first (cached: the suite's setup script provisions them), so the runs
    // below only build the image.
    drop(common::lab().await);
    let Some(lab_bin) = common::lab_binary("image provisioning kill test") else {
        return;
    };
    for tool in ["gpg", "gpgconf", "dpkg-deb"] {
        if !on_path(tool) {
            lab::skip::host_lacks(
                "image provisioning kill test",
                &format!("no `{tool}` to build and sign the test's Debian archive"),
                "Install gpg and dpkg (`apt-get install gpg dpkg`); .ci/run does.",
            );
            return;
        }
    }
    let work = tempfile::tempdir().unwrap();
    let deb = work.path().join("busybox.deb");
    build_package(&work.path().join("package"), &deb, VERSION);
    let archive = fake_archive(work.path(), &[(PACKAGE, VERSION, deb)]);
    let server = Server::start(archive.root.clone());
    let own = test_cache();
    let cache = lab::cache::Cache::at(own.path()).unwrap();

    // A copy of the lock without the default image's bundle: the lab resolves it again, from
    // the test's archive (every other bundle stays as locked, so nothing else asks apt).
    let lock_path = work.path().join("lock.toml");
    let lock_file = std::env::var_os("LAB_LOCK_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| lab::repo_path("images/lock.toml"));
    let mut lock: toml::Table = toml::from_str(&fs::read_to_string(&lock_file).unwrap()).unwrap();
    lock["bundle"]
        .as_array_mut()
        .expect("the lock's [[bundle]] tables")
        .retain(|b| b["name"].as_str() != Some("guest-default"));
    fs::write(&lock_path, toml::to_string(&lock).unwrap()).unwrap();

    let mark = format!("{}-{}", std::process::id(), work.path().display());
    let hang = work.path().join("hang");
    let lab_cmd = |log: &str| {
        let mut cmd = Command::new(&lab_bin);
        cmd.args(["prepare", "--kernels", "v6.12", "--images", "default"])
            .env("LAB_CACHE_DIR", own.path())
            .env("LAB_DEBIAN_MIRROR", server.url())
            .env("LAB_DEBIAN_KEYRING", &archive.keyring)
            .env("LAB_LOCK_FILE", &lock_path)
            .env("LAB_KILL_TEST_MARK", &mark)
            .env("LAB_TEST_BUSYBOX_HANG", &hang)
            .stdin(Stdio::null())
            .stdout(fs::File::create(work.path().join(format!("{log}.out"))).unwrap())
            .stderr(fs::File::create(work.path().join(format!("{log}.err"))).unwrap());
        cmd
    };
    let log = |name: &str| {
        fs::read_to_string(work.path().join(format!("{name}.err"))).unwrap_or_default()
    };

    // 1. Killed while apt downloads the package: apt-get and its http method are running.
    server.stall_debs(true);
    let first = lab_cmd("first").spawn().unwrap();
    let first = wait_until(
        first,
        Duration::from_secs(180),
        || server.stalled(),
        || log("first"),
    );
    let survivors = kill_and_count(first, &mark);
    assert!(
        survivors.is_empty(),
        "killed during the download, these outlived the lab by {GONE_WITHIN:?}: {survivors:?}"
    );
    assert!(
        fake_images(&cache, VERSION).is_empty(),
        "an image entry appeared although the download never finished"
    );

    // 2. Killed while the image is assembled: the package is in, busybox hangs listing its
    // applets (a child of its own waiting), the entry's staging directory exists.
    server.stall_debs(false);
    fs::write(&hang, b"").unwrap();
    let second = lab_cmd("second").spawn().unwrap();
    let hang_child = hang.with_extension("child");
    let second = wait_until(
        second,
        Duration::from_secs(180),
        || hang_child.exists(),
        || log("second"),
    );
    // This build's staging dir, told from any other by the stand-in package's padding.
    let partial: Vec<_> = entries(&cache.dir("images").join(".staging"))
        .into_iter()
        .filter(|dir| dir.join("root/usr/share/lab-provisioning-test").is_dir())
        .collect();
    assert!(
        !partial.is_empty(),
        "no staging directory while the image was being assembled"
    );
    let survivors = kill_and_count(second, &mark);
    assert!(
        survivors.is_empty(),
        "killed while assembling the image, these outlived the lab by {GONE_WITHIN:?}: \
         {survivors:?}"
    );
    assert!(
        fake_images(&cache, VERSION).is_empty(),
        "a half-built image became an entry"
    );

    // 3. The next run sweeps the dead build's staging directory, checks the (possibly torn)
    // download and builds the image.
    fs::remove_file(&hang).unwrap();
    let third = lab_cmd("third").status().unwrap();
    assert!(
        third.success(),
        "the run after the kills failed:\n{}",
        log("third")
    );
    let images = fake_images(&cache, VERSION);
    assert_eq!(
        images.len(),
        1,
        "entries holding the stand-in package: {images:?}"
    );
    let staging_after = entries(&cache.dir("images").join(".staging"));
    let left: Vec<_> = partial
        .iter()
        .filter(|p| staging_after.contains(*p))
        .collect();
    assert!(
        left.is_empty(),
        "the killed build's staging dirs are still there: {left:?}"
    );
    println!(
        "package downloads started: {}; image {} built after two kills",
        server.deb_requests(),
        images[0].display()
    );
    assert_no_stand_in_in_the_users_cache();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_package_gone_from_the_archive_is_said_once_and_a_warm_start_asks_apt_nothing() {
    // QEMU and the default kernel from the cache, as in every VM test.
    drop(common::lab().await);
    let Some(lab_bin) = common::lab_binary("locked-package substitution test") else {
        return;
    };
    for tool in ["gpg", "gpgconf", "dpkg-deb", "depmod"] {
        if !on_path(tool) {
            lab::skip::host_lacks(
                "locked-package substitution test",
                &format!("no `{tool}` to build the test's Debian archive or unpack its kernel"),
                "Install gpg, dpkg and kmod (`apt-get install gpg dpkg kmod`); .ci/run does.",
            );
            return;
        }
    }
    // The archive serves newer builds of the two series the lock pins: the locked ones are gone.
    let work = tempfile::tempdir().unwrap();
    let busybox = work.path().join("busybox.deb");
    build_package(&work.path().join("busybox"), &busybox, NEWER_VERSION);
    let kernel = work.path().join("kernel.deb");
    build_kernel_package(&work.path().join("kernel"), &kernel, KERNEL_SERVED);
    let archive = fake_archive(
        work.path(),
        &[
            (PACKAGE, NEWER_VERSION, busybox),
            (KERNEL_PACKAGE, KERNEL_SERVED, kernel),
        ],
    );
    let server = Server::start(archive.root.clone());
    let own = test_cache();
    let cache = lab::cache::Cache::at(own.path()).unwrap();

    // A copy of the lock whose default image and Debian kernel bundles pin the gone versions
    // (checksums no archive has: they are never compared, the versions being gone).
    let lock_path = work.path().join("lock.toml");
    let lock_file = std::env::var_os("LAB_LOCK_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| lab::repo_path("images/lock.toml"));
    let mut lock: toml::Table = toml::from_str(&fs::read_to_string(&lock_file).unwrap()).unwrap();
    let pin = |name: &str, version: &str| {
        let mut p = toml::Table::new();
        p.insert("name".into(), name.into());
        p.insert("version".into(), version.into());
        p.insert("sha256".into(), "0".repeat(64).into());
        toml::Value::Array(vec![toml::Value::Table(p)])
    };
    let bundles = lock["bundle"]
        .as_array_mut()
        .expect("the lock's [[bundle]] tables");
    for (bundle, package, version) in [
        ("guest-default", PACKAGE, VERSION),
        ("kernel-debian-6.12", KERNEL_PACKAGE, KERNEL_LOCKED),
    ] {
        let b = bundles
            .iter_mut()
            .find(|b| b["name"].as_str() == Some(bundle))
            .unwrap_or_else(|| panic!("the lock has no bundle {bundle}"));
        b["package"] = pin(package, version);
    }
    fs::write(&lock_path, toml::to_string(&lock).unwrap()).unwrap();

    let run = |log: &str| {
        let status = Command::new(&lab_bin)
            // The default image only (not the further ones `prepare` builds by default).
            .args(["prepare", "--kernels", "debian", "--images", "default"])
            .env("LAB_CACHE_DIR", own.path())
            .env("LAB_DEBIAN_MIRROR", server.url())
            .env("LAB_DEBIAN_KEYRING", &archive.keyring)
            .env("LAB_LOCK_FILE", &lock_path)
            .stdin(Stdio::null())
            .stdout(fs::File::create(work.path().join(format!("{log}.out"))).unwrap())
            .stderr(fs::File::create(work.path().join(format!("{log}.err"))).unwrap())
            .status()
            .unwrap();
        let err = fs::read_to_string(work.path().join(format!("{log}.err"))).unwrap();
        assert!(status.success(), "lab prepare ({log}) failed:\n{err}");
        let gone: Vec<String> = err
            .lines()
            .filter(|l| l.contains("LOCKED PACKAGE GONE"))
            .map(str::to_string)
            .collect();
        (gone, err)
    };

    // 1. Resolving: each substitution is said once.
    let (gone, err) = run("first");
    assert_eq!(gone.len(), 2, "two substitutions, each said once:\n{err}");
    for (package, locked, used) in [
        (PACKAGE, VERSION, NEWER_VERSION),
        (KERNEL_PACKAGE, KERNEL_LOCKED, KERNEL_SERVED),
    ] {
        let said = format!("{package} {locked} is no longer in the archive; using {used}");
        assert!(
            gone.iter().any(|l| l.contains(&said)),
            "{said:?} not in\n{err}"
        );
    }
    // ... and recorded with the resolution, for the runs after it.
    let recorded = entries(&cache.root().join("memo/resolved-bundles"))
        .into_iter()
        .filter_map(|memo| fs::read_to_string(memo).ok())
        .filter(|t| {
            t.contains(&format!(
                "\"package\":\"{KERNEL_PACKAGE}\",\"locked\":\"{KERNEL_LOCKED}\",\"used\":\"{KERNEL_SERVED}\""
            ))
        })
        .count();
    assert_eq!(
        recorded, 1,
        "the Debian kernel's substitution is in one resolution memo"
    );

    // 2. Warm, with the archive answering nothing and the test's apt state gone: the kernel
    // and the image come from the cache through the recorded resolutions, silently.
    server.go_down();
    for dir in apt_states_of(&cache, &server.url()) {
        fs::remove_dir_all(dir).unwrap();
    }
    let asked = server.requests();
    let (gone, err) = run("second");
    assert!(
        gone.is_empty(),
        "a warm start repeated the substitutions:\n{err}"
    );
    assert_eq!(
        server.requests(),
        asked,
        "a warm start asked the archive:\n{err}"
    );
    assert!(
        apt_states_of(&cache, &server.url()).is_empty(),
        "a warm start opened an apt state:\n{err}"
    );
    assert_eq!(
        fake_images(&cache, NEWER_VERSION).len(),
        1,
        "the image of the substitute package, built once"
    );
    assert_no_stand_in_in_the_users_cache();
}

/// The test's own cache ([`common::own_cache`]): the user's QEMU, kernels and the rest shared,
/// its own guest images, unpacked Debian kernels and apt states (what it builds from its
/// stand-in packages), and a copy of the memos (the stand-ins' resolutions and file digests are
/// written there). The user's memos answer what the lab asks of the bundles the test keeps as
/// locked (QEMU's, the kernel sources'), so no apt state of the real archive is needed.
fn test_cache() -> tempfile::TempDir {
    common::own_cache(&["images", "debian-kernels", "apt"], &["memo"])
}

/// The user's cache holds no stand-in of these tests: no image built from a `-lab` package, no
/// unpacked `-lab` Debian kernel, no memo naming either.
fn assert_no_stand_in_in_the_users_cache() {
    let user = lab::cache::Cache::from_env().unwrap();
    let names_one = |path: &Path| {
        fs::read_to_string(path).is_ok_and(|t| {
            [VERSION, NEWER_VERSION, KERNEL_PACKAGE, KERNEL_RELEASE]
                .iter()
                .any(|m| t.contains(m))
        })
    };
    let mut found: Vec<PathBuf> = entries(&user.dir("images"))
        .into_iter()
        .filter(|image| names_one(&image.join("manifest.json")))
        .collect();
    found.extend(
        entries(&user.dir("debian-kernels"))
            .into_iter()
            .filter(|k| k.join(format!("boot/vmlinuz-{KERNEL_RELEASE}")).exists()),
    );
    for kind in entries(&user.root().join("memo")) {
        found.extend(entries(&kind).into_iter().filter(|m| names_one(m)));
    }
    assert!(
        found.is_empty(),
        "stand-ins of the provisioning tests in the user's cache {}: {found:?}",
        user.root().display()
    );
}

/// The cache's private apt states that read the archive at `mirror`.
fn apt_states_of(cache: &lab::cache::Cache, mirror: &str) -> Vec<PathBuf> {
    entries(&cache.dir("apt"))
        .into_iter()
        .filter(|dir| {
            fs::read_to_string(dir.join("etc/sources.list"))
                .is_ok_and(|t| t.contains(&format!("] {mirror} ")))
        })
        .collect()
}

fn on_path(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn entries(dir: &Path) -> std::collections::BTreeSet<PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// Complete image entries built from the stand-in package at `version`.
fn fake_images(cache: &lab::cache::Cache, version: &str) -> Vec<PathBuf> {
    entries(&cache.dir("images"))
        .into_iter()
        .filter(|dir| {
            fs::read_to_string(dir.join("manifest.json"))
                .is_ok_and(|m| m.contains(&format!("{PACKAGE}={version}")))
        })
        .collect()
}

/// Waits for `ready` while the lab runs; a lab that exits first, or a wait past `limit`, fails
/// the test with the lab's log.
fn wait_until(
    mut child: Child,
    limit: Duration,
    ready: impl Fn() -> bool,
    log: impl Fn() -> String,
) -> Child {
    let start = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the lab ended ({status}) before the point to kill it:\n{}",
                log()
            );
        }
        if start.elapsed() > limit {
            child.kill().ok();
            panic!(
                "the lab did not reach the point to kill it in {limit:?}:\n{}",
                log()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// SIGKILLs the lab and returns what still runs with `mark` in its environment after
/// [`GONE_WITHIN`] (killing those, so a failure leaves nothing behind either).
fn kill_and_count(mut child: Child, mark: &str) -> Vec<String> {
    let before = marked_processes(mark);
    assert!(
        before.len() > 1,
        "the lab had started nothing to outlive it: {before:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let mut left = marked_processes(mark);
    while !left.is_empty() && killed.elapsed() < GONE_WITHIN {
        std::thread::sleep(Duration::from_millis(20));
        left = marked_processes(mark);
    }
    println!(
        "killed the lab with {} processes: {before:?}; {} left after {:?}",
        before.len(),
        left.len(),
        killed.elapsed()
    );
    for (pid, _) in &left {
        // SAFETY: kill(2) on a pid this test found carrying its own marker.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    left.into_iter()
        .map(|(pid, cmd)| format!("{pid} {cmd}"))
        .collect()
}

/// Live processes whose environment holds `LAB_KILL_TEST_MARK=mark`, with their command lines.
fn marked_processes(mark: &str) -> Vec<(u32, String)> {
    let needle = format!("LAB_KILL_TEST_MARK={mark}");
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
            && common::process_alive(pid)
        {
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, cmdline.trim().to_string()));
        }
    }
    found
}

/// A signed Debian repository (`lab::debian::test_repo`) with the given packages (name,
/// version, `.deb` built here) in `trixie`, every other suite the lab reads present and empty.
fn fake_archive(work: &Path, packages: &[(&'static str, &'static str, PathBuf)]) -> TestRepo {
    let debs: Vec<TestDeb> = packages
        .iter()
        .map(|(name, version, built)| TestDeb {
            built: Some(built.clone()),
            ..TestDeb::new(name, version)
        })
        .collect();
    TestRepo::build(work, &["amd64"], &debs)
}

/// The stand-in `busybox-static` at `version`: `busybox --list-full` names two applets, after
/// hanging (with a child of its own, pids written beside the file) while
/// `$LAB_TEST_BUSYBOX_HANG` exists; and a MiB of incompressible padding, so the download can be
/// held half way.
fn build_package(dir: &Path, deb: &Path, version: &str) {
    write_control(dir, PACKAGE, version);
    let bin = dir.join("usr/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(
        bin.join("busybox"),
        "#!/bin/sh\n\
         h=\"$LAB_TEST_BUSYBOX_HANG\"\n\
         if [ -n \"$h\" ] && [ -e \"$h\" ]; then\n\
         \x20 echo $$ > \"$h.pid\"\n\
         \x20 sleep 300 &\n\
         \x20 echo $! > \"$h.child.tmp\" && mv \"$h.child.tmp\" \"$h.child\"\n\
         \x20 wait\n\
         fi\n\
         printf 'bin/sh\\nbin/ls\\n'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(bin.join("busybox"), fs::Permissions::from_mode(0o755)).unwrap();
    let pad = dir.join("usr/share/lab-provisioning-test");
    fs::create_dir_all(&pad).unwrap();
    // Random bytes: gzip keeps the MiB.
    let mut noise = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut fs::File::open("/dev/urandom").unwrap(), &mut noise).unwrap();
    fs::write(pad.join("padding"), noise).unwrap();
    dpkg_build(dir, deb);
}

/// The stand-in Debian kernel at `version`: a `vmlinuz` (never booted here) and an empty
/// modules directory, as the lab unpacks and runs depmod on a real one.
fn build_kernel_package(dir: &Path, deb: &Path, version: &str) {
    write_control(dir, KERNEL_PACKAGE, version);
    fs::create_dir_all(dir.join("boot")).unwrap();
    fs::write(
        dir.join(format!("boot/vmlinuz-{KERNEL_RELEASE}")),
        format!("stand-in kernel {version}\n"),
    )
    .unwrap();
    fs::create_dir_all(dir.join(format!("usr/lib/modules/{KERNEL_RELEASE}/kernel"))).unwrap();
    fs::write(
        dir.join(format!("usr/lib/modules/{KERNEL_RELEASE}/modules.builtin")),
        b"",
    )
    .unwrap();
    dpkg_build(dir, deb);
}

fn write_control(dir: &Path, name: &str, version: &str) {
    fs::create_dir_all(dir.join("DEBIAN")).unwrap();
    fs::write(
        dir.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: amd64\n\
             Maintainer: lab <archive@lab.invalid>\n\
             Description: stand-in for the lab's provisioning tests\n"
        ),
    )
    .unwrap();
}

fn dpkg_build(dir: &Path, deb: &Path) {
    let out = Command::new("dpkg-deb")
        .args(["-Zgzip", "--root-owner-group", "--build"])
        .arg(dir)
        .arg(deb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dpkg-deb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback HTTP/1.1 server for the archive's files, one request per connection. While
/// stalling, a `.deb` response stops after its first 64 KiB until stalling is switched off or
/// the client goes.
struct Server {
    port: u16,
    state: Arc<ServerState>,
}

#[derive(Default)]
struct ServerState {
    stall: AtomicBool,
    stalled: AtomicBool,
    /// Every request is answered 404 (the archive gone, or the host offline).
    down: AtomicBool,
    requests: AtomicUsize,
    deb_requests: AtomicUsize,
}

impl Server {
    fn start(root: PathBuf) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ServerState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, state) = (root.clone(), shared.clone());
                std::thread::spawn(move || serve(stream, &root, &state));
            }
        });
        Server { port, state }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/debian", self.port)
    }

    fn stall_debs(&self, on: bool) {
        self.state.stall.store(on, Ordering::SeqCst);
    }

    /// Whether a download is being held half way.
    fn stalled(&self) -> bool {
        self.state.stalled.load(Ordering::SeqCst)
    }

    fn deb_requests(&self) -> usize {
        self.state.deb_requests.load(Ordering::SeqCst)
    }

    fn go_down(&self) {
        self.state.down.store(true, Ordering::SeqCst);
    }

    /// Requests of any kind so far.
    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, root: &Path, state: &ServerState) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // The headers are read and ignored (no ranges, no conditional requests: always all of it).
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    let mut stream = stream;
    state.requests.fetch_add(1, Ordering::SeqCst);
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let file = path
        .strip_prefix("/debian/")
        .filter(|_| !state.down.load(Ordering::SeqCst))
        .filter(|p| !p.split('/').any(|part| part == ".."))
        .map(|p| root.join(p));
    let Some(body) = file.and_then(|f| fs::read(f).ok()) else {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let mut sent = 0;
    if path.ends_with(".deb") {
        state.deb_requests.fetch_add(1, Ordering::SeqCst);
        if state.stall.load(Ordering::SeqCst) {
            sent = 64 * 1024;
            if stream.write_all(&body[..sent]).is_err() || stream.flush().is_err() {
                return;
            }
            state.stalled.store(true, Ordering::SeqCst);
            let start = Instant::now();
            while state.stall.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(300) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let _ = stream.write_all(&body[sent..]);
}
