//! Pinned Debian packages: the lab's hermetic inputs (QEMU, guest userspace, kernel sources) come
//! from Debian's archive, resolved through a private apt state in the cache so the host's apt
//! configuration is never changed. The mirror is taken from the host's own apt sources.
//!
//! Exact versions and checksums live in the repo's lock file (`images/lock.toml`). The archive
//! drops superseded versions; when a locked one is gone the lab takes the newest of the same
//! upstream series, says so loudly and records the substitution in every result
//! (`lab lock update` rewrites the lock).
//!
//! Every resolution is remembered in the cache under a key of its lock entry
//! ([`recorded_resolution`]): while the lock entry is unchanged, a caller whose product (an
//! unpacked QEMU, a guest image) is already cached needs neither apt nor the network.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cache::{hash_parts, sha256_file, Cache};

/// Suites the private apt state reads. Bookworm hosts get trixie's kernels and trixie-backports'
/// QEMU (the first with `vfio-user-pci`).
/// Bookworm for its older kernels (`linux-source-6.1`, the last before EEVDF); bundles that
/// name no release get the newest version any suite has, which is trixie's for everything else.
pub const SUITES: &[&str] = &["trixie", "trixie-updates", "trixie-backports", "bookworm"];

/// Lists older than this are refreshed (`LAB_APT_REFRESH=1` forces a refresh).
const LIST_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// A private apt state (lists, downloads) under the cache.
#[derive(Debug, Clone)]
pub struct Archive {
    cache: Cache,
    state: PathBuf,
    mirror: String,
}

/// One binary package as the archive's index describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRef {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

impl Archive {
    /// Opens (and if stale, refreshes) the private apt state for [`SUITES`].
    pub fn open(cache: &Cache) -> Result<Archive> {
        let mirror = host_mirror()?;
        let key = hash_parts(&[
            ("mirror", mirror.as_bytes()),
            ("suites", SUITES.join(" ").as_bytes()),
        ]);
        let state = cache.dir("apt").join(&key[..16]);
        let archive = Archive {
            cache: cache.clone(),
            state,
            mirror,
        };
        let _lock = cache.lock(&format!("apt-{}", &key[..16]))?;
        archive.prepare()?;
        Ok(archive)
    }

