//! Names that become file and directory names (comparisons, VMs, boots): checked or made safe
//! in one place, below every module that writes files.

use anyhow::Result;

/// Checks a name that becomes a directory under `results/` (a comparison's name).
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c));
    if !ok {
        anyhow::bail!(
            "{what} {name:?}: use 1-100 characters from [A-Za-z0-9._+-], not starting with '.'"
        );
    }
    Ok(())
}

/// File-name-safe form of a run or VM name.
pub(crate) fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}
