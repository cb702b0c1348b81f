//! Wire protocol between the host (`lab::guest`) and the guest agent.
//!
//! A frame is
//!
//! ```text
//! u32 LE header length | u32 LE payload length | JSON header | raw payload bytes
//! ```
//!
//! The header is a [`Request`] (host to guest) or a [`Response`] (guest to host), tagged by its
//! `type` field. Bulk data (file contents, command stdin, output chunks) travels as the raw
//! payload so it is never JSON-escaped. Every request carries an `id` chosen by the host; the
//! agent answers asynchronously and many requests may be in flight at once, so responses for
//! different ids interleave.
//!
//! Exchange per request:
//! - `exec`: zero or more `stdout`/`stderr` chunks, then one `exit` (or one `error` if the
//!   command could not be started).
//! - `read_file`: one `file_data` (payload = contents) or `error`.
//! - `write_file` (payload = contents): one `done` or `error`.
//! - `ping`: one `hello` carrying the ping's id.
//! - `power_off`: one `done`, after which the agent exits (as PID 1: syncs and powers off).
//!
//! The agent also sends an unsolicited `hello` (id `null`) as soon as its port is open.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, Read, Write};

/// Bumped on any incompatible change; carried in [`Hello::protocol`].
pub const PROTOCOL_VERSION: u32 = 1;

/// Name of the virtio-serial port (`virtserialport,name=...`) the agent serves.
pub const PORT_NAME: &str = "lab.agent";

/// Bytes before the JSON header: two little-endian u32 lengths.
pub const PREFIX_LEN: usize = 8;

/// Largest JSON header accepted. Headers carry argv/env/paths only; anything bigger means the
/// stream is corrupt.
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// Largest payload accepted in one frame (file contents, stdin). Bounds what a corrupt length
/// field can make the reader allocate.
pub const MAX_PAYLOAD_LEN: usize = 256 << 20;

/// Host-to-guest messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Run a command; the frame payload is its stdin when `stdin` is true.
    Exec(ExecRequest),
    /// Read a whole file; answered by `file_data`.
    ReadFile { id: u64, path: String },
    /// Create or truncate a file with the frame payload as contents; `mode` applies to the file
    /// whether or not it existed (none: 0644 for new files, existing mode kept).
    WriteFile {
        id: u64,
        path: String,
        mode: Option<u32>,
    },
    /// Answered by a `hello` with this id.
    Ping { id: u64 },
    /// Answered by `done`; then the agent exits and, as PID 1, powers the machine off.
    PowerOff { id: u64 },
}

impl Request {
    /// The id the agent answers with.
    pub fn id(&self) -> u64 {
        match self {
            Request::Exec(e) => e.id,
            Request::ReadFile { id, .. }
            | Request::WriteFile { id, .. }
            | Request::Ping { id }
            | Request::PowerOff { id } => *id,
        }
    }
}

/// A command to run in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub id: u64,
    /// Program and arguments; the program is looked up in `PATH` when it has no slash.
    pub argv: Vec<String>,
    /// Added to (overriding) the agent's environment.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// True: the frame payload is written to the command's stdin, then stdin is closed.
    /// False: stdin is /dev/null.
    #[serde(default)]
    pub stdin: bool,
    /// After this long the command's whole process group is killed (SIGKILL) and `exit`
    /// reports `timed_out`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Resource use of a finished command as `wait4` reports it: the process, all of its threads,
/// and the descendants it waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUse {
    pub user_us: u64,
    pub system_us: u64,
    /// Peak resident set of the largest of them, KiB.
    pub max_rss_kib: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    /// Switches because a thread blocked (slept, waited for I/O or a lock).
    pub voluntary_switches: u64,
    /// Switches because a thread was preempted while it could still run.
    pub involuntary_switches: u64,
}

