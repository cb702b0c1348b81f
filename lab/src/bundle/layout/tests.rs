use super::*;

const TYPE: &str = "application/vnd.example.test.v1";

fn tree(root: &Path) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/one"), b"one").unwrap();
    fs::write(root.join("a/b/two"), vec![7u8; 100_000]).unwrap();
    fs::set_permissions(root.join("a/one"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("one", root.join("a/link")).unwrap();
    fs::create_dir_all(root.join("a/skipped")).unwrap();
    fs::write(root.join("a/skipped/x"), b"x").unwrap();
}

fn layers(root: &Path) -> Vec<LayerSpec> {
    vec![
        LayerSpec {
            name: "first".into(),
            sources: vec![Source {
                path: root.join("a"),
                dest: "x/a".into(),
                skip: vec!["skipped".into()],
            }],
        },
        LayerSpec {
            name: "second".into(),
            sources: vec![Source {
                path: root.join("a/b/two"),
                dest: "y/two".into(),
                skip: vec![],
            }],
        },
    ]
}

#[test]
fn a_written_layout_unpacks_to_the_same_files() {
    let dir = tempfile::tempdir().unwrap();
    tree(&dir.path().join("src"));
    let out = dir.path().join("out/t.bundle");
    let written = write(
        &out,
        TYPE,
        "t",
        serde_json::json!({"k": 1}),
        &layers(&dir.path().join("src")),
    )
    .unwrap();
    assert_eq!(written.layers.len(), 2);
    assert_eq!(written.layers[0].files, 3);
    assert_eq!(written.bytes, fs::metadata(&out).unwrap().len());
    let dest = dir.path().join("unpacked");
    let got = read(&out, &dest, TYPE).unwrap();
    assert_eq!(got.config.metadata["k"], 1);
    assert_eq!(got.reference.as_deref(), Some("t"));
    assert_eq!(fs::read(dest.join("x/a/one")).unwrap(), b"one");
    assert_eq!(fs::read(dest.join("y/two")).unwrap(), vec![7u8; 100_000]);
    assert_eq!(
        fs::read_link(dest.join("x/a/link")).unwrap(),
        Path::new("one")
    );
    let mode = fs::metadata(dest.join("x/a/one"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(!dest.join("x/a/skipped").exists());
    assert!(!dest.join(".blobs").exists());
    // The file is an OCI layout: the index names the manifest, tagged.
    let mut names = Vec::new();
    let mut a = tar::Archive::new(File::open(&out).unwrap());
    for e in a.entries().unwrap() {
        names.push(e.unwrap().path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(names[..2], ["oci-layout", "index.json"]);
    assert!(names[2..].iter().all(|n| n.starts_with("blobs/sha256/")));
    // Another artifact type is refused.
    let err = read(&out, &dir.path().join("other"), "application/x-other").unwrap_err();
    assert!(format!("{err:#}").contains("artifactType"), "{err:#}");
}

/// Whether a blob is the second layer of [`layers`] (the one that holds `y/two`).
fn second_layer(blob: &[u8]) -> bool {
    zstd::decode_all(blob).is_ok_and(|d| d.windows(5).any(|w| w == b"y/two"))
}

/// Rewrites `bundle` with `change` applied to the blob whose content satisfies `pick`.
fn tamper(bundle: &Path, pick: impl Fn(&[u8]) -> bool, change: impl Fn(&mut Vec<u8>)) {
    let mut entries = Vec::new();
    let mut a = tar::Archive::new(File::open(bundle).unwrap());
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).unwrap();
        entries.push((name, bytes));
    }
    let mut changed = 0;
    for (name, bytes) in &mut entries {
        if name.starts_with("blobs/") && pick(bytes) {
            change(bytes);
            changed += 1;
        }
    }
    assert_eq!(changed, 1);
    let mut b = tar::Builder::new(File::create(bundle).unwrap());
    for (name, bytes) in entries {
        append_bytes(&mut b, &name, &bytes).unwrap();
    }
    b.finish().unwrap();
}

#[test]
fn a_changed_file_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    tree(&dir.path().join("src"));
    let out = dir.path().join("t.bundle");
    write(
        &out,
        TYPE,
        "t",
        Value::Null,
        &layers(&dir.path().join("src")),
    )
    .unwrap();
    // The second layer, recompressed with one byte of its file changed.
    tamper(&out, second_layer, |bytes| {
        let mut tar = zstd::decode_all(&bytes[..]).unwrap();
        tar[512 + 10] ^= 1;
        *bytes = zstd::encode_all(&tar[..], 1).unwrap();
    });
    let err = format!("{:#}", read(&out, &dir.path().join("u"), TYPE).unwrap_err());
    assert!(err.contains("refused"), "{err}");
    assert!(err.contains("layer second"), "{err}");
    assert!(err.contains("y/two is corrupt"), "{err}");
}

#[test]
fn a_damaged_blob_or_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    tree(&dir.path().join("src"));
    let out = dir.path().join("t.bundle");
    write(
        &out,
        TYPE,
        "t",
        Value::Null,
        &layers(&dir.path().join("src")),
    )
    .unwrap();
    let pristine = fs::read(&out).unwrap();
    // A flipped byte in a compressed layer: zstd's checksum or the file's sha256 catches it.
    tamper(&out, second_layer, |bytes| {
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
    });
    let err = format!(
        "{:#}",
        read(&out, &dir.path().join("u1"), TYPE).unwrap_err()
    );
    assert!(
        err.contains("refused") && err.contains("layer second"),
        "{err}"
    );
    // A config whose file list was edited no longer matches the manifest's digest.
    fs::write(&out, &pristine).unwrap();
    tamper(
        &out,
        |b| std::str::from_utf8(b).is_ok_and(|s| s.contains("\"metadata\"")),
        |bytes| {
            let text = String::from_utf8(bytes.clone()).unwrap();
            *bytes = text.replace("y/two", "y/tw0").into_bytes();
        },
    );
    let err = format!(
        "{:#}",
        read(&out, &dir.path().join("u2"), TYPE).unwrap_err()
    );
    assert!(err.contains("the config: blob sha256:"), "{err}");
}

#[test]
fn paths_outside_the_tree_are_refused() {
    let dest = Path::new("/tmp/x");
    assert!(safe_join(dest, "../etc/passwd").is_err());
    assert!(safe_join(dest, "/etc/passwd").is_err());
    assert_eq!(safe_join(dest, "a/b").unwrap(), dest.join("a/b"));
}

/// One entry of a crafted layer: its path, `Ok(symlink target)` or `Err(contents)`, its mode.
type Crafted<'a> = (&'a str, Result<&'a str, &'a [u8]>, u32);

