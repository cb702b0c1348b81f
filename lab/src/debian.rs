//! Pinned Debian packages: the lab's hermetic inputs (QEMU, guest userspace, kernel sources) come
//! from Debian's archive, resolved through a private apt state in the cache so the host's apt
//! configuration is never changed. The mirror is taken from the host's own apt sources.
//!
//! Exact versions and checksums live in the repo's lock file (`images/lock.toml`). The archive
//! drops superseded versions; when a locked one is gone the lab takes the newest of the same
//! upstream series, says so loudly once, when it resolves the bundle, and records the
//! substitution with the resolution and in every result (`lab lock update` rewrites the lock);
//! a later run that reuses the resolution does not say it again. When the whole series left,
//! the bundle is resolved again as a whole; several architectures out of step fall back to the
//! release below; `LAB_LOCK_STRICT=1` fails instead (`moved`).
//!
//! Every resolution is remembered in the cache under a key of its lock entry
//! (`recorded_resolution`): while the lock entry is unchanged, a caller whose product (an
//! unpacked QEMU, a guest image) is already cached needs neither apt nor the network.
//!
//! Between processes (two CI jobs, two test processes on one cache): an open `Archive` holds
//! the apt state's lock until its last clone drops, so a list update never runs under another
//! process's resolution or download, and resolving and downloading a bundle is one locked step.
//! Files others read (`sources.list`, `images/lock.toml`) are replaced atomically through
//! unique temporary names, `sources.list` only when it changes.
//!
//! The network: lists older than a day are refreshed once (bounded, no retries); when that
//! fails the old lists are used with a warning and are not marked fresh. Steps that cannot do
//! without the network (lists never fetched, downloads) retry with backoff and name what failed.
//!
//! Outside the lab only `lab lock update` ([`update_default_lock`]), `lab lock check`
//! ([`check_default_lock`], changing nothing) and the suites a mirror must serve ([`SUITES`],
//! for `LAB_DEBIAN_MIRROR`) are public.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cache::{hash_parts, sha256_file, Cache, CacheLock};

mod check;
mod lock;
mod moved;
#[doc(hidden)]
pub mod test_repo;
pub use check::{check_default_lock, LockCheck};
use lock::LOCK_FILE_MUTEX;
pub use lock::{update_default_lock, LockUpdate};
pub(crate) use lock::{LockFile, LockedBundle};

/// Suites the private apt state reads. Bookworm hosts get trixie's kernels and trixie-backports'
/// QEMU (the first with `vfio-user-pci`).
/// Bookworm for its older kernels (`linux-source-6.1`, the last before EEVDF); bundles that
/// name no release get the newest version any suite has, which is trixie's for everything else.
pub const SUITES: &[&str] = &["trixie", "trixie-updates", "trixie-backports", "bookworm"];

/// The keys of Debian's archive (`LAB_DEBIAN_KEYRING` names another keyring, for a mirror
/// that signs with keys of its own).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Lists older than this are refreshed (`LAB_APT_REFRESH=1` forces a refresh).
const LIST_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How often a network step that is needed is tried, and the pause before each retry.
const NETWORK_TRIES: &[Duration] = &[
    Duration::ZERO,
    Duration::from_secs(2),
    Duration::from_secs(8),
];

/// A private apt state (lists, downloads) under the cache, locked against other processes for
/// as long as this value or a clone of it lives: open it, resolve, download, drop it. Each set
/// of architectures has a state of its own: `amd64` (QEMU, kernel sources, x86 guests), `arm64`
/// (aarch64 guests' packages, resolved as that architecture's own), and `amd64` with `arm64`
/// beside it (the cross toolchain: amd64 compilers and arm64 libraries to link against).
#[derive(Debug, Clone)]
pub(crate) struct Archive {
    cache: Cache,
    state: PathBuf,
    mirror: String,
    keyring: PathBuf,
    /// Debian architectures, the native one first.
    archs: Vec<String>,
    _lock: std::sync::Arc<CacheLock>,
}

/// The architectures of a state that names none: the host's packages.
pub(crate) const DEFAULT_ARCHS: &[&str] = &["amd64"];

/// One binary package as the archive's index describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PackageRef {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

impl Archive {
    /// Opens (and if stale, refreshes) the private apt state for [`SUITES`], waiting while
    /// another process or thread has it open.
    pub(crate) fn open(cache: &Cache) -> Result<Archive> {
        Archive::open_for(cache, DEFAULT_ARCHS)
    }

    /// [`Archive::open`] for packages of `archs` (Debian names, the native one first).
    pub(crate) fn open_for(cache: &Cache, archs: &[&str]) -> Result<Archive> {
        let mirror = host_mirror()?;
        let keyring = match std::env::var_os("LAB_DEBIAN_KEYRING") {
            Some(path) => {
                let path = PathBuf::from(path);
                if !path.is_file() {
                    bail!("LAB_DEBIAN_KEYRING: {} is not a file", path.display());
                }
                path
            }
            None if Path::new(KEYRING).exists() => PathBuf::from(KEYRING),
            None => bail!("{KEYRING} is missing: install debian-archive-keyring (apt checks Debian's signatures with it)"),
        };
        Archive::open_at(cache, mirror, keyring, archs)
    }

    fn open_at(cache: &Cache, mirror: String, keyring: PathBuf, archs: &[&str]) -> Result<Archive> {
        let arch_list = archs.join(",");
        let suites = SUITES.join(" ");
        let mut parts: Vec<(&str, &[u8])> =
            vec![("mirror", mirror.as_bytes()), ("suites", suites.as_bytes())];
        // The host's own state keeps the key it had before other architectures existed.
        if archs != DEFAULT_ARCHS {
            parts.push(("architectures", arch_list.as_bytes()));
        }
        let key = hash_parts(&parts);
        let state = cache.dir("apt").join(&key[..16]);
        let lock = cache.lock(&format!("apt-{}", &key[..16]))?;
        let archive = Archive {
            cache: cache.clone(),
            state,
            mirror,
            keyring,
            archs: archs.iter().map(|a| a.to_string()).collect(),
            _lock: std::sync::Arc::new(lock),
        };
        archive.prepare()?;
        Ok(archive)
    }