/// Guest-to-host messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Hello(Hello),
    /// A chunk of a command's stdout (payload), in order.
    Stdout {
        id: u64,
    },
    /// A chunk of a command's stderr (payload), in order.
    Stderr {
        id: u64,
    },
    /// The command ended; sent after all of its output chunks.
    Exit {
        id: u64,
        /// Exit code when it exited normally.
        code: Option<i32>,
        /// Terminating signal when it was killed.
        signal: Option<i32>,
        /// True when the agent killed it because `timeout_ms` passed.
        timed_out: bool,
        /// From spawn to reaping, in microseconds.
        duration_us: u64,
        /// What the command and its threads used (`wait4`'s rusage); absent from agents that
        /// predate it.
        #[serde(default)]
        usage: Option<ResourceUse>,
    },
    /// Contents of a `read_file` (payload).
    FileData {
        id: u64,
    },
    /// A `write_file` or `power_off` completed.
    Done {
        id: u64,
    },
    /// The request failed; `id` is null when the request itself could not be decoded.
    Error {
        id: Option<u64>,
        message: String,
    },
}

impl Response {
    /// The request this answers; `None` for an unsolicited hello or an error about an
    /// undecodable request.
    pub fn id(&self) -> Option<u64> {
        match self {
            Response::Hello(h) => h.id,
            Response::Stdout { id }
            | Response::Stderr { id }
            | Response::Exit { id, .. }
            | Response::FileData { id }
            | Response::Done { id } => Some(*id),
            Response::Error { id, .. } => *id,
        }
    }
}

/// The agent's greeting: sent unsolicited when it starts serving and in reply to `ping`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The ping this answers; `None` for the greeting sent when the agent starts.
    pub id: Option<u64>,
    pub protocol: u32,
    pub agent_version: String,
    /// Time since the (guest) kernel booted, from /proc/uptime.
    pub uptime_ms: u64,
    /// Kernel uptime when the agent started (as init: when the kernel ran it), so
    /// `uptime_ms - started_ms` is the agent's own start-up cost.
    #[serde(default)]
    pub started_ms: u64,
    /// `uname -r` of the kernel the agent runs on.
    pub kernel_release: String,
    /// True when the agent is the guest's init (false for `--serve-unix` on a host).
    pub pid1: bool,
}

/// Everything that can go wrong reading or writing a frame. Never a panic: the bytes come from
/// the other side of a VM boundary.
#[derive(Debug)]
pub enum ProtocolError {
    Io(io::Error),
    /// The stream ended inside a frame.
    Truncated {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    HeaderTooLong(usize),
    PayloadTooLong(usize),
    EmptyHeader,
    /// The header is not valid JSON for the expected message type.
    BadHeader {
        error: serde_json::Error,
        excerpt: String,
    },
    Encode(serde_json::Error),
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Io(e) => write!(f, "i/o error on the agent channel: {e}"),
            ProtocolError::Truncated {
                what,
                expected,
                got,
            } => write!(
                f,
                "stream ended inside a frame: {what} needs {expected} bytes, got {got}"
            ),
            ProtocolError::HeaderTooLong(n) => write!(
                f,
                "frame header length {n} exceeds the limit of {MAX_HEADER_LEN} bytes (corrupt stream?)"
            ),
            ProtocolError::PayloadTooLong(n) => write!(
                f,
                "frame payload length {n} exceeds the limit of {MAX_PAYLOAD_LEN} bytes"
            ),
            ProtocolError::EmptyHeader => write!(f, "frame has an empty header"),
            ProtocolError::BadHeader { error, excerpt } => {
                write!(f, "undecodable frame header ({error}): {excerpt:?}")
            }
            ProtocolError::Encode(e) => write!(f, "cannot encode frame header: {e}"),
        }
    }
}

impl std::error::Error for ProtocolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProtocolError::Io(e) => Some(e),
            ProtocolError::BadHeader { error, .. } | ProtocolError::Encode(error) => Some(error),
            _ => None,
        }
    }
}

impl From<io::Error> for ProtocolError {
    fn from(e: io::Error) -> Self {
        ProtocolError::Io(e)
    }
}

impl ProtocolError {
    /// True when the byte stream can no longer be trusted to be at a frame boundary (the
    /// reader must resynchronise, e.g. by waiting for a reconnect). A bad header inside a
    /// well-formed frame leaves the stream usable.
    pub fn is_desync(&self) -> bool {
        !matches!(self, ProtocolError::BadHeader { .. })
    }
}

