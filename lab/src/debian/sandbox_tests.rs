//! apt's downloads as `_apt` when the lab is root (issue W2), seen from the other end: a
//! loopback HTTP server for a real signed repository ([`TestRepo`]) records, for every request,
//! the user owning the client's socket (from `/proc/net/tcp`). Real apt, the lab's own state.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::sandbox::uid_of;
use super::test_repo::{TestDeb, TestRepo};
use super::Archive;
use crate::cache::Cache;

/// Every request: the path asked for and the uid of the socket that asked.
type Seen = Arc<Mutex<Vec<(String, Option<u32>)>>>;

/// Serves `root`'s files on loopback (GET, keep-alive, 404 for anything else); its URL and
/// what it saw.
fn serve(root: PathBuf) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Seen::default();
    let shared = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let uid = socket_uid(stream.peer_addr().unwrap().port());
            let (root, seen) = (root.clone(), shared.clone());
            std::thread::spawn(move || answer(stream, &root, uid, &seen));
        }
    });
    (url, seen)
}

/// Answers one connection's requests in turn.
fn answer(stream: TcpStream, root: &Path, uid: Option<u32>, seen: &Seen) {
    let mut out = stream.try_clone().unwrap();
    let mut lines = BufReader::new(stream).lines();
    while let Some(Ok(request)) = lines.next() {
        // The headers, up to the blank line.
        for line in lines.by_ref() {
            if line.map_or(true, |l| l.is_empty()) {
                break;
            }
        }
        let path = request.split(' ').nth(1).unwrap_or("").to_string();
        seen.lock().unwrap().push((path.clone(), uid));
        let file = root.join(path.trim_start_matches('/'));
        let body = (!path.contains(".."))
            .then(|| std::fs::read(file).ok())
            .flatten();
        let head = match &body {
            Some(b) => format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", b.len()),
            None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
        };
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if let Some(b) = body {
            if out.write_all(&b).is_err() {
                return;
            }
        }
    }
}

/// The uid owning the loopback socket whose local port is `port` (the client's end).
fn socket_uid(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()))
            .then(|| fields.get(7)?.parse().ok())
            .flatten()
    })
}

#[test]
fn as_root_apt_fetches_lists_and_packages_as_its_own_user() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let Some(apt) = uid_of("_apt").filter(|_| root) else {
        crate::skip::host_lacks(
            "apt's sandbox as root",
            "the tests do not run as root, or the system has no _apt user",
            "Run the tests as root on Debian (apt creates _apt).",
        );
        return;
    };
    if !super::test_repo::tools_here("apt's sandbox as root") {
        return;
    }
    // The cache under a directory only root can traverse, as /root/.cache is.
    let work = tempfile::tempdir().unwrap();
    let repo = TestRepo::build(
        work.path(),
        &["amd64"],
        &[TestDeb::new("lab-tool", "1.0-1")],
    );
    let (url, seen) = serve(repo.root.clone());
    let cache = Cache::at(work.path().join("cache")).unwrap();
    let archive = Archive::open_at(&cache, url, repo.keyring.clone(), &["amd64"]).unwrap();
    let deb = archive.lookup("lab-tool", "1.0-1").unwrap().unwrap();
    let path = archive.download(&deb).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert!(path.starts_with(work.path()), "{}", path.display());
    assert_eq!(
        std::fs::metadata(&path).unwrap().uid(),
        0,
        "the cache's copy is root's"
    );
    let seen = seen.lock().unwrap();
    assert!(
        seen.iter().any(|(p, _)| p.ends_with("InRelease"))
            && seen.iter().any(|(p, _)| p.ends_with(".deb")),
        "{seen:?}"
    );
    for (path, uid) in seen.iter() {
        assert_eq!(
            *uid,
            Some(apt),
            "{path} was fetched by uid {uid:?}, not _apt's {apt}"
        );
    }
}
