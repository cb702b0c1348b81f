//! When the archive moved under the lock. Debian's archive keeps only current versions, so a
//! locked one leaves with the next upload; a run must not stop for that, nor change silently:
//!
//! - a version whose upstream series is still served is replaced by the newest of that series
//!   (`resolve_bundle`, one warning a package);
//! - one whose whole series left makes the bundle resolve again as `lab lock update` would, a
//!   consistent set against today's archive, said once and loudly, recorded as substitutions
//!   in the resolution and so in every result's manifest;
//! - a bundle of several architectures (amd64 compilers, arm64 libraries at the same version)
//!   whose configured release has them out of step (backports moved one architecture first)
//!   resolves from the release below it, saying which; with none, the error names what each
//!   architecture has;
//! - `LAB_LOCK_STRICT=1` fails instead of replacing anything.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use super::{Archive, PackageRef, Substitution};

/// Whether a replaced version fails the run (`LAB_LOCK_STRICT=1`).
pub(crate) fn strict_from_env() -> bool {
    std::env::var("LAB_LOCK_STRICT").is_ok_and(|v| v == "1")
}

/// A dropped or added package in a [`Substitution`]: the side it is missing from.
pub(crate) const NONE: &str = "-";

/// What resolving a bundle against today's archive gave.
#[derive(Debug, Clone)]
pub(crate) struct InStep {
    pub packages: Vec<PackageRef>,
    /// The release used instead of the configured one, and why.
    pub fell_back: Option<FellBack>,
}

/// A bundle resolved from the release below its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FellBack {
    pub configured: String,
    pub used: String,
    /// apt's words for the configured release.
    pub why: String,
}

impl std::fmt::Display for FellBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "resolved from {}: its architectures are out of step in {} ({})",
            self.used, self.configured, self.why
        )
    }
}

/// The release a bundle of several architectures may fall back to: a backports suite's own
/// release (`trixie-backports` -> `trixie`).
fn release_below(release: &str) -> Option<&str> {
    release.strip_suffix("-backports")
}

impl Archive {
    /// `roots` and their closure from `release`, or, for a bundle of several architectures
    /// that does not resolve there, from the release below it. The error, when neither
    /// resolves, names every version each architecture has of each root.
    pub(crate) fn resolve_in_step(
        &self,
        roots: &[String],
        release: Option<&str>,
        only: Option<&str>,
    ) -> Result<InStep> {
        let first = match self.resolve_closure(roots, release, only) {
            Ok(packages) => {
                return Ok(InStep {
                    packages,
                    fell_back: None,
                })
            }
            Err(e) => e,
        };
        if self.archs.len() < 2 {
            return Err(first);
        }
        let below = release.and_then(release_below);
        if let (Some(configured), Some(below)) = (release, below) {
            if let Ok(packages) = self.resolve_closure(roots, Some(below), only) {
                return Ok(InStep {
                    packages,
                    fell_back: Some(FellBack {
                        configured: configured.to_string(),
                        used: below.to_string(),
                        why: format!("{first:#}"),
                    }),
                });
            }
        }
        let tried = match (release, below) {
            (Some(r), Some(b)) => format!("{r} or {b}"),
            (Some(r), None) => r.to_string(),
            (None, _) => "any release".to_string(),
        };
        let have = self.root_versions(roots)?;
        Err(first.context(format!(
            "{} resolve to no set with one version for every architecture ({}) in {tried}; \
             what each has:\n{have}way out: give the bundle a release where they agree \
             (its `release` in the lock), or wait for the \
             archive to catch up; then `lab lock update`",
            roots.join(" "),
            self.archs.join(", ")
        )))
    }

