//! `lab`: a reproducible QEMU/KVM test lab for Linux scheduler, IRQ and NUMA behaviour.
//!
//! The pipeline, one module per noun (see `docs/ARCHITECTURE.md`):
//! topology + kernel + image + devices -> vm (QEMU + QMP) -> guest (agent) -> workload
//! -> observe -> stats -> report. Each step hands a plain value to the next. `experiment` runs
//! that pipeline for any [`experiment::Scenario`] over a list of [`variant::Variant`]s; the
//! shipped scenarios are in `scenarios`.

pub mod bench;
pub mod cache;
pub mod debian;
pub mod devices;
pub mod experiment;
pub mod guest;
pub mod host;
pub mod host_topology;
pub mod image;
pub mod kernel;
pub mod observe;
pub mod process;
pub mod progress;
pub mod report;
pub mod scenarios;
pub mod slots;
pub mod stats;
pub mod storage;
pub mod toolchain;
pub mod topology;
pub mod variant;
pub mod vm;
pub mod workload;

pub use host::{BootOptions, Lab};

/// The lab's result type: errors carry context chains (`anyhow`); modules whose errors a caller
/// may match on (topology validation, patch application, ...) define typed errors that convert.
pub type Result<T, E = anyhow::Error> = std::result::Result<T, E>;

/// A path inside this checkout (recipes, topologies, lock file). `LAB_REPO_DIR` overrides the
/// checkout the binary was built from, for a `lab` binary copied elsewhere.
pub fn repo_path(relative: &str) -> std::path::PathBuf {
    let root = std::env::var_os("LAB_REPO_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            lab.parent().unwrap_or(lab).to_path_buf()
        });
    root.join(relative)
}
