//! The `lab` command line's arguments (clap); `main.rs` runs them through the library and
//! prints what comes back.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lab",
    version,
    about = "Reproducible QEMU/KVM lab for scheduler, IRQ and NUMA behaviour"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Cmd,
}

#[derive(Subcommand)]
pub(super) enum Cmd {
    /// Show what this host offers: QEMU, accelerator, cache, kernels, topologies.
    Doctor,
    /// Provision everything tests and `compare` need (QEMU, the default kernels and guest image)
    /// up front, with progress; later runs find it all in the cache.
    Prepare {
        /// Kernel recipes to build (default: every kernel of the shipped scenarios' default
        /// comparisons, `lab scenarios`).
        #[arg(long, num_args = 1..)]
        kernels: Vec<String>,
        /// Kernel recipes to build besides those (the test suite's setup adds the ptdma fix its
        /// device tests boot).
        #[arg(long, num_args = 1..)]
        also: Vec<String>,
        /// Guest images to build beside the default one, for the first kernel of each architecture (the scenario
        /// tests' `sched` and `storage`): built here once, not inside two tests at the same
        /// time.
        #[arg(long, default_values = ["sched", "storage"])]
        images: Vec<String>,
    },
    /// Inspect the declared machine shapes.
    Topology {
        #[command(subcommand)]
        command: TopologyCmd,
    },
    /// Boot a guest, run one command in it, print its output and exit with its status.
    Run {
        /// A topology file's name (topologies/NAME.toml).
        #[arg(long, default_value = crate::DEFAULT_TOPOLOGY, conflicts_with = "cpus")]
        topology: String,
        /// A plain shape without a topology file: N vCPUs (with --memory, and --nodes to split
        /// them into NUMA nodes).
        #[arg(long, value_name = "N", requires = "memory")]
        cpus: Option<u32>,
        /// The quick shape's memory, e.g. `1G` (split evenly over its nodes).
        #[arg(long, value_name = "SIZE", requires = "cpus")]
        memory: Option<String>,
        /// The quick shape's NUMA nodes (default 1).
        #[arg(long, value_name = "K", requires = "cpus", default_value_t = 1)]
        nodes: u32,
        /// Kernel recipe name (images/kernels/NAME.toml) or `debian` for Debian's prebuilt kernel.
        #[arg(long)]
        kernel: Option<String>,
        /// Extra kernel command-line argument (repeatable).
        #[arg(long = "cmdline")]
        cmdline: Vec<String>,
        /// Guest image recipe (images/guest/NAME.toml), e.g. `storage` for fio, mkfs.ext4 and
        /// dmsetup.
        #[arg(long)]
        image: Option<String>,
        /// A device for the guest (repeatable), in slot order: `nvme:queues=4,size=1G`,
        /// `ioat:channels=2`, `ptdma`, `nic`, `passthrough:NAME` (a host file's device);
        /// `irqV=CPULIST` pins vector V.
        #[arg(long = "device")]
        devices: Vec<crate::devices::DeviceSpec>,
        /// The host file for `passthrough:NAME` devices: hosts/NAME.toml or a path (default:
        /// LAB_HOST, else hosts/<hostname>.toml).
        #[arg(long)]
        host: Option<String>,
        /// Seconds the command may run.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Write the run's phases (start-up, boot, command, shutdown; seconds) as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        timings: Option<PathBuf>,
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// The lab's speed, measured side by side. Without a subcommand: every row of the speed
    /// targets (`run`, `kernel` and `suite` together).
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        command: Option<BenchCmd>,
        /// Runs of each side of `lab run -- true` vs the hand-written QEMU line.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value = crate::DEFAULT_TOPOLOGY)]
        topology: String,
        /// Build the default kernel and the one-patch variant now, into a temporary cache
        /// (takes minutes: about ten on two cores), instead of reading the cache's manifests.
        #[arg(long)]
        cold: bool,
    },
    /// The shipped scenarios with their default variants, parameters and metrics.
    Scenarios {
        /// Show this scenario file's instead (checked as `lab compare` checks it).
        #[arg(long = "scenario", value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
    /// Run a scenario's variants side by side (interleaved boots, one boot per sample) and print
    /// an LKP-style table. Without arguments: seed S1, v6.12 vs the wake_affine_idle revert.
    Compare {
        /// A shipped scenario (`lab scenarios`).
        #[arg(default_value = "dma-wakeup")]
        scenario: String,
        /// Run the scenario this file declares instead (docs/SCENARIO-FILES.md; examples in
        /// `scenarios/`).
        #[arg(long = "scenario", value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        /// A column, base first; two or more replace the scenario's defaults. Written
        /// `[NAME=]KERNEL[@feature=F][@cmdline=ARG][@sysctl=KEY=VALUE][@set=PARAM=VALUE]...`,
        /// e.g. `v6.12@feature=NO_RUN_TO_PARITY`.
        #[arg(long = "variant", value_name = "VARIANT")]
        variants: Vec<crate::variant::Variant>,
        /// A scenario parameter for every variant, e.g. `placement=remote-node`,
        /// `engine=ptdma`, `dmatest.polled=true` (a variant's own `@set=` wins).
        #[arg(long = "set", value_name = "PARAM=VALUE", value_parser = parse_set)]
        set: Vec<(String, String)>,
        /// Exactly N boots per variant (one boot is one sample; SAME needs 9 or more, 19 or 39
        /// on a share decided within 10 or 5 points). Without
        /// it the run starts with 5 per variant and adds boots while a primary verdict is
        /// UNKNOWN.
        #[arg(long, value_name = "N", conflicts_with = "max_repetitions")]
        repetitions: Option<usize>,
        /// The most boots per variant an adaptive run may take (default 10, or the 19 or 39
        /// SAME needs on a share decided within 10 or 5 points).
        #[arg(long, value_name = "N")]
        max_repetitions: Option<usize>,
        /// Decide the comparison on METRIC instead of the scenario's primary metric, with the
        /// smallest change that matters in its unit (`=20`) or relative to the base (`=50%`);
        /// repeat for several.
        #[arg(long = "primary", value_name = "METRIC[=MAGNITUDE]", value_parser = parse_primary)]
        primaries: Vec<(String, Option<crate::stats::Magnitude>)>,
        /// The boot order's seed (recorded in every run; the same seed gives the same order).
        #[arg(long)]
        seed: Option<u64>,
        /// Exit 0 when every primary verdict is SAME, 1 when one is DIFFERENT, and 125 when one
        /// is UNKNOWN or the run failed (a kernel that does not build or boot): `git bisect
        /// run`'s codes, with the base as good.
        #[arg(long)]
        exit_code: bool,
        /// Topology (default: the scenario's).
        #[arg(long)]
        topology: Option<String>,
        /// The comparison's name: results go to results/NAME/ (default: the scenario's name).
        #[arg(long)]
        name: Option<String>,
        /// Replaces the scenario's devices in order (the first --device its device 0, ...)
        /// with one of the same role, its IRQ masks kept: `passthrough:NAME` runs the scenario
        /// on the host file's device instead of the emulated one.
        #[arg(long = "device", value_name = "SPEC")]
        devices: Vec<crate::devices::DeviceSpec>,
        /// The host file for `passthrough:NAME` devices: hosts/NAME.toml or a path (default:
        /// LAB_HOST, else hosts/<hostname>.toml).
        #[arg(long)]
        host: Option<String>,
    },
    /// Find the change between a good and a bad kernel that moves a scenario's primary metric:
    /// the endpoints must be DIFFERENT; each probe boots interleaved with both and is classified
    /// by its verdicts against them; the culprit is verified against its parent with more boots.
    /// Prints the bisect log; the record and page go to results/bisect-NAME/.
    Bisect(BisectArgs),
    /// The host devices the lab may pass through to guests (hosts/NAME.toml).
    Host {
        #[command(subcommand)]
        command: HostCmd,
    },
    /// Print the stored comparison tables (under results/, or the RESULTS given); with
    /// `--html`, write each record's page next to it (record.json -> record.html).
    #[command(args_conflicts_with_subcommands = true)]
    Report {
        #[command(subcommand)]
        command: Option<ReportCmd>,
        /// Write a self-contained HTML page per record and print its path.
        #[arg(long)]
        html: bool,
        /// Record files or directories to search for them (default: results/).
        #[arg(value_name = "RESULTS")]
        results: Vec<PathBuf>,
    },
    /// Kernel recipes and their cached builds.
    Kernel {
        #[command(subcommand)]
        command: KernelCmd,
    },
    /// The cache and its remote registry (`LAB_CACHE_REMOTE=oci://HOST[:PORT]/REPO`).
    Cache {
        #[command(subcommand)]
        command: CacheCmd,
    },
    /// The lab's own test suite: `cargo nextest run --workspace ARGS` in this checkout, with
    /// cargo-nextest installed first where it is missing (the version `.config/nextest.toml`
    /// names), then the tests that skipped a part marked skipped in the run's JUnit report.
    /// Exits with nextest's status.
    Test {
        /// The quick tier (nextest's `quick` profile): every unit test and the VM tests of the
        /// machine itself on the base kernel, no scenario decision, no bisect; a few minutes.
        #[arg(long)]
        quick: bool,
        /// Passed to `cargo nextest run --workspace`, e.g. `--profile ci`, `-E 'binary(vm)'`.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "NEXTEST_ARGS"
        )]
        args: Vec<String>,
    },
    /// An offline bundle: one file (an OCI image layout) with the lab, QEMU, the kernels and
    /// images of a comparison, its recipes and topologies, for a host without network or cargo.
    Bundle {
        #[command(subcommand)]
        command: BundleCmd,
    },
    /// The lock file of pinned Debian packages.
    Lock {
        #[command(subcommand)]
        command: LockCmd,
    },
}

