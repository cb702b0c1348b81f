//! How the remote names things: an entry in messages, its registry tag, and the `oci://` URL of
//! the repository, each checked against the distribution spec's grammar.

use anyhow::{bail, Context, Result};

/// `kernels/f73c8d6731`: how messages name an entry.
pub(crate) fn entry_name(kind: &str, key: &str) -> String {
    format!("{kind}/{}", &key[..key.len().min(10)])
}

/// The tag of an entry: `<kind>-<key>`, checked against the distribution spec's tag grammar
/// (`[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).
pub(crate) fn tag_of(kind: &str, key: &str) -> Result<String> {
    let tag = format!("{kind}-{key}");
    let ok_first = tag
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let ok_rest = tag
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok_first || !ok_rest || tag.len() > 128 {
        bail!("cache entry {kind}/{key} cannot be a registry tag ({tag:?}: at most 128 of A-Z a-z 0-9 . _ -)");
    }
    Ok(tag)
}

/// `oci://HOST[:PORT]/REPO` into (`HOST[:PORT]`, `REPO`).
pub(super) fn parse_url(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("oci://")
        .with_context(|| format!("{url:?} is not oci://HOST[:PORT]/REPO"))?;
    let (registry, repository) = rest
        .split_once('/')
        .with_context(|| format!("{url:?} names no repository (oci://HOST[:PORT]/REPO)"))?;
    if registry.is_empty() {
        bail!("{url:?} names no host (oci://HOST[:PORT]/REPO)");
    }
    if let Some((_, port)) = registry.rsplit_once(':') {
        if !registry.ends_with(']') && port.parse::<u16>().is_err() {
            bail!("{url:?}: port {port:?} is not a number");
        }
    }
    // The distribution spec's repository grammar: lowercase components joined by `/`.
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch))
            && c.chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_alphanumeric())
    };
    if !repository.split('/').all(component_ok) {
        bail!("{url:?}: repository {repository:?} must be lowercase letters, digits, . _ - and /");
    }
    Ok((registry.to_string(), repository.to_string()))
}
