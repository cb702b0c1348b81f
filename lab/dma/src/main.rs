//! `lab-dma`: serves one emulated DMA engine on a vfio-user socket.
//!
//! Contract: prints `lab-dma: listening on PATH` on stdout once the socket is bound; exits 0
//! when the client disconnects or on SIGTERM/SIGINT (removing the socket); exits 1 on a
//! startup or transport error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use lab_dma::{serve, DeviceKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// Intel I/OAT (8086:0b00, ioatdma)
    Ioat,
    /// AMD PTDMA (1022:1498, ptdma)
    Ptdma,
}

#[derive(Debug, Parser)]
#[command(name = "lab-dma", about = "Emulated DMA engine served over vfio-user")]
struct Args {
    /// Unix socket to listen on (QEMU's vfio-user-pci connects here).
    #[arg(long)]
    socket: PathBuf,
    /// Which engine to model.
    #[arg(long, value_enum)]
    device: Kind,
    /// I/OAT channels (1-4); ignored for ptdma.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    channels: u8,
    /// Write the log here instead of stderr (a new file: one log per device process).
    #[arg(long)]
    log: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = init_logging(args.log.as_deref()) {
        eprintln!("lab-dma: {e:#}");
        return ExitCode::FAILURE;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("lab-dma: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let kind = match args.device {
        Kind::Ioat => DeviceKind::Ioat {
            channels: usize::from(args.channels),
        },
        Kind::Ptdma => DeviceKind::Ptdma,
    };
    watch_signals(args.socket.clone())?;
    tracing::info!(?kind, socket = %args.socket.display(), "starting");
    let ended = serve(&args.socket, kind, || {
        let mut out = std::io::stdout().lock();
        // The lab starts QEMU only after this line; a closed stdout must not stop the server.
        let _ = writeln!(out, "lab-dma: listening on {}", args.socket.display());
        let _ = out.flush();
    })?;
    tracing::info!(?ended, "client gone, exiting");
    let _ = std::fs::remove_file(&args.socket);
    Ok(())
}

/// SIGTERM/SIGINT end the process at once (the vfio-user loop blocks in recvmsg and has no
/// shutdown hook), after removing the socket file.
fn watch_signals(socket: PathBuf) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!(signal = sig, "terminating");
                let _ = std::fs::remove_file(&socket);
                std::process::exit(0);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

fn init_logging(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("LAB_DMA_LOG")
        .or_else(|_| EnvFilter::try_new("info"))
        .context("log filter")?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match path {
        Some(p) => {
            let file = std::fs::File::create(p)
                .with_context(|| format!("opening log file {}", p.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(file))
                .try_init()
        }
        None => builder.with_writer(std::io::stderr).try_init(),
    }
    .map_err(|e| anyhow::anyhow!("installing the logger: {e}"))
}
