//! `lab`: a reproducible QEMU/KVM test lab for Linux scheduler, IRQ and NUMA behaviour.
//!
//! A [`Lab`] boots guests from recipes: a topology (`topologies/*.toml`), a kernel built from a
//! recipe (`images/kernels/*.toml`), a guest image (`images/guest/*.toml`) and devices. A
//! [`Scenario`](experiment::Scenario) says what one boot measures; an
//! [`Experiment`](experiment::Experiment) boots it for each [`Variant`](variant::Variant) of a
//! comparison, as often as its verdicts need, and gives a [`RunRecord`](report::RunRecord)
//! with its [`Comparison`](report::Comparison): a table, a page, and DIFFERENT, SAME or UNKNOWN
//! per metric. `docs/ARCHITECTURE.md` says how it works inside.
//!
//! # Boot a guest
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let lab = lab::Lab::from_env_async().await?;
//! let vm = lab.boot(lab::BootOptions::named("hello").topology("ci-smt")).await?;
//! println!("{}", vm.sh("uname -r; nproc").await?);
//! vm.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Compare two kernels
//!
//! ```no_run
//! # async fn demo(lab: &lab::Lab) -> anyhow::Result<()> {
//! use lab::experiment::Experiment;
//! use lab::scenarios::file::ScenarioFile;
//! use lab::variant::Variant;
//!
//! // S1 as the lab ships it, `scenarios/dma-wakeup.toml`; a file of your own reads the same way
//! // (`ScenarioFile::read`).
//! let s1 = ScenarioFile::shipped("dma-wakeup")?;
//! let revert = "v6.12+wake-affine-idle-revert";
//! let outcome = Experiment::new(s1)
//!     .variants([Variant::kernel("v6.12"), Variant::kernel(revert)])
//!     .set("placement", "remote-node")
//!     .run(lab)
//!     .await?;
//! print!("{}", outcome.comparison().table());
//! outcome.comparison().assert_different("share_on_irq_cpu", revert)?;
//! # Ok(())
//! # }
//! ```
//!
//! # What is here
//!
//! - Booting: [`Lab`], [`BootOptions`], [`vm::Vm`] and its [`guest`] agent, [`topology`] (machine
//!   shapes, on an [`arch::Arch`]), [`kernel`] (kernels a boot takes, and the `lab kernel` verbs), [`image`].
//! - Devices: [`devices::Device`], the trait a device (the lab's or a test's own) implements,
//!   and [`devices::DeviceSpec`], a device with the CPUs its interrupts are pinned to.
//! - Experiments: [`experiment`] (the runner and the [`Scenario`](experiment::Scenario) trait),
//!   [`variant`], [`scenarios`] (the shipped ones and their parameters), [`workload`] and
//!   [`observe`] (what a scenario runs and measures in a guest).
//! - Results: [`report`] (records, comparisons, tables, pages), [`stats`] (verdicts),
//!   [`bisect`].
//! - The CLI's verbs, one function each: [`run::run`], [`prepare::prepare`],
//!   [`doctor::Doctor::examine`], [`bundle::create`], [`bundle::run`], [`bench`](mod@bench), [`bisect::run`], [`results::stored`],
//!   [`report::merge::merge_and_write`], [`kernel::build_all`], [`kernel::list_table`],
//!   [`kernel::gc_unused`], [`debian::update_default_lock`],
//!   [`devices::passthrough::restore_host`], [`host_topology::write_mirror`],
//!   [`scenarios::list_text`], [`scenarios::compare`], [`nextest::test_suite`].
//! - Test helpers: [`skip`] (KVM-only parts), [`progress`] (the reporter),
//!   [`process::watch_parent`].
//! - Errors: functions return `anyhow` chains; the conditions a caller acts on are [`Error`],
//!   found in a chain with [`Error::find`].
#![warn(unreachable_pub)]
#![deny(missing_docs)]

mod agent;
pub mod arch;
pub mod bench;
pub mod bisect;
mod build_paths;
pub mod bundle;
pub mod cache;
pub mod cli;
mod cross;
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
pub mod results;
pub mod run;
mod sample;
pub mod scenarios;
pub mod skip;
mod slots;
mod storage;
mod toolchain;
pub mod topology;
pub mod variant;
pub mod vm;
pub mod workload;

pub use error::Error;
pub use host::{results_root, BootOptions, Lab, DEFAULT_TOPOLOGY};
/// Verdicts and the numbers behind them: the `lab-stats` crate.
pub use lab_stats as stats;

/// A path inside this checkout (recipes, topologies, lock file). `LAB_REPO_DIR` overrides the
/// checkout the binary was built from, for a `lab` binary copied elsewhere. Under nextest the
/// workspace it names (`NEXTEST_WORKSPACE_ROOT`) wins over the build's: a test run from a
/// `cargo nextest archive` on another machine has it remapped (`--workspace-remap`) to the
/// sources unpacked there, where the build machine's checkout does not exist.
pub fn repo_path(relative: &str) -> std::path::PathBuf {
    repo_root().join(relative)
}

/// `path` as a value in a QEMU option string (`path=...,id=...`): a comma doubled, which is how
/// QEMU's option syntax escapes it. Undoubled, a comma in the temporary directory or the cache
/// path ended the value and QEMU refused the rest as an unknown option.
pub(crate) fn qemu_opt_path(path: &std::path::Path) -> String {
    path.display().to_string().replace(',', ",,")
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
