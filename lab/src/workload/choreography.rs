//! The steps every placement scenario's guest script takes around its workload, as shell text
//! to put in a [`crate::guest::GuestCommand::shell`] script: keep the script's own shell off
//! the CPUs being watched, start the watched task pinned and free it once it is ready, wait for
//! a guest-side condition without forking on the watched CPUs.
//!
//! ```
//! use lab::workload::choreography::{control_shell, start_pinned_then_widen};
//!
//! // The receiver starts on CPU 0 and may go anywhere once bound; the shell stays on CPU 7.
//! let script = format!(
//!     "{}{}",
//!     control_shell(Some(7)),
//!     start_pinned_then_widen(0, "lab-udp-sink --port 9000 --ready /tmp/ready", "/tmp/ready")
//! );
//! assert!(script.starts_with("taskset -p -c 7 $$"));
//! ```

/// Moves the script's own shell (and so every command it forks) to `cpu`; nothing for `None`
/// (a topology with no CPU outside the watched LLCs leaves the shell where the kernel puts it).
pub fn control_shell(cpu: Option<u32>) -> String {
    match cpu {
        Some(c) => format!("taskset -p -c {c} $$ > /dev/null\n"),
        None => String::new(),
    }
}

/// Waits until guest file `path` exists, a look every 50 ms; the looks' `sleep`s run on
/// `cpu` when given, off the CPUs being watched. `path` must hold no single quote.
pub fn wait_for_file(path: &str, cpu: Option<u32>) -> String {
    let wait = format!("while [ ! -e '{path}' ]; do sleep 0.05; done");
    match cpu {
        Some(c) => format!("taskset -c {c} sh -c \"{wait}\"\n"),
        None => format!("{wait}\n"),
    }
}

/// Starts `command` (one simple command: a program and its arguments) pinned to `cpu` in the
/// background, waits for `ready` (a file the program writes once it is set up, and then
/// blocks), widens it to every online CPU, and waits for it, ending with its exit status.
/// Where it runs from then on is the scheduler's choice: the placement under test.
pub fn start_pinned_then_widen(cpu: u32, command: &str, ready: &str) -> String {
    format!(
        "taskset -c {cpu} {command} &\n\
         pid=$!\n\
         {wait}\
         taskset -p -c $(cat /sys/devices/system/cpu/online) $pid > /dev/null\n\
         wait $pid\n",
        wait = wait_for_file(ready, None)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_shell(script: &str) {
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", script])
            .status()
            .unwrap();
        assert!(status.success(), "not valid shell:\n{script}");
    }

    #[test]
    fn the_steps_are_valid_shell_and_say_what_they_do() {
        assert_eq!(control_shell(None), "");
        assert_eq!(control_shell(Some(3)), "taskset -p -c 3 $$ > /dev/null\n");
        let wait = wait_for_file("/tmp/ready", Some(7));
        assert_eq!(
            wait,
            "taskset -c 7 sh -c \"while [ ! -e '/tmp/ready' ]; do sleep 0.05; done\"\n"
        );
        valid_shell(&wait);
        let start = start_pinned_then_widen(0, "lab-udp-sink --port 9000", "/tmp/ready");
        assert!(start.starts_with("taskset -c 0 lab-udp-sink --port 9000 &\npid=$!\n"));
        assert!(start.ends_with("wait $pid\n"));
        valid_shell(&format!("{}{start}", control_shell(Some(7))));
    }

    #[test]
    fn a_widened_task_ends_with_its_status() {
        // Run for real by the host's sh: the "task" writes its ready file, then exits 3.
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let command = format!("sh -c 'touch {} && exit 3'", ready.display());
        let script = start_pinned_then_widen(0, &command, ready.to_str().unwrap());
        let status = std::process::Command::new("sh")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(3), "{script}");
    }
}
