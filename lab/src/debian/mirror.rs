//! The Debian mirror the lab's private apt state reads: the host's own (its apt sources, one-line
//! or deb822), or `LAB_DEBIAN_MIRROR`; a host without Debian sources gets an error that says
//! what it has and what the lab needs.

use std::fs;

use anyhow::{bail, Result};

use super::{stanza_field, SUITES};

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
pub(super) fn mirror_from_texts(texts: &[String]) -> Result<String> {
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
pub(super) fn mirror_from_sources(text: &str) -> Option<String> {
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