    /// The native architecture (the first).
    fn native(&self) -> &str {
        &self.archs[0]
    }

    fn prepare(&self) -> Result<()> {
        for sub in ["lists/partial", "archives/partial", "etc"] {
            fs::create_dir_all(self.state.join(sub))?;
        }
        let sources: String = SUITES
            .iter()
            .map(|suite| {
                let keyring = self.keyring.display();
                format!("deb [signed-by={keyring}] {} {suite} main\n", self.mirror)
            })
            .collect();
        write_if_changed(&self.state.join("etc/sources.list"), sources.as_bytes())?;
        let stamp = self.state.join("lists/.updated");
        let have_lists = stamp.exists();
        let fresh = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < LIST_MAX_AGE);
        if fresh && std::env::var_os("LAB_APT_REFRESH").is_none() {
            return Ok(());
        }
        tracing::info!("updating the private apt lists for {}", SUITES.join(", "));
        // Old lists still resolve and download the locked versions: one bounded try, and on
        // failure they are used as they are (offline after provisioning).
        let tries = if have_lists {
            &NETWORK_TRIES[..1]
        } else {
            NETWORK_TRIES
        };
        match self.update(tries) {
            Ok(()) => {
                fs::write(&stamp, b"")?;
                Ok(())
            }
            Err(e) if have_lists => {
                crate::progress::warn(format!(
                    "could not refresh the apt lists (using the old ones): {e:#}"
                ));
                Ok(())
            }
            Err(e) => Err(e.context("fetching the apt lists (the lab needs them once, online)")),
        }
    }

    /// `apt-get update`, tried at the given pauses; success only when every index was fetched
    /// (plain `apt-get update` exits 0 when fetches fail, and then nothing was updated).
    fn update(&self, tries: &[Duration]) -> Result<()> {
        retry(tries, "apt-get update", || {
            let out = self.apt(
                "apt-get",
                &[
                    "-q",
                    "-o",
                    "APT::Update::Error-Mode=any",
                    "-o",
                    "Acquire::Retries=0",
                    "-o",
                    "Acquire::http::Timeout=15",
                    "update",
                ],
            )?;
            if let Some(line) = out.lines().find(|l| l.starts_with("Err:")) {
                bail!("apt-get update: {}", line.trim());
            }
            Ok(())
        })
    }

    fn options(&self) -> Vec<String> {
        let s = self.state.display();
        [
            format!("Dir::State={s}"),
            format!("Dir::State::Lists={s}/lists"),
            "Dir::State::status=/dev/null".into(),
            format!("Dir::Cache={s}"),
            format!("Dir::Cache::archives={s}/archives"),
            format!("Dir::Etc::SourceList={s}/etc/sources.list"),
            format!("Dir::Etc::SourceParts={s}/etc"),
            "Dir::Etc::Preferences=/dev/null".into(),
            format!("Dir::Etc::PreferencesParts={s}/etc"),
            format!("APT::Architecture={}", self.native()),
            format!("APT::Architectures={}", self.archs.join(",")),
            // The state is the lab's own and `Archive` holds its lock around every apt call.
            "Debug::NoLocking=1".into(),
            // Downloads land in the cache, which the unprivileged _apt user may not reach.
            "APT::Sandbox::User=root".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn apt(&self, tool: &str, args: &[&str]) -> Result<String> {
        self.apt_in(tool, args, None)
    }

    fn apt_in(&self, tool: &str, args: &[&str], cwd: Option<&Path>) -> Result<String> {
        let mut cmd = Command::new(tool);
        cmd.args(self.options()).args(args);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let out = crate::process::output(&mut cmd)
            .with_context(|| format!("running {tool} (is apt installed?)"))?;
        if !out.status.success() {
            bail!(
                "{tool} {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every version of `package` the archive serves, newest first.
    pub(crate) fn versions(&self, package: &str) -> Result<Vec<String>> {
        let out = self.apt("apt-cache", &["madison", package])?;
        let mut versions: Vec<String> = out
            .lines()
            .filter_map(|l| l.split('|').nth(1).map(|v| v.trim().to_string()))
            .collect();
        versions.dedup();
        Ok(versions)
    }

    /// The index entry of `package` at `version`, if the archive still serves it.
    pub(crate) fn lookup(&self, package: &str, version: &str) -> Result<Option<PackageRef>> {
        let found = self.lookup_many(&[(package.to_string(), version.to_string())])?;
        Ok(found.into_iter().next().flatten())
    }

    /// Looks up many exact versions with one apt-cache call (one call per package costs
    /// seconds for a bundle of ~100 packages). Entries the archive no longer serves are `None`.
    pub(crate) fn lookup_many(
        &self,
        wanted: &[(String, String)],
    ) -> Result<Vec<Option<PackageRef>>> {
        let specs: Vec<String> = wanted.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let mut args = vec!["show", "--no-all-versions", "-q"];
        args.extend(specs.iter().map(String::as_str));
        // apt-cache exits non-zero when any one is missing but still prints the others.
        let mut cmd = Command::new("apt-cache");
        cmd.args(self.options()).args(&args);
        let out = crate::process::output(&mut cmd).context("running apt-cache")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut found: BTreeMap<(String, String), String> = BTreeMap::new();
        for stanza in text.split("\n\n") {
            let field = |name: &str| stanza_field(stanza, name);
            if let (Some(n), Some(v), Some(sha)) =
                (field("Package: "), field("Version: "), field("SHA256: "))
            {
                // A foreign architecture's package is named as apt names it: `name:arch`.
                let name = match field("Architecture: ") {
                    Some(a) if a != "all" && a != self.native() => format!("{n}:{a}"),
                    _ => n,
                };
                found.insert((name, v), sha);
            }
        }
        Ok(wanted
            .iter()
            .map(|(n, v)| {
                found.get(&(n.clone(), v.clone())).map(|sha| PackageRef {
                    name: n.clone(),
                    version: v.clone(),
                    sha256: sha.clone(),
                })
            })
            .collect())
    }

    /// Resolves `roots` and their whole dependency closure (no recommends), preferring `release`
    /// (e.g. `trixie-backports`) for the roots. Returns exact versions with checksums.
    pub(crate) fn resolve_closure(
        &self,
        roots: &[String],
        release: Option<&str>,
        only: Option<&str>,
    ) -> Result<Vec<PackageRef>> {
        let mut args = vec!["install", "-s", "-q", "--no-install-recommends"];
        if let Some(release) = release {
            args.extend(["-t", release]);
        }
        args.extend(roots.iter().map(String::as_str));
        let out = self.apt("apt-get", &args)?;
        let mut wanted = simulated_installs(&out, roots, only)?;
        // A foreign architecture's packages are what the native tools link against, taken as
        // named: their own dependencies would only run on that architecture.
        wanted.retain(|(name, _)| !name.contains(':') || roots.contains(name));
        let mut refs = Vec::new();
        for ((name, version), entry) in wanted.iter().zip(self.lookup_many(&wanted)?) {
            refs.push(
                entry
                    .with_context(|| format!("{name} {version} resolved but has no index entry"))?,
            );
        }
        if refs.is_empty() {
            bail!("apt resolved nothing for {}", roots.join(" "));
        }
        Ok(refs)
    }

    /// Downloads one package into the private state and verifies its checksum.
    pub(crate) fn download(&self, package: &PackageRef) -> Result<PathBuf> {
        Ok(self.download_many(std::slice::from_ref(package))?.remove(0))
    }

    /// Downloads packages (one apt-get call for all that are not already here) and verifies
    /// every checksum.
    pub(crate) fn download_many(&self, packages: &[PackageRef]) -> Result<Vec<PathBuf>> {
        let dir = self.state.join("debs");
        fs::create_dir_all(&dir)?;
        let missing: Vec<String> = packages
            .iter()
            .filter(|p| find_deb(&dir, &p.name, &p.version, self.native()).is_none())
            .map(|p| format!("{}={}", p.name, p.version))
            .collect();
        if !missing.is_empty() {
            let mut args = vec!["-q", "download"];
            args.extend(missing.iter().map(String::as_str));
            let what = format!("downloading {} Debian packages", missing.len());
            retry(NETWORK_TRIES, &what, || {
                self.apt_in("apt-get", &args, Some(&dir)).map(drop)
            })?;
        }
        let verified = |package: &PackageRef| -> Result<PathBuf> {
            let spec = format!("{}={}", package.name, package.version);
            let path = find_deb(&dir, &package.name, &package.version, self.native())
                .with_context(|| format!("apt-get download {spec} left no .deb"))?;
            let actual = sha256_file(&path)?;
            if actual != package.sha256 {
                fs::remove_file(&path).ok();
                bail!(
                    "checksum mismatch for {spec}: expected sha256 {}, got {actual}",
                    package.sha256
                );
            }
            Ok(path)
        };
        packages
            .iter()
            .map(|package| match verified(package) {
                Ok(path) => Ok(path),
                // A .deb a killed download left half-written: removed above, fetched once more.
                Err(e) if !missing.contains(&format!("{}={}", package.name, package.version)) => {
                    tracing::warn!("{e:#}: downloading it again");
                    let spec = format!("{}={}", package.name, package.version);
                    self.apt_in("apt-get", &["-q", "download", &spec], Some(&dir))?;
                    verified(package)
                }
                Err(e) => Err(e),
            })
            .collect()
    }
}

/// Runs a network step at the given pauses (the first is before the first try) until it
/// succeeds; the error names the step and every failure.
fn retry(pauses: &[Duration], what: &str, mut step: impl FnMut() -> Result<()>) -> Result<()> {
    let mut failures = Vec::new();
    for (i, pause) in pauses.iter().enumerate() {
        std::thread::sleep(*pause);
        match step() {
            Ok(()) => return Ok(()),
            Err(e) => {
                if i + 1 < pauses.len() {
                    tracing::warn!("{what} failed (retrying in {:?}): {e:#}", pauses[i + 1]);
                }
                failures.push(format!("try {}: {e:#}", i + 1));
            }
        }
    }
    bail!(
        "{what} failed {} times:\n{}",
        failures.len(),
        failures.join("\n")
    )
}

/// Replaces `path` with `bytes` unless it holds them already; through a unique temporary file
/// and a rename, so a concurrent reader sees the old or the new file, never a part, and two
/// writers never share a temporary file.
pub(crate) fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.unwrap_or_default()))
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    // Temporary files are private (0600); the file replaced is an ordinary one.
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))?;
    tmp.persist(path)?;
    Ok(())
}

