//! Progress of long steps (provisioning, kernel builds, boots of an experiment), reported through
//! one sink so the library never prints. The CLI installs a `Reporter` once (bars on a
//! terminal, plain lines otherwise, see [`install_for_stderr`]); without one, events go to
//! `tracing` and appear only if a subscriber shows them.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// What the lab is doing, for a human watching.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// A step worth a line: "provisioning QEMU from 90 Debian packages".
    Step(String),
    /// Something the user must know although the run goes on (a substituted package).
    Warning(String),
    /// A counted task starts: `expected` steps if known (a kernel build's compile lines).
    TaskStart {
        id: u64,
        label: String,
        expected: Option<u64>,
    },
    /// The task reached `position`; `message` is its latest line.
    TaskProgress {
        id: u64,
        position: u64,
        message: String,
    },
    TaskEnd {
        id: u64,
    },
}

/// Renders events. Implementations must be cheap: events come from build loops.
pub(crate) trait Reporter: Send + Sync {
    fn report(&self, event: &Event);
}

static REPORTER: OnceLock<Box<dyn Reporter>> = OnceLock::new();
static NEXT_TASK: AtomicU64 = AtomicU64::new(1);

/// Installs the process's reporter; the first call wins (later ones return false).
pub(crate) fn set_reporter(reporter: Box<dyn Reporter>) -> bool {
    REPORTER.set(reporter).is_ok()
}

/// Installs `Bars` when stderr is a terminal, `Lines` otherwise.
pub fn install_for_stderr() -> bool {
    if std::io::stderr().is_terminal() {
        set_reporter(Box::new(Bars::default()))
    } else {
        set_reporter(Box::new(Lines))
    }
}

fn emit(event: Event) {
    match REPORTER.get() {
        Some(r) => r.report(&event),
        None => match &event {
            Event::Step(m) => tracing::info!("{m}"),
            Event::Warning(m) => tracing::warn!("{m}"),
            Event::TaskStart { label, .. } => tracing::info!("{label}"),
            Event::TaskProgress { .. } | Event::TaskEnd { .. } => {}
        },
    }
}

/// Reports a step.
pub(crate) fn step(message: impl Into<String>) {
    emit(Event::Step(message.into()));
}

/// Reports a warning.
pub(crate) fn warn(message: impl Into<String>) {
    emit(Event::Warning(message.into()));
}

/// A counted task; ends when dropped.
#[derive(Debug)]
pub(crate) struct Task {
    id: u64,
}

impl Task {
    pub(crate) fn start(label: impl Into<String>, expected: Option<u64>) -> Task {
        let id = NEXT_TASK.fetch_add(1, Ordering::Relaxed);
        emit(Event::TaskStart {
            id,
            label: label.into(),
            expected,
        });
        Task { id }
    }

    pub(crate) fn set(&self, position: u64, message: &str) {
        emit(Event::TaskProgress {
            id: self.id,
            position,
            message: message.to_string(),
        });
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        emit(Event::TaskEnd { id: self.id });
    }
}

/// Plain `lab: ...` lines on stderr, for logs and CI: steps and warnings, a task's start and end,
/// no per-line progress.
#[derive(Debug, Default)]
pub(crate) struct Lines;

impl Reporter for Lines {
    fn report(&self, event: &Event) {
        match event {
            Event::Step(m) => eprintln!("lab: {m}"),
            Event::Warning(m) => eprintln!("lab: warning: {m}"),
            Event::TaskStart { label, .. } => eprintln!("lab: {label} ..."),
            Event::TaskEnd { .. } | Event::TaskProgress { .. } => {}
        }
    }
}

/// indicatif bars on a terminal: a bar (or spinner) per task, steps printed above them.
#[derive(Default)]
pub(crate) struct Bars {
    multi: indicatif::MultiProgress,
    tasks: Mutex<std::collections::HashMap<u64, indicatif::ProgressBar>>,
}

impl Reporter for Bars {
    fn report(&self, event: &Event) {
        use indicatif::{ProgressBar, ProgressStyle};
        match event {
            Event::Step(m) => {
                let _ = self.multi.println(format!("lab: {m}"));
            }
            Event::Warning(m) => {
                let _ = self.multi.println(format!("lab: warning: {m}"));
            }
            Event::TaskStart {
                id,
                label,
                expected,
            } => {
                let bar = match expected {
                    Some(n) => ProgressBar::new(*n).with_style(
                        ProgressStyle::with_template(
                            "{prefix} [{elapsed_precise}] {bar:30} {pos}/~{len} (eta {eta}) {wide_msg}",
                        )
                        .expect("valid template"),
                    ),
                    None => ProgressBar::new_spinner().with_style(
                        ProgressStyle::with_template("{prefix} {spinner} [{elapsed_precise}] {wide_msg}")
                            .expect("valid template"),
                    ),
                };
                let bar = self.multi.add(bar);
                bar.set_prefix(label.clone());
                bar.enable_steady_tick(std::time::Duration::from_millis(250));
                self.tasks.lock().unwrap().insert(*id, bar);
            }
            Event::TaskProgress {
                id,
                position,
                message,
            } => {
                if let Some(bar) = self.tasks.lock().unwrap().get(id) {
                    bar.set_position(*position);
                    bar.set_message(message.clone());
                }
            }
            Event::TaskEnd { id } => {
                if let Some(bar) = self.tasks.lock().unwrap().remove(id) {
                    bar.finish_and_clear();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_reach_the_installed_reporter_in_order() {
        struct Collect(std::sync::Arc<Mutex<Vec<Event>>>);
        impl Reporter for Collect {
            fn report(&self, event: &Event) {
                self.0.lock().unwrap().push(event.clone());
            }
        }
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        // Unit tests run in one process: this is the only test that installs a reporter.
        assert!(set_reporter(Box::new(Collect(seen.clone()))));
        step("one");
        {
            let task = Task::start("build", Some(3));
            task.set(2, "CC fair.o");
        }
        warn("two");
        let seen = seen.lock().unwrap();
        // Other tests of this process may report too: find ours by content.
        let at = |f: &dyn Fn(&Event) -> bool| seen.iter().position(f).expect("event missing");
        let one = at(&|e| matches!(e, Event::Step(m) if m == "one"));
        let progress = at(
            &|e| matches!(e, Event::TaskProgress { position: 2, message, .. } if message == "CC fair.o"),
        );
        let two = at(&|e| matches!(e, Event::Warning(m) if m == "two"));
        assert!(one < progress && progress < two, "{seen:?}");
        assert!(!set_reporter(Box::new(Lines)), "the first reporter wins");
    }
}
