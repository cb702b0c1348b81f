//! `lab-udp-sink`: a UDP receiver for network scenarios, the task a NIC's interrupt wakes. Built
//! static beside the agent (`lab/build.rs`) and placed in the images that list it.
//!
//! ```text
//! lab-udp-sink --port P [--count N] [--idle-ms MS] [--ready FILE]
//! ```
//!
//! Binds `0.0.0.0:P`, writes FILE once bound (so a caller knows when to start sending), then
//! receives datagrams until N have arrived or none came for MS milliseconds (default 2000), and
//! prints one JSON line:
//!
//! ```text
//! {"received":1000,"bytes":64000,"first_seq":0,"last_seq":999,"out_of_order":0,"seconds":1.02}
//! ```
//!
//! `seconds` runs from the first datagram to the last. A datagram's first 8 bytes are its
//! sequence number (big-endian), as the lab's traffic source writes them. Bad arguments exit 2.

use std::net::UdpSocket;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
struct Args {
    port: u16,
    count: Option<u64>,
    idle: Duration,
    ready: Option<String>,
}

const USAGE: &str = "usage: lab-udp-sink --port P [--count N] [--idle-ms MS] [--ready FILE]";

/// `--help`: the flags and the output, as the module's doc says them.
const HELP: &str = "\
usage: lab-udp-sink --port P [--count N] [--idle-ms MS] [--ready FILE]

Receives UDP datagrams on 0.0.0.0:P: the task a NIC's receive interrupt wakes.

  --port P       the UDP port to bind (required)
  --count N      stop after N datagrams (default: only on idle)
  --idle-ms MS   stop when none came for MS milliseconds (default 2000)
  --ready FILE   write FILE once bound, so a sender knows when to start
  -h, --help     this text

Prints one JSON line: received, bytes, first_seq, last_seq, out_of_order (a datagram's first
8 bytes are its big-endian sequence number) and seconds (first datagram to last).
Bad arguments exit 2.
";

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut port = None;
    let mut count = None;
    let mut idle = Duration::from_millis(2000);
    let mut ready = None;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let number = |v: &str| -> Result<u64, String> {
            v.parse()
                .map_err(|_| format!("{flag} {v}: not a whole number\n{USAGE}"))
        };
        match flag.as_str() {
            "--port" => {
                let v = value()?;
                port = Some(
                    u16::try_from(number(v)?)
                        .map_err(|_| format!("--port {v}: at most 65535\n{USAGE}"))?,
                );
            }
            "--count" => count = Some(number(value()?)?),
            "--idle-ms" => idle = Duration::from_millis(number(value()?)?),
            "--ready" => ready = Some(value()?.clone()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(Args {
        port: port.ok_or(format!("--port is required\n{USAGE}"))?,
        count,
        idle,
        ready,
    })
}

/// What arrived.
#[derive(Debug, Default, Clone, PartialEq)]
struct Tally {
    received: u64,
    bytes: u64,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    out_of_order: u64,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
}

impl Tally {
    fn add(&mut self, datagram: &[u8], at: Instant) {
        self.received += 1;
        self.bytes += datagram.len() as u64;
        if datagram.len() >= 8 {
            let seq = u64::from_be_bytes(datagram[..8].try_into().expect("8 bytes"));
            if self.last_seq.is_some_and(|last| seq <= last) {
                self.out_of_order += 1;
            }
            self.first_seq.get_or_insert(seq);
            self.last_seq = Some(seq);
        }
        self.first_at.get_or_insert(at);
        self.last_at = Some(at);
    }

    fn json(&self) -> String {
        let seq = |s: Option<u64>| s.map_or("null".to_string(), |s| s.to_string());
        let seconds = match (self.first_at, self.last_at) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        format!(
            "{{\"received\":{},\"bytes\":{},\"first_seq\":{},\"last_seq\":{},\"out_of_order\":{},\"seconds\":{seconds:.6}}}",
            self.received,
            self.bytes,
            seq(self.first_seq),
            seq(self.last_seq),
            self.out_of_order
        )
    }
}

fn receive(args: &Args) -> Result<Tally, String> {
    let socket = UdpSocket::bind(("0.0.0.0", args.port))
        .map_err(|e| format!("binding UDP port {}: {e}", args.port))?;
    socket
        .set_read_timeout(Some(args.idle.max(Duration::from_millis(1))))
        .map_err(|e| format!("setting the idle timeout: {e}"))?;
    if let Some(path) = &args.ready {
        std::fs::write(path, "ready\n").map_err(|e| format!("writing {path}: {e}"))?;
    }
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 65536];
    while args.count.is_none_or(|n| tally.received < n) {
        match socket.recv(&mut buf) {
            Ok(len) => tally.add(&buf[..len], Instant::now()),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break
            }
            Err(e) => return Err(format!("receiving: {e}")),
        }
    }
    Ok(tally)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "-h" || a == "--help") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lab-udp-sink: {e}");
            return ExitCode::from(2);
        }
    };
    match receive(&args) {
        Ok(tally) => {
            println!("{}", tally.json());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lab-udp-sink: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        assert!(parse_args(&argv(""))
            .unwrap_err()
            .contains("--port is required"));
        assert!(parse_args(&argv("--port 70000"))
            .unwrap_err()
            .contains("at most 65535"));
        assert!(parse_args(&argv("--port 9 --count x"))
            .unwrap_err()
            .contains("--count x"));
        assert!(parse_args(&argv("--port 9 --loud"))
            .unwrap_err()
            .contains("unknown argument --loud"));
        let a = parse_args(&argv("--port 9 --count 5 --idle-ms 10 --ready /r")).unwrap();
        assert_eq!(a.count, Some(5));
        assert_eq!(a.idle, Duration::from_millis(10));
        assert_eq!(a.ready.as_deref(), Some("/r"));
    }

    #[test]
    fn datagrams_on_loopback_are_counted_in_order() {
        let dir = std::env::temp_dir().join(format!("lab-udp-sink-{}", std::process::id()));
        let ready = dir.with_extension("ready");
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let args = Args {
            port,
            count: Some(3),
            idle: Duration::from_millis(2000),
            ready: Some(ready.display().to_string()),
        };
        let sink = std::thread::spawn(move || receive(&args));
        while !ready.exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let out = UdpSocket::bind("127.0.0.1:0").unwrap();
        for seq in [0u64, 2, 1] {
            let mut d = seq.to_be_bytes().to_vec();
            d.extend([0u8; 8]);
            out.send_to(&d, ("127.0.0.1", port)).unwrap();
        }
        let tally = sink.join().unwrap().unwrap();
        std::fs::remove_file(&ready).unwrap();
        assert_eq!((tally.received, tally.bytes), (3, 48));
        assert_eq!((tally.first_seq, tally.last_seq), (Some(0), Some(1)));
        assert_eq!(tally.out_of_order, 1);
        assert!(tally.json().starts_with("{\"received\":3,\"bytes\":48,"));
    }
}
