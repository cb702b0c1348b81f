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