/// Encodes one frame into a buffer (written with a single `write_all`, so frames from
/// different writers never interleave when they share a lock).
pub fn encode_frame<H: Serialize>(header: &H, payload: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    let json = serde_json::to_vec(header).map_err(ProtocolError::Encode)?;
    if json.len() > MAX_HEADER_LEN {
        return Err(ProtocolError::HeaderTooLong(json.len()));
    }
    if payload.len() > MAX_PAYLOAD_LEN {
        return Err(ProtocolError::PayloadTooLong(payload.len()));
    }
    let mut buf = Vec::with_capacity(PREFIX_LEN + json.len() + payload.len());
    // Both lengths are below the limits, which fit in u32.
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    buf.extend_from_slice(payload);
    Ok(buf)
}

/// Encodes and writes one frame.
pub fn write_frame<W: Write, H: Serialize>(
    w: &mut W,
    header: &H,
    payload: &[u8],
) -> Result<(), ProtocolError> {
    let buf = encode_frame(header, payload)?;
    w.write_all(&buf)?;
    w.flush()?;
    Ok(())
}

/// Validates the 8-byte length prefix; returns (header length, payload length).
pub fn parse_prefix(prefix: &[u8; PREFIX_LEN]) -> Result<(usize, usize), ProtocolError> {
    let hlen = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    let plen = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]) as usize;
    if hlen == 0 {
        return Err(ProtocolError::EmptyHeader);
    }
    if hlen > MAX_HEADER_LEN {
        return Err(ProtocolError::HeaderTooLong(hlen));
    }
    if plen > MAX_PAYLOAD_LEN {
        return Err(ProtocolError::PayloadTooLong(plen));
    }
    Ok((hlen, plen))
}

/// Decodes a JSON header.
pub fn decode_header<H: DeserializeOwned>(json: &[u8]) -> Result<H, ProtocolError> {
    serde_json::from_slice(json).map_err(|error| {
        let cut = &json[..json.len().min(120)];
        ProtocolError::BadHeader {
            error,
            excerpt: String::from_utf8_lossy(cut).into_owned(),
        }
    })
}

/// Splits a frame body (header then payload, as announced by the prefix) and decodes the header.
pub fn decode_body<H: DeserializeOwned>(
    header_len: usize,
    mut body: Vec<u8>,
) -> Result<(H, Vec<u8>), ProtocolError> {
    if body.len() < header_len {
        return Err(ProtocolError::Truncated {
            what: "frame header",
            expected: header_len,
            got: body.len(),
        });
    }
    let payload = body.split_off(header_len);
    let header = decode_header(&body)?;
    Ok((header, payload))
}

/// Decodes the first frame of `buf` if it is complete: `Ok(None)` means more bytes are needed;
/// `Ok(Some((header, payload, consumed)))` otherwise.
pub fn decode_frame<H: DeserializeOwned>(
    buf: &[u8],
) -> Result<Option<(H, Vec<u8>, usize)>, ProtocolError> {
    let Some(prefix) = buf.first_chunk::<PREFIX_LEN>() else {
        return Ok(None);
    };
    let (hlen, plen) = parse_prefix(prefix)?;
    let total = PREFIX_LEN + hlen + plen;
    if buf.len() < total {
        return Ok(None);
    }
    let header = decode_header(&buf[PREFIX_LEN..PREFIX_LEN + hlen])?;
    let payload = buf[PREFIX_LEN + hlen..total].to_vec();
    Ok(Some((header, payload, total)))
}

/// Reads one frame. `Ok(None)` on a clean end of stream (at a frame boundary); a stream that
/// ends inside a frame is [`ProtocolError::Truncated`].
pub fn read_frame<R: Read, H: DeserializeOwned>(
    r: &mut R,
) -> Result<Option<(H, Vec<u8>)>, ProtocolError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let got = read_full(r, &mut prefix)?;
    if got == 0 {
        return Ok(None);
    }
    if got < PREFIX_LEN {
        return Err(ProtocolError::Truncated {
            what: "frame length prefix",
            expected: PREFIX_LEN,
            got,
        });
    }
    let (hlen, plen) = parse_prefix(&prefix)?;
    let total = hlen + plen;
    // Grow with the data instead of trusting the length up front.
    let mut body = Vec::with_capacity(total.min(64 << 10));
    r.take(total as u64).read_to_end(&mut body)?;
    if body.len() < total {
        return Err(ProtocolError::Truncated {
            what: "frame body",
            expected: total,
            got: body.len(),
        });
    }
    decode_body(hlen, body).map(Some)
}

