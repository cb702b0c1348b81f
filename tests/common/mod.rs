//! Shared helpers for the scenario tests.
#![allow(dead_code)]

use std::time::Duration;

use lab::Lab;

/// The lab for this test process (provisioning is cached across processes). Progress (builds,
/// boots of an experiment) goes to stderr as plain lines, which nextest shows for failures.
pub async fn lab() -> Lab {
    lab::progress::install_for_stderr();
    Lab::from_env_async()
        .await
        .unwrap_or_else(|e| panic!("the lab could not start on this host: {e:#}"))
}

/// Whether process `pid` still exists (zombies count as gone: they hold no resources and
/// cannot run).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Waits up to `limit` for `pid` to be gone.
pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !process_alive(pid)
}
