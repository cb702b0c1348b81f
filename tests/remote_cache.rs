//! The remote cache against a real registry: Debian's `docker-registry` (distribution 2.8)
//! started by each test on 127.0.0.1 with a free port and its own storage, killed with the test.
//! Everything goes through the `lab` binary with `LAB_CACHE_REMOTE`, as a workflow would.
//!
//! The temp caches share the host's cache for everything the test does not look at (QEMU, apt
//! state, memos, CPU slots, and kernels or images as the test says) through symlinks, so only
//! the kind under test starts empty and nothing is provisioned twice.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const REPO: &str = "lab-test";

/// A `docker-registry serve` of this test, with its storage in a temp dir.
struct Registry {
    _child: lab::process::GroupChild,
    host: &'static str,
    port: u16,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts one on 127.0.0.1; `None` (after a LAB-SKIP line) where the binary is missing.
    fn start(part: &str, htpasswd: Option<&str>) -> Option<Registry> {
        Registry::start_on(part, "127.0.0.1", htpasswd, None)
    }

    /// Starts one on `host` (a loopback address), over TLS with `tls` (certificate and key
    /// files) when given.
    fn start_on(
        part: &str,
        host: &'static str,
        htpasswd: Option<&str>,
        tls: Option<(&Path, &Path)>,
    ) -> Option<Registry> {
        let Some(bin) = which("docker-registry") else {
            lab::skip::host_lacks(
                part,
                "no docker-registry binary",
                "Install Debian's docker-registry package \
                 (`apt-get install --no-install-recommends docker-registry`; .ci/run does).",
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let port = free_port(host);
        let auth = match htpasswd {
            Some(line) => {
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{line}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: lab-test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let tls = match tls {
            Some((cert, key)) => format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ),
            None => String::new(),
        };
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\nhttp:\n  addr: {host}:{port}\n{tls}{auth}",
                storage.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let mut child = lab::process::spawn_in_group(
            Command::new(bin)
                .arg("serve")
                .arg(&config)
                .stdout(log.try_clone().unwrap())
                .stderr(log),
        )
        .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect((host, port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.path().join("registry.log")).unwrap();
                panic!("docker-registry exited ({status}):\n{log}");
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "docker-registry did not listen on {port} within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Registry {
            _child: child,
            host,
            port,
            storage,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        format!("oci://{}:{}/{REPO}", self.host, self.port)
    }

    /// The storage file of the first layer blob of tag `tag`.
    fn first_layer_blob(&self, tag: &str) -> PathBuf {
        let v2 = self.storage.join("docker/registry/v2");
        let link = v2.join(format!(
            "repositories/{REPO}/_manifests/tags/{tag}/current/link"
        ));
        let manifest_digest =
            std::fs::read_to_string(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(blob_path(&v2, manifest_digest.trim())).unwrap())
                .unwrap();
        let layer = manifest["layers"][0]["digest"].as_str().unwrap();
        blob_path(&v2, layer)
    }
}

fn blob_path(v2: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap();
    v2.join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn free_port(host: &str) -> u16 {
    let listener = std::net::TcpListener::bind((host, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// A temp cache whose every top-level directory but `own` links to the host's cache
/// ([`common::own_cache`]).
fn cache_sharing_all_but(own: &[&str]) -> tempfile::TempDir {
    common::own_cache(own, &[])
}

/// Runs the lab binary with `env` (`LAB_CACHE_*`; `LAB_CACHE_PUSH` always removed).
fn lab_cmd(bin: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("LAB_CACHE_PUSH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn sha256(path: &Path) -> String {
    format!("{:x}", Sha256::digest(std::fs::read(path).unwrap()))
}

fn only_entry(dir: &Path) -> String {
    let keys: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(keys.len(), 1, "{}: {keys:?}", dir.display());
    keys[0].clone()
}

/// v6.12 pushed from the host's cache (built the normal way first where it is missing), pulled
/// into an empty kernel cache, and booted with no build step; its object tree, an optional
/// layer, comes only when a variant is built from it.
#[test]
fn a_pushed_kernel_boots_from_an_empty_cache_without_a_build() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: kernel") else {
        return;
    };
    let Some(registry) = Registry::start("remote cache: kernel", None) else {
        return;
    };
    let url = registry.url();
    let built = lab_cmd(&bin, &[], &["kernel", "build", "v6.12"]);
    assert!(built.status.success(), "{}", text(&built));
    let keys = lab_cmd(&bin, &[], &["kernel", "keys"]);
    assert!(keys.status.success(), "{}", text(&keys));
    let keys = String::from_utf8_lossy(&keys.stdout).into_owned();
    let key = keys
        .lines()
        .find_map(|l| l.strip_prefix("v6.12 x86_64 "))
        .unwrap_or_else(|| panic!("no v6.12 line in `lab kernel keys`:\n{keys}"))
        .to_string();
    let shared = lab::cache::Cache::from_env()
        .unwrap()
        .dir("kernels")
        .join(&key);
    assert!(shared.join("bzImage").is_file(), "{}", shared.display());

    let started = Instant::now();
    let entry = format!("kernels/{}", &key[..10]);
    let pushed = lab_cmd(
        &bin,
        &[("LAB_CACHE_REMOTE", &url)],
        &["cache", "push", &entry],
    );
    let push_time = started.elapsed();
    assert!(pushed.status.success(), "{}", text(&pushed));
    let said = String::from_utf8_lossy(&pushed.stdout).into_owned();
    assert!(
        said.contains("pushed") && said.contains("files.tar.zst"),
        "{said}"
    );
    println!("push of v6.12: {push_time:.1?}: {said}");
    // A second push leaves the tag alone.
    let again = lab_cmd(
        &bin,
        &[("LAB_CACHE_REMOTE", &url)],
        &["cache", "push", &entry],
    );
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already on the registry"),
        "{}",
        text(&again)
    );

    // Kernels empty here; QEMU, images, apt state shared.
    let cache = cache_sharing_all_but(&["kernels"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", cache.path().to_str().unwrap()),
        // A build's phases are info lines ("kernel v6.12: unpacking ..."): shown, so that one
        // would be seen.
        ("LAB_LOG", "lab=info"),
    ];
    let started = Instant::now();
    let run = lab_cmd(
        &bin,
        &env,
        &["run", "--kernel", "v6.12", "--", "uname", "-r"],
    );
    let run_time = started.elapsed();
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(out.contains(&format!("pulled {entry} from {url}")), "{out}");
    assert!(
        !out.contains("kernel v6.12: ") && !out.contains("lab: kernel v6.12 ..."),
        "a build step ran:\n{out}"
    );
    let pulled = cache.path().join("kernels").join(&key);
    assert_eq!(
        sha256(&pulled.join("bzImage")),
        sha256(&shared.join("bzImage"))
    );
    // The build log is the pushed one, byte for byte: nothing here wrote one.
    assert_eq!(
        sha256(&pulled.join("build.log")),
        sha256(&shared.join("build.log"))
    );
    assert!(!cache.path().join("kernels/.failed").exists());
    let release: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pulled.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout).trim(),
        release["release"].as_str().unwrap()
    );
    assert!(
        !pulled.join("tree").exists(),
        "the tree came without a variant build"
    );
    println!("pull + boot of v6.12 into an empty cache: {run_time:.1?}");

    // A variant that is not on the registry is built here from v6.12's tree, which is pulled
    // for it; the result is bit-identical to the host's own build of the same key.
    let started = Instant::now();
    let variant = lab_cmd(
        &bin,
        &env,
        &["kernel", "build", "v6.12+wake-affine-idle-revert"],
    );
    let variant_time = started.elapsed();
    let out = text(&variant);
    assert!(variant.status.success(), "{out}");
    assert!(
        out.contains(&format!("pulled {entry}'s tree from {url}")),
        "{out}"
    );
    assert!(pulled.join("tree/obj/.config").is_file());
    let variant_key = only_entry_other_than(&cache.path().join("kernels"), &key);
    let here = cache.path().join("kernels").join(&variant_key);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(here.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["build"]["incremental_from"].as_str(),
        Some(key.as_str())
    );
    let host_build = lab::cache::Cache::from_env()
        .unwrap()
        .dir("kernels")
        .join(&variant_key)
        .join("bzImage");
    let identical = host_build
        .is_file()
        .then(|| sha256(&host_build) == sha256(&here.join("bzImage")));
    println!(
        "revert variant built from the pulled tree in {variant_time:.1?}: bzImage {} \
         (bit-identical to the host's build: {identical:?})",
        sha256(&here.join("bzImage"))
    );
    if let Some(identical) = identical {
        assert!(
            identical,
            "the revert built from a pulled tree differs from the host's build"
        );
    }
}

fn only_entry_other_than(dir: &Path, key: &str) -> String {
    let keys: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != key)
        .collect();
    assert_eq!(keys.len(), 1, "{}: {keys:?}", dir.display());
    keys[0].clone()
}

/// A guest image (a cheap kind): with a registry that is down, a clear error naming it, then the
/// image built here; pushed to a real one, a layer blob changed on the registry's storage is
/// refused and named, and the image built here again; unchanged, it is pulled and booted.
#[test]
fn a_down_registry_and_a_corrupt_blob_fall_back_to_building() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: images") else {
        return;
    };
    // Nobody listens there.
    let down = format!("oci://127.0.0.1:{}/{REPO}", free_port("127.0.0.1"));
    let first = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", down.as_str()),
        ("LAB_CACHE_DIR", first.path().to_str().unwrap()),
    ];
    let started = Instant::now();
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(
        out.contains(&format!("cache remote {down} is unreachable"))
            && out.contains("here instead"),
        "{out}"
    );
    assert!(started.elapsed() < Duration::from_secs(300), "{out}");
    let key = only_entry(&first.path().join("images"));
    let entry = format!("images/{}", &key[..10]);

    let Some(registry) = Registry::start("remote cache: images", None) else {
        return;
    };
    let url = registry.url();
    let push_env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", first.path().to_str().unwrap()),
    ];
    let pushed = lab_cmd(
        &bin,
        &push_env,
        &["cache", "push", &format!("images/{key}")],
    );
    assert!(pushed.status.success(), "{}", text(&pushed));