/// A layer blob (zstd tar) of `entries` (path, symlink target or contents, mode), with the
/// manifest's list of them: what a crafted bundle can hold.
fn crafted_layer(dir: &Path, name: &str, entries: &[Crafted<'_>]) -> (PathBuf, LayerFiles) {
    let blob = dir.join(format!("{name}.tar.zst"));
    let mut builder =
        tar::Builder::new(zstd::Encoder::new(File::create(&blob).unwrap(), 3).unwrap());
    let mut files = Vec::new();
    for (path, what, mode) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(*mode);
        match what {
            Ok(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder.append_link(&mut header, path, target).unwrap();
                files.push(FileEntry {
                    path: path.to_string(),
                    sha256: None,
                    size: 0,
                    mode: 0,
                    link: Some(target.to_string()),
                });
            }
            Err(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, *bytes).unwrap();
                use sha2::Digest;
                files.push(FileEntry {
                    path: path.to_string(),
                    sha256: Some(format!("{:x}", sha2::Sha256::digest(bytes))),
                    size: bytes.len() as u64,
                    mode: *mode,
                    link: None,
                });
            }
        }
    }
    builder.into_inner().unwrap().finish().unwrap();
    (
        blob,
        LayerFiles {
            name: name.into(),
            files,
        },
    )
}

#[test]
fn a_crafted_layer_cannot_write_outside_the_bundle_or_keep_an_s_bit() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    let dest = dir.path().join("unpacked");
    fs::create_dir_all(&dest).unwrap();
    // A symlink to a directory outside, then a setuid file through it (issue W2's finding).
    let (blob, listed) = crafted_layer(
        dir.path(),
        "escape",
        &[
            ("x", Ok(outside.to_str().unwrap()), 0o777),
            ("x/f", Err(b"#!/bin/sh\n"), 0o4755),
        ],
    );
    let err = format!("{:#}", unpack_layer(&blob, &listed, &dest).unwrap_err());
    assert!(err.contains("x/f: x is a symbolic link"), "{err}");
    assert!(!outside.join("f").exists(), "written outside the bundle");
    // The link in one layer, a file at the same path in the next: not written through it.
    let target = outside.join("target");
    let (first, first_listed) = crafted_layer(
        dir.path(),
        "first",
        &[("p", Ok(target.to_str().unwrap()), 0o777)],
    );
    let (second, second_listed) = crafted_layer(dir.path(), "second", &[("p", Err(b"x"), 0o644)]);
    let dest = dir.path().join("two-layers");
    fs::create_dir_all(&dest).unwrap();
    unpack_layer(&first, &first_listed, &dest).unwrap();
    let err = format!(
        "{:#}",
        unpack_layer(&second, &second_listed, &dest).unwrap_err()
    );
    assert!(err.contains("p: listed after something else"), "{err}");
    assert!(!target.exists(), "written through an earlier layer's link");
    // s-bits and world-writable bits are dropped; the rest of the mode is kept.
    let (blob, listed) = crafted_layer(
        dir.path(),
        "modes",
        &[
            ("suid", Err(b"a"), 0o6755),
            ("open", Err(b"b"), 0o777),
            ("plain", Err(b"c"), 0o640),
        ],
    );
    let dest = dir.path().join("modes");
    fs::create_dir_all(&dest).unwrap();
    unpack_layer(&blob, &listed, &dest).unwrap();
    let mode = |f: &str| fs::metadata(dest.join(f)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        (mode("suid"), mode("open"), mode("plain")),
        (0o755, 0o775, 0o640)
    );
}