    /// Every version of each root for each architecture, a line per root and architecture.
    fn root_versions(&self, roots: &[String]) -> Result<String> {
        let mut out = String::new();
        let mut seen = Vec::new();
        for root in roots {
            let base = root.split_once(':').map_or(root.as_str(), |(b, _)| b);
            if seen.contains(&base) {
                continue;
            }
            seen.push(base);
            for arch in &self.archs {
                let spec = if *arch == self.archs[0] {
                    base.to_string()
                } else {
                    format!("{base}:{arch}")
                };
                let text = self.apt("apt-cache", &["madison", &spec])?;
                let versions: Vec<String> = text
                    .lines()
                    .filter_map(|line| {
                        let mut fields = line.split('|').map(str::trim);
                        let version = fields.nth(1)?;
                        let suite = fields.next()?.split_whitespace().nth(1)?;
                        Some(format!("{version} ({})", suite.split('/').next()?))
                    })
                    .collect();
                let listed = if versions.is_empty() {
                    "none".to_string()
                } else {
                    versions.join(", ")
                };
                out += &format!("  {base} {arch}: {listed}\n");
            }
        }
        Ok(out)
    }
}

/// What moved from `old` to `new`, by package: a version changed, a package added (locked
/// [`NONE`]) or dropped (used [`NONE`]).
pub(crate) fn changes(old: &[PackageRef], new: &[PackageRef]) -> Vec<Substitution> {
    let before: BTreeMap<&str, &str> = old
        .iter()
        .map(|p| (p.name.as_str(), p.version.as_str()))
        .collect();
    let after: BTreeMap<&str, &str> = new
        .iter()
        .map(|p| (p.name.as_str(), p.version.as_str()))
        .collect();
    let mut out = Vec::new();
    for (name, v) in &after {
        match before.get(name) {
            Some(old) if old == v => {}
            Some(old) => out.push(Substitution::new(name, old, v)),
            None => out.push(Substitution::new(name, NONE, v)),
        }
    }
    for (name, v) in &before {
        if !after.contains_key(name) {
            out.push(Substitution::new(name, v, NONE));
        }
    }
    out
}

/// `name old -> new`, `+ name v` or `- name v`.
pub(crate) fn change_line(s: &Substitution) -> String {
    match (s.locked.as_str(), s.used.as_str()) {
        (NONE, used) => format!("+ {} {used}", s.package),
        (locked, NONE) => format!("- {} {locked}", s.package),
        (locked, used) => format!("{} {locked} -> {used}", s.package),
    }
}

/// The bundle `name` resolved again because `gone`'s series left the archive: what a run
/// says, once, when it resolves it.
pub(crate) fn reresolved_warning(
    name: &str,
    gone: &[PackageRef],
    moved: &[Substitution],
    fell_back: Option<&FellBack>,
) -> String {
    let gone: Vec<String> = gone
        .iter()
        .map(|p| {
            format!(
                "{} {} (no {}.x left)",
                p.name,
                p.version,
                super::upstream_series(&p.version)
            )
        })
        .collect();
    let shown: Vec<String> = moved.iter().take(8).map(change_line).collect();
    let more = moved.len().saturating_sub(shown.len());
    format!(
        "LOCKED BUNDLE RESOLVED AGAIN: {name}: {} left the archive, so the whole bundle was \
         resolved against today's archive{}: {} package(s) moved: {}{}. Results record this. \
         Run `lab lock update {name}` to pin it (LAB_LOCK_STRICT=1 fails instead).",
        gone.join(", "),
        fell_back.map(|f| format!(" ({f})")).unwrap_or_default(),
        moved.len(),
        shown.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )
}

/// The error of a strict run (`LAB_LOCK_STRICT=1`) that meets `package` `locked` gone, with
/// what the archive has of it.
pub(crate) fn strict_error(
    lock_path: &std::path::Path,
    package: &str,
    locked: &str,
    archive: &Archive,
) -> anyhow::Error {
    let now = archive
        .versions(package)
        .map(|v| v.join(", "))
        .unwrap_or_else(|e| format!("unknown: {e:#}"));
    anyhow::anyhow!(
        "{package} {locked} (locked in {}) has left the archive, which has {now}; \
         LAB_LOCK_STRICT=1 takes nothing else: run `lab lock update`",
        lock_path.display()
    )
}

/// [`Archive::resolve_in_step`] with what was being resolved named in its error.
pub(crate) fn resolve_again(
    archive: &Archive,
    name: &str,
    roots: &[String],
    release: Option<&str>,
    only: Option<&str>,
) -> Result<InStep> {
    archive
        .resolve_in_step(roots, release, only)
        .with_context(|| format!("resolving bundle {name} against today's archive"))
}

#[cfg(test)]
mod tests;