    // One byte of the layer changed where the registry keeps it.
    let blob = registry.first_layer_blob(&format!("images-{key}"));
    let original = std::fs::read(&blob).unwrap();
    let mut changed = original.clone();
    let at = changed.len() / 2;
    changed[at] ^= 0xff;
    std::fs::write(&blob, &changed).unwrap();
    let second = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", second.path().to_str().unwrap()),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(
        out.contains(&entry) && out.contains("corrupt") && out.contains("refused"),
        "{out}"
    );
    assert!(
        out.contains("initramfs.cpio"),
        "the refusal names no file:\n{out}"
    );
    assert!(
        out.contains(&format!("building {entry} here instead")),
        "{out}"
    );
    assert!(!out.contains(&format!("pulled {entry}")), "{out}");
    assert_eq!(only_entry(&second.path().join("images")), key);
    let staging = second.path().join("images/.staging");
    assert!(
        std::fs::read_dir(&staging).map_or(true, |d| d.count() == 0),
        "the refused pull left files in {}",
        staging.display()
    );

    // The blob as pushed: pulled, verified, booted, no image built.
    std::fs::write(&blob, &original).unwrap();
    let third = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", third.path().to_str().unwrap()),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(out.contains(&format!("pulled {entry} from {url}")), "{out}");
    assert!(!out.contains("here instead"), "{out}");
    let image = |c: &Path| sha256(&c.join("images").join(&key).join("initramfs.cpio"));
    assert_eq!(image(third.path()), image(first.path()));
}