#[derive(Subcommand)]
pub(super) enum BundleCmd {
    /// Write a bundle of a scenario's comparison (its kernels and images found or built, as
    /// `lab compare` would) and print its size by part.
    Create {
        /// A shipped scenario (`lab scenarios`), or a scenario file (a path ending in `.toml`,
        /// carried in the bundle as `scenarios/NAME.toml`).
        #[arg(long, default_value = "dma-wakeup", value_name = "NAME|FILE")]
        scenario: String,
        /// A variant, base first (as `lab compare` takes them; none: the scenario's).
        #[arg(long = "variant", value_name = "VARIANT")]
        variants: Vec<crate::variant::Variant>,
        /// A scenario parameter for every variant (one that picks another guest image, say).
        #[arg(long = "set", value_name = "PARAM=VALUE", value_parser = parse_set)]
        set: Vec<(String, String)>,
        /// Topology (default: the scenario's).
        #[arg(long)]
        topology: Option<String>,
        /// The bundle file to write.
        #[arg(short = 'o', long)]
        output: PathBuf,
    },
    /// Unpack a bundle (every file checked) and run its lab on its own cache, recipes and
    /// topologies: `lab bundle run s1.bundle -- compare --repetitions 1`. Exits as that lab does.
    Run {
        /// The bundle file.
        file: PathBuf,
        /// Unpack here and keep it (a new or empty directory; default: a temporary one).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The bundled lab's arguments, after `--`.
        #[arg(last = true, required = true, value_name = "LAB_ARGS")]
        args: Vec<std::ffi::OsString>,
    },
}

