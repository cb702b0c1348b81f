//! Guest text on the user's terminal. A guest is untrusted, and what it prints reaches the
//! terminal in `lab run`'s output and in errors that quote its console: escape sequences there
//! could retitle the window, move the cursor or worse. On a terminal, every control character
//! but newline and tab is shown escaped (`\u{1b}`); into a pipe or a file the bytes go as they
//! are, so `lab run -- cat FILE > copy` still copies.

use std::io::{IsTerminal, Write};

/// `text` with every control character but newline and tab escaped.
pub(super) fn safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `bytes` to `out`: escaped (as UTF-8, invalid bytes replaced) when `out` is a terminal.
pub(super) fn write<W: Write + IsTerminal>(out: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    if out.is_terminal() {
        out.write_all(safe(&String::from_utf8_lossy(bytes)).as_bytes())
    } else {
        out.write_all(bytes)
    }
}

/// Prints `error` as `lab: error: ...` on standard error, escaped when that is a terminal.
pub(super) fn error(error: &anyhow::Error) {
    let text = format!("{error:#}");
    if std::io::stderr().is_terminal() {
        eprintln!("lab: error: {}", safe(&text));
    } else {
        eprintln!("lab: error: {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped_but_lines_and_tabs_stay() {
        let guest = "ok\tdone\n\u{1b}]0;owned\u{7}\u{1b}[2J\r\u{9b}31m";
        assert_eq!(
            safe(guest),
            "ok\tdone\n\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\r\\u{9b}31m"
        );
        let mut file = tempfile::tempfile().unwrap();
        write(&mut file, guest.as_bytes()).unwrap();
        use std::io::{Read, Seek};
        file.rewind().unwrap();
        let mut back = String::new();
        file.read_to_string(&mut back).unwrap();
        assert_eq!(back, guest, "into a file the bytes go as they are");
    }
}
