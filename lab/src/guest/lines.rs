//! One output stream of a guest command as it arrives: split into lines for tracing and the
//! guest log, kept for the caller up to a bound. A guest is untrusted: `yes` in it would
//! otherwise grow the lab's memory and the log without limit (`lab run -- sh -c 'yes | head -c
//! 100000000'` peaked at 130 MB of resident memory before the bound, docs/MEASUREMENTS.md).

use super::{tail, Shared};

/// The most of each stream of one command the lab keeps (and logs); the rest is counted in
/// [`super::GuestOutput::dropped`], and its last bytes are kept for error messages.
pub const OUTPUT_KEPT: usize = 16 << 20;

/// One stream of one command.
pub(super) struct Lines {
    label: String,
    stream: &'static str,
    /// The first [`OUTPUT_KEPT`] bytes.
    pub(super) all: Vec<u8>,
    /// Start of the line not yet logged.
    line_start: usize,
    /// Bytes past the bound, not kept.
    pub(super) dropped: u64,
    /// The last bytes, once some were dropped: what an error quotes.
    recent: Vec<u8>,
    kept: usize,
}

impl Lines {
    /// A line longer than this is logged in pieces.
    const MAX_LINE: usize = 16 << 10;

    pub(super) fn new(label: &str, stream: &'static str) -> Self {
        Self::with_bound(label, stream, OUTPUT_KEPT)
    }

    fn with_bound(label: &str, stream: &'static str, kept: usize) -> Self {
        Lines {
            label: label.to_string(),
            stream,
            all: Vec::new(),
            line_start: 0,
            dropped: 0,
            recent: Vec::new(),
            kept,
        }
    }

    pub(super) fn push(&mut self, chunk: &[u8], shared: &Shared) {
        let room = self.kept - self.all.len();
        let (keep, past) = chunk.split_at(chunk.len().min(room));
        self.all.extend_from_slice(keep);
        while let Some(nl) = self.all[self.line_start..].iter().position(|&b| b == b'\n') {
            let end = self.line_start + nl;
            self.emit(self.line_start, end, shared);
            self.line_start = end + 1;
        }
        if self.all.len() - self.line_start > Self::MAX_LINE {
            self.emit(self.line_start, self.all.len(), shared);
            self.line_start = self.all.len();
        }
        if past.is_empty() {
            return;
        }
        if self.dropped == 0 {
            self.finish(shared);
            let note = format!(
                "[lab: {} past {} MiB is not kept]",
                self.stream,
                self.kept >> 20
            );
            tracing::warn!(target: "guest", cmd = %self.label, "{note}");
            shared.log_line(&format!("{} {note}", self.label));
        }
        self.dropped += past.len() as u64;
        self.recent.extend_from_slice(past);
        let excess = self.recent.len().saturating_sub(super::TAIL_BYTES);
        self.recent.drain(..excess);
    }

    pub(super) fn finish(&mut self, shared: &Shared) {
        if self.line_start < self.all.len() {
            self.emit(self.line_start, self.all.len(), shared);
            self.line_start = self.all.len();
        }
    }

    /// The last lines, for an error message: of what was dropped, when something was.
    pub(super) fn tail(&self) -> String {
        if self.dropped == 0 {
            tail(&self.all)
        } else {
            format!(
                "[... {} bytes not kept ...]\n{}",
                self.dropped,
                tail(&self.recent)
            )
        }
    }

    fn emit(&self, start: usize, end: usize, shared: &Shared) {
        let line = String::from_utf8_lossy(&self.all[start..end]);
        tracing::info!(target: "guest", cmd = %self.label, stream = self.stream, "{line}");
        shared.log_line(&format!("{} {}: {line}", self.label, self.stream));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            calls: std::sync::Mutex::new(Default::default()),
            status: tokio::sync::watch::Sender::new(Default::default()),
            log: None,
            started: std::time::Instant::now(),
        }
    }

    #[test]
    fn a_flood_is_kept_up_to_the_bound_and_counted_past_it() {
        let shared = shared();
        let mut lines = Lines::with_bound("yes#1", "stdout", 10);
        lines.push(b"y\ny\ny\ny\n", &shared);
        lines.push(b"y\ny\ny\ny\n", &shared);
        lines.push(b"end\n", &shared);
        assert_eq!(lines.all, b"y\ny\ny\ny\ny\n");
        assert_eq!(lines.dropped, 6 + 4);
        assert_eq!(lines.tail(), "[... 10 bytes not kept ...]\ny\ny\ny\nend");
        let mut small = Lines::with_bound("echo#2", "stdout", 10);
        small.push(b"one\n", &shared);
        assert_eq!((small.dropped, small.tail()), (0, "one".to_string()));
    }
}