impl From<BundleCmd> for crate::bundle::Command {
    fn from(command: BundleCmd) -> Self {
        match command {
            BundleCmd::Create {
                scenario,
                variants,
                set,
                topology,
                output,
            } => crate::bundle::Command::Create(crate::bundle::CreateRequest {
                scenario,
                variants,
                set: set.into_iter().collect(),
                topology,
                output,
            }),
            BundleCmd::Run { file, dir, args } => {
                crate::bundle::Command::Run(crate::bundle::RunRequest { file, dir, args })
            }
        }
    }
}

#[derive(Subcommand)]
pub(super) enum HostCmd {
    /// Give host devices a killed lab left on vfio-pci back to their drivers (its journals in
    /// the cache); devices a running lab holds are left alone. Idempotent.
    Restore,
    /// The host file's devices and their state here: ID, driver, IOMMU group, what uses them.
    Show {
        /// hosts/NAME.toml or a path (default: LAB_HOST, else hosts/<hostname>.toml).
        #[arg(long)]
        host: Option<String>,
    },
}

#[derive(Subcommand)]
pub(super) enum TopologyCmd {
    /// List the shipped topologies.
    List,
    /// Show one topology as a table, with the QEMU mapping used.
    Show { name: String },
    /// Write a topology mirroring this host (nodes, LLCs, SMT, distances), every vCPU pinned to
    /// the host CPU it mirrors and node memory bound to its host node.
    FromHost(FromHostArgs),
}