fn find_deb(dir: &Path, name: &str, version: &str, native: &str) -> Option<PathBuf> {
    // apt writes the epoch's colon as %3a in file names, and a foreign package's architecture
    // (`name:arch`) after the version.
    let version = version.replace(':', "%3a");
    let (name, arch) = match name.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (name, None),
    };
    let prefix = format!("{name}_{version}_");
    let suffixes = match arch {
        Some(a) => vec![format!("_{a}.deb")],
        None => vec![format!("_{native}.deb"), "_all.deb".to_string()],
    };
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with(&prefix) && suffixes.iter().any(|s| n.ends_with(s.as_str()))
            })
        })
}

/// The `Inst name (version ...)` lines of `apt-get install -s`, keeping names that start with
/// `only`. Every root must be among them by its exact name: apt reads a name it does not know
/// as a regular expression (`linux-source-6.1` selects `linux-source-6.12`), so a missing root
/// would otherwise resolve to some other package.
fn simulated_installs(
    out: &str,
    roots: &[String],
    only: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let mut installs = Vec::new();
    for line in out.lines().filter(|l| l.starts_with("Inst ")) {
        let mut words = line.split_whitespace().skip(1);
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        installs.push((
            name.to_string(),
            version.trim_start_matches('(').to_string(),
        ));
    }
    for root in roots {
        if !installs.iter().any(|(name, _)| name == root) {
            let picked: Vec<&str> = installs.iter().map(|(n, _)| n.as_str()).collect();
            bail!(
                "package {root} is not in the archive (suites {}); apt would install {} instead",
                SUITES.join(", "),
                if picked.is_empty() {
                    "nothing".to_string()
                } else {
                    picked.join(", ")
                }
            );
        }
    }
    installs.retain(|(name, _)| only.is_none_or(|prefix| name.starts_with(prefix)));
    Ok(installs)
}

