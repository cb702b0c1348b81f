//! A kernel's boot-time settings in a booted guest: scheduler features and sysctls written (the
//! script is [`crate::kernel::apply_script`]) and read back. [`crate::Lab::boot`] runs it for
//! every boot, so a recipe's or a variant's settings are in effect whoever boots.

use anyhow::{bail, Context, Result};

use crate::guest::Shell;
use crate::kernel::{apply_script, BootSettings};

/// Applies `settings`' scheduler features and sysctls in a booted guest and reads both back
/// (command-line arguments were given at boot).
pub(crate) async fn apply_settings(guest: &impl Shell, settings: &BootSettings) -> Result<()> {
    if settings.sched_features.is_empty() && settings.sysctls.is_empty() {
        return Ok(());
    }
    guest
        .sh(&apply_script(settings)?)
        .await
        .context("applying scheduler features and sysctls")?;
    if !settings.sched_features.is_empty() {
        let text = guest.sh("cat /sys/kernel/debug/sched/features").await?;
        features_in_effect(&settings.sched_features, &text)?;
    }
    for (key, want) in &settings.sysctls {
        let path = key.replace('.', "/");
        let got = guest.sh(&format!("cat /proc/sys/{path}")).await?;
        // Multi-value sysctls read back tab-separated.
        let got: Vec<&str> = got.split_whitespace().collect();
        let want_words: Vec<&str> = want.split_whitespace().collect();
        if got != want_words {
            bail!(
                "sysctl {key} = {want:?} did not take: it reads {:?}",
                got.join(" ")
            );
        }
    }
    Ok(())
}

/// Whether every requested feature is in effect in the contents of
/// `/sys/kernel/debug/sched/features` (`NO_X` means `X` is off).
pub(crate) fn features_in_effect(requested: &[String], features_file: &str) -> Result<()> {
    let current: Vec<&str> = features_file.split_whitespace().collect();
    for f in requested {
        if !current.contains(&f.as_str()) {
            bail!(
                "scheduler feature {f} is not in effect (features: {})",
                current.join(" ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_read_back() {
        let requested = vec!["NO_DELAY_DEQUEUE".to_string()];
        assert!(features_in_effect(&requested, "PLACE_LAG NO_DELAY_DEQUEUE RUN_TO_PARITY").is_ok());
        let err = features_in_effect(&requested, "DELAY_DEQUEUE").unwrap_err();
        assert!(err.to_string().contains("NO_DELAY_DEQUEUE"));
    }
}
