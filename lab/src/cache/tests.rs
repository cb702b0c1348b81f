use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[test]
fn failed_build_leaves_no_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path()).unwrap();
    let err = cache
        .get_or_build("things", "k1", |tmp| {
            fs::write(tmp.join("half"), b"x")?;
            anyhow::bail!("boom")
        })
        .unwrap_err();
    assert!(err.to_string().contains("boom"));
    assert!(cache.lookup("things", "k1").is_none());
    let staging: Vec<_> = fs::read_dir(cache.dir("things").join(".staging"))
        .unwrap()
        .collect();
    assert!(staging.is_empty(), "staging not cleaned: {staging:?}");
}

#[test]
fn stale_staging_is_swept_but_not_a_live_build() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path()).unwrap();
    // What a killed lab leaves: staging dirs of a kernel, an image and a QEMU bundle.
    for kind in ["kernels", "images", "qemu"] {
        let stale = cache.dir(kind).join(".staging/deadbeef-AbC123");
        fs::create_dir_all(stale.join("tree/obj")).unwrap();
        fs::write(stale.join("tree/obj/half.o"), b"x").unwrap();
    }
    // A build in progress in this process: its key is locked, its staging dir stays.
    let _live = cache.lock("kernels-cafe").unwrap();
    let live = cache.dir("kernels").join(".staging/cafe-Zz9999");
    fs::create_dir_all(&live).unwrap();
    assert_eq!(cache.remove_all_stale_staging().unwrap(), 3);
    assert!(live.is_dir());
    for kind in ["kernels", "images", "qemu"] {
        assert!(!cache.dir(kind).join(".staging/deadbeef-AbC123").exists());
    }
}

#[test]
fn concurrent_requests_build_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path()).unwrap();
    let builds = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let cache = cache.clone();
            let builds = builds.clone();
            std::thread::spawn(move || {
                cache
                    .get_or_build("things", "same", |tmp| {
                        builds.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        fs::write(tmp.join("out"), b"done")?;
                        Ok(())
                    })
                    .unwrap()
            })
        })
        .collect();
    for t in threads {
        let path = t.join().unwrap();
        assert_eq!(fs::read(path.join("out")).unwrap(), b"done");
    }
    assert_eq!(builds.load(Ordering::SeqCst), 1);
}

#[test]
fn file_digest_is_remembered_by_stat() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::at(dir.path().join("cache")).unwrap();
    let file = dir.path().join("blob");
    fs::write(&file, b"one").unwrap();
    // Just written: hashed but not remembered (racy).
    let one = cache.file_sha256(&file).unwrap();
    assert_eq!(one, sha256_file(&file).unwrap());
    let key = hash_parts(&[("path", file.as_os_str().as_encoded_bytes())])[..24].to_string();
    assert!(cache.read_memo::<DigestMemo>("sha256", &key).is_none());
    // Age it: now remembered, and the memo is what answers (a planted digest shows it).
    let old = SystemTime::now() - Duration::from_secs(60);
    File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut memo = DigestMemo {
        path: file.clone(),
        stat: FileStat::of(&fs::metadata(&file).unwrap()),
        sha256: "planted".into(),
    };
    // ctime is now: still racy, so hashing happens and nothing is kept.
    assert_eq!(cache.file_sha256(&file).unwrap(), one);
    memo.stat.ctime_ns -= 60_000_000_000;
    assert!(!memo.stat.is_racy(SystemTime::now()));
    cache.write_memo("sha256", &key, &memo).unwrap();
    // The stat differs from the planted one (ctime), so the file is hashed again.
    assert_eq!(cache.file_sha256(&file).unwrap(), one);
    // With the real stat, the memo answers without reading the file.
    memo.stat = FileStat::of(&fs::metadata(&file).unwrap());
    cache.write_memo("sha256", &key, &memo).unwrap();
    assert_eq!(cache.file_sha256(&file).unwrap(), "planted");
    // Any change of content changes size or times: hashed again.
    fs::write(&file, b"two!").unwrap();
    assert_ne!(cache.file_sha256(&file).unwrap(), one);
}

#[test]
fn hash_depends_on_labels_and_boundaries() {
    let a = hash_parts(&[("a", b"xy"), ("b", b"z")]);
    let b = hash_parts(&[("a", b"x"), ("b", b"yz")]);
    let c = hash_parts(&[("a", b"xy"), ("c", b"z")]);
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(a, hash_parts(&[("a", b"xy"), ("b", b"z")]));
}

#[test]
fn special_bits_are_dropped_everywhere_below_a_root_and_links_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    fs::create_dir_all(root.join("tmp/deep")).unwrap();
    let set = |p: &str, mode: u32| {
        fs::set_permissions(root.join(p), fs::Permissions::from_mode(mode)).unwrap()
    };
    let mode = |p: &str| {
        fs::symlink_metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    fs::write(root.join("passwd"), b"x").unwrap();
    fs::write(root.join("tmp/deep/open"), b"x").unwrap();
    fs::write(root.join("plain"), b"x").unwrap();
    set("passwd", 0o4755);
    set("tmp", 0o1777);
    set("tmp/deep/open", 0o2666);
    set("plain", 0o640);
    // A link to a file outside: neither followed nor changed.
    let outside = dir.path().join("outside");
    fs::write(&outside, b"x").unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    assert_eq!(drop_special_bits(&root).unwrap(), 3);
    assert_eq!(
        (
            mode("passwd"),
            mode("tmp"),
            mode("tmp/deep/open"),
            mode("plain")
        ),
        (0o755, 0o775, 0o664, 0o640)
    );
    assert_eq!(
        fs::metadata(&outside).unwrap().permissions().mode() & 0o7777,
        0o4755
    );
    assert_eq!(
        drop_special_bits(&root).unwrap(),
        0,
        "nothing left to change"
    );
}