/// Unpacks a `.deb`'s data into `dest` (no maintainer scripts run).
pub(crate) fn extract_deb(deb: &Path, dest: &Path) -> Result<()> {
    fs::create_dir_all(dest)?;
    let out = crate::process::output(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dest))
        .context("running dpkg-deb")?;
    if !out.status.success() {
        bail!(
            "dpkg-deb -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The Debian mirror the host's apt uses (`LAB_DEBIAN_MIRROR` overrides it).
pub(crate) fn host_mirror() -> Result<String> {
    if let Ok(m) = std::env::var("LAB_DEBIAN_MIRROR") {
        return Ok(m.trim_end_matches('/').to_string());
    }
    let mut texts = Vec::new();
    for path in ["/etc/apt/sources.list"] {
        if let Ok(t) = fs::read_to_string(path) {
            texts.push(t);
        }
    }
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if let Ok(t) = fs::read_to_string(&p) {
                texts.push(t);
            }
        }
    }
    mirror_from_texts(&texts)
}

/// The Debian mirror among the host's apt sources, or an error saying what the host is and what
/// the lab needs instead. Only Debian hosts are supported as they are: the lab's packages come
/// from Debian's archive (trixie, bookworm), which an Ubuntu host's sources do not serve.
fn mirror_from_texts(texts: &[String]) -> Result<String> {
    if let Some(mirror) = texts.iter().find_map(|t| mirror_from_sources(t)) {
        return Ok(mirror);
    }
    let mut suites: Vec<String> = texts.iter().flat_map(|t| source_suites(t)).collect();
    suites.dedup();
    let ubuntu = texts.iter().any(|t| t.contains("ubuntu"))
        || suites.iter().any(|s| {
            let base = s.split('-').next().unwrap_or(s);
            UBUNTU_SUITES.contains(&base)
        });
    let host = match (ubuntu, suites.is_empty()) {
        (true, _) => format!("Ubuntu ({})", suites.join(", ")),
        (false, false) => format!("suites {} but no Debian release", suites.join(", ")),
        (false, true) => "no apt sources".to_string(),
    };
    bail!(
        "this host's apt sources (/etc/apt/sources.list{{,.d}}) name {host}. The lab takes QEMU, \
         kernel sources and guest packages from Debian's archive ({}), so it supports Debian 12 \
         and 13 hosts as they are; elsewhere set LAB_DEBIAN_MIRROR to the base URL of a Debian \
         mirror and install debian-archive-keyring",
        SUITES.join(", ")
    )
}

/// Ubuntu release names, to say so when a host has no Debian sources.
const UBUNTU_SUITES: &[&str] = &[
    "bionic", "focal", "jammy", "noble", "oracular", "plucky", "questing",
];

/// Every suite the sources name (one-line and deb822).
fn source_suites(text: &str) -> Vec<String> {
    let mut suites = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("deb ") {
            let mut words = rest
                .split_whitespace()
                .filter(|w| !w.starts_with('['))
                .skip_while(|w| !w.contains("://"));
            if let (Some(_), Some(suite)) = (words.next(), words.next()) {
                suites.push(suite.to_string());
            }
        } else if let Some(list) = line.strip_prefix("Suites:") {
            suites.extend(list.split_whitespace().map(str::to_string));
        }
    }
    suites
}

/// Finds the first URI serving a Debian release suite (not the security archive) in either
/// one-line (`deb URI suite comp`) or deb822 (`URIs:`/`Suites:`) format.
fn mirror_from_sources(text: &str) -> Option<String> {
    let is_release = |suite: &str| {
        let base = suite.split('-').next().unwrap_or(suite);
        [
            "bookworm", "trixie", "forky", "sid", "stable", "testing", "unstable",
        ]
        .contains(&base)
            && !suite.ends_with("-security")
    };
    let good_uri = |uri: &str| uri.starts_with("http") && !uri.contains("security");
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("deb ") {
            let words: Vec<&str> = rest
                .split_whitespace()
                .filter(|w| !w.starts_with('['))
                .collect();
            // Options in brackets may contain spaces; skip words until the URI.
            let mut it = words.iter().skip_while(|w| !w.contains("://"));
            if let (Some(uri), Some(suite)) = (it.next(), it.next()) {
                if good_uri(uri) && is_release(suite) {
                    return Some(uri.trim_end_matches('/').to_string());
                }
            }
        }
    }
    for stanza in text.split("\n\n") {
        let field = |name: &str| stanza_field(stanza, name);
        if let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:")) {
            let types = field("Types:").unwrap_or_default();
            if types.split_whitespace().any(|t| t == "deb")
                && suites.split_whitespace().any(is_release)
            {
                if let Some(uri) = uris.split_whitespace().find(|u| good_uri(u)) {
                    return Some(uri.trim_end_matches('/').to_string());
                }
            }
        }
    }
    None
}

