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
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cache::{hash_parts, sha256_file, Cache, CacheLock};

mod check;
mod lock;
mod mirror;
mod moved;
mod resolve;
mod sandbox;
#[doc(hidden)]
pub mod test_repo;
pub use check::{check_default_lock, LockCheck};
use lock::LOCK_FILE_MUTEX;
pub use lock::{update_default_lock, LockUpdate};
pub(crate) use lock::{LockFile, LockedBundle};
use mirror::host_mirror;
use resolve::resolution_key;
#[cfg(test)]
use resolve::resolve_bundle_as;
pub(crate) use resolve::{
    recorded_resolution, resolve_bundle, unpack_bundle, ResolvedBundle, Substitution,
};
use sandbox::Sandbox;

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
            // As root, apt writes the lists where `_apt` can, and they come into the state
            // once apt has checked their signatures.
            let sandbox = Sandbox::new()?;
            let lists = self.state.join("lists");
            let mut args = vec![
                "-q".to_string(),
                "-o".into(),
                "APT::Update::Error-Mode=any".into(),
                "-o".into(),
                "Acquire::Retries=0".into(),
                "-o".into(),
                "Acquire::http::Timeout=15".into(),
            ];
            if let Some(sandbox) = &sandbox {
                let lists = sandbox.lists(&lists)?;
                args.extend([
                    "-o".into(),
                    format!("Dir::State::Lists={}", lists.display()),
                ]);
            }
            args.push("update".into());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = self.apt("apt-get", &args)?;
            if let Some(line) = out.lines().find(|l| l.starts_with("Err:")) {
                bail!("apt-get update: {}", line.trim());
            }
            if let Some(sandbox) = &sandbox {
                sandbox.keep_lists(&lists)?;
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
            // Downloads run as `_apt` where the lab is root (`sandbox`).
            Sandbox::user_option(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn apt(&self, tool: &str, args: &[&str]) -> Result<String> {
        self.apt_in(tool, args, None)
    }

    fn apt_in(&self, tool: &str, args: &[&str], cwd: Option<&Path>) -> Result<String> {
        let mut cmd = crate::process::command(Path::new(DPKG_TOOLS).join(tool));
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
        let stderr = String::from_utf8_lossy(&out.stderr);
        if let Some(line) = stderr.lines().find(|l| l.contains("performed unsandboxed")) {
            bail!(
                "{tool} {} would have downloaded as root: {line}",
                args.join(" ")
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
        let mut cmd = crate::process::command(Path::new(DPKG_TOOLS).join("apt-cache"));
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

    /// `apt-get ARGS` (a download) leaving its `.deb`s in `dir`: as root through a sandbox's
    /// directory, whose files are copied into `dir` before anything checks them.
    fn download_into(&self, dir: &Path, args: &[&str]) -> Result<()> {
        let Some(sandbox) = Sandbox::new()? else {
            return self.apt_in("apt-get", args, Some(dir)).map(drop);
        };
        let downloads = sandbox.downloads()?;
        self.apt_in("apt-get", args, Some(&downloads))?;
        sandbox.take_debs(dir)
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
            retry(NETWORK_TRIES, &what, || self.download_into(&dir, &args))?;
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
                    self.download_into(&dir, &["-q", "download", &spec])?;
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

/// Where apt and dpkg are run from: the system's, never the first of their names on `PATH`
/// (a directory a user controls, ahead in a root lab's `PATH`, would get to run as root).
const DPKG_TOOLS: &str = "/usr/bin";

/// Unpacks a `.deb`'s data into `dest` (no maintainer scripts run), without its setuid, setgid
/// and world-writable bits (`dpkg-deb -x` keeps them: trixie's `passwd` is setuid root).
pub(crate) fn extract_deb(deb: &Path, dest: &Path) -> Result<()> {
    fs::create_dir_all(dest)?;
    let out = crate::process::output(
        crate::process::command(Path::new(DPKG_TOOLS).join("dpkg-deb"))
            .arg("-x")
            .arg(deb)
            .arg(dest),
    )
    .context("running dpkg-deb")?;
    if !out.status.success() {
        bail!(
            "dpkg-deb -x {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    crate::cache::drop_special_bits(dest)?;
    Ok(())
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

#[cfg(test)]
mod chain_tests;
#[cfg(test)]
mod sandbox_tests;
#[cfg(test)]
mod tests;
