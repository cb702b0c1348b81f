//! A real, signed Debian repository built in a test: small `.deb`s made with `dpkg-deb`, one
//! `Packages` index per suite and architecture, a `Release` signed with a key made for the
//! test, served as a `file:` mirror. The lab's apt state reads it as it reads Debian's archive,
//! so the tests of what happens when the archive moves run real apt, not a stand-in. Test
//! support, not the lab: the provisioning tests (`tests/provisioning.rs`) serve one over HTTP.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::SUITES;
use crate::cache::sha256_file;

/// One binary package of the test repository.
pub struct TestDeb {
    pub name: &'static str,
    pub version: &'static str,
    pub arch: &'static str,
    /// The suite that serves it (one of [`SUITES`]).
    pub suite: &'static str,
    /// `Depends:`, when any.
    pub depends: &'static str,
    /// `Multi-Arch: same`: installed for several architectures only at one version.
    pub same: bool,
    /// A `.deb` built by the test itself, taken as it is (`None`: one is made, holding a file
    /// that names it).
    pub built: Option<PathBuf>,
}

impl TestDeb {
    /// `name` `version` for amd64 in trixie, nothing depended on.
    pub fn new(name: &'static str, version: &'static str) -> TestDeb {
        TestDeb {
            name,
            version,
            arch: "amd64",
            suite: "trixie",
            depends: "",
            same: false,
            built: None,
        }
    }
}

/// The repository: its `file:` URL, its directory (to serve another way) and the keyring that
/// verifies it.
pub struct TestRepo {
    pub mirror: String,
    pub root: PathBuf,
    pub keyring: PathBuf,
    gnupg: PathBuf,
}

/// Why a test of the repository cannot run here: a tool it needs is missing.
pub fn missing_tool() -> Option<&'static str> {
    ["dpkg-deb", "gpg", "gpgconf", "apt-get"]
        .into_iter()
        .find(|tool| {
            !std::env::var_os("PATH").is_some_and(|path| {
                std::env::split_paths(&path).any(|dir| dir.join(tool).is_file())
            })
        })
}

/// Whether the repository's tools are here; otherwise a visible skip of `part` naming the
/// missing one.
#[cfg(test)]
pub(crate) fn tools_here(part: &str) -> bool {
    match missing_tool() {
        None => true,
        Some(tool) => {
            crate::skip::host_lacks(
                part,
                &format!("no `{tool}` to build and read it"),
                "Install dpkg, gpg and apt (`apt-get install dpkg gpg apt`).",
            );
            false
        }
    }
}