/// The value of `name` (given with its colon, e.g. `"Version: "`) in a deb822 stanza.
fn stanza_field(stanza: &str, name: &str) -> Option<String> {
    stanza
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
}

/// The upstream series of a Debian version: epoch and Debian revision dropped, first two
/// numeric components kept (`1:11.1.3+ds-1~bpo13+1` -> `11.1`).
pub(crate) fn upstream_series(version: &str) -> String {
    let no_epoch = version.split_once(':').map_or(version, |(_, v)| v);
    let upstream = no_epoch.rsplit_once('-').map_or(no_epoch, |(u, _)| u);
    let mut parts = upstream
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => format!("{a}.{b}"),
        (Some(a), None) => a.to_string(),
        _ => upstream.to_string(),
    }
}

/// A locked version that had left the archive and what was taken instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Substitution {
    pub package: String,
    pub locked: String,
    pub used: String,
}

impl Substitution {
    pub(crate) fn new(package: &str, locked: &str, used: &str) -> Substitution {
        Substitution {
            package: package.to_string(),
            locked: locked.to_string(),
            used: used.to_string(),
        }
    }

    /// Says loudly that a locked version is gone (once: when the bundle is resolved).
    pub(crate) fn warn(&self) {
        crate::progress::warn(format!(
            "LOCKED PACKAGE GONE: {} {} is no longer in the archive; using {} of the same \
             series {}. Results record this. Run `lab lock update` to pin it.",
            self.package,
            self.locked,
            self.used,
            upstream_series(&self.locked)
        ));
    }
}

/// The packages a bundle resolved to on this run, with any substitutions made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResolvedBundle {
    pub name: String,
    pub packages: Vec<PackageRef>,
    pub substitutions: Vec<Substitution>,
}

impl ResolvedBundle {
    /// Logs (at debug level) the substitutions a reused resolution carries: they were said
    /// loudly when the bundle was resolved and are in every result's manifest, so a warm start
    /// does not repeat them.
    pub(crate) fn note_substitutions(&self) {
        for s in &self.substitutions {
            tracing::debug!(
                "{}: locked {} gone, {} used (recorded when resolved)",
                s.package,
                s.locked,
                s.used
            );
        }
    }
}

/// The memo key of a bundle's resolution: the request and its lock entry, so editing either
/// (or `lab lock update`) leads to a fresh resolution.
fn resolution_key(
    name: &str,
    roots: &[String],
    release: Option<&str>,
    only: Option<&str>,
    archs: &[&str],
    locked: &[PackageRef],
) -> String {
    let packages: String = locked
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.version, p.sha256))
        .collect();
    let arch_list = archs.join(",");
    let root_list = roots.join(" ");
    let mut parts: Vec<(&str, &[u8])> = vec![
        ("name", name.as_bytes()),
        ("roots", root_list.as_bytes()),
        ("release", release.unwrap_or("").as_bytes()),
        ("only", only.unwrap_or("").as_bytes()),
        ("locked", packages.as_bytes()),
    ];
    // Host-architecture bundles keep the keys they had before other architectures existed.
    if archs != DEFAULT_ARCHS {
        parts.push(("architectures", arch_list.as_bytes()));
    }
    let key = hash_parts(&parts);
    format!("{}-{}", crate::names::sanitize(name), &key[..16])
}

/// The resolution [`resolve_bundle`] last made for this bundle while its lock entry was what it
/// is now, without opening the archive (no apt call, no network). `None` when the lock lacks the
/// bundle, its entry changed since, or it was never resolved with this cache. The packages it
/// names were checked against the lock and the archive when it was made; a caller that must
/// download them resolves afresh instead, and one that uses it calls
/// [`ResolvedBundle::note_substitutions`] (resolving said them loudly already).
pub(crate) fn recorded_resolution(
    cache: &Cache,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    only: Option<&str>,
) -> Result<Option<ResolvedBundle>> {
    let lock = LockFile::load(lock_path)?;
    let roots: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    let Some(locked) = lock.bundle(name) else {
        return Ok(None);
    };
    if locked.roots != roots || locked.only.as_deref() != only {
        return Ok(None);
    }
    Ok(cache.read_memo::<ResolvedBundle>(crate::cache::RESOLUTIONS_MEMO, &locked.memo_key()))
}

/// Resolves a bundle (`roots` and their dependency closure, or only the closure's packages
/// whose names start with `only`):
/// the locked versions where the archive still has them, else the newest of
/// the same upstream series (loudly). A bundle missing from the lock is resolved fresh from
/// `release` and written to the lock, so a new checkout pins what it first used; a locked one
/// keeps the lock's `release`.
pub(crate) fn resolve_bundle(
    archive: &Archive,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
    only: Option<&str>,
) -> Result<ResolvedBundle> {
    let strict = moved::strict_from_env();
    resolve_bundle_as(archive, lock_path, name, roots, release, only, strict)
}