/// A registry with htpasswd auth: a wrong password and anonymous access are refused with errors
/// that name the remote and the credentials; the right ones push.
#[test]
fn registry_auth_failures_are_clear_errors() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: auth") else {
        return;
    };
    let Some(htpasswd) = which("htpasswd") else {
        lab::skip::host_lacks(
            "remote cache: auth",
            "no htpasswd binary",
            "Install apache2-utils (.ci/run does).",
        );
        return;
    };
    let line = Command::new(htpasswd)
        .args(["-Bbn", "lab", "right-password"])
        .output()
        .unwrap();
    assert!(line.status.success());
    let line = String::from_utf8(line.stdout).unwrap();
    let Some(registry) = Registry::start("remote cache: auth", Some(line.trim())) else {
        return;
    };
    let url = registry.url();
    // Any small entry of the host's cache will do: one image.
    let shared = lab::cache::Cache::from_env().unwrap();
    let Some(key) = std::fs::read_dir(shared.dir("images"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.'))
    else {
        lab::skip::host_lacks(
            "remote cache: auth",
            "no guest image in the cache",
            "Run `lab prepare` first.",
        );
        return;
    };
    let entry = format!("images/{key}");
    let push = |env: &[(&str, &str)]| {
        let mut all = vec![("LAB_CACHE_REMOTE", url.as_str())];
        all.extend_from_slice(env);
        lab_cmd(&bin, &all, &["cache", "push", &entry])
    };
    let wrong = push(&[("LAB_CACHE_USER", "lab"), ("LAB_CACHE_PASSWORD", "wrong")]);
    let out = text(&wrong);
    assert!(!wrong.status.success(), "{out}");
    assert!(
        out.contains(&format!("cache remote {url}"))
            && out.contains("refused the credentials of LAB_CACHE_USER=lab"),
        "{out}"
    );
    let anonymous = push(&[]);
    let out = text(&anonymous);
    assert!(!anonymous.status.success(), "{out}");
    assert!(out.contains("refused anonymous access"), "{out}");
    let right = push(&[
        ("LAB_CACHE_USER", "lab"),
        ("LAB_CACHE_PASSWORD", "right-password"),
    ]);
    let out = text(&right);
    assert!(right.status.success(), "{out}");
    assert!(out.contains("pushed"), "{out}");
}

/// The memos that name entries travel with them: a guest image is pushed together with its
/// bundles' resolutions (`LAB_CACHE_PUSH=1` pushes each resolution it writes), QEMU's
/// resolution by `lab cache push resolved-bundles/qemu`; a cache with no memos and no apt state
/// then boots from the pulled image without opening apt (no lists fetched, no mirror needed),
/// and a memo refused on pull is worked out here instead.
#[test]
fn resolutions_travel_with_the_entries_so_a_fresh_cache_needs_no_apt() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: resolutions") else {
        return;
    };
    let Some(registry) = Registry::start("remote cache: resolutions", None) else {
        return;
    };
    let url = registry.url();
    // The default image built into an empty image kind and pushed as built, with the
    // resolutions its build wrote.
    let first = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", first.path().to_str().unwrap()),
        ("LAB_CACHE_PUSH", "1"),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    let key = only_entry(&first.path().join("images"));
    let image = format!("images/{}", &key[..10]);
    assert!(
        out.contains(&format!("{image}: pushed")),
        "the image was not pushed as built:\n{out}"
    );
    assert!(
        out.contains("memo.resolved-bundles/guest-defa") && out.contains(": pushed"),
        "no resolution was pushed as written:\n{out}"
    );
    let qemu = lab_cmd(
        &bin,
        &[("LAB_CACHE_REMOTE", &url)],
        &["cache", "push", "resolved-bundles/qemu-"],
    );
    let out = text(&qemu);
    assert!(qemu.status.success(), "{out}");
    assert!(out.contains("memo.resolved-bundles/qemu-"), "{out}");

    // No memos, no apt state, no images: QEMU and the kernel stay shared (their entries are
    // here; QEMU's key needs its resolution all the same).
    let fresh = cache_sharing_all_but(&["images", "memo", "apt"]);
    std::fs::remove_dir(fresh.path().join("apt")).unwrap();
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", fresh.path().to_str().unwrap()),
        ("LAB_LOG", "lab=info"),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(
        out.contains("pulled memo.resolved-bundles/qemu-")
            && out.contains("pulled memo.resolved-bundles/guest-defa"),
        "{out}"
    );
    assert!(out.contains(&format!("pulled {image} from {url}")), "{out}");
    assert!(
        !out.contains("apt lists") && !fresh.path().join("apt").exists(),
        "apt was opened:\n{out}"
    );
    assert!(!out.contains("here instead"), "{out}");
    assert_eq!(only_entry(&fresh.path().join("images")), key);
    println!("a cache with no memos and no apt state:\n{out}");

    // QEMU's resolution changed on the registry: refused, named, and resolved here (apt
    // opened), and the run still boots.
    let qemu_key = std::fs::read_dir(fresh.path().join("memo/resolved-bundles"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find_map(|n| {
            n.strip_prefix("qemu-")
                .map(|k| format!("qemu-{}", k.trim_end_matches(".json")))
        })
        .expect("QEMU's resolution was kept");
    let blob = registry.first_layer_blob(&format!("memo.resolved-bundles-{qemu_key}"));
    let mut changed = std::fs::read(&blob).unwrap();
    let at = changed.len() / 2;
    changed[at] ^= 0xff;
    std::fs::write(&blob, &changed).unwrap();
    let again = cache_sharing_all_but(&["memo"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", again.path().to_str().unwrap()),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(
        out.contains("memo.resolved-bundles/qemu-")
            && out.contains("refused")
            && out.contains("out here instead"),
        "{out}"
    );
    println!("QEMU's resolution changed on the registry:\n{out}");
}

/// A registry over TLS behind a CA of its own (on 127.0.0.2: plain http is only for 127.0.0.1,
/// localhost and [::1]): refused with the way out named while the CA is unknown, an image
/// pushed and pulled with `LAB_CACHE_CA`, and a CA file that is not one named.
#[test]
fn a_registry_over_tls_with_its_own_ca() {
    lab::process::watch_parent();
    let part = "remote cache: TLS";
    let Some(bin) = common::lab_binary(part) else {
        return;
    };
    let Some(openssl) = which("openssl") else {
        lab::skip::host_lacks(
            part,
            "no openssl binary (the test makes its certificates with it)",
            "Install Debian's openssl package (.ci/run does).",
        );
        return;
    };
    let certs = tempfile::tempdir().unwrap();
    let at = |name: &str| certs.path().join(name);
    let openssl = |args: &[&str]| {
        let out = Command::new(&openssl)
            .args(args)
            .current_dir(certs.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", text(&out));
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=lab-test-ca",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.2",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        at("server.ext"),
        "subjectAltName=IP:127.0.0.2\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    let Some(registry) = Registry::start_on(
        part,
        "127.0.0.2",
        None,
        Some((&at("server.pem"), &at("server.key"))),
    ) else {
        return;
    };
    let url = registry.url();
    // The default image, built into a kind of its own (no remote), is what is pushed.
    let first = cache_sharing_all_but(&["images"]);
    let built = lab_cmd(
        &bin,
        &[("LAB_CACHE_DIR", first.path().to_str().unwrap())],
        &["run", "--", "true"],
    );
    assert!(built.status.success(), "{}", text(&built));
    let key = only_entry(&first.path().join("images"));
    let entry = format!("images/{key}");
    let from_first = ("LAB_CACHE_DIR", first.path().to_str().unwrap());

    // The system's roots do not know this CA.
    let unknown = lab_cmd(
        &bin,
        &[("LAB_CACHE_REMOTE", &url), from_first],
        &["cache", "push", &entry],
    );
    let out = text(&unknown);
    assert!(!unknown.status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "cache remote {url}: its TLS certificate is not trusted"
        )) && out.contains("set LAB_CACHE_CA"),
        "{out}"
    );
    println!("a CA the system does not know:\n{out}");
    // Not a certificate.
    let bad = lab_cmd(
        &bin,
        &[
            ("LAB_CACHE_REMOTE", &url),
            ("LAB_CACHE_CA", at("server.ext").to_str().unwrap()),
            from_first,
        ],
        &["cache", "push", &entry],
    );
    let out = text(&bad);
    assert!(!bad.status.success(), "{out}");
    assert!(
        out.contains("LAB_CACHE_CA=") && out.contains("no PEM certificate"),
        "{out}"
    );

    let ca = at("ca.pem");
    let ca = ca.to_str().unwrap();
    let pushed = lab_cmd(
        &bin,
        &[("LAB_CACHE_REMOTE", &url), ("LAB_CACHE_CA", ca), from_first],
        &["cache", "push", &entry],
    );
    let out = text(&pushed);
    assert!(pushed.status.success(), "{out}");
    assert!(out.contains("pushed"), "{out}");
    let fresh = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_CA", ca),
        ("LAB_CACHE_DIR", fresh.path().to_str().unwrap()),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(
        out.contains(&format!("pulled images/{} from {url}", &key[..10])),
        "{out}"
    );
    let image = |c: &Path| sha256(&c.join("images").join(&key).join("initramfs.cpio"));
    assert_eq!(image(fresh.path()), image(first.path()));
}

/// One HTTP/1.1 request to the test's registry on loopback; the status code and the
/// `Location` header. Written out by hand: the test needs three requests, and no HTTP client is
/// among the suite's dependencies.
fn http(
    registry: &Registry,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect((registry.host, registry.port)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        registry.host,
        registry.port,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let status = reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"));
    let location = reply
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("location")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, location)
}

/// Replaces tag `tag`'s config with `edit` of it (uploaded as a new blob) and its manifest's
/// layer titles with `title`, as a hostile registry would serve them; `shrink` bytes taken off
/// every layer's declared size.
fn rewrite_entry(
    registry: &Registry,
    tag: &str,
    title: &str,
    shrink: u64,
    edit: impl FnOnce(&mut serde_json::Value),
) {
    let v2 = registry.storage.join("docker/registry/v2");
    let link = v2.join(format!(
        "repositories/{REPO}/_manifests/tags/{tag}/current/link"
    ));
    let digest = std::fs::read_to_string(link).unwrap();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_path(&v2, digest.trim())).unwrap()).unwrap();
    let config_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_path(&v2, &config_digest)).unwrap()).unwrap();
    edit(&mut config);
    let bytes = serde_json::to_vec(&config).unwrap();
    let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
    // An upload session, then its one chunk with the digest.
    let start = format!("/v2/{REPO}/blobs/uploads/");
    let (status, location) = http(registry, "POST", &start, "application/octet-stream", &[]);
    assert_eq!(status, 202, "starting an upload");
    let path = location
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
        .unwrap_or(location);
    let sep = if path.contains('?') { '&' } else { '?' };
    let put = format!("{path}{sep}digest={digest}");
    let (status, _) = http(registry, "PUT", &put, "application/octet-stream", &bytes);
    assert_eq!(status, 201, "uploading the config");
    manifest["config"]["digest"] = digest.into();
    manifest["config"]["size"] = bytes.len().into();
    for layer in manifest["layers"].as_array_mut().unwrap() {
        layer["annotations"]["org.opencontainers.image.title"] = title.into();
        let size = layer["size"].as_u64().unwrap();
        layer["size"] = (size - shrink.min(size - 1)).into();
    }
    let media = manifest["mediaType"]
        .as_str()
        .unwrap_or("application/vnd.oci.image.manifest.v1+json")
        .to_string();
    let body = serde_json::to_vec(&manifest).unwrap();
    let put = format!("/v2/{REPO}/manifests/{tag}");
    let (status, _) = http(registry, "PUT", &put, &media, &body);
    assert_eq!(status, 201, "putting the manifest");
}

