//! Child processes that never outlive the lab: QEMU, the device models, the KVM probe and the
//! benchmark's hand-written QEMU each run in their own process group, which is killed when the
//! handle drops, and get SIGKILL from the kernel if the lab process dies first
//! (`PR_SET_PDEATHSIG`). Its own module because the VM, the devices, the toolchain probe and
//! the benchmarks all start children this way.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use anyhow::{Context, Result};

/// Makes `cmd` start a new process group and die with its parent.
fn isolate(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (setpgid, prctl, getppid, kill) run between fork and
    // exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then we were reparented.
            if libc::getppid() == 1 {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Makes `cmd` start on `cpus` only (`sched_setaffinity` before exec), so every thread it
/// creates inherits that set: QEMU's I/O, RCU and worker threads and the device models run on
/// the housekeeping CPUs of a pinned topology. QEMU's vCPU threads are then moved one by one.
/// CPUs at or above [`crate::topology::MAX_HOST_CPUS`] are left out of the set.
pub fn restrict_to_cpus(cmd: &mut Command, cpus: &[u32]) {
    // SAFETY: a zeroed cpu_set_t is valid and CPU_SET stays within it (ids are bounded above).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            if (cpu as usize) < crate::topology::MAX_HOST_CPUS {
                libc::CPU_SET(cpu as usize, &mut set);
            }
        }
        set
    };
    // SAFETY: sched_setaffinity is a plain syscall, async-signal-safe between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPUs a thread or process may run on (`sched_getaffinity`).
pub fn affinity_of(tid: u32) -> std::io::Result<Vec<u32>> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it; CPU_ISSET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..crate::topology::MAX_HOST_CPUS)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c as u32)
            .collect())
    }
}

/// A synchronous child in its own process group.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
}

/// Spawns `cmd` isolated as above.
pub fn spawn_in_group(cmd: &mut Command) -> Result<GroupChild> {
    isolate(cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    Ok(GroupChild { child })
}

impl GroupChild {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    pub fn inner(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

/// Kills a whole process group led by `pid`.
pub fn kill_group(pid: u32) {
    // SAFETY: plain syscall; a stale pgid only yields ESRCH.
    unsafe {
        libc::killpg(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// An async child in its own process group; the group is killed on drop.
#[derive(Debug)]
pub struct AsyncGroupChild {
    pub child: tokio::process::Child,
    pgid: u32,
}

/// Spawns an async `cmd` isolated as above.
pub fn spawn_async_in_group(mut cmd: Command) -> Result<AsyncGroupChild> {
    isolate(&mut cmd);
    let program = cmd.get_program().to_owned();
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {program:?}"))?;
    let pgid = child.id().context("child exited at once")?;
    Ok(AsyncGroupChild { child, pgid })
}

impl AsyncGroupChild {
    pub fn pid(&self) -> u32 {
        self.pgid
    }
}

impl Drop for AsyncGroupChild {
    fn drop(&mut self) {
        kill_group(self.pgid);
        // Reap it now so no zombie lingers in the test's process table.
        let _ = self.child.start_kill();
        // SIGKILL takes effect within milliseconds; wait (bounded) so no zombie lingers.
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child restricted to one CPU (one this process may use) runs there, and so does every
    /// thread it starts: its affinity is set before exec.
    #[test]
    fn restrict_to_cpus_sets_the_childs_affinity_before_exec() {
        let own = affinity_of(0).unwrap();
        let cpu = *own.last().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        restrict_to_cpus(&mut cmd, &[cpu]);
        let child = spawn_in_group(&mut cmd).unwrap();
        assert_eq!(affinity_of(child.id()).unwrap(), vec![cpu]);
        drop(child);
        // Our own affinity is untouched.
        assert_eq!(affinity_of(0).unwrap(), own);
    }
}