#[derive(clap::Args)]
pub(super) struct FromHostArgs {
    /// The directory read as /sys (a model or captured tree, e.g. lab/tests/fixtures/hosts/NAME).
    #[arg(long, default_value = "/sys")]
    pub(super) sysfs: PathBuf,
    /// At most this many vCPUs: the first cores of every LLC are dropped (and left to QEMU's
    /// other threads and the device models) until it fits.
    #[arg(long)]
    pub(super) max_cpus: Option<u32>,
    /// The topology's name (default: the output file's name, else `host`).
    #[arg(long)]
    pub(super) name: Option<String>,
    /// Memory per NUMA node (bytes or K/M/G/T).
    #[arg(long, default_value = "2G")]
    pub(super) memory: String,
    /// Back guest memory with host hugepages of this size (`2M` or `1G`; reserved on the
    /// host beforehand, checked before each boot).
    #[arg(long, value_name = "SIZE")]
    pub(super) hugepages: Option<String>,
    /// QEMU -cpu model (default by vendor: Skylake-Server-v4, EPYC-v4, else qemu64; `host`
    /// boots only under KVM).
    #[arg(long)]
    pub(super) cpu_model: Option<String>,
    /// Write the file here (refused if it exists, unless --force); default: standard output.
    #[arg(short = 'o', long)]
    pub(super) output: Option<PathBuf>,
    #[arg(long)]
    pub(super) force: bool,
}

impl From<FromHostArgs> for crate::host_topology::FromHost {
    fn from(a: FromHostArgs) -> Self {
        crate::host_topology::FromHost {
            sysfs: a.sysfs,
            max_cpus: a.max_cpus,
            name: a.name,
            memory: a.memory,
            hugepages: a.hugepages,
            cpu_model: a.cpu_model,
            output: a.output,
            force: a.force,
        }
    }
}

/// `lab bench boot`'s arguments.
#[derive(clap::Args)]
pub(super) struct BootBenchArgs {
    #[arg(long, default_value_t = 5)]
    pub(super) runs: usize,
    #[arg(long, default_value = crate::DEFAULT_TOPOLOGY)]
    pub(super) topology: String,
    /// Also boot the lab on this topology in every run, and print the ratio of the two
    /// (`--topology ci-arm64-2node --against ci-2node-4llc`: arm64 against x86 guests).
    #[arg(long)]
    pub(super) against: Option<String>,
}

/// `lab bench run`'s arguments.
#[derive(clap::Args)]
pub(super) struct RunBenchArgs {
    #[arg(long, default_value_t = 5)]
    pub(super) runs: usize,
    #[arg(long, default_value = crate::DEFAULT_TOPOLOGY)]
    pub(super) topology: String,
    /// The kernel both sides boot: a recipe or `debian` (default: the lab's default kernel).
    #[arg(long)]
    pub(super) kernel: Option<String>,
}

impl RunBenchArgs {
    /// Runs the bench with the `lab` binary `exe`; its table.
    pub(super) async fn report(&self, exe: &std::path::Path) -> anyhow::Result<String> {
        let kernel = self.kernel.as_deref();
        let report = crate::bench::run_report(exe, self.runs, &self.topology, kernel).await?;
        Ok(report.render())
    }
}