/// Every path under `dir` whose name holds `word`.
fn named_under(dir: &Path, word: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if e.file_name().to_string_lossy().contains(word) {
            out.push(path.clone());
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(named_under(&path, word));
        }
    }
    out
}

/// A hostile registry (issue W2): layer names and titles that climb out of the cache are never
/// paths (the entry is pulled, nothing lands outside it); a file list that climbs out is
/// refused, named, and the entry built here instead.
#[test]
fn a_registry_cannot_write_outside_the_cache() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: a hostile registry") else {
        return;
    };
    let Some(registry) = Registry::start("remote cache: a hostile registry", None) else {
        return;
    };
    let url = registry.url();
    let first = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url.as_str()),
        ("LAB_CACHE_DIR", first.path().to_str().unwrap()),
    ];
    let run = lab_cmd(&bin, &env, &["run", "--", "true"]);
    assert!(run.status.success(), "{}", text(&run));
    let key = only_entry(&first.path().join("images"));
    let pushed = lab_cmd(&bin, &env, &["cache", "push", &format!("images/{key}")]);
    assert!(pushed.status.success(), "{}", text(&pushed));
    let tag = format!("images-{key}");
    let entry = format!("images/{}", &key[..10]);

    // Names that climb out: only names, the pull goes on, nothing lands outside the entry.
    rewrite_entry(&registry, &tag, "../../../escape-title", 0, |config| {
        for layer in config["layers"].as_array_mut().unwrap() {
            layer["name"] = "../../../escape-name".into();
        }
    });
    let (cache, out) = run_on_fresh_images(&bin, &url);
    assert!(out.contains(&format!("pulled {entry} from {url}")), "{out}");
    assert_nothing_escaped(&cache);

    // A file list that climbs out: refused, named, built here instead.
    rewrite_entry(&registry, &tag, "files", 0, |config| {
        let files = config["layers"][0]["files"].as_array_mut().unwrap();
        files[0]["path"] = "../../escape-file".into();
    });
    let (cache, out) = run_on_fresh_images(&bin, &url);
    assert!(
        out.contains("../../escape-file") && out.contains("refused"),
        "the refusal names the path:\n{out}"
    );
    assert!(
        out.contains(&format!("building {entry} here instead")),
        "{out}"
    );
    assert_eq!(only_entry(&cache.path().join("images")), key);
    assert_nothing_escaped(&cache);

    // A layer longer than its manifest declares: refused once past the declared size (a
    // registry cannot fill the disk), built here instead.
    rewrite_entry(&registry, &tag, "files", 4096, |_| {});
    let (cache, out) = run_on_fresh_images(&bin, &url);
    assert!(
        out.contains("more than its declared") && out.contains("refused"),
        "{out}"
    );
    assert!(
        out.contains(&format!("building {entry} here instead")),
        "{out}"
    );
    assert_eq!(only_entry(&cache.path().join("images")), key);
}