/// [`resolve_bundle`], failing on any version that left the archive when `strict`.
fn resolve_bundle_as(
    archive: &Archive,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
    only: Option<&str>,
    strict: bool,
) -> Result<ResolvedBundle> {
    let _guard = LOCK_FILE_MUTEX.lock().unwrap_or_else(|p| p.into_inner());
    let mut lock = LockFile::load(lock_path)?;
    let roots_owned: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    let archs: Vec<&str> = archive.archs.iter().map(String::as_str).collect();
    let locked = match lock.bundle(name) {
        Some(b) if b.roots == roots_owned && b.only.as_deref() == only && b.archs() == archs => {
            b.clone()
        }
        _ => {
            let packages = archive.resolve_closure(&roots_owned, release, only)?;
            let bundle = LockedBundle {
                name: name.to_string(),
                roots: roots_owned,
                release: release.map(str::to_string),
                only: only.map(str::to_string),
                architectures: if archs == DEFAULT_ARCHS {
                    Vec::new()
                } else {
                    archive.archs.clone()
                },
                packages,
            };
            lock.put(bundle.clone());
            if let Err(e) = lock.save(lock_path) {
                tracing::warn!("could not write {}: {e:#}", lock_path.display());
            }
            bundle
        }
    };
    // Once locked, the bundle's release is the lock's (`lab lock update` reads it there too);
    // the caller's names the release a bundle new to the lock is resolved from.
    let release = locked.release.as_deref();
    let mut packages = Vec::new();
    let mut substitutions = Vec::new();
    // Locked packages whose whole upstream series left: the bundle resolves again.
    let mut series_gone = Vec::new();
    let available = archive.lookup_many(&locked.wanted())?;
    for (pkg, entry) in locked.packages.iter().zip(available) {
        match entry {
            Some(found) => {
                if found.sha256 != pkg.sha256 {
                    bail!(
                        "{}: {} {} has sha256 {} in the archive but {} in the lock",
                        lock_path.display(),
                        pkg.name,
                        pkg.version,
                        found.sha256,
                        pkg.sha256
                    );
                }
                packages.push(found);
            }
            None if strict => {
                return Err(moved::strict_error(
                    lock_path,
                    &pkg.name,
                    &pkg.version,
                    archive,
                ))
            }
            None => {
                let series = upstream_series(&pkg.version);
                let Some(replacement) = archive
                    .versions(&pkg.name)?
                    .into_iter()
                    .find(|v| upstream_series(v) == series)
                else {
                    series_gone.push(pkg.clone());
                    continue;
                };
                let found = archive
                    .lookup(&pkg.name, &replacement)?
                    .context("replacement vanished")?;
                let substitution = Substitution {
                    package: pkg.name.clone(),
                    locked: pkg.version.clone(),
                    used: replacement,
                };
                substitution.warn();
                substitutions.push(substitution);
                packages.push(found);
            }
        }
    }
    if !series_gone.is_empty() {
        let again = moved::resolve_again(archive, name, &locked.roots, release, only)
            .with_context(|| {
                format!(
                    "{} {} (locked in {}) has left the archive with its whole series",
                    series_gone[0].name,
                    series_gone[0].version,
                    lock_path.display()
                )
            })?;
        substitutions = moved::changes(&locked.packages, &again.packages);
        crate::progress::warn(moved::reresolved_warning(
            name,
            &series_gone,
            &substitutions,
            again.fell_back.as_ref(),
        ));
        packages = again.packages;
    }
    let resolved = ResolvedBundle {
        name: name.to_string(),
        packages,
        substitutions,
    };
    let key = locked.memo_key();
    if let Err(e) = archive
        .cache
        .write_memo(crate::cache::RESOLUTIONS_MEMO, &key, &resolved)
    {
        tracing::debug!("not remembering the resolution of {name}: {e:#}");
    }
    Ok(resolved)
}

