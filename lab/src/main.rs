//! The `lab` command line: the same pipeline pieces the tests compose.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use lab::guest::GuestCommand;
use lab::topology::Topology;
use lab::{BootOptions, Lab};

#[derive(Parser)]
#[command(
    name = "lab",
    version,
    about = "Reproducible QEMU/KVM lab for scheduler, IRQ and NUMA behaviour"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show what this host offers: QEMU, accelerator, cache, kernels, topologies.
    Doctor,
    /// Provision everything tests and `compare` need (QEMU, the default kernels and guest image)
    /// up front, with progress; later runs find it all in the cache.
    Prepare {
        /// Kernel recipes to build (default: v6.12, the S1 variant and the ptdma fix the tests use).
        #[arg(long, default_values = ["v6.12", "v6.12+wake-affine-idle-revert", "v6.12+ptdma-claim-once"])]
        kernels: Vec<String>,
    },
    /// Inspect the declared machine shapes.
    Topology {
        #[command(subcommand)]
        command: TopologyCmd,
    },
    /// Boot a guest, run one command in it, print its output and exit with its status.
    Run {
        #[arg(long, default_value = lab::host::DEFAULT_TOPOLOGY)]
        topology: String,
        /// Kernel recipe name (images/kernels/NAME.toml) or `debian` for the prebuilt Debian kernel.
        #[arg(long)]
        kernel: Option<String>,
        /// Extra kernel command-line argument (repeatable).
        #[arg(long = "cmdline")]
        cmdline: Vec<String>,
        /// Seconds the command may run.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Benchmarks that print ratios measured side by side in one run.
    Bench {
        #[command(subcommand)]
        command: BenchCmd,
    },
    /// Seed S1 side by side: v6.12 vs v6.12+wake-affine-idle-revert, dmatest thread placement
    /// with its DMA completion interrupt pinned elsewhere; prints an LKP-style table.
    Compare {
        /// Where the interrupt goes relative to the thread's start LLC.
        #[arg(long, value_enum, default_value = "cross-llc")]
        placement: Placement,
        #[arg(long, default_value = lab::host::DEFAULT_TOPOLOGY)]
        topology: String,
        /// Boots per kernel (one boot is one sample).
        #[arg(long, default_value_t = 5)]
        repetitions: usize,
        /// The two kernel recipes, base first.
        #[arg(long, num_args = 2, default_values = ["v6.12", "v6.12+wake-affine-idle-revert"])]
        kernels: Vec<String>,
    },
    /// Print the stored comparison tables under results/.
    Report,
    /// Kernel recipes and their cached builds.
    Kernel {
        #[command(subcommand)]
        command: KernelCmd,
    },
    /// The lock file of pinned Debian packages.
    Lock {
        #[command(subcommand)]
        command: LockCmd,
    },
}

#[derive(Subcommand)]
enum TopologyCmd {
    /// List the shipped topologies.
    List,
    /// Show one topology as a table, with the QEMU mapping used.
    Show { name: String },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Boot-to-first-command time of the lab vs a hand-written QEMU command line.
    Boot {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value = lab::host::DEFAULT_TOPOLOGY)]
        topology: String,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Placement {
    CrossLlc,
    SameLlc,
    RemoteNode,
}

