//! One library function per verb, and what comes back printed: the `lab` binary's body
//! ([`super::main`]), and a crate's own (`super::main_with`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::args::{
    self as cli, BenchCmd, CacheCmd, Cli, Cmd, HostCmd, KernelCmd, LockCmd, ReportCmd, TopologyCmd,
};
use super::device_model;
use crate::cache::{push_entries, Cache};
use crate::debian::update_default_lock;
use crate::topology::Topology;

/// `lab run`: boots, runs the command, prints what it wrote (escaped on a terminal, with
/// what was past the bound said), writes the timings; the command's exit code.
async fn run_command(
    request: crate::run::Request,
    timings: Option<&std::path::Path>,
) -> Result<i32> {
    if !request.devices.is_empty() {
        device_model::build()?;
    }
    let outcome = crate::run::run(request).await?;
    for line in &outcome.devices {
        eprintln!("lab: {line}");
    }
    super::terminal::write(&mut std::io::stdout(), &outcome.stdout)?;
    super::terminal::write(&mut std::io::stderr(), &outcome.stderr)?;
    if outcome.dropped > 0 {
        eprintln!(
            "lab: the command wrote {} bytes past the {} MiB a stream the lab keeps; they are \
             not shown",
            outcome.dropped,
            crate::guest::OUTPUT_KEPT >> 20
        );
    }
    if let Some(path) = timings {
        outcome.timings.write_json(path)?;
    }
    Ok(outcome.exit_code)
}

/// Runs one verb; its exit code. Runs on the main thread (`block_on`), which `lab test` needs
/// (see [`crate::nextest::test_suite`]).
pub(super) async fn run(cli: Cli, started: Instant) -> Result<i32> {
    match cli.command {
        Cmd::Doctor => print!("{}", crate::doctor::Doctor::examine().await?),
        Cmd::Prepare {
            kernels,
            also,
            images,
        } => {
            let request = crate::prepare::Request {
                kernels,
                also,
                images,
            };
            device_model::build()?;
            print!("{}", crate::prepare::prepare(&request).await?);
        }
        Cmd::Topology { command } => topology(command)?,
        Cmd::Run {
            topology,
            cpus,
            memory,
            nodes,
            kernel,
            cmdline,
            image,
            devices,
            host,
            timeout,
            timings,
            command,
        } => {
            let request = crate::run::Request {
                started,
                topology,
                cpus,
                memory,
                nodes,
                kernel,
                cmdline,
                image,
                devices,
                host,
                command,
                timeout: Duration::from_secs(timeout),
            };
            return run_command(request, timings.as_deref()).await;
        }
        Cmd::Bench {
            command,
            runs,
            topology,
            cold,
        } => bench(command, runs, &topology, cold).await?,
        Cmd::Scenarios { file: None } => print!("{}", crate::scenarios::list_text()?),
        Cmd::Scenarios { file: Some(path) } => print!("{}", crate::scenarios::file_text(&path)?),
        Cmd::Compare {
            scenario,
            file,
            variants,
            set,
            repetitions,
            max_repetitions,
            primaries,
            seed,
            exit_code,
            topology,
            name,
            devices,
            host,
        } => {
            let mut request = crate::scenarios::Request {
                scenario,
                file,
                variants,
                repetitions,
                max_repetitions,
                primaries,
                seed,
                topology,
                set: set.into_iter().collect(),
                name,
                devices,
                host,
                ..crate::scenarios::Request::default()
            };
            device_model::build()?;
            return compare(&mut request, exit_code).await;
        }
        Cmd::Host { command } => match command {
            HostCmd::Restore => print!(
                "{}",
                crate::devices::passthrough::restore_host(&Cache::from_env()?)?
            ),
            HostCmd::Show { host } => print!(
                "{}",
                crate::devices::passthrough::HostReport::this_host(host.as_deref())?
            ),
        },
        Cmd::Bisect(args) => return bisect(args).await,
        Cmd::Report {
            command: Some(command),
            ..
        } => report_command(command)?,
        Cmd::Report {
            command: None,
            html,
            results,
        } => report(results, html)?,
        Cmd::Kernel { command } => kernel(command).await?,
        Cmd::Cache {
            command: CacheCmd::Push { entry, .. },
        } => print!("{}", push_entries(&Cache::from_env()?, entry.as_deref())?),
        Cmd::Test { quick, args } => return test(quick, args, started),
        Cmd::Bundle { command } => match command.into() {
            crate::bundle::Command::Create(request) => {
                device_model::build()?;
                print!("{}", crate::bundle::create(&request).await?);
            }
            crate::bundle::Command::Run(request) => return crate::bundle::run(&request),
        },
        Cmd::Lock {
            command: LockCmd::Update { bundles },
        } => print!("{}", update_default_lock(&Cache::from_env()?, &bundles)?),
        Cmd::Lock {
            command: LockCmd::Check { bundles },
        } => {
            let check = crate::debian::check_default_lock(&Cache::from_env()?, &bundles)?;
            print!("{check}");
            return Ok(check.exit_code());
        }
    }
    Ok(0)
}

