//! `lab`: a reproducible QEMU/KVM test lab for Linux scheduler, IRQ and NUMA behaviour.
//!
//! The pipeline, one module per noun (see `docs/ARCHITECTURE.md`):
//! topology + kernel + image + devices -> vm (QEMU + QMP) -> guest (agent) -> workload
//! -> observe -> stats -> report. Each step hands a plain value to the next. `experiment` runs
//! that pipeline for any [`experiment::Scenario`] over a list of [`variant::Variant`]s; the
//! shipped scenarios are in `scenarios`.
#![warn(unreachable_pub)]

mod agent;
pub mod bench;
pub mod bisect;
pub mod cache;
pub mod debian;
pub mod devices;
pub mod doctor;
mod error;
pub mod experiment;
pub mod guest;
mod host;
pub mod host_topology;
mod hosts;
pub mod image;
pub mod kernel;
mod names;
pub mod nextest;
pub mod observe;
pub mod prepare;
pub mod process;
pub mod progress;
pub mod report;
pub mod run;
mod sample;
pub mod scenarios;
pub mod skip;
mod slots;
pub mod stats;
mod storage;
mod toolchain;
pub mod topology;
pub mod variant;
pub mod vm;
pub mod workload;

pub use error::Error;
pub use host::{results_root, BootOptions, Lab, DEFAULT_TOPOLOGY};

/// A path inside this checkout (recipes, topologies, lock file). `LAB_REPO_DIR` overrides the
/// checkout the binary was built from, for a `lab` binary copied elsewhere. Under nextest the
/// workspace it names (`NEXTEST_WORKSPACE_ROOT`) wins over the build's: a test run from a
/// `cargo nextest archive` on another machine has it remapped (`--workspace-remap`) to the
/// sources unpacked there, where the build machine's checkout does not exist.
pub fn repo_path(relative: &str) -> std::path::PathBuf {
    repo_root().join(relative)
}

fn repo_root() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("LAB_REPO_DIR").filter(|d| !d.is_empty()) {
        return std::path::PathBuf::from(dir);
    }
    // Only a workspace that is this repository: a program of another workspace run by nextest
    // could use the library too.
    if let Some(dir) = std::env::var_os("NEXTEST_WORKSPACE_ROOT").filter(|d| !d.is_empty()) {
        let dir = std::path::PathBuf::from(dir);
        if dir.join("images/lock.toml").is_file() {
            return dir;
        }
    }
    let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    lab.parent().unwrap_or(lab).to_path_buf()
}

/// Whether this process runs from a `cargo nextest archive` (see `.ci/archive`): the sources it
/// reads were unpacked from the archive, which holds every binary the tests need, so nothing
/// may be built (there may be no cargo, and no target dir of a build).
pub fn from_archive() -> bool {
    repo_path(ARCHIVE_MARKER).is_file()
}

/// The file `.ci/archive` leaves at the root of the sources it puts in the archive.
const ARCHIVE_MARKER: &str = ".lab-archive";
