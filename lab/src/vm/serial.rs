//! The guest's serial console: copied to a log file kept with the results, its last lines kept
//! in memory for error messages, and scanned for the signs of a dead guest (panic, oops) so a
//! crash becomes an error within a bounded time instead of a hung test.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::watch;

/// How many trailing lines error messages quote.
pub(crate) const TAIL_LINES: usize = 40;

/// The longest line kept whole: a guest that prints without newlines cannot make the reader
/// hold more than this (the rest of such a line is still written to the log, in pieces).
pub(crate) const MAX_LINE: usize = 64 << 10;

/// The most of the console the log keeps: a guest printing without end (a kernel spamming
/// its log, `yes > /dev/console`) cannot fill the results' disk. Past it the log says so once;
/// the tail and the panic watch go on.
pub(crate) const LOG_KEPT: u64 = 64 << 20;

/// What the console has shown so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum ConsoleState {
    #[default]
    Booting,
    /// The kernel panicked; the line that said so.
    Panicked(String),
    /// The console closed (QEMU exited).
    Closed,
}

/// A handle on a running console reader.
#[derive(Debug, Clone)]
pub(crate) struct Console {
    tail: Arc<Mutex<VecDeque<String>>>,
    state: watch::Receiver<ConsoleState>,
    pub log_path: PathBuf,
}

/// Lines that mean the guest kernel is dead or dying.
fn panic_line(line: &str) -> bool {
    line.contains("Kernel panic - not syncing") || line.contains("---[ end Kernel panic")
}

/// The next line of `reader` without its newline, or its first `max` bytes when it is longer
/// (the rest comes as the next lines); `None` at the end.
async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let room = max - line.len();
        match buf.iter().take(room).position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                reader.consume(i + 1);
                return Ok(Some(line));
            }
            None => {
                let n = buf.len().min(room);
                line.extend_from_slice(&buf[..n]);
                reader.consume(n);
                if line.len() == max {
                    return Ok(Some(line));
                }
            }
        }
    }
}

impl Console {
    /// Starts copying `reader` (QEMU's stdout, where the serial port goes) to `log_path`.
    pub(crate) fn spawn<R: AsyncRead + Unpin + Send + 'static>(
        reader: R,
        log_path: PathBuf,
    ) -> Console {
        Self::spawn_keeping(reader, log_path, LOG_KEPT)
    }

    /// [`Console::spawn`] with a log of at most `kept` bytes.
    fn spawn_keeping<R: AsyncRead + Unpin + Send + 'static>(
        reader: R,
        log_path: PathBuf,
        kept: u64,
    ) -> Console {
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let (tx, rx) = watch::channel(ConsoleState::Booting);
        let console = Console {
            tail: tail.clone(),
            state: rx,
            log_path: log_path.clone(),
        };
        tokio::spawn(async move {
            let mut log = match tokio::fs::File::create(&log_path).await {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!("cannot write serial log {}: {e}", log_path.display());
                    None
                }
            };
            let mut reader = BufReader::new(reader);
            let mut written: u64 = 0;
            while let Ok(Some(raw)) = next_line(&mut reader, MAX_LINE).await {
                let line = String::from_utf8_lossy(&raw)
                    .trim_end_matches('\r')
                    .to_string();
                if let Some(f) = log.as_mut() {
                    written += line.len() as u64 + 1;
                    if written <= kept {
                        let _ = f.write_all(line.as_bytes()).await;
                        let _ = f.write_all(b"\n").await;
                    } else {
                        let note = format!("[lab: the console past {kept} bytes is not kept]\n");
                        let _ = f.write_all(note.as_bytes()).await;
                        let _ = f.flush().await;
                        log = None;
                    }
                }
                tracing::debug!(target: "serial", "{line}");
                if panic_line(&line) && matches!(*tx.borrow(), ConsoleState::Booting) {
                    let _ = tx.send(ConsoleState::Panicked(line.clone()));
                }
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
            if let Some(f) = log.as_mut() {
                let _ = f.flush().await;
            }
            tx.send_if_modified(|s| {
                if *s == ConsoleState::Booting {
                    *s = ConsoleState::Closed;
                    true
                } else {
                    false
                }
            });
        });
        console
    }

    /// The last lines the guest printed.
    pub(crate) fn tail(&self) -> Vec<String> {
        self.tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// The tail, indented, for error messages.
    pub(crate) fn tail_text(&self) -> String {
        let tail = self.tail();
        if tail.is_empty() {
            return "    (the serial console printed nothing)".into();
        }
        tail.iter().map(|l| format!("    | {l}\n")).collect()
    }

    /// Resolves once the console shows a panic or closes.
    pub(crate) async fn dead(&self) -> ConsoleState {
        let mut rx = self.state.clone();
        loop {
            let state = rx.borrow_and_update().clone();
            if state != ConsoleState::Booting {
                return state;
            }
            if rx.changed().await.is_err() {
                return ConsoleState::Closed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_without_end_is_kept_in_bounded_pieces() {
        let text = [vec![b'x'; 10], b"\nshort\n".to_vec(), vec![b'y'; 25]].concat();
        let mut reader = BufReader::with_capacity(4, &text[..]);
        let mut lines = Vec::new();
        while let Some(line) = next_line(&mut reader, 8).await.unwrap() {
            lines.push(String::from_utf8(line).unwrap());
        }
        assert_eq!(
            lines,
            ["xxxxxxxx", "xx", "short", "yyyyyyyy", "yyyyyyyy", "yyyyyyyy", "y"]
        );
    }

    #[tokio::test]
    async fn panic_is_detected_and_tail_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, r) = tokio::io::duplex(4096);
        let console = Console::spawn(r, dir.path().join("serial.log"));
        w.write_all(b"booting\r\nKernel panic - not syncing: Attempted to kill init!\n")
            .await
            .unwrap();
        let state = console.dead().await;
        assert!(matches!(state, ConsoleState::Panicked(ref l) if l.contains("kill init")));
        drop(w);
        assert!(console.tail_text().contains("booting"));
    }

    #[tokio::test]
    async fn a_console_that_never_stops_keeps_a_bounded_log_and_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("serial.log");
        let (mut w, r) = tokio::io::duplex(4096);
        let console = Console::spawn_keeping(r, log.clone(), 100);
        for i in 0..1000 {
            w.write_all(format!("line {i}\n").as_bytes()).await.unwrap();
        }
        w.write_all(b"Kernel panic - not syncing: late\n")
            .await
            .unwrap();
        drop(w);
        assert!(matches!(console.dead().await, ConsoleState::Panicked(_)));
        // The reader flushes and drops the log when the console ends.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.starts_with("line 0\nline 1\n"), "{text}");
        assert!(text.len() < 150, "{}", text.len());
        assert!(
            text.ends_with("[lab: the console past 100 bytes is not kept]\n"),
            "{text}"
        );
        assert!(console.tail_text().contains("line 999"));
    }
}
