//! `lab-numa01`, the lab's own numa01_THREAD_ALLOC-shaped program (`lab/agent/src/bin/
//! lab-numa01.rs`, at [`crate::guest::NUMA01_GUEST_PATH`] in the images whose recipe lists it in
//! `lab_programs`): processes that each map one region, with unbound threads that write all of
//! it once and then their own slice over and over. It prints one JSON line, parsed here.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::guest::GuestCommand;

/// One run's shape (`lab-numa01 --mib N --processes P [--threads T] (--loops L | --seconds S)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Numa01 {
    /// Total over all processes; each maps `mib / processes`.
    pub mib: u64,
    /// Processes.
    pub processes: u32,
    /// Threads per process; `None`: the guest's CPUs divided by `processes` (numa01's default).
    pub threads: Option<u32>,
    /// Passes over each thread's slice (numa01_THREAD_ALLOC: 1000 over 3 GiB per process).
    pub loops: Option<u64>,
    /// Instead of `loops`: write slices for this long.
    pub seconds: Option<f64>,
}

/// What one run reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Numa01Result {
    /// From the start to the last process's end, as the program measured it in the guest.
    pub elapsed_s: f64,
    /// Bytes written by all threads (the first whole-region pass included).
    pub bytes: u64,
    /// Slice passes completed by all threads.
    pub passes: u64,
    /// The run's shape, as the program took it.
    pub processes: u32,
    /// Threads per process.
    pub threads: u32,
    /// MiB over all processes.
    pub mib: u64,
    /// `--loops`, if given.
    pub loops: Option<u64>,
    /// `--seconds`, if given.
    pub seconds: Option<f64>,
}

impl Numa01 {
    /// The program's arguments.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec![
            crate::guest::NUMA01_GUEST_PATH.to_string(),
            "--mib".into(),
            self.mib.to_string(),
            "--processes".into(),
            self.processes.to_string(),
        ];
        if let Some(t) = self.threads {
            argv.extend(["--threads".into(), t.to_string()]);
        }
        if let Some(l) = self.loops {
            argv.extend(["--loops".into(), l.to_string()]);
        }
        if let Some(s) = self.seconds {
            argv.extend(["--seconds".into(), s.to_string()]);
        }
        argv
    }

    /// Rejects shapes the program would refuse, before anything boots.
    pub fn check(&self) -> Result<()> {
        if self.mib == 0 {
            bail!("mib must be at least 1");
        }
        if self.processes == 0 || self.threads == Some(0) {
            bail!("processes and threads must be at least 1");
        }
        match (self.loops, self.seconds) {
            (Some(0), _) => bail!("loops must be at least 1"),
            (Some(_), None) => {}
            (None, Some(s)) if s.is_finite() && s > 0.0 => {}
            (None, Some(s)) => bail!("seconds must be a positive number, got {s}"),
            (Some(_), Some(_)) => bail!("set loops or seconds, not both (set the other to null)"),
            (None, None) => bail!("set loops or seconds"),
        }
        Ok(())
    }

    /// The guest command, with `limit` as its timeout.
    pub fn command(&self, limit: Duration) -> GuestCommand {
        GuestCommand::new(self.argv()).timeout(limit)
    }
}

impl Numa01Result {
    /// The program's last non-empty stdout line.
    pub fn parse(stdout: &str) -> Result<Numa01Result> {
        let line = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .context("lab-numa01 printed nothing")?;
        let r: Numa01Result = serde_json::from_str(line)
            .with_context(|| format!("lab-numa01's result line {line:?}"))?;
        if !(r.elapsed_s.is_finite() && r.elapsed_s > 0.0) || r.bytes == 0 {
            bail!("lab-numa01 reported no work: {line}");
        }
        Ok(r)
    }

    /// Bytes written per second over the run.
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes as f64 / self.elapsed_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Numa01 {
        Numa01 {
            mib: 512,
            processes: 2,
            threads: None,
            loops: Some(4),
            seconds: None,
        }
    }

    #[test]
    fn argv_names_only_what_is_set() {
        assert_eq!(
            shape().argv().join(" "),
            "/usr/bin/lab-numa01 --mib 512 --processes 2 --loops 4"
        );
        let timed = Numa01 {
            threads: Some(3),
            loops: None,
            seconds: Some(20.0),
            ..shape()
        };
        assert_eq!(
            timed.argv().join(" "),
            "/usr/bin/lab-numa01 --mib 512 --processes 2 --threads 3 --seconds 20"
        );
    }

    #[test]
    fn check_wants_exactly_one_length() {
        shape().check().unwrap();
        let both = Numa01 {
            seconds: Some(1.0),
            ..shape()
        };
        assert!(both.check().unwrap_err().to_string().contains("not both"));
        let neither = Numa01 {
            loops: None,
            ..shape()
        };
        assert!(neither.check().is_err());
        for bad in [
            Numa01 { mib: 0, ..shape() },
            Numa01 {
                loops: Some(0),
                ..shape()
            },
            Numa01 {
                threads: Some(0),
                ..shape()
            },
            Numa01 {
                loops: None,
                seconds: Some(f64::NAN),
                ..shape()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn parses_the_result_line() {
        let out = "{\"elapsed_s\":21.5,\"bytes\":2147483648,\"passes\":40,\"processes\":2,\
                   \"threads\":4,\"mib\":512,\"loops\":5,\"seconds\":null,\"per_process\":[]}\n";
        let r = Numa01Result::parse(out).unwrap();
        assert_eq!((r.processes, r.threads, r.passes), (2, 4, 40));
        assert_eq!(r.loops, Some(5));
        assert!((r.bytes_per_second() - 2147483648.0 / 21.5).abs() < 1e-3);
        assert!(Numa01Result::parse("").is_err());
        assert!(Numa01Result::parse("not json\n").is_err());
        let idle = out.replace("2147483648", "0");
        assert!(Numa01Result::parse(&idle)
            .unwrap_err()
            .to_string()
            .contains("no work"));
    }
}