/// Downloads and unpacks every package of a resolved bundle into `dest`.
pub(crate) fn unpack_bundle(archive: &Archive, bundle: &ResolvedBundle, dest: &Path) -> Result<()> {
    for deb in archive.download_many(&bundle.packages)? {
        extract_deb(&deb, dest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mirror nothing listens on (the discard port of loopback): network steps fail at once.
    const UNREACHABLE_MIRROR: &str = "http://127.0.0.1:9/debian";

    #[test]
    fn a_root_apt_only_matched_as_a_regex_is_an_error() {
        let out = "NOTE: This is only a simulation!\n\
                   Inst linux-source-6.12 (6.12.117-1 Debian:13 [all])\n\
                   Conf linux-source-6.12 (6.12.117-1 Debian:13 [all])\n";
        let roots = ["linux-source-6.1".to_string()];
        let err = simulated_installs(out, &roots, Some("linux-source-6.1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("linux-source-6.1 is not in the archive")
                && err.contains("would install linux-source-6.12"),
            "{err}"
        );
        let roots = ["linux-source-6.12".to_string()];
        assert_eq!(
            simulated_installs(out, &roots, Some("linux-source-6.12")).unwrap(),
            [("linux-source-6.12".to_string(), "6.12.117-1".to_string())]
        );
        let out =
            "Inst fio (3.39-1 Debian:13 [amd64])\nInst libaio1t64 (0.3.113-8 Debian:13 [amd64])\n";
        let installs = simulated_installs(out, &["fio".to_string()], None).unwrap();
        assert_eq!(installs.len(), 2);
    }

    /// An apt state whose lists were fetched `age` ago, from a mirror nothing listens on.
    fn unreachable_archive_state(cache: &Cache, age: Duration) -> PathBuf {
        let mirror = UNREACHABLE_MIRROR.to_string();
        let archive = {
            let key = hash_parts(&[
                ("mirror", mirror.as_bytes()),
                ("suites", SUITES.join(" ").as_bytes()),
            ]);
            cache.dir("apt").join(&key[..16])
        };
        fs::create_dir_all(archive.join("lists")).unwrap();
        let stamp = archive.join("lists/.updated");
        fs::write(&stamp, b"").unwrap();
        fs::File::options()
            .write(true)
            .open(&stamp)
            .unwrap()
            .set_modified(SystemTime::now() - age)
            .unwrap();
        archive
    }

    #[test]
    fn an_open_archive_keeps_others_out_and_sources_are_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path()).unwrap();
        let state = unreachable_archive_state(&cache, Duration::ZERO);
        let mirror = UNREACHABLE_MIRROR.to_string();
        let first =
            Archive::open_at(&cache, mirror.clone(), KEYRING.into(), DEFAULT_ARCHS).unwrap();
        let sources = state.join("etc/sources.list");
        let before = fs::metadata(&sources).unwrap();
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let second = std::thread::spawn({
            let (cache, opened, mirror) = (cache.clone(), opened.clone(), mirror.clone());
            move || {
                let archive =
                    Archive::open_at(&cache, mirror, KEYRING.into(), DEFAULT_ARCHS).unwrap();
                opened.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(archive);
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !opened.load(std::sync::atomic::Ordering::SeqCst),
            "a second open got in while the first was resolving/downloading"
        );
        // A clone (an image build's download step) still holds it.
        let clone = first.clone();
        drop(first);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!opened.load(std::sync::atomic::Ordering::SeqCst));
        drop(clone);
        second.join().unwrap();
        assert!(opened.load(std::sync::atomic::Ordering::SeqCst));
        // Unchanged sources.list: not rewritten (same file, same mtime) while others read it.
        let after = fs::metadata(&sources).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (before.ino(), before.mtime_nsec(), before.mtime()),
            (after.ino(), after.mtime_nsec(), after.mtime())
        );
    }

    #[test]
    fn stale_lists_and_no_network_neither_fail_nor_count_as_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path()).unwrap();
        let state = unreachable_archive_state(&cache, Duration::from_secs(2 * 24 * 3600));
        let stamp = state.join("lists/.updated");
        let old = fs::metadata(&stamp).unwrap().modified().unwrap();
        let start = std::time::Instant::now();
        Archive::open_at(
            &cache,
            UNREACHABLE_MIRROR.into(),
            KEYRING.into(),
            DEFAULT_ARCHS,
        )
        .unwrap();
        let took = start.elapsed();
        assert_eq!(
            fs::metadata(&stamp).unwrap().modified().unwrap(),
            old,
            "a failed update marked the lists fresh"
        );
        // One bounded try, no backoff: the old lists serve the locked versions.
        assert!(took < Duration::from_secs(10), "took {took:?}");
        println!("stale lists, unreachable mirror: open took {took:?}");
    }

    #[test]
    fn needed_network_steps_retry_and_name_every_failure() {
        let mut calls = 0;
        let err = retry(&[Duration::ZERO; 3], "fetching x", || {
            calls += 1;
            bail!("refused {calls}")
        })
        .unwrap_err()
        .to_string();
        assert_eq!(calls, 3);
        assert!(
            err.contains("fetching x failed 3 times")
                && err.contains("try 1: refused 1")
                && err.contains("try 3: refused 3"),
            "{err}"
        );
        let mut calls = 0;
        retry(&[Duration::ZERO; 3], "fetching y", || {
            calls += 1;
            if calls < 2 {
                bail!("flaky")
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 2);
    }

    #[test]
    fn lock_file_writers_never_tear_it_or_share_a_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        let bundle = |i: usize| LockedBundle {
            name: format!("b{i}"),
            roots: vec![format!("root{i}")],
            release: None,
            only: None,
            architectures: Vec::new(),
            packages: (0..200)
                .map(|j| PackageRef {
                    name: format!("p{j}"),
                    version: format!("{i}.{j}"),
                    sha256: "ef".repeat(32),
                })
                .collect(),
        };
        let mut first = LockFile::default();
        first.put(bundle(0));
        first.save(&path).unwrap();
        // Two writers (two processes' `resolve_bundle`) and a reader, all at once.
        let writers: Vec<_> = (1..3)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let mut lock = LockFile::default();
                        lock.put(bundle(i));
                        lock.save(&path).unwrap();
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            let lock = LockFile::load(&path).unwrap();
            assert_eq!(lock.bundles.len(), 1);
            assert_eq!(lock.bundles[0].packages.len(), 200);
        }
        for w in writers {
            w.join().unwrap();
        }
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "lock.toml")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    #[test]
    fn series_drops_epoch_and_revision() {
        assert_eq!(upstream_series("1:11.1.3+ds-1~bpo13+1"), "11.1");
        assert_eq!(upstream_series("6.12.117-1"), "6.12");
        assert_eq!(upstream_series("1:1.37.0-6+b9"), "1.37");
        assert_eq!(upstream_series("2.41-12+deb13u5"), "2.41");
    }

    #[test]
    fn mirror_from_deb822_and_one_line_sources() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
                      Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n";
        assert_eq!(
            mirror_from_sources(deb822).as_deref(),
            Some("http://mirror.example/debian")
        );
        let one_line = "deb [arch=amd64] http://m.example/debian/ trixie main\n";
        assert_eq!(
            mirror_from_sources(one_line).as_deref(),
            Some("http://m.example/debian")
        );
        let other = "deb https://packages.example/apt cloud-sdk main\n";
        assert_eq!(mirror_from_sources(other), None);
    }

    #[test]
    fn an_ubuntu_host_is_named_with_what_the_lab_needs() {
        let noble =
            "Types: deb\nURIs: http://ubuntu-mirror.invalid/ubuntu/\nSuites: noble noble-updates\n\
                     Components: main universe\n";
        let err = mirror_from_texts(&[noble.to_string()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Ubuntu (noble, noble-updates)")
                && err.contains("supports Debian 12 and 13")
                && err.contains("LAB_DEBIAN_MIRROR")
                && err.contains("debian-archive-keyring"),
            "{err}"
        );
        let jammy = "deb http://mirror.example/ubuntu jammy main\n";
        let err = mirror_from_texts(&[jammy.to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("Ubuntu (jammy)"), "{err}");
        let err = mirror_from_texts(&[]).unwrap_err().to_string();
        assert!(err.contains("no apt sources"), "{err}");
        let both = [
            noble.to_string(),
            "deb http://m.example/debian trixie main\n".into(),
        ];
        assert_eq!(mirror_from_texts(&both).unwrap(), "http://m.example/debian");
    }

    #[test]
    fn lock_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        let mut lock = LockFile::default();
        lock.put(LockedBundle {
            name: "qemu".into(),
            roots: vec!["qemu-system-x86".into()],
            release: Some("trixie-backports".into()),
            only: None,
            architectures: vec!["amd64".into(), "arm64".into()],
            packages: vec![PackageRef {
                name: "qemu-system-x86".into(),
                version: "1:11.1.3+ds-1~bpo13+1".into(),
                sha256: "ab".repeat(32),
            }],
        });
        lock.save(&path).unwrap();
        let back = LockFile::load(&path).unwrap();
        assert_eq!(
            back.bundle("qemu").unwrap().packages,
            lock.bundles[0].packages
        );
        assert_eq!(back.bundle("qemu").unwrap().archs(), ["amd64", "arm64"]);
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("architectures = [") && text.contains("\"arm64\""),
            "{text}"
        );
    }

    #[test]
    fn recorded_resolution_follows_the_lock_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path().join("cache")).unwrap();
        let lock_path = dir.path().join("lock.toml");
        let package = |version: &str| PackageRef {
            name: "busybox-static".into(),
            version: version.into(),
            sha256: "cd".repeat(32),
        };
        let mut lock = LockFile::default();
        let bundle = LockedBundle {
            name: "guest-default".into(),
            roots: vec!["busybox-static".into()],
            release: Some("trixie".into()),
            only: None,
            architectures: Vec::new(),
            packages: vec![package("1:1.37.0-6+b9")],
        };
        lock.put(bundle.clone());
        lock.save(&lock_path).unwrap();
        let roots = ["busybox-static"];
        let recorded = |roots: &[&str]| {
            recorded_resolution(&cache, &lock_path, "guest-default", roots, None).unwrap()
        };
        // Never resolved with this cache: nothing recorded.
        assert!(recorded(&roots).is_none());
        // What resolve_bundle records (here with a substitution, which is kept).
        let resolved = ResolvedBundle {
            name: "guest-default".into(),
            packages: vec![package("1:1.37.0-6+b10")],
            substitutions: vec![Substitution {
                package: "busybox-static".into(),
                locked: "1:1.37.0-6+b9".into(),
                used: "1:1.37.0-6+b10".into(),
            }],
        };
        let key = bundle.memo_key();
        cache
            .write_memo(crate::cache::RESOLUTIONS_MEMO, &key, &resolved)
            .unwrap();
        let got = recorded(&roots).unwrap();
        assert_eq!(got.packages, resolved.packages);
        assert_eq!(got.substitutions, resolved.substitutions);
        // Other roots than the lock's: the lock entry will be re-resolved.
        assert!(recorded(&["busybox-static", "fio"]).is_none());
        // `lab lock update` (another locked version): a new resolution is needed.
        lock.put(LockedBundle {
            packages: vec![package("1:1.37.0-7")],
            ..bundle
        });
        lock.save(&lock_path).unwrap();
        assert!(recorded(&roots).is_none());
    }

    #[test]
    fn a_parsed_lock_is_reused_only_while_its_file_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        let bundle = |name: &str| format!("[[bundle]]\nname = \"{name}\"\nroots = []\n");
        let names = |path: &Path| -> Vec<String> {
            let lock = LockFile::load(path).unwrap();
            lock.bundles.into_iter().map(|b| b.name).collect()
        };
        fs::write(&path, bundle("aaaa")).unwrap();
        // Past the racy window its parse is remembered...
        std::thread::sleep(crate::cache::RACY_WINDOW + Duration::from_millis(100));
        assert_eq!(names(&path), ["aaaa"]);
        // ... until the file changes, even in place and to the same size.
        fs::write(&path, bundle("bbbb")).unwrap();
        assert_eq!(names(&path), ["bbbb"]);
        // Replaced by `save` (a new file): read again.
        let mut lock = LockFile::load(&path).unwrap();
        lock.put(LockedBundle {
            name: "cccc".into(),
            roots: Vec::new(),
            release: None,
            only: None,
            architectures: Vec::new(),
            packages: Vec::new(),
        });
        lock.save(&path).unwrap();
        assert_eq!(names(&path), ["bbbb", "cccc"]);
        fs::remove_file(&path).unwrap();
        assert!(names(&path).is_empty(), "no lock file: an empty lock");
    }

    #[test]
    fn lock_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        fs::write(&path, "[[bundle]]\nname = \"x\"\nbogus = 1\n").unwrap();
        let err = LockFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("lock.toml") && err.contains("bogus"), "{err}");
    }

    #[test]
    fn a_lock_update_says_what_changed_or_that_nothing_did() {
        let path = PathBuf::from("images/lock.toml");
        let none = LockUpdate {
            path: path.clone(),
            changes: Vec::new(),
        };
        assert_eq!(none.to_string(), "images/lock.toml: up to date\n");
        let some = LockUpdate {
            path,
            changes: vec!["a: 1 -> 2".into(), "b: 3 -> 4".into()],
        };
        assert_eq!(some.to_string(), "a: 1 -> 2\nb: 3 -> 4\n");
    }
}