    fn prepare(&self) -> Result<()> {
        for sub in ["lists/partial", "archives/partial", "etc"] {
            fs::create_dir_all(self.state.join(sub))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let sources: String = SUITES
            .iter()
            .map(|suite| format!("deb [signed-by={keyring}] {} {suite} main\n", self.mirror))
            .collect();
        fs::write(self.state.join("etc/sources.list"), sources)?;
        let stamp = self.state.join("lists/.updated");
        let fresh = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < LIST_MAX_AGE);
        if !fresh || std::env::var_os("LAB_APT_REFRESH").is_some() {
            tracing::info!("updating the private apt lists for {}", SUITES.join(", "));
            self.apt("apt-get", &["-q", "update"])?;
            fs::write(&stamp, b"")?;
        }
        Ok(())
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
            "APT::Architecture=amd64".into(),
            "APT::Architectures=amd64".into(),
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
    pub fn versions(&self, package: &str) -> Result<Vec<String>> {
        let out = self.apt("apt-cache", &["madison", package])?;
        let mut versions: Vec<String> = out
            .lines()
            .filter_map(|l| l.split('|').nth(1).map(|v| v.trim().to_string()))
            .collect();
        versions.dedup();
        Ok(versions)
    }

    /// The index entry of `package` at `version`, if the archive still serves it.
    pub fn lookup(&self, package: &str, version: &str) -> Result<Option<PackageRef>> {
        let found = self.lookup_many(&[(package.to_string(), version.to_string())])?;
        Ok(found.into_iter().next().flatten())
    }

    /// Looks up many exact versions with one apt-cache call (one call per package costs
    /// seconds for a bundle of ~100 packages). Entries the archive no longer serves are `None`.
    pub fn lookup_many(&self, wanted: &[(String, String)]) -> Result<Vec<Option<PackageRef>>> {
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
                found.insert((n, v), sha);
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
    pub fn resolve_closure(
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
        let wanted = simulated_installs(&out, roots, only)?;
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
    pub fn download(&self, package: &PackageRef) -> Result<PathBuf> {
        Ok(self.download_many(std::slice::from_ref(package))?.remove(0))
    }

    /// Downloads packages (one apt-get call for all that are not already here) and verifies
    /// every checksum.
    pub fn download_many(&self, packages: &[PackageRef]) -> Result<Vec<PathBuf>> {
        let dir = self.state.join("debs");
        fs::create_dir_all(&dir)?;
        let missing: Vec<String> = packages
            .iter()
            .filter(|p| find_deb(&dir, &p.name, &p.version).is_none())
            .map(|p| format!("{}={}", p.name, p.version))
            .collect();
        if !missing.is_empty() {
            let mut args = vec!["-q", "download"];
            args.extend(missing.iter().map(String::as_str));
            self.apt_in("apt-get", &args, Some(&dir))?;
        }
        packages
            .iter()
            .map(|package| {
                let spec = format!("{}={}", package.name, package.version);
                let path = find_deb(&dir, &package.name, &package.version)
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
            })
            .collect()
    }
}

fn find_deb(dir: &Path, name: &str, version: &str) -> Option<PathBuf> {
    // apt writes the epoch's colon as %3a in file names.
    let version = version.replace(':', "%3a");
    let prefix = format!("{name}_{version}_");
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
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
pub fn extract_deb(deb: &Path, dest: &Path) -> Result<()> {
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
pub fn host_mirror() -> Result<String> {
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
    texts.iter().find_map(|t| mirror_from_sources(t)).context(
        "no Debian mirror found in /etc/apt/sources.list{,.d}: set LAB_DEBIAN_MIRROR to the \
             base URL of a Debian archive mirror",
    )
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
pub fn upstream_series(version: &str) -> String {
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

/// The repo's lock file: named bundles of exact package versions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    #[serde(default, rename = "bundle")]
    pub bundles: Vec<LockedBundle>,
}

/// A set of packages resolved together (e.g. QEMU and every library it loads).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedBundle {
    pub name: String,
    /// What was asked for; the rest of `package` is their dependency closure.
    pub roots: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Keep only closure members whose names start with this (e.g. the versioned kernel image a
    /// metapackage points at, without the tools it drags in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    #[serde(default, rename = "package")]
    pub packages: Vec<PackageRef>,
}

/// A locked version that had left the archive and what was taken instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Substitution {
    pub package: String,
    pub locked: String,
    pub used: String,
}

impl Substitution {
    /// Says loudly that a locked version is gone (on every run that uses the substitute).
    pub fn warn(&self) {
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
pub struct ResolvedBundle {
    pub name: String,
    pub packages: Vec<PackageRef>,
    pub substitutions: Vec<Substitution>,
}

impl ResolvedBundle {
    /// Repeats the warning of every substitution (for a run that reuses a recorded resolution).
    pub fn warn_substitutions(&self) {
        for s in &self.substitutions {
            s.warn();
        }
    }
}

impl LockFile {
    /// The lock file of this checkout (`LAB_LOCK_FILE` overrides).
    pub fn default_path() -> PathBuf {
        std::env::var_os("LAB_LOCK_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::repo_path("images/lock.toml"))
    }

    pub fn load(path: &Path) -> Result<LockFile> {
        if !path.exists() {
            return Ok(LockFile::default());
        }
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let header = "# Exact Debian package versions the lab uses. Written by `lab lock update`;\n\
                      # when a version leaves the archive the lab substitutes the newest of the same\n\
                      # upstream series, warns, and records it in each result.\n\n";
        let body = toml::to_string_pretty(self)?;
        let tmp = path.with_extension("toml.tmp");
        fs::write(&tmp, format!("{header}{body}"))?;
        fs::rename(&tmp, path)?;
        Ok(())
    }

    pub fn bundle(&self, name: &str) -> Option<&LockedBundle> {
        self.bundles.iter().find(|b| b.name == name)
    }

    /// Replaces (or adds) a bundle.
    pub fn put(&mut self, bundle: LockedBundle) {
        self.bundles.retain(|b| b.name != bundle.name);
        self.bundles.push(bundle);
        self.bundles.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Cache memo kind of bundle resolutions.
const RESOLVED_MEMO: &str = "resolved-bundles";

/// The memo key of a bundle's resolution: the request and its lock entry, so editing either
/// (or `lab lock update`) leads to a fresh resolution.
fn resolution_key(
    name: &str,
    roots: &[String],
    release: Option<&str>,
    only: Option<&str>,
    locked: &[PackageRef],
) -> String {
    let packages: String = locked
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.version, p.sha256))
        .collect();
    let key = hash_parts(&[
        ("name", name.as_bytes()),
        ("roots", roots.join(" ").as_bytes()),
        ("release", release.unwrap_or("").as_bytes()),
        ("only", only.unwrap_or("").as_bytes()),
        ("locked", packages.as_bytes()),
    ]);
    format!("{}-{}", crate::host::sanitize(name), &key[..16])
}

/// The resolution [`resolve_bundle`] last made for this bundle while its lock entry was what it
/// is now, without opening the archive (no apt call, no network). `None` when the lock lacks the
/// bundle, its entry changed since, or it was never resolved with this cache. The packages it
/// names were checked against the lock and the archive when it was made; a caller that must
/// download them resolves afresh instead, and one that uses it calls
/// [`ResolvedBundle::warn_substitutions`] as [`resolve_bundle`] would have warned.
pub fn recorded_resolution(
    cache: &Cache,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
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
    let key = resolution_key(name, &roots, release, only, &locked.packages);
    Ok(cache.read_memo::<ResolvedBundle>(RESOLVED_MEMO, &key))
}

/// Resolves a bundle (`roots` and their dependency closure, or only the closure's packages
/// whose names start with `only`):
/// the locked versions where the archive still has them, else the newest of
/// the same upstream series (loudly). A bundle missing from the lock is resolved fresh and
/// written to the lock, so a new checkout pins what it first used.
pub fn resolve_bundle(
    archive: &Archive,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
    only: Option<&str>,
) -> Result<ResolvedBundle> {
    let _guard = LOCK_FILE_MUTEX.lock().unwrap_or_else(|p| p.into_inner());
    let mut lock = LockFile::load(lock_path)?;
    let roots_owned: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    let locked = match lock.bundle(name) {
        Some(b) if b.roots == roots_owned && b.only.as_deref() == only => b.clone(),
        _ => {
            let packages = archive.resolve_closure(&roots_owned, release, only)?;
            let bundle = LockedBundle {
                name: name.to_string(),
                roots: roots_owned,
                release: release.map(str::to_string),
                only: only.map(str::to_string),
                packages,
            };
            lock.put(bundle.clone());
            if let Err(e) = lock.save(lock_path) {
                tracing::warn!("could not write {}: {e:#}", lock_path.display());
            }
            bundle
        }
    };
    let mut packages = Vec::new();
    let mut substitutions = Vec::new();
    let wanted: Vec<(String, String)> = locked
        .packages
        .iter()
        .map(|p| (p.name.clone(), p.version.clone()))
        .collect();
    let available = archive.lookup_many(&wanted)?;
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
            None => {
                let series = upstream_series(&pkg.version);
                let replacement = archive
                    .versions(&pkg.name)?
                    .into_iter()
                    .find(|v| upstream_series(v) == series)
                    .with_context(|| {
                        format!(
                            "{} {} (locked in {}) has left the archive and no {} {series}.x \
                             remains: run `lab lock update`",
                            pkg.name,
                            pkg.version,
                            lock_path.display(),
                            pkg.name
                        )
                    })?;
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
    let resolved = ResolvedBundle {
        name: name.to_string(),
        packages,
        substitutions,
    };
    let key = resolution_key(name, &locked.roots, release, only, &locked.packages);
    if let Err(e) = archive.cache.write_memo(RESOLVED_MEMO, &key, &resolved) {
        tracing::debug!("not remembering the resolution of {name}: {e:#}");
    }
    Ok(resolved)
}

/// Re-resolves every bundle in the lock against today's archive.
pub fn update_lock(archive: &Archive, lock_path: &Path) -> Result<Vec<String>> {
    let mut lock = LockFile::load(lock_path)?;
    let mut changes = Vec::new();
    for bundle in lock.bundles.clone() {
        let packages = archive.resolve_closure(
            &bundle.roots,
            bundle.release.as_deref(),
            bundle.only.as_deref(),
        )?;
        let old: BTreeMap<_, _> = bundle
            .packages
            .iter()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect();
        for p in &packages {
            match old.get(&p.name) {
                Some(v) if *v == p.version => {}
                Some(v) => {
                    changes.push(format!("{}: {} {v} -> {}", bundle.name, p.name, p.version))
                }
                None => changes.push(format!("{}: + {} {}", bundle.name, p.name, p.version)),
            }
        }
        lock.put(LockedBundle { packages, ..bundle });
    }
    lock.save(lock_path)?;
    Ok(changes)
}

/// Serializes read-modify-write of the lock file between threads of one process; processes are
/// serialized by the apt state's cache lock held around resolution.
static LOCK_FILE_MUTEX: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Downloads and unpacks every package of a resolved bundle into `dest`.
pub fn unpack_bundle(archive: &Archive, bundle: &ResolvedBundle, dest: &Path) -> Result<()> {
    for deb in archive.download_many(&bundle.packages)? {
        extract_deb(&deb, dest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn lock_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        let mut lock = LockFile::default();
        lock.put(LockedBundle {
            name: "qemu".into(),
            roots: vec!["qemu-system-x86".into()],
            release: Some("trixie-backports".into()),
            only: None,
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
            packages: vec![package("1:1.37.0-6+b9")],
        };
        lock.put(bundle.clone());
        lock.save(&lock_path).unwrap();
        let roots = ["busybox-static"];
        let recorded = |roots: &[&str]| {
            recorded_resolution(
                &cache,
                &lock_path,
                "guest-default",
                roots,
                Some("trixie"),
                None,
            )
            .unwrap()
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
        let key = resolution_key(
            "guest-default",
            &bundle.roots,
            Some("trixie"),
            None,
            &bundle.packages,
        );
        cache.write_memo(RESOLVED_MEMO, &key, &resolved).unwrap();
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
    fn lock_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock.toml");
        fs::write(&path, "[[bundle]]\nname = \"x\"\nbogus = 1\n").unwrap();
        let err = LockFile::load(&path).unwrap_err().to_string();
        assert!(err.contains("lock.toml") && err.contains("bogus"), "{err}");
    }
}
