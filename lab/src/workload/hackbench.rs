//! `hackbench` from Debian's rt-tests: groups of senders and receivers passing small messages
//! over pipes or UNIX sockets, as threads or processes; it prints the elapsed time.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// One hackbench run's shape (`hackbench -g GROUPS -f FDS -l LOOPS -s DATASIZE [--threads]
/// [--pipe]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hackbench {
    /// Groups of `fds` senders and `fds` receivers.
    pub groups: u32,
    /// Senders and receivers per group.
    pub fds: u32,
    /// Messages each sender sends to each receiver of its group.
    pub loops: u32,
    /// Bytes per message.
    pub datasize: u32,
    /// Threads (the seed's `--threads`) instead of processes.
    pub threads: bool,
    /// Pipes instead of UNIX stream sockets.
    pub pipe: bool,
}

/// What one run reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HackbenchResult {
    /// hackbench's own `Time:` line.
    pub seconds: f64,
}

impl Hackbench {
    /// The seed's run (`hackbench -g 112 -f 20 --threads -l 30000 -s 100`: 4480 tasks on a
    /// 224-CPU machine).
    pub fn seed() -> Hackbench {
        Hackbench {
            groups: 112,
            fds: 20,
            loops: 30000,
            datasize: 100,
            threads: true,
            pipe: false,
        }
    }

    /// Senders plus receivers.
    #[cfg(test)]
    pub(crate) fn tasks(&self) -> u64 {
        2 * u64::from(self.groups) * u64::from(self.fds)
    }

    /// Messages passed in one run: every sender sends `loops` to each receiver of its group.
    pub fn messages(&self) -> u64 {
        u64::from(self.groups) * u64::from(self.fds) * u64::from(self.fds) * u64::from(self.loops)
    }

    /// Rejects shapes hackbench would refuse or that measure nothing.
    pub fn check(&self) -> Result<()> {
        for (name, value) in [
            ("groups", self.groups),
            ("fds", self.fds),
            ("loops", self.loops),
            ("datasize", self.datasize),
        ] {
            if value == 0 {
                bail!("hackbench.{name} must be at least 1");
            }
        }
        // hackbench's own limit: each task holds a descriptor per peer, and the guest's
        // default RLIMIT_NOFILE is 1024.
        if self.fds > 500 {
            bail!("hackbench.fds is {}, at most 500", self.fds);
        }
        Ok(())
    }

    /// The command line (for `GuestCommand::new`).
    pub fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "hackbench".into(),
            "--groups".into(),
            self.groups.to_string(),
            "--fds".into(),
            self.fds.to_string(),
            "--loops".into(),
            self.loops.to_string(),
            "--datasize".into(),
            self.datasize.to_string(),
        ];
        if self.threads {
            argv.push("--threads".into());
        }
        if self.pipe {
            argv.push("--pipe".into());
        }
        argv
    }
}

impl HackbenchResult {
    /// Reads the `Time: 1.234` line.
    pub fn parse(stdout: &str) -> Result<HackbenchResult> {
        let line = stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("Time:"))
            .with_context(|| format!("hackbench printed no `Time:` line:\n{stdout}"))?;
        let seconds: f64 = line
            .trim()
            .parse()
            .with_context(|| format!("hackbench's time {:?} is not a number", line.trim()))?;
        Ok(HackbenchResult { seconds })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_shape_has_4480_tasks() {
        let seed = Hackbench::seed();
        assert_eq!(seed.tasks(), 4480);
        assert_eq!(seed.messages(), 112 * 20 * 20 * 30000);
        assert_eq!(
            seed.argv().join(" "),
            "hackbench --groups 112 --fds 20 --loops 30000 --datasize 100 --threads"
        );
    }

    #[test]
    fn parses_the_time_line_and_refuses_output_without_one() {
        let out =
            "Running in threaded mode with 2 groups using 40 file descriptors each (== 80 tasks)\n\
                   Each sender will pass 100 messages of 100 bytes\nTime: 12.345\n";
        assert_eq!(HackbenchResult::parse(out).unwrap().seconds, 12.345);
        let err = HackbenchResult::parse("Segmentation fault\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no `Time:` line"), "{err}");
        assert!(HackbenchResult::parse("Time: soon\n").is_err());
    }

    #[test]
    fn check_names_the_bad_field() {
        let mut h = Hackbench::seed();
        h.loops = 0;
        assert!(h
            .check()
            .unwrap_err()
            .to_string()
            .contains("hackbench.loops"));
        let mut h = Hackbench::seed();
        h.fds = 600;
        assert!(h.check().unwrap_err().to_string().contains("hackbench.fds"));
    }
}
