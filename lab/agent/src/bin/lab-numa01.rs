//! `lab-numa01`: the shape of autonuma-benchmark's `numa01_THREAD_ALLOC`, sized by arguments so
//! it fits a small guest. Built static beside the agent (`lab/build.rs`) and placed in every
//! guest image at `/usr/bin/lab-numa01`.
//!
//! numa01 forks into two processes; each maps one large anonymous region and starts its
//! threads unbound, so the scheduler spreads them over the machine's nodes. Every thread first
//! writes the whole region of its process (numa01's `bzero(p_global, SIZE)`), then writes its
//! own slice, `SIZE / THREADS` bytes at offset `THREAD_SIZE * i` (the `THREAD_ALLOC` build), over
//! and over. NUMA balancing has to find out, through hinting faults, which node each slice is
//! used from, and move pages or threads accordingly.
//!
//! ```text
//! lab-numa01 --mib N [--processes P] [--threads T] (--loops L | --seconds S)
//! ```
//!
//! `--mib` is the total over all processes (each maps `N / P` MiB), `--threads` counts threads
//! per process (default: online CPUs / P, as numa01's `THREADS` is half the CPUs with two
//! processes). `--loops` writes each slice L times (numa01_THREAD_ALLOC: 1000 with 3 GiB per
//! process); `--seconds` instead writes slices until S seconds have passed since the start.
//! Prints one JSON line:
//!
//! ```text
//! {"elapsed_s":12.5,"bytes":4294967296,"processes":2,"threads":4,"mib":512,"loops":10,...}
//! ```
//!
//! Writes are relaxed atomic 8-byte stores: threads of one process write the same memory in the
//! first phase, as in numa01, and atomics make that well defined without costing more than
//! plain stores. Bad arguments exit 2 with a message; a failure while running exits 1.

use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// How long each thread writes its slice.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Length {
    Loops(u64),
    Seconds(f64),
}

#[derive(Debug, Clone, PartialEq)]
struct Args {
    mib: u64,
    processes: u32,
    threads: u32,
    length: Length,
}

const USAGE: &str =
    "usage: lab-numa01 --mib N [--processes P] [--threads T] (--loops L | --seconds S)";

/// `--help`: the flags and the output, as the module's doc says them.
const HELP: &str = "\
usage: lab-numa01 --mib N [--processes P] [--threads T] (--loops L | --seconds S)

numa01_THREAD_ALLOC's shape: P processes, each mapping N/P MiB and starting T unbound threads
that write the whole region, then their own slice of it over and over, while NUMA balancing
finds out which node each slice is used from.

  --mib N          MiB over all processes (required)
  --processes P    processes (default 2)
  --threads T      threads per process (default: online CPUs / P)
  --loops L        write each slice L times, or
  --seconds S      write slices until S seconds from the start
  -h, --help       this text

Prints one JSON line with elapsed_s, bytes, processes, threads, mib and per process bytes,
passes and elapsed_s. Bad arguments exit 2; a failure while running exits 1.
";