#[derive(Subcommand)]
enum KernelCmd {
    /// Build a recipe (and its base) into the cache.
    Build { recipes: Vec<String> },
    /// List cached kernels.
    List,
    /// Remove cached kernels no current recipe uses.
    Gc {
        /// Remove every cached kernel.
        #[arg(long)]
        all: bool,
        /// Also drop the object trees of kept kernels (variants then build cold).
        #[arg(long)]
        drop_trees: bool,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum LockCmd {
    /// Re-resolve every locked bundle against today's archive and rewrite the lock.
    Update,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LAB_LOG")
                .unwrap_or_else(|_| "lab=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("lab: error: {e:#}");
            std::process::exit(2);
        }
    }
}

/// A spinner for work that takes more than a moment.
fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").unwrap());
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

async fn lab_ready() -> Result<Lab> {
    let bar = spinner("preparing QEMU, kernel and accelerator");
    let lab = Lab::from_env_async().await;
    bar.finish_and_clear();
    lab
}

async fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Cmd::Doctor => doctor().await,
        Cmd::Prepare { kernels } => {
            let started = Instant::now();
            let lab = lab_ready().await?;
            for name in kernels {
                let (kernel, _) = lab
                    .variant_kernel(&lab::kernel::Variant::kernel(&name))
                    .await?;
                let image = tokio::task::spawn_blocking({
                    let lab = lab.clone();
                    let kernel = kernel.clone();
                    move || lab.image(lab::host::DEFAULT_IMAGE, &kernel)
                })
                .await??;
                println!("{name}: {} (image {})", kernel.release, image.hash);
            }
            println!(
                "prepared in {:.0?} ({})",
                started.elapsed(),
                lab.accel.name()
            );
            Ok(0)
        }
        Cmd::Topology { command } => match command {
            TopologyCmd::List => {
                for name in Topology::list()? {
                    let t = Topology::by_name(&name)?;
                    println!("{name:<20} {:>3} vCPUs  {}", t.nr_cpus(), t.description());
                }
                Ok(0)
            }
            TopologyCmd::Show { name } => {
                print!("{}", Topology::by_name(&name)?.render_table());
                Ok(0)
            }
        },
        Cmd::Run {
            topology,
            kernel,
            cmdline,
            timeout,
            command,
        } => {
            let lab = lab_ready().await?;
            let mut opts = BootOptions::named("lab-run").topology(&topology);
            opts.cmdline = cmdline;
            if let Some(name) = kernel {
                opts.kernel = Some(resolve_kernel(&lab, &name).await?);
            }
            let bar = spinner(&format!("booting {topology} ({})", lab.accel.name()));
            let vm = lab.boot(opts).await;
            bar.finish_and_clear();
            let vm = vm?;
            eprintln!(
                "lab: {} booted in {:.1?} ({}, kernel {})",
                topology,
                vm.boot_time,
                lab.accel.name(),
                vm.hello.kernel_release
            );
            let mut cmd = GuestCommand::new(command);
            cmd.timeout = Duration::from_secs(timeout);
            let out = vm.exec(&cmd).await?;
            use std::io::Write;
            std::io::stdout().write_all(&out.stdout)?;
            std::io::stderr().write_all(&out.stderr)?;
            let code = out.exit_code();
            vm.shutdown().await?;
            Ok(code)
        }
        Cmd::Bench { command } => match command {
            BenchCmd::Boot { runs, topology } => lab::bench::boot(runs, &topology).await.map(|_| 0),
        },
        Cmd::Compare {
            placement,
            topology,
            repetitions,
            kernels,
        } => {
            let placement = match placement {
                Placement::CrossLlc => lab::scenario::IrqPlacement::CrossLlc,
                Placement::SameLlc => lab::scenario::IrqPlacement::SameLlc,
                Placement::RemoteNode => lab::scenario::IrqPlacement::RemoteNode,
            };
            let mut scenario = lab::scenario::DmaWakeup::seed(placement)
                .topology(&topology)
                .repetitions(repetitions);
            scenario.variants = kernels
                .iter()
                .map(|k| lab::kernel::Variant::kernel(k))
                .collect();
            let lab = lab_ready().await?;
            eprintln!(
                "lab: {} on {topology} ({}), {} boots per kernel, interleaved",
                scenario.name,
                lab.accel.name(),
                repetitions
            );
            let outcome = scenario.run(&lab).await?;
            print!("{}", outcome.comparison.table());
            let table = lab::scenario::write_table(&outcome)?;
            eprintln!(
                "lab: record {} and table {}",
                outcome.record_path.display(),
                table.display()
            );
            if !lab.on_kvm() {
                eprintln!(
                    "lab: throughput (iops) is not meaningful under {}; placement is",
                    lab.accel.name()
                );
            }
            Ok(0)
        }
        Cmd::Report => {
            let root = lab::host::results_root();
            let mut found = 0;
            for entry in walk_json(&root) {
                if let Ok(record) = lab::report::RunRecord::read_json(&entry) {
                    println!("== {}", entry.display());
                    print!("{}", record.comparison.table());
                    found += 1;
                }
            }
            if found == 0 {
                println!("no comparison records under {}", root.display());
            }
            Ok(0)
        }
        Cmd::Kernel { command } => {
            let cache = lab::cache::Cache::from_env()?;
            let opts = lab::kernel::BuildOptions::default();
            match command {
                KernelCmd::Build { recipes } => {
                    let recipes = if recipes.is_empty() {
                        vec![lab::kernel::DEFAULT_RECIPE.to_string()]
                    } else {
                        recipes
                    };
                    for name in recipes {
                        let built = tokio::task::spawn_blocking({
                            let cache = cache.clone();
                            let opts = opts.clone();
                            move || lab::kernel::build(&cache, &name, &opts)
                        })
                        .await??;
                        println!(
                            "{} {} ({})",
                            built.manifest.recipe,
                            built.manifest.release,
                            built.dir.display()
                        );
                    }
                }
                KernelCmd::List => print!("{}", lab::kernel::list_table(&cache)?),
                KernelCmd::Gc {
                    all,
                    drop_trees,
                    dry_run,
                } => {
                    let report = lab::kernel::gc_unused(&cache, &opts, all, drop_trees, dry_run)?;
                    println!("{report:?}");
                }
            }
            Ok(0)
        }
        Cmd::Lock { command } => match command {
            LockCmd::Update => {
                let cache = lab::cache::Cache::from_env()?;
                let archive = lab::debian::Archive::open(&cache)?;
                let path = lab::debian::LockFile::default_path();
                let changes = lab::debian::update_lock(&archive, &path)?;
                if changes.is_empty() {
                    println!("{}: up to date", path.display());
                }
                for c in changes {
                    println!("{c}");
                }
                Ok(0)
            }
        },
    }
}