/// `lab test [--quick] ARGS`: what the arguments select said first (or why nothing would run),
/// then the suite, its marked skips and its time; nextest's exit code.
fn test(quick: bool, args: Vec<String>, started: Instant) -> Result<i32> {
    let args = if quick {
        let mut quick_args = crate::nextest::quick_args(&args)?;
        // Only what the tier runs is built (cargo's options before nextest's).
        if let Some(selection) = crate::nextest::quick_build_selection(&args) {
            quick_args.splice(2..2, selection);
        }
        quick_args
    } else {
        args
    };
    if let Some(selected) = crate::nextest::select(&args)? {
        match selected.before_run() {
            Some(line) => eprintln!("{line}"),
            None => {
                eprint!("{}", selected.why_none());
                return Ok(crate::nextest::NO_TESTS_RUN);
            }
        }
    }
    let run = crate::nextest::test_suite(&args)?;
    match &run.skips {
        Some(Ok(marked)) => print!("{marked}"),
        Some(Err(e)) => eprintln!("lab: error: {e:#}"),
        None => {}
    }
    eprintln!(
        "lab test: {} in {} (compile included), exit {}",
        if quick { "the quick tier" } else { "the suite" },
        crate::bench::minutes(started.elapsed().as_secs_f64()),
        run.exit_code()
    );
    Ok(run.exit_code())
}

/// `lab topology list|show|from-host`.
fn topology(command: TopologyCmd) -> Result<()> {
    match command {
        TopologyCmd::List => print!("{}", Topology::list_text()?),
        TopologyCmd::Show { name } => print!("{}", Topology::by_name(&name)?.render_table()),
        TopologyCmd::FromHost(args) => {
            let written = crate::host_topology::write_mirror(&args.into())?;
            match written.summary() {
                Some(line) => eprintln!("{line}"),
                None => print!("{}", written.mirror.text),
            }
        }
    }
    Ok(())
}

/// `lab compare`: the table on standard output, where the files went on standard error; with
/// `--exit-code`, `git bisect run`'s codes.
async fn compare(request: &mut crate::scenarios::Request, exit_code: bool) -> Result<i32> {
    // One variant, a bad passthrough device or an unknown scenario fails before QEMU or a
    // kernel is prepared.
    request.check()?;
    let lab = crate::Lab::ready().await?;
    let outcome = match crate::scenarios::compare(&lab, request).await {
        Ok(outcome) => outcome,
        Err(e) if exit_code => {
            eprintln!("lab: error: {e:#}");
            eprintln!("lab: exit 125: the comparison could not be made");
            return Ok(crate::report::BISECT_SKIP);
        }
        Err(e) => return Err(e),
    };
    print!("{}", outcome.comparison().table());
    for line in outcome.written() {
        eprintln!("lab: {line}");
    }
    if let Some(note) = lab.accelerator_note() {
        eprintln!("lab: {note}");
    }
    let code = outcome.comparison().bisect_exit_code();
    Ok(if exit_code { code } else { 0 })
}

/// `lab bisect`: a new bisect or `--resume`; its log printed, its exit code.
async fn bisect(args: cli::BisectArgs) -> Result<i32> {
    let cli::BisectArgs {
        scenario,
        file,
        good,
        bad,
        series,
        git_recipe,
        metric,
        set,
        topology,
        boot_failure,
        max_repetitions,
        seed,
        name,
        resume,
    } = args;
    device_model::build()?;
    let lab = crate::Lab::ready().await?;
    let outcome = match resume {
        Some(dir) => crate::bisect::resume(&lab, &dir).await?,
        None => {
            let request = crate::bisect::Request::from_arguments(
                scenario.unwrap_or_default(),
                good.unwrap_or_default(),
                bad,
                series,
                git_recipe,
            )?;
            let request = crate::bisect::Request {
                file,
                metric,
                set: set.into_iter().collect(),
                topology,
                on_boot_failure: boot_failure,
                max_repetitions,
                seed,
                name,
                ..request
            };
            crate::bisect::run(&lab, request).await?
        }
    };
    print!("{}", outcome.log);
    eprintln!(
        "lab: bisect record {}\nlab: report {}",
        crate::bisect::BisectRecord::path(&outcome.dir).display(),
        outcome.html.display()
    );
    Ok(outcome.exit_code())
}