/// `lab run -- true` on a cache whose images start empty, pulling from `url`: the cache and the
/// run's output (the run must succeed, by a pull or a build).
fn run_on_fresh_images(bin: &Path, url: &str) -> (tempfile::TempDir, String) {
    let cache = cache_sharing_all_but(&["images"]);
    let env = [
        ("LAB_CACHE_REMOTE", url),
        ("LAB_CACHE_DIR", cache.path().to_str().unwrap()),
    ];
    let run = lab_cmd(bin, &env, &["run", "--", "true"]);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    (cache, out)
}

/// No `escape-*` file in `cache` or beside it (where a climbing name would land).
fn assert_nothing_escaped(cache: &tempfile::TempDir) {
    assert_eq!(named_under(cache.path(), "escape-"), Vec::<PathBuf>::new());
    let beside = cache.path().parent().unwrap();
    for name in ["escape-name", "escape-title", "escape-file"] {
        assert!(!beside.join(name).exists(), "{name} beside the cache");
    }
}

/// The registry password reaches no child of the lab (issue W2): QEMU's environment, read from
/// `/proc` while its guest runs, lacks `LAB_CACHE_PASSWORD` and holds the test's marker (so the
/// process is this test's).
#[test]
fn the_registry_password_reaches_no_child() {
    lab::process::watch_parent();
    let Some(bin) = common::lab_binary("remote cache: the password") else {
        return;
    };
    let marker = format!("lab-password-test-{}", std::process::id());
    // Nobody listens there: the cache has what `lab run` needs, so it is never asked.
    let down = format!("oci://127.0.0.1:{}/{REPO}", free_port("127.0.0.1"));
    let mut lab = Command::new(&bin)
        .args(["run", "--", "sleep", "20"])
        .env("LAB_CACHE_REMOTE", &down)
        .env("LAB_CACHE_USER", "u")
        .env("LAB_CACHE_PASSWORD", "s3cret-for-the-registry-only")
        .env("LAB_PASSWORD_TEST_MARK", &marker)
        .env_remove("LAB_CACHE_PUSH")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Generous: in the suite the guest may wait minutes for one of the host's CPU slots.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut qemu = None;
    while qemu.is_none() && Instant::now() < deadline {
        qemu = std::fs::read_dir("/proc").unwrap().flatten().find_map(|p| {
            let environ = std::fs::read(p.path().join("environ")).ok()?;
            let cmdline = std::fs::read(p.path().join("cmdline")).ok()?;
            let environ = String::from_utf8_lossy(&environ).replace('\0', "\n");
            let is_qemu = String::from_utf8_lossy(&cmdline).contains("qemu-system");
            (is_qemu && environ.contains(&marker)).then_some(environ)
        });
        if lab.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = lab.kill();
    let _ = lab.wait();
    let environ = qemu.expect("no QEMU of this test's lab seen within 600 s");
    assert!(
        !environ.contains("LAB_CACHE_PASSWORD") && !environ.contains("s3cret"),
        "the password reached QEMU:\n{environ}"
    );
}