fn parse_args(argv: &[String], online_cpus: u32) -> Result<Args, String> {
    let mut mib = None;
    let mut processes = 2u32;
    let mut threads = None;
    let mut loops = None;
    let mut seconds = None;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value"))
                .cloned()
        };
        match flag.as_str() {
            "--mib" => mib = Some(number::<u64>("--mib", &value("--mib")?)?),
            "--processes" => processes = number("--processes", &value("--processes")?)?,
            "--threads" => threads = Some(number::<u32>("--threads", &value("--threads")?)?),
            "--loops" => loops = Some(number::<u64>("--loops", &value("--loops")?)?),
            "--seconds" => seconds = Some(number::<f64>("--seconds", &value("--seconds")?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mib = mib.ok_or("--mib is required")?;
    if processes == 0 {
        return Err("--processes must be at least 1".into());
    }
    let threads = threads.unwrap_or_else(|| (online_cpus / processes).max(1));
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    let length = match (loops, seconds) {
        (Some(_), Some(_)) => return Err("give --loops or --seconds, not both".into()),
        (None, None) => return Err("give --loops or --seconds".into()),
        (Some(0), None) => return Err("--loops must be at least 1".into()),
        (Some(l), None) => Length::Loops(l),
        (None, Some(s)) if !(s.is_finite() && s > 0.0) => {
            return Err(format!("--seconds must be a positive number, got {s}"))
        }
        (None, Some(s)) => Length::Seconds(s),
    };
    // Every thread needs a slice of at least one page.
    let per_process = mib * MIB / u64::from(processes);
    if per_process / u64::from(threads) < page_size() {
        return Err(format!(
            "--mib {mib} over {processes} processes of {threads} threads leaves less than a page per thread"
        ));
    }
    Ok(Args {
        mib,
        processes,
        threads,
        length,
    })
}

fn number<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{name}: {text:?} is not a valid number"))
}

fn page_size() -> u64 {
    // Safety: plain libc query.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

fn online_cpus() -> u32 {
    // Safety: plain libc query.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).unwrap_or(1).max(1)
}

/// One process's share of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ProcessResult {
    /// Bytes written by all its threads, both phases.
    bytes: u64,
    /// Slice passes completed by all its threads.
    passes: u64,
    elapsed_s: f64,
}

/// An anonymous private mapping: one VMA, as numa01's `malloc(SIZE)` of gigabytes gets.
struct Region {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Region {
    fn map(len: usize) -> Result<Region, String> {
        // Safety: anonymous mapping, no address hint; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mmap of {} MiB failed: {}",
                len as u64 / MIB,
                std::io::Error::last_os_error()
            ));
        }
        Ok(Region { ptr, len })
    }

    fn words(&self) -> &[AtomicU64] {
        // Safety: the mapping is page-aligned, `len` bytes long, readable and writable, lives
        // as long as `self`, and is only accessed through atomics.
        unsafe {
            std::slice::from_raw_parts(self.ptr as *const AtomicU64, self.len / size_of::<u64>())
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Safety: unmaps exactly what `map` mapped.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

fn write_all(words: &[AtomicU64], value: u64) {
    for w in words {
        w.store(value, Ordering::Relaxed);
    }
}

/// One numa01 process: map, start the threads, let each write the whole region once and then
/// its own slice until the run's length is reached.
fn run_process(args: &Args, started: Instant) -> Result<ProcessResult, String> {
    let bytes = args.mib * MIB / u64::from(args.processes);
    let region = Region::map(bytes as usize)?;
    let words = region.words();
    let threads = args.threads as usize;
    let slice_len = words.len() / threads;
    let deadline = match args.length {
        Length::Seconds(s) => Some(started + Duration::from_secs_f64(s)),
        Length::Loops(_) => None,
    };
    let per_thread: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let own = &words[i * slice_len..(i + 1) * slice_len];
                scope.spawn(move || {
                    write_all(words, 0);
                    let mut written = (words.len() * size_of::<u64>()) as u64;
                    let mut passes = 0u64;
                    loop {
                        match (args.length, deadline) {
                            (Length::Loops(n), _) if passes >= n => break,
                            (Length::Seconds(_), Some(end)) if Instant::now() >= end => break,
                            _ => {}
                        }
                        write_all(own, passes + 1);
                        written += (own.len() * size_of::<u64>()) as u64;
                        passes += 1;
                    }
                    (written, passes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 0)))
            .collect()
    });
    Ok(ProcessResult {
        bytes: per_thread.iter().map(|t| t.0).sum(),
        passes: per_thread.iter().map(|t| t.1).sum(),
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// Runs `args.processes` processes (this one and forked children) and returns each one's
/// result, this process's first.
fn run(args: &Args) -> Result<Vec<ProcessResult>, String> {
    let started = Instant::now();
    let mut children = Vec::new();
    // Fork before any thread exists, as numa01 does.
    for _ in 1..args.processes {
        let mut fds = [0; 2];
        // Safety: plain syscalls; the child only runs this program's own code and exits.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // Safety: the child owns the write end; from_raw_fd takes it once.
            unsafe { libc::close(fds[0]) };
            let mut pipe =
                unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
            let code = match run_process(args, started) {
                Ok(r) => {
                    let line = format!("{} {} {}\n", r.bytes, r.passes, r.elapsed_s);
                    if pipe.write_all(line.as_bytes()).is_ok() {
                        0
                    } else {
                        1
                    }
                }
                Err(e) => {
                    eprintln!("lab-numa01 (child): {e}");
                    1
                }
            };
            drop(pipe);
            // Safety: leave without running the parent's atexit handlers or destructors twice.
            unsafe { libc::_exit(code) };
        }
        unsafe { libc::close(fds[1]) };
        children.push((pid, fds[0]));
    }
    let own = run_process(args, started);
    let mut results = Vec::new();
    let mut failures = Vec::new();
    match own {
        Ok(r) => results.push(r),
        Err(e) => failures.push(e),
    }
    for (pid, fd) in children {
        // Safety: the parent owns the read end.
        let mut pipe = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        let mut status = 0;
        // Safety: waits for our own child.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        let exited_ok = waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        match parse_child(&text) {
            Some(r) if exited_ok => results.push(r),
            _ => failures.push(format!(
                "child process {pid} failed (wait status {status:#x}, reported {:?})",
                text.trim()
            )),
        }
    }
    if failures.is_empty() {
        Ok(results)
    } else {
        Err(failures.join("; "))
    }
}

fn parse_child(text: &str) -> Option<ProcessResult> {
    let mut words = text.split_whitespace();
    let r = ProcessResult {
        bytes: words.next()?.parse().ok()?,
        passes: words.next()?.parse().ok()?,
        elapsed_s: words.next()?.parse().ok()?,
    };
    words.next().is_none().then_some(r)
}

/// The one-line result.
fn result_json(args: &Args, results: &[ProcessResult]) -> serde_json::Value {
    let elapsed = results.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
    let (loops, seconds) = match args.length {
        Length::Loops(l) => (Some(l), None),
        Length::Seconds(s) => (None, Some(s)),
    };
    serde_json::json!({
        "elapsed_s": elapsed,
        "bytes": results.iter().map(|r| r.bytes).sum::<u64>(),
        "passes": results.iter().map(|r| r.passes).sum::<u64>(),
        "processes": args.processes,
        "threads": args.threads,
        "mib": args.mib,
        "loops": loops,
        "seconds": seconds,
        "per_process": results.iter().map(|r| serde_json::json!({
            "bytes": r.bytes,
            "passes": r.passes,
            "elapsed_s": r.elapsed_s,
        })).collect::<Vec<_>>(),
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "-h" || a == "--help") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(&argv, online_cpus()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lab-numa01: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(results) => {
            println!("{}", result_json(&args, &results));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lab-numa01: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Result<Args, String> {
        let argv: Vec<String> = text.split_whitespace().map(String::from).collect();
        parse_args(&argv, 8)
    }

    #[test]
    fn defaults_follow_numa01() {
        let a = args("--mib 512 --loops 3").unwrap();
        assert_eq!(
            a,
            Args {
                mib: 512,
                processes: 2,
                threads: 4,
                length: Length::Loops(3),
            }
        );
        let a = args("--mib 64 --processes 1 --threads 3 --seconds 1.5").unwrap();
        assert_eq!((a.processes, a.threads), (1, 3));
        assert_eq!(a.length, Length::Seconds(1.5));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (text, want) in [
            ("--loops 3", "--mib is required"),
            ("--mib 64", "give --loops or --seconds"),
            ("--mib 64 --loops 1 --seconds 2", "not both"),
            ("--mib 64 --loops 0", "at least 1"),
            ("--mib 64 --seconds -1", "positive"),
            ("--mib x --loops 1", "not a valid number"),
            ("--mib 64 --loops 1 --processes 0", "--processes"),
            ("--mib 64 --loops 1 --threads 0", "--threads"),
            ("--mib 64 --loops", "needs a value"),
            ("--mib 64 --loops 1 --bind", "unknown argument"),
            ("--mib 1 --loops 1 --threads 512", "less than a page"),
        ] {
            let e = args(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn one_process_writes_what_it_reports() {
        let a = args("--mib 2 --processes 1 --threads 2 --loops 3").unwrap();
        let results = run(&a).unwrap();
        assert_eq!(results.len(), 1);
        // Each thread writes the whole 2 MiB once, then its 1 MiB slice 3 times.
        assert_eq!(results[0].bytes, 2 * (2 * MIB + 3 * MIB));
        assert_eq!(results[0].passes, 6);
    }

    #[test]
    fn forked_processes_report_through_the_pipe() {
        let a = args("--mib 4 --processes 2 --threads 1 --loops 2").unwrap();
        let results = run(&a).unwrap();
        assert_eq!(results.len(), 2);
        for r in &results {
            // 2 MiB each: the whole region once, then the one slice (the whole region) twice.
            assert_eq!(r.bytes, 3 * 2 * MIB);
        }
        let json = result_json(&a, &results);
        assert_eq!(json["bytes"], 12 * MIB);
        assert_eq!(json["loops"], 2);
        assert!(json["seconds"].is_null());
    }

    #[test]
    fn child_lines_must_be_whole() {
        assert_eq!(
            parse_child("10 2 0.5\n"),
            Some(ProcessResult {
                bytes: 10,
                passes: 2,
                elapsed_s: 0.5
            })
        );
        assert_eq!(parse_child("10 2"), None);
        assert_eq!(parse_child("10 2 0.5 9"), None);
        assert_eq!(parse_child(""), None);
    }
}
