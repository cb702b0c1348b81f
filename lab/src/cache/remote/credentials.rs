//! What the lab authenticates with and trusts: the registry password, kept out of every
//! child's environment, and the CA file `LAB_CACHE_CA` names.

use std::path::Path;

use anyhow::{bail, Context, Result};
use oci_client::client::{Certificate, CertificateEncoding};

use super::PASSWORD_ENV;

/// The registry password taken out of the environment by [`keep_password_from_children`].
static PASSWORD: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Moves `LAB_CACHE_PASSWORD` out of this process's environment into memory, so no child
/// (QEMU, `make` running a pulled or bisected tree's Kbuild, apt, git) inherits it; the
/// remote still reads it. The lab binary calls it first thing, before any thread starts
/// (removing a variable races with threads reading the environment), except for `lab test`,
/// whose tests are the lab's own children and may need it.
pub fn keep_password_from_children() {
    let password = std::env::var(PASSWORD_ENV).ok();
    if password.is_some() {
        std::env::remove_var(PASSWORD_ENV);
    }
    let _ = PASSWORD.set(password);
}

/// The password: the one kept in memory, else (a library caller that kept none) the
/// environment's.
pub(super) fn password() -> Option<String> {
    match PASSWORD.get() {
        Some(kept) => kept.clone(),
        None => std::env::var(PASSWORD_ENV).ok(),
    }
}

/// The certificates of PEM file `path` (at least one), for [`CA_ENV`].
pub(super) fn read_certificates(path: &Path) -> Result<Vec<Certificate>> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .map(|c| {
            c.map(|der| Certificate {
                encoding: CertificateEncoding::Der,
                data: der.to_vec(),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}: not a PEM file of certificates", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no PEM certificate in it", path.display());
    }
    Ok(certs)
}
