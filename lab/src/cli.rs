//! The `lab` command line, as a library: its arguments (`args`), one library call per verb and
//! what comes back printed (`verbs`). The `lab` binary is [`main`]; a crate with scenarios of
//! its own makes its binary the same command line with them added ([`main_with`]), so
//! `compare`, `bisect`, `scenarios`, `prepare` and `report` run them as they run the shipped
//! ones.
//!
//! ```no_run
//! use lab::experiment::{BootPlan, Boot, Measurement, MetricDef, Scenario};
//! use lab::scenarios::Extra;
//! # #[derive(Clone)] struct MyScenario;
//! # impl Scenario for MyScenario {
//! #     type Params = serde_json::Value;
//! #     fn name(&self) -> &str { "my-scenario" }
//! #     fn description(&self) -> &str { "" }
//! #     fn params(&self) -> &serde_json::Value { unimplemented!() }
//! #     fn default_variants(&self) -> Vec<lab::variant::Variant> { Vec::new() }
//! #     fn metrics(&self) -> Vec<MetricDef> { Vec::new() }
//! #     fn plan(&self, _: &Self::Params, _: &lab::topology::Topology) -> anyhow::Result<BootPlan> { unimplemented!() }
//! #     async fn measure(&self, _: &Self::Params, _: &Boot<'_>) -> anyhow::Result<Measurement> { unimplemented!() }
//! # }
//!
//! // src/main.rs of the crate: `cargo run -- compare my-scenario` runs it.
//! fn main() {
//!     lab::cli::main_with(vec![Extra::new(MyScenario)]);
//! }
//! ```

mod args;
mod device_model;
mod terminal;
mod verbs;

use std::time::Instant;

use clap::Parser;

use crate::scenarios::Extra;

/// Resolves with the name of the first SIGINT or SIGTERM and the exit code a shell gives it
/// (128 + its number); never, if they cannot be watched.
async fn interrupted() -> (&'static str, i32) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => ("SIGINT", 130),
        _ = term.recv() => ("SIGTERM", 143),
    }
}

/// The `lab` binary: parses the command line, runs the verb, exits with its code (2 with the
/// error on standard error).
pub fn main() -> ! {
    main_with(Vec::new())
}

/// [`main`] with `scenarios` found by name beside the shipped ones (a name the lab ships, or
/// one given twice, is refused before anything runs).
pub fn main_with(scenarios: Vec<Extra>) -> ! {
    let started = Instant::now();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LAB_LOG")
                .unwrap_or_else(|_| "lab=warn".into()),
        )
        // With LAB_LOG=lab=debug every step of the start-up and boot path logs its duration.
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .init();
    let cli = args::Cli::parse();
    // Before any thread: the registry password stays in memory, out of every child's
    // environment; `lab test`'s children are the suite's own labs.
    if !matches!(cli.command, args::Cmd::Test { .. }) {
        crate::cache::remote::keep_password_from_children();
    }
    if let Err(e) = crate::scenarios::add_extra(scenarios) {
        terminal::error(&e);
        std::process::exit(2);
    }
    crate::process::watch_parent();
    crate::progress::install_for_stderr();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    // SIGINT or SIGTERM ends the verb by dropping it: its guests, device models and temporary
    // directories go as on any error, instead of being left for the parent watchers (the
    // processes) or forever (`/tmp/lab-vm-*`).
    let ended = runtime.block_on(async {
        tokio::select! {
            result = verbs::run(cli, started) => Ok(result),
            signal = interrupted() => Err(signal),
        }
    });
    let result = match ended {
        Ok(result) => result,
        Err((name, code)) => {
            // The verb's future is dropped already, its guests with it; its tasks go here (a
            // blocking one is not waited for past the timeout).
            runtime.shutdown_timeout(std::time::Duration::from_secs(2));
            terminal::error(&anyhow::anyhow!("stopped by {name}"));
            std::process::exit(code);
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            terminal::error(&e);
            std::process::exit(2);
        }
    }
}