/// Every `*.json` under `dir`, sorted.
fn walk_json(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

async fn resolve_kernel(lab: &Lab, name: &str) -> Result<lab::vm::BootKernel> {
    if name == "debian" {
        return lab::image::debian_kernel(&lab.cache);
    }
    let (kernel, _settings) = lab
        .variant_kernel(&lab::kernel::Variant::kernel(name))
        .await?;
    Ok(kernel)
}

async fn doctor() -> Result<i32> {
    let started = Instant::now();
    let lab = lab_ready().await?;
    println!("cache dir      {}", lab.cache.root().display());
    println!(
        "QEMU           {} ({})",
        lab.qemu.version,
        lab.qemu.binary.display()
    );
    match &lab.qemu.origin {
        lab::toolchain::QemuOrigin::Host => println!("QEMU origin    host"),
        lab::toolchain::QemuOrigin::Bundle {
            packages,
            substitutions,
        } => {
            println!(
                "QEMU origin    pinned Debian bundle ({} packages)",
                packages.len()
            );
            for s in substitutions {
                println!(
                    "  WARNING: {} {} left the archive; using {}",
                    s.package, s.locked, s.used
                );
            }
        }
    }
    println!(
        "vfio-user-pci  {}",
        if lab.qemu.has_vfio_user { "yes" } else { "NO" }
    );
    println!(
        "accelerator    {} ({})",
        lab.accel.name(),
        lab.accel_probe.reason
    );
    println!("host CPU       {}", lab::toolchain::host_cpu_model());
    let k = lab.default_kernel();
    println!("default kernel {} ({})", k.name, k.release);
    let dirs = lab::kernel::RecipeDirs::default_dirs();
    println!(
        "kernel recipes {}",
        lab::kernel::recipe_names(&dirs)?.join(", ")
    );
    let cached = lab::kernel::list(&lab.cache)?;
    println!("cached kernels {} (lab kernel list)", cached.len());
    println!("topologies     {}", Topology::list()?.join(", "));
    println!("(checked in {:.1?})", started.elapsed());
    Ok(0)
}
