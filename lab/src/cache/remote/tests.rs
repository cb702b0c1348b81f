use super::*;

#[test]
fn urls_tags_and_credentials() {
    let r = Remote::new("oci://127.0.0.1:5000/lab/cache", None, None, Vec::new()).unwrap();
    assert_eq!(
        (r.registry.as_str(), r.repository.as_str()),
        ("127.0.0.1:5000", "lab/cache")
    );
    for bad in [
        "http://127.0.0.1/lab",
        "oci://127.0.0.1:5000",
        "oci:///lab",
        "oci://host:port/lab",
        "oci://host/Lab",
    ] {
        assert!(
            Remote::new(bad, None, None, Vec::new()).is_err(),
            "{bad} accepted"
        );
    }
    let err = Remote::new("oci://h/lab", Some("u".into()), None, Vec::new()).unwrap_err();
    assert!(err.to_string().contains(PASSWORD_ENV), "{err}");
    assert_eq!(tag_of("kernels", "0a12").unwrap(), "kernels-0a12");
    assert!(tag_of("guest-programs", &"f".repeat(64)).is_ok());
    assert!(tag_of("kernels", &"f".repeat(130)).is_err());
    assert!(tag_of("a/b", "k").is_err());
}

/// A port nobody listens on: an error naming the remote within the connect timeout, and
/// the remote is not asked again by this process.
#[test]
fn a_remote_that_is_down_is_named_and_remembered() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("oci://127.0.0.1:{port}/lab");
    let r = Remote::new(&url, None, None, Vec::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let err = match r.pull("images", "abc", dir.path(), dir.path()) {
        Err(Failure::Unusable(e)) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(started.elapsed() < CONNECT_TIMEOUT + Duration::from_secs(5));
    assert!(err.contains(&url) && err.contains("unreachable"), "{err}");
    assert!(r.unusable().is_some());
    assert!(matches!(
        r.pull("images", "other", dir.path(), dir.path()),
        Err(Failure::Unusable(_))
    ));
}