impl TestRepo {
    /// Builds the repository under `work` with `debs`, every suite the lab reads present for
    /// `archs` (empty where it serves nothing).
    pub fn build(work: &Path, archs: &[&str], debs: &[TestDeb]) -> TestRepo {
        let root = work.join("repo");
        let mut indexes: Vec<(&str, &str, String)> = Vec::new();
        for suite in SUITES {
            for arch in archs {
                indexes.push((suite, arch, String::new()));
            }
        }
        for deb in debs {
            let upstream = deb.version.split_once(':').map_or(deb.version, |(_, v)| v);
            let file = format!("pool/main/{}_{upstream}_{}.deb", deb.name, deb.arch);
            let path = root.join(&file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            match &deb.built {
                Some(built) => {
                    fs::copy(built, &path).unwrap();
                }
                None => build_deb(work, deb, &path),
            }
            let mut stanza = format!(
                "Package: {}\nVersion: {}\nArchitecture: {}\n",
                deb.name, deb.version, deb.arch
            );
            if deb.same {
                stanza += "Multi-Arch: same\n";
            }
            if !deb.depends.is_empty() {
                let _ = writeln!(stanza, "Depends: {}", deb.depends);
            }
            let _ = write!(
                stanza,
                "Maintainer: lab <repo@lab.invalid>\nInstalled-Size: 1\nFilename: {file}\n\
                 Size: {}\nSHA256: {}\nDescription: a test package of the lab\n\n",
                fs::metadata(&path).unwrap().len(),
                sha256_file(&path).unwrap()
            );
            let index = indexes
                .iter_mut()
                .find(|(s, a, _)| *s == deb.suite && *a == deb.arch)
                .unwrap_or_else(|| {
                    panic!("{} {}: no such suite or architecture", deb.suite, deb.arch)
                });
            index.2 += &stanza;
        }

        // gpg's agent socket lives in its home directory: keep the path short.
        let gnupg = tempfile::Builder::new()
            .prefix("lab-gpg")
            .tempdir_in("/tmp")
            .unwrap()
            .keep();
        let gpg = |args: &[&str]| {
            let out = Command::new("gpg")
                .arg("--homedir")
                .arg(&gnupg)
                .args(["--batch", "--yes", "--pinentry-mode", "loopback"])
                .args(["--passphrase", ""])
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "gpg {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        gpg(&[
            "--quick-gen-key",
            "lab test repo <repo@lab.invalid>",
            "ed25519",
            "sign",
            "never",
        ]);
        let keyring = work.join("repo-keyring.gpg");
        fs::write(&keyring, gpg(&["--export"])).unwrap();

        for suite in SUITES {
            let dist = root.join("dists").join(suite);
            let mut sums = String::new();
            for (_, arch, text) in indexes.iter().filter(|(s, _, _)| s == suite) {
                let rel = format!("main/binary-{arch}/Packages");
                let index = dist.join(&rel);
                fs::create_dir_all(index.parent().unwrap()).unwrap();
                fs::write(&index, text).unwrap();
                let _ = writeln!(
                    sums,
                    " {} {} {rel}",
                    sha256_file(&index).unwrap(),
                    text.len()
                );
            }
            let release = format!(
                "Origin: lab-test\nLabel: lab-test\nSuite: {suite}\nCodename: {suite}\n\
                 Date: Sat, 05 Dec 2026 00:00:00 UTC\nArchitectures: {}\nComponents: main\n\
                 Description: the lab's test repository\nSHA256:\n{sums}",
                archs.join(" ")
            );
            let path = dist.join("Release");
            fs::write(&path, release).unwrap();
            let signed = gpg(&["--clearsign", "--output", "-", path.to_str().unwrap()]);
            fs::write(dist.join("InRelease"), signed).unwrap();
        }
        TestRepo {
            mirror: format!("file:{}", root.display()),
            root,
            keyring,
            gnupg,
        }
    }
}

impl Drop for TestRepo {
    fn drop(&mut self) {
        // gpg started an agent for the key: it goes with the home directory.
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(&self.gnupg)
            .args(["--kill", "all"])
            .status();
        let _ = fs::remove_dir_all(&self.gnupg);
    }
}

/// `deb` as a `.deb` at `out`: its control file and one file naming it.
fn build_deb(work: &Path, deb: &TestDeb, out: &Path) {
    let dir = work.join(format!("build-{}-{}-{}", deb.name, deb.version, deb.arch));
    fs::create_dir_all(dir.join("DEBIAN")).unwrap();
    let mut control = format!(
        "Package: {}\nVersion: {}\nArchitecture: {}\nMaintainer: lab <repo@lab.invalid>\n\
         Description: a test package of the lab\n",
        deb.name, deb.version, deb.arch
    );
    if deb.same {
        control += "Multi-Arch: same\n";
    }
    if !deb.depends.is_empty() {
        let _ = writeln!(control, "Depends: {}", deb.depends);
    }
    fs::write(dir.join("DEBIAN/control"), control).unwrap();
    let share = dir.join(format!("usr/share/lab-test/{}", deb.arch));
    fs::create_dir_all(&share).unwrap();
    fs::write(share.join(deb.name), deb.version).unwrap();
    let built = Command::new("dpkg-deb")
        .args(["-Zgzip", "--root-owner-group", "--build"])
        .arg(&dir)
        .arg(out)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "dpkg-deb: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}