#[derive(Subcommand)]
pub(super) enum BenchCmd {
    /// Boot-to-first-command time of the lab vs a hand-written QEMU command line.
    Boot(BootBenchArgs),
    /// `lab run -- true` as a whole process vs a hand-written QEMU line that boots the same
    /// kernel and initramfs, runs `true` and powers off; the lab's overhead and its phases.
    Run(RunBenchArgs),
    /// Kernel build times: the default kernel cold and a one-patch variant from its tree.
    Kernel {
        /// Build both now, into a temporary cache (minutes), instead of reading manifests.
        #[arg(long)]
        cold: bool,
        #[arg(long, default_value = crate::kernel::DEFAULT_RECIPE)]
        base: String,
        #[arg(long, default_value = crate::bench::kernel::DEFAULT_VARIANT)]
        variant: String,
    },
    /// The last nextest run's wall time, per-binary sums and slowest tests (its JUnit report).
    Suite {
        /// The nextest profile (default: every profile with a report).
        #[arg(long)]
        profile: Option<String>,
        /// How many of the slowest tests to list.
        #[arg(long, default_value_t = crate::bench::suite::SLOWEST)]
        slowest: usize,
        /// Also hold the run to this tier's budget: its phases, the share of CI's limit, tests
        /// over 5 minutes (`.ci/run` prints it for `ci`; `quick` reads `lab test --quick`'s run).
        #[arg(long, value_enum)]
        tier: Option<crate::bench::budget::Tier>,
        /// When the whole job started (Unix seconds; default: the nextest run's start), so the
        /// phase before nextest (cargo, apt) is counted.
        #[arg(long, value_name = "UNIX_SECONDS")]
        started: Option<f64>,
    },
    /// How often the verdicts err: simulated comparisons of every shape, true change and
    /// variant count, decided by the lab's own code (a few minutes on two cores).
    Verdicts {
        /// Simulated comparisons per cell.
        #[arg(long, default_value_t = crate::bench::verdicts::RUNS)]
        runs: usize,
        /// The simulation's seed (the same seed, the same table).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// How often the bisect names the right changes: simulated bisects of six series (S1's
    /// shape, two culprits, a sub-magnitude neighbour, an opposite change, a point that does not
    /// boot, a change that stops booting), the lab's own search and step schedules.
    Bisect {
        /// Simulated bisects per series.
        #[arg(long, default_value_t = crate::bench::bisect::RUNS)]
        runs: usize,
        /// The simulation's seed (the same seed, the same table).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// How often a scenario's verdicts come out as they did, at a schedule: runs drawn again
    /// from its recorded boots (with replacement, one record a run), decided stage by stage by
    /// the lab's own code. Which cap a test needs, from boots the scenario really gave.
    Resample {
        /// Records, or directories searched for `record.json` (one comparison).
        #[arg(required = true, value_name = "RECORD")]
        records: Vec<PathBuf>,
        /// Boots per variant of the first stage (default: the first record's schedule's).
        #[arg(long)]
        initial: Option<usize>,
        /// The most boots per variant (default: the first record's schedule's, as its run
        /// followed it).
        #[arg(long)]
        cap: Option<usize>,
        /// Simulated runs.
        #[arg(long, default_value_t = crate::bench::resample::RUNS)]
        runs: usize,
        /// The draws' seed (the same seed, the same table).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// CI shards of about equal time from earlier runs' JUnit reports: prints the plan and
    /// writes one nextest filterset per shard (`cargo nextest run -E "$(cat shard-1.filterset)"`)
    Shards {
        /// How many shards.
        #[arg(long)]
        shards: usize,
        /// JUnit reports to take test times from, e.g. every shard's of the last CI run
        /// (default: the last local run's, `lab bench suite`'s).
        #[arg(long, value_name = "FILE")]
        junit: Vec<PathBuf>,
        /// The suite's test binaries, one per line (`cargo nextest list --list-type
        /// binaries-only --message-format oneline`): binaries the reports name but the suite no
        /// longer has are left out (nextest refuses a filterset naming one).
        #[arg(long, value_name = "FILE")]
        binaries: Option<PathBuf>,
        /// Write `shard-K.filterset` (K from 1) here.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// `METRIC[=MAGNITUDE]` of `--primary`.
fn parse_primary(text: &str) -> Result<(String, Option<crate::stats::Magnitude>), String> {
    match text.split_once('=') {
        None if !text.is_empty() => Ok((text.to_string(), None)),
        Some((metric, magnitude)) if !metric.is_empty() => {
            Ok((metric.to_string(), Some(magnitude.parse()?)))
        }
        _ => Err(format!("{text:?}: write METRIC or METRIC=MAGNITUDE")),
    }
}

/// `PARAM=VALUE` of `--set`.
fn parse_set(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?}: write PARAM=VALUE")),
    }
}
#[derive(Subcommand)]
pub(super) enum ReportCmd {
    /// Combine records of the same comparison from several machines or CI shards into one
    /// (every boot of every record), refusing records whose kernel, topology, accelerator or
    /// parameters differ unless grouped by that field.
    Merge {
        /// Run directories, results directories (searched for record.json) or record files.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Let records differ in this field (kernel, topology, accelerator, parameters): each
        /// of its values gets its own columns.
        #[arg(long = "group-by", value_name = "FIELD")]
        group_by: Vec<crate::report::merge::Field>,
        /// Where the merged record, table and page go (default: a new directory under
        /// results/<comparison>/).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Mark the tests that passed with parts skipped here (their LAB-SKIP lines: no KVM, a
    /// missing host tool) as skipped in nextest JUnit reports, in place, and list them.
    JunitSkips {
        #[arg(required = true, value_name = "JUNIT_XML")]
        files: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(super) enum KernelCmd {
    /// Build a recipe (and its base) into the cache.
    Build { recipes: Vec<String> },
    /// List cached kernels.
    List,
    /// The cache key each recipe needs here, one line per recipe: NAME ARCH KEY.
    Keys,
    /// Remove cached kernels no current recipe uses.
    Gc {
        /// Remove every cached kernel.
        #[arg(long)]
        all: bool,
        /// Also drop the object trees of kept kernels (variants then build cold).
        #[arg(long)]
        drop_trees: bool,
        /// With --drop-trees: this recipe's kernel keeps its tree (repeatable).
        #[arg(long, value_name = "RECIPE", requires = "drop_trees")]
        keep_tree: Vec<String>,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum CacheCmd {
    /// Push cache entries to `LAB_CACHE_REMOTE` (credentials: `LAB_CACHE_USER`,
    /// `LAB_CACHE_PASSWORD`). A tag already there is left alone: keys hash inputs.
    Push {
        /// The entry as KIND/KEY (`kernels/f73c8d6731`: a unique key prefix will do).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        entry: Option<String>,
        /// Every entry of every kind.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum LockCmd {
    /// Re-resolve the locked bundles against today's archive and rewrite the lock.
    Update {
        /// Only these bundles (e.g. `qemu`); all when none are named. A kernel source's bundle
        /// moves every kernel's cache key with it.
        bundles: Vec<String>,
    },
    /// What the archive has done to the lock, changing nothing: every locked package that left
    /// the archive (and whether a run substitutes it or fails), changed its checksum, or would
    /// move with `lab lock update`; exit 1 when a bundle needs that update. For a scheduled CI
    /// job; `LAB_APT_REFRESH=1` reads lists fetched now.
    Check {
        /// Only these bundles; all when none are named.
        bundles: Vec<String>,
    },
}

/// `lab bisect`'s arguments.
#[derive(Args)]
pub(super) struct BisectArgs {
    /// A shipped scenario (`lab scenarios`).
    #[arg(required_unless_present_any = ["resume", "file"])]
    pub(super) scenario: Option<String>,
    /// Bisect on the scenario this file declares instead (docs/SCENARIO-FILES.md).
    #[arg(long = "scenario", value_name = "FILE", conflicts_with = "scenario")]
    pub(super) file: Option<PathBuf>,
    /// The good end: a variant (`v6.12`, settings and `@set=` allowed), or with --git-recipe a
    /// git ref.
    #[arg(long, required_unless_present = "resume")]
    pub(super) good: Option<String>,
    /// The bad end: a variant whose recipe adds patches to the good one's, or with --series
    /// omitted when the series says it all, or with --git-recipe a git ref.
    #[arg(long)]
    pub(super) bad: Option<String>,
    /// The changes as posted: an mbox of the series, or a directory of numbered patch files,
    /// applied on the good kernel's recipe (bad is the good kernel with all of them).
    #[arg(long, value_name = "FILE", conflicts_with = "git_recipe")]
    pub(super) series: Option<PathBuf>,
    /// Bisect the first-parent commits between --good and --bad (git refs) in the tree of
    /// this kernel recipe (one with a `git` source).
    #[arg(long, value_name = "RECIPE")]
    pub(super) git_recipe: Option<String>,
    /// Decide on METRIC with its smallest change that matters (`=20`, `=50%`; default: the
    /// scenario's first primary metric with its own).
    #[arg(long, value_name = "METRIC[=MAGNITUDE]", value_parser = parse_primary)]
    pub(super) metric: Option<(String, Option<crate::stats::Magnitude>)>,
    /// A scenario parameter for every boot.
    #[arg(long = "set", value_name = "PARAM=VALUE", value_parser = parse_set)]
    pub(super) set: Vec<(String, String)>,
    /// Topology (default: the scenario's).
    #[arg(long)]
    pub(super) topology: Option<String>,
    /// A probe that does not boot (panic, WARNING, hang): skipped, or counted as bad (for
    /// functional bisects: with `bad`, a bad end that does not boot makes a bisect of
    /// booting, one boot per point, ending with the change that stops it).
    #[arg(long, value_enum, default_value = "skip")]
    pub(super) boot_failure: crate::bisect::OnBootFailure,
    /// The most boots per variant of any step (default 60): each step's error is split over
    /// looks up to it from its first boot, and a step stops as soon as its verdicts settle.
    #[arg(long, value_name = "N")]
    pub(super) max_repetitions: Option<usize>,
    /// Step i's boot order has seed SEED + i (recorded).
    #[arg(long)]
    pub(super) seed: Option<u64>,
    /// The bisect's name: results go to results/bisect-NAME/ (default: the scenario's).
    #[arg(long)]
    pub(super) name: Option<String>,
    /// Continue the bisect in DIR after a kill: finished steps are read back, not repeated.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["scenario", "file", "good", "bad", "series", "git_recipe"])]
    pub(super) resume: Option<PathBuf>,
}