/// `lab bench [SUBCOMMAND]`: measured in the library, printed here.
async fn bench(command: Option<BenchCmd>, runs: usize, topology: &str, cold: bool) -> Result<()> {
    let exe = std::env::current_exe().context("finding the lab binary to benchmark")?;
    let cache = crate::cache::Cache::from_env()?;
    let text = match command {
        Some(BenchCmd::Boot(b)) => crate::bench::boot(b.runs, &b.topology, b.against.as_deref())
            .await?
            .render(),
        Some(BenchCmd::Run(r)) => r.report(&exe).await?,
        Some(BenchCmd::Kernel {
            cold,
            base,
            variant,
        }) => crate::bench::kernel::times(&cache, &exe, cold, &base, &variant)
            .await?
            .render(),
        Some(BenchCmd::Suite {
            profile,
            slowest,
            tier,
            started,
        }) => {
            // A tier's summary reads that tier's own run.
            let profile = profile.or(tier.map(|t| t.profile().to_string()));
            let runs = crate::bench::suite::reports(&cache, profile.as_deref())?;
            let mut text = crate::bench::suite::render_all(&runs, slowest);
            if let (Some(tier), Some(run)) = (tier, runs.last()) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                text += "\n";
                // With the job's start, this is the job's own end, on the host it ran on.
                let host = started.map(|_| crate::bench::budget::Host::this());
                text +=
                    &crate::bench::budget::summary(run, tier, started, now, slowest, host.as_ref());
            }
            text
        }
        Some(BenchCmd::Verdicts { runs, seed }) => {
            crate::bench::verdicts::verdicts(runs, seed)?.render()
        }
        Some(BenchCmd::Bisect { runs, seed }) => {
            crate::bench::bisect::bisects(runs, seed)?.render()
        }
        Some(BenchCmd::Resample {
            records,
            initial,
            cap,
            runs,
            seed,
        }) => crate::bench::resample::resample(&records, initial, cap, runs, seed)?.render(),
        Some(BenchCmd::Shards {
            shards,
            junit,
            binaries,
            out,
        }) => crate::bench::shards::plan_from_reports(
            &cache,
            &junit,
            binaries.as_deref(),
            shards,
            out.as_deref(),
        )?,
        None => crate::bench::overview(&cache, &exe, runs, topology, cold)
            .await?
            .render(),
    };
    print!("{text}");
    Ok(())
}

/// `lab report [--html] [RESULTS...]`: every stored record's table or bisect log, or its page.
fn report(results: Vec<PathBuf>, html: bool) -> Result<()> {
    let stored = crate::results::stored(results, html)?;
    print!("{}", stored.text);
    for note in stored.notes {
        eprintln!("lab: {note}");
    }
    Ok(())
}

/// `lab report merge|junit-skips`.
fn report_command(command: ReportCmd) -> Result<()> {
    match command {
        ReportCmd::Merge {
            dirs,
            group_by,
            out,
        } => {
            let merged = crate::report::merge::merge_and_write(
                &dirs,
                &group_by,
                out.as_deref(),
                &crate::results_root(),
                &crate::scenarios::picture_of,
            )?;
            print!("{}", merged.record.comparison().table());
            for line in merged.lines() {
                eprintln!("lab: {line}");
            }
        }
        ReportCmd::JunitSkips { files } => {
            for file in files {
                print!("{}", crate::report::junit::mark_skips_in_file(&file)?);
            }
        }
    }
    Ok(())
}

/// `lab kernel build|list|keys|gc`.
async fn kernel(command: KernelCmd) -> Result<()> {
    let cache = crate::cache::Cache::from_env()?;
    let opts = crate::kernel::BuildOptions::default();
    match command {
        KernelCmd::Build { recipes } => {
            let built = tokio::task::spawn_blocking(move || {
                crate::kernel::build_all(&cache, &recipes, &opts)
            })
            .await??;
            for kernel in built {
                println!("{kernel}");
            }
        }
        KernelCmd::List => print!("{}", crate::kernel::list_table(&cache)?),
        KernelCmd::Keys => print!("{}", crate::kernel::keys_table(&cache, &opts)?),
        KernelCmd::Gc {
            all,
            drop_trees,
            keep_tree,
            dry_run,
        } => {
            let request = crate::kernel::GcRequest {
                all,
                drop_trees,
                keep_trees: keep_tree,
                dry_run,
            };
            println!("{}", crate::kernel::gc_unused(&cache, &opts, &request)?);
        }
    }
    Ok(())
}