/// Like `read_exact`, but reports how much was read before end of stream instead of failing.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn exec(id: u64) -> Request {
        Request::Exec(ExecRequest {
            id,
            argv: vec!["sh".into(), "-c".into(), "echo \"hi\"\n".into()],
            env: vec![("A".into(), "b=c".into())],
            cwd: Some("/tmp".into()),
            stdin: true,
            timeout_ms: Some(1500),
        })
    }

    fn all_requests() -> Vec<Request> {
        vec![
            exec(1),
            Request::ReadFile {
                id: 2,
                path: "/proc/cpuinfo".into(),
            },
            Request::WriteFile {
                id: 3,
                path: "/tmp/x".into(),
                mode: Some(0o755),
            },
            Request::Ping { id: 4 },
            Request::PowerOff { id: u64::MAX },
        ]
    }

    fn all_responses() -> Vec<Response> {
        vec![
            Response::Hello(Hello {
                id: None,
                protocol: PROTOCOL_VERSION,
                agent_version: "0.1.0".into(),
                uptime_ms: 1234,
                started_ms: 1200,
                kernel_release: "6.12.0".into(),
                pid1: true,
            }),
            Response::Stdout { id: 1 },
            Response::Stderr { id: 1 },
            Response::Exit {
                id: 1,
                code: None,
                signal: Some(9),
                timed_out: true,
                duration_us: 17,
                usage: Some(ResourceUse {
                    user_us: 1,
                    system_us: 2,
                    max_rss_kib: 3,
                    minor_faults: 4,
                    major_faults: 5,
                    voluntary_switches: 6,
                    involuntary_switches: 7,
                }),
            },
            Response::FileData { id: 2 },
            Response::Done { id: 3 },
            Response::Error {
                id: None,
                message: "nope".into(),
            },
        ]
    }

    #[test]
    fn frame_layout_is_lengths_json_payload() {
        let buf = encode_frame(&Request::Ping { id: 7 }, b"\x00\xffraw").unwrap();
        let json = br#"{"type":"ping","id":7}"#;
        assert_eq!(&buf[0..4], &(json.len() as u32).to_le_bytes());
        assert_eq!(&buf[4..8], &5u32.to_le_bytes());
        assert_eq!(&buf[8..8 + json.len()], json);
        assert_eq!(&buf[8 + json.len()..], b"\x00\xffraw");
    }

    #[test]
    fn requests_and_responses_round_trip_through_a_stream() {
        let mut stream = Vec::new();
        for (i, r) in all_requests().iter().enumerate() {
            write_frame(&mut stream, r, &vec![i as u8; i * 1000]).unwrap();
        }
        let mut cur = Cursor::new(stream);
        for (i, r) in all_requests().iter().enumerate() {
            let (got, payload): (Request, _) = read_frame(&mut cur).unwrap().unwrap();
            assert_eq!(&got, r);
            assert_eq!(payload, vec![i as u8; i * 1000]);
            assert_eq!(got.id(), r.id());
        }
        assert!(read_frame::<_, Request>(&mut cur).unwrap().is_none());

        let mut stream = Vec::new();
        for r in all_responses() {
            write_frame(&mut stream, &r, b"payload").unwrap();
        }
        let mut cur = Cursor::new(stream);
        for r in all_responses() {
            let (got, payload): (Response, _) = read_frame(&mut cur).unwrap().unwrap();
            assert_eq!(got, r);
            assert_eq!(payload, b"payload");
        }
        assert!(read_frame::<_, Response>(&mut cur).unwrap().is_none());
    }

    #[test]
    fn incremental_decode_needs_the_whole_frame() {
        let a = encode_frame(&exec(1), b"stdin bytes").unwrap();
        let b = encode_frame(&Request::Ping { id: 2 }, b"").unwrap();
        let mut both = a.clone();
        both.extend_from_slice(&b);
        for cut in 0..a.len() {
            assert!(decode_frame::<Request>(&both[..cut]).unwrap().is_none());
        }
        let (h, p, used) = decode_frame::<Request>(&both).unwrap().unwrap();
        assert_eq!(h, exec(1));
        assert_eq!(p, b"stdin bytes");
        assert_eq!(used, a.len());
        let (h, p, used) = decode_frame::<Request>(&both[used..]).unwrap().unwrap();
        assert_eq!(h, Request::Ping { id: 2 });
        assert!(p.is_empty());
        assert_eq!(used, b.len());
    }

    #[test]
    fn truncated_frames_are_errors_at_every_cut() {
        let frame = encode_frame(&exec(9), b"0123456789").unwrap();
        for cut in 1..frame.len() {
            let err = read_frame::<_, Request>(&mut Cursor::new(&frame[..cut])).unwrap_err();
            assert!(
                matches!(err, ProtocolError::Truncated { .. }),
                "cut {cut}: {err}"
            );
            assert!(err.is_desync());
            assert!(err.to_string().contains("stream ended inside a frame"));
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        // Absurd lengths are rejected before any allocation.
        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&0u32.to_le_bytes());
        let err = read_frame::<_, Request>(&mut Cursor::new(&huge)).unwrap_err();
        assert!(matches!(err, ProtocolError::HeaderTooLong(_)), "{err}");
        assert!(err.to_string().contains("exceeds the limit"));

        let mut big_payload = Vec::new();
        big_payload.extend_from_slice(&2u32.to_le_bytes());
        big_payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = decode_frame::<Request>(&big_payload).unwrap_err();
        assert!(matches!(err, ProtocolError::PayloadTooLong(_)), "{err}");

        let zero = [0u8; 8];
        let err = read_frame::<_, Request>(&mut Cursor::new(&zero)).unwrap_err();
        assert!(matches!(err, ProtocolError::EmptyHeader), "{err}");

        // Well-framed but not JSON / not a known message: the stream stays in sync.
        for header in [
            &b"\xff\xfe not json"[..],
            br#"{"type":"reboot_everything","id":1}"#,
            br#"{"type":"exec","id":"one","argv":[]}"#,
            br#"{"type":"ping"}"#,
            br#"[1,2,3]"#,
        ] {
            let mut f = Vec::new();
            f.extend_from_slice(&(header.len() as u32).to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes());
            f.extend_from_slice(header);
            write_frame(&mut f, &Request::Ping { id: 5 }, b"").unwrap();
            let mut cur = Cursor::new(f);
            let err = read_frame::<_, Request>(&mut cur).unwrap_err();
            assert!(matches!(err, ProtocolError::BadHeader { .. }), "{err}");
            assert!(!err.is_desync());
            let (next, _) = read_frame::<_, Request>(&mut cur).unwrap().unwrap();
            assert_eq!(next, Request::Ping { id: 5 });
        }

        // Pseudo-random byte soup never panics, whatever it decodes to.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..2000usize {
            let soup: Vec<u8> = (0..len % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let _ = read_frame::<_, Response>(&mut Cursor::new(&soup));
            let _ = decode_frame::<Request>(&soup);
        }
    }

    #[test]
    fn oversized_frames_are_refused_when_encoding() {
        let big = vec![0u8; MAX_PAYLOAD_LEN + 1];
        let err = encode_frame(&Request::Ping { id: 1 }, &big).unwrap_err();
        assert!(matches!(err, ProtocolError::PayloadTooLong(_)), "{err}");
    }

    #[test]
    fn exec_defaults_allow_minimal_headers() {
        let h: Request = decode_header(br#"{"type":"exec","id":3,"argv":["true"]}"#).unwrap();
        assert_eq!(
            h,
            Request::Exec(ExecRequest {
                id: 3,
                argv: vec!["true".into()],
                env: vec![],
                cwd: None,
                stdin: false,
                timeout_ms: None,
            })
        );
    }
}
