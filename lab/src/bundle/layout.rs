//! One file holding a tree of files as an OCI image layout tarball (image-spec v1.1,
//! "image-layout.md"): `oci-layout`, `index.json` and `blobs/sha256/<digest>` in a plain tar; the
//! index names one manifest, whose config blob lists every layer's files with their sha256, and
//! whose layers are tar streams compressed with zstd (`application/vnd.oci.image.layer.v1.tar+zstd`).
//! Any OCI tool (`oras`, `skopeo`, `crane`) can copy or push the file as it is.
//!
//! Written by hand with `tar` and `serde_json`: the layout is four small JSON shapes and a tar;
//! `oci-spec` would bring a builder-generated type stack for those shapes only, and `ocidir`
//! writes directories rather than one file (through cap-std). Reading is strict: every blob's
//! digest, and every file against the config's list, so a corrupt bundle is refused naming the
//! file (or the blob) that does not match. Nothing here knows what the files are.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
/// The annotation OCI tools show as a layer's (or file's) name.
const TITLE: &str = "org.opencontainers.image.title";
/// The annotation that names a manifest inside an index (a tag).
const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// JSON blobs are read into memory; nothing the writer makes comes near this.
const MAX_JSON: u64 = 16 << 20;

/// What one layer holds: files copied from `source` (a file, or a directory walked whole with
/// its symlinks) to paths under `dest` in the unpacked tree.
#[derive(Debug, Clone)]
pub(crate) struct LayerSpec {
    /// The layer's name (its title annotation), as errors and size reports name it.
    pub name: String,
    pub sources: Vec<Source>,
}

/// A file or directory to put at `dest` (a relative `/`-separated path).
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub path: PathBuf,
    pub dest: String,
    /// Names of a directory's top-level entries to leave out.
    pub skip: Vec<String>,
}

/// The config blob: the caller's metadata and every layer's files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Config {
    pub metadata: Value,
    pub layers: Vec<LayerFiles>,
}

/// One layer's files, in its order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LayerFiles {
    pub name: String,
    pub files: Vec<FileEntry>,
}

/// A regular file (its sha256, size and mode) or a symlink (its target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub mode: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Index {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: String,
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType")]
    media_type: String,
    #[serde(rename = "artifactType")]
    artifact_type: String,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// What [`write`] wrote: each layer's compressed and unpacked size.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub layers: Vec<LayerSize>,
    /// The whole file.
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct LayerSize {
    pub name: String,
    pub compressed: u64,
    pub unpacked: u64,
    pub files: usize,
}

/// How hard zstd works on the layers, with long-distance matching over a 128 MiB window (the
/// most a default decoder accepts). Measured on the 2-core host: S1's bundle is 38.9 MiB at
/// level 19 in 4 min 44 s of CPU; level 12 with the long window compresses the stripped debug
/// `lab` (53 MB) to 8.7 MB (19: 7.5 MB) in 3.4 s of CPU instead of 40 s, QEMU's 83 MB to 20.2 MB
/// (19: 18.4 MB) in 7 s instead of 59 s.
const ZSTD_LEVEL: i32 = 12;
const ZSTD_WINDOW_LOG: u32 = 27;

/// Writes the layers into `output` (through a temporary file beside it, renamed at the end),
/// with `artifact_type` (the config's media type too, `+json`), tag `reference` and `metadata`
/// in the config.
pub(crate) fn write(
    output: &Path,
    artifact_type: &str,
    reference: &str,
    metadata: Value,
    layers: &[LayerSpec],
) -> Result<Written> {
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix(".lab-bundle-")
        .tempdir_in(dir)
        .with_context(|| format!("a scratch dir in {}", dir.display()))?;
    let mut blobs: Vec<(Descriptor, PathBuf)> = Vec::new();
    let mut config_layers = Vec::new();
    let mut sizes = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        crate::progress::step(format!("bundle: compressing {}", layer.name));
        let path = scratch.path().join(format!("layer-{i}"));
        let (files, digest, compressed) =
            write_layer(layer, &path).with_context(|| format!("bundle layer {}", layer.name))?;
        sizes.push(LayerSize {
            name: layer.name.clone(),
            compressed,
            unpacked: files.iter().map(|f| f.size).sum(),
            files: files.len(),
        });
        config_layers.push(LayerFiles {
            name: layer.name.clone(),
            files,
        });
        let descriptor = Descriptor {
            media_type: LAYER_MEDIA_TYPE.into(),
            digest,
            size: compressed,
            annotations: BTreeMap::from([(TITLE.to_string(), layer.name.clone())]),
        };
        blobs.push((descriptor, path));
    }
    let config = serde_json::to_vec_pretty(&Config {
        metadata,
        layers: config_layers,
    })?;
    let config_descriptor = json_descriptor(&format!("{artifact_type}+json"), &config);
    let manifest = serde_json::to_vec_pretty(&Manifest {
        schema_version: 2,
        media_type: MANIFEST_MEDIA_TYPE.into(),
        artifact_type: artifact_type.into(),
        config: config_descriptor.clone(),
        layers: blobs.iter().map(|(d, _)| d.clone()).collect(),
    })?;
    let mut manifest_descriptor = json_descriptor(MANIFEST_MEDIA_TYPE, &manifest);
    manifest_descriptor
        .annotations
        .insert(REF_NAME.into(), reference.into());
    let index = serde_json::to_vec_pretty(&Index {
        schema_version: 2,
        media_type: INDEX_MEDIA_TYPE.into(),
        manifests: vec![manifest_descriptor.clone()],
    })?;

    let tmp = scratch.path().join("bundle.tar");
    let mut tar = tar::Builder::new(BufWriter::new(File::create(&tmp)?));
    // The small documents first, so a reader meets them before the blobs they describe.
    append_bytes(&mut tar, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    append_bytes(&mut tar, "index.json", &index)?;
    append_bytes(&mut tar, &blob_path(&manifest_descriptor.digest), &manifest)?;
    append_bytes(&mut tar, &blob_path(&config_descriptor.digest), &config)?;
    for (descriptor, path) in &blobs {
        let mut header = tar::Header::new_ustar();
        header.set_size(descriptor.size);
        header.set_mode(0o644);
        header.set_mtime(0);
        tar.append_data(
            &mut header,
            blob_path(&descriptor.digest),
            File::open(path)?,
        )?;
    }
    tar.into_inner()?.into_inner().map_err(|e| e.into_error())?;
    let bytes = fs::metadata(&tmp)?.len();
    fs::rename(&tmp, output).with_context(|| format!("writing {}", output.display()))?;
    Ok(Written {
        layers: sizes,
        bytes,
    })
}

fn json_descriptor(media_type: &str, bytes: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
        size: bytes.len() as u64,
        annotations: BTreeMap::new(),
    }
}

fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

fn append_bytes(tar: &mut tar::Builder<impl Write>, path: &str, bytes: &[u8]) -> Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    tar.append_data(&mut header, path, bytes)?;
    Ok(())
}

/// A writer or reader that hashes and counts what passes through it.
struct Hashing<T> {
    inner: T,
    hasher: Sha256,
    bytes: u64,
}

impl<T> Hashing<T> {
    fn new(inner: T) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }
    fn finish(self) -> (T, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Compresses one layer into `out`: its file list, the blob's digest and size.
fn write_layer(layer: &LayerSpec, out: &Path) -> Result<(Vec<FileEntry>, String, u64)> {
    let blob = Hashing::new(BufWriter::new(File::create(out)?));
    let mut encoder = zstd::Encoder::new(blob, ZSTD_LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.long_distance_matching(true)?;
    encoder.window_log(ZSTD_WINDOW_LOG)?;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    encoder.multithread(workers)?;
    let mut tar = tar::Builder::new(encoder);
    let mut files = Vec::new();
    for source in &layer.sources {
        let mut walked = Vec::new();
        walk(&source.path, &source.dest, &source.skip, &mut walked)?;
        for (path, dest) in walked {
            files.push(append_file(&mut tar, &path, &dest)?);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for f in &files {
        if !seen.insert(&f.path) {
            bail!("{} is in the layer twice", f.path);
        }
    }
    let encoder = tar.into_inner()?;
    let blob = encoder.finish()?;
    let (writer, digest, bytes) = blob.finish();
    writer.into_inner().map_err(|e| e.into_error())?;
    Ok((files, format!("sha256:{digest}"), bytes))
}

/// Every file and symlink under `path` (or `path` itself), with its destination, sorted.
fn walk(path: &Path, dest: &str, skip: &[String], out: &mut Vec<(PathBuf, String)>) -> Result<()> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        out.push((path.to_path_buf(), dest.to_string()));
        return Ok(());
    }
    let mut entries: Vec<_> = fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if skip.contains(&name) {
            continue;
        }
        walk(&entry.path(), &format!("{dest}/{name}"), &[], out)?;
    }
    Ok(())
}

fn append_file(tar: &mut tar::Builder<impl Write>, path: &Path, dest: &str) -> Result<FileEntry> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mut header = tar::Header::new_gnu();
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    if meta.file_type().is_symlink() {
        let target = fs::read_link(path)?;
        let text = target.to_string_lossy().into_owned();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        tar.append_link(&mut header, dest, &target)?;
        return Ok(FileEntry {
            path: dest.to_string(),
            sha256: None,
            size: 0,
            mode: 0o777,
            link: Some(text),
        });
    }
    if !meta.is_file() {
        bail!("{} is neither a file nor a symlink", path.display());
    }
    let mode = meta.permissions().mode() & 0o7777;
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(meta.len());
    header.set_mode(mode);
    let mut reader = Hashing::new(BufReader::new(
        File::open(path).with_context(|| format!("opening {}", path.display()))?,
    ));
    tar.append_data(&mut header, dest, &mut reader)
        .with_context(|| format!("adding {}", path.display()))?;
    let (_, sha256, size) = reader.finish();
    if size != meta.len() {
        bail!("{} changed while it was bundled", path.display());
    }
    Ok(FileEntry {
        path: dest.to_string(),
        sha256: Some(sha256),
        size,
        mode,
        link: None,
    })
}

/// What [`read`] unpacked.
#[derive(Debug, Clone)]
pub(crate) struct Unpacked {
    /// The manifest's digest: the bundle's identity.
    pub digest: String,
    pub reference: Option<String>,
    pub config: Config,
}

/// Unpacks `file` into `dest` (created; it must be empty), checking every blob's digest and
/// every file's sha256 against the config. An error names `file` and the part that does not
/// match.
pub(crate) fn read(file: &Path, dest: &Path, artifact_type: &str) -> Result<Unpacked> {
    read_inner(file, dest, artifact_type)
        .with_context(|| format!("bundle {} refused", file.display()))
}

fn read_inner(file: &Path, dest: &Path, artifact_type: &str) -> Result<Unpacked> {
    fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let blobs_dir = dest.join(".blobs");
    fs::create_dir_all(&blobs_dir)?;
    let mut layout_file = None;
    let mut index = None;
    // Blobs by digest, on disk, each with whether it matched its name.
    let mut blobs: BTreeMap<String, (PathBuf, bool)> = BTreeMap::new();
    let reader = BufReader::new(File::open(file).context("opening it")?);
    let mut outer = tar::Archive::new(reader);
    for entry in outer.entries().context("reading its tar")? {
        let mut entry = entry.context("reading its tar")?;
        let name = entry.path()?.to_string_lossy().into_owned();
        let name = name.trim_start_matches("./").to_string();
        match name.as_str() {
            "oci-layout" => layout_file = Some(read_small(&mut entry, &name)?),
            "index.json" => index = Some(read_small(&mut entry, &name)?),
            _ => {
                let Some(hex) = name.strip_prefix("blobs/sha256/") else {
                    if entry.header().entry_type().is_dir() {
                        continue;
                    }
                    bail!("{name} is not part of an OCI image layout");
                };
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    bail!("{name} is not a sha256 blob name");
                }
                let path = blobs_dir.join(hex);
                let mut out = Hashing::new(BufWriter::new(File::create(&path)?));
                io::copy(&mut entry, &mut out).with_context(|| format!("reading {name}"))?;
                let (w, got, _) = out.finish();
                w.into_inner().map_err(|e| e.into_error())?;
                blobs.insert(format!("sha256:{hex}"), (path, got == hex));
            }
        }
    }
    let layout_file = layout_file.context("it has no oci-layout file: not an OCI image layout")?;
    let layout: Value = serde_json::from_slice(&layout_file).context("parsing oci-layout")?;
    if layout["imageLayoutVersion"] != "1.0.0" {
        bail!(
            "oci-layout: imageLayoutVersion is {}, not 1.0.0",
            layout["imageLayoutVersion"]
        );
    }
    let index: Index = serde_json::from_slice(&index.context("it has no index.json")?)
        .context("parsing index.json")?;
    let [manifest_descriptor] = &index.manifests[..] else {
        bail!(
            "index.json: manifests holds {}, not one",
            index.manifests.len()
        );
    };
    let manifest_bytes = small_blob(&blobs, manifest_descriptor, "the manifest")?;
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .with_context(|| format!("parsing the manifest {}", manifest_descriptor.digest))?;
    if manifest.artifact_type != artifact_type {
        bail!(
            "the manifest's artifactType is {:?}, not {artifact_type:?}",
            manifest.artifact_type
        );
    }
    let config_bytes = small_blob(&blobs, &manifest.config, "the config")?;
    let config: Config = serde_json::from_slice(&config_bytes)
        .with_context(|| format!("parsing the config {}", manifest.config.digest))?;
    if config.layers.len() != manifest.layers.len() {
        bail!(
            "the config lists {} layers, the manifest {}",
            config.layers.len(),
            manifest.layers.len()
        );
    }
    for (descriptor, listed) in manifest.layers.iter().zip(&config.layers) {
        let (path, matched) = match blobs.get(&descriptor.digest) {
            Some((path, matched)) => (path.clone(), *matched),
            None => bail!(
                "layer {} (blob {}) is missing",
                listed.name,
                descriptor.digest
            ),
        };
        unpack_layer(&path, listed, dest).with_context(|| format!("layer {}", listed.name))?;
        // Every file matched its sha256, yet the blob did not: name the blob.
        if !matched {
            bail!(
                "layer {}: blob {} does not match its digest",
                listed.name,
                descriptor.digest
            );
        }
        fs::remove_file(&path).ok();
    }
    fs::remove_dir_all(&blobs_dir).ok();
    Ok(Unpacked {
        digest: manifest_descriptor.digest.clone(),
        reference: manifest_descriptor.annotations.get(REF_NAME).cloned(),
        config,
    })
}

fn read_small(entry: &mut impl Read, name: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    entry
        .take(MAX_JSON)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {name}"))?;
    Ok(bytes)
}

/// A JSON blob, checked against its descriptor.
fn small_blob(
    blobs: &BTreeMap<String, (PathBuf, bool)>,
    descriptor: &Descriptor,
    what: &str,
) -> Result<Vec<u8>> {
    let (path, matched) = blobs
        .get(&descriptor.digest)
        .with_context(|| format!("{what} (blob {}) is missing", descriptor.digest))?;
    if !matched {
        bail!(
            "{what}: blob {} does not match its digest",
            descriptor.digest
        );
    }
    let bytes = read_small(&mut File::open(path)?, what)?;
    if bytes.len() as u64 != descriptor.size {
        bail!(
            "{what}: blob {} is not {} bytes",
            descriptor.digest,
            descriptor.size
        );
    }
    Ok(bytes)
}

/// Unpacks one layer blob into `dest`, each file checked against `listed`.
fn unpack_layer(blob: &Path, listed: &LayerFiles, dest: &Path) -> Result<()> {
    let mut expected: BTreeMap<&str, &FileEntry> =
        listed.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let decoder = zstd::Decoder::new(File::open(blob)?)?;
    let mut archive = tar::Archive::new(decoder);
    let mut last = String::from("its start");
    let entries = archive
        .entries()
        .with_context(|| format!("reading the layer after {last}"))?;
    for entry in entries {
        let mut entry = entry.with_context(|| format!("reading the layer after {last}"))?;
        let name = entry.path()?.to_string_lossy().into_owned();
        let want = expected
            .remove(name.as_str())
            .ok_or_else(|| anyhow!("{name} is not in the bundle's manifest"))?;
        let path = safe_join(dest, &name)?;
        no_link_on_the_way(dest, &name)?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        match (&want.link, entry.header().entry_type()) {
            (Some(target), tar::EntryType::Symlink) => {
                let got = entry
                    .link_name()?
                    .map(|l| l.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if &got != target {
                    bail!("{name} links to {got}, the manifest says {target}");
                }
                std::os::unix::fs::symlink(target, &path)
                    .with_context(|| format!("linking {}", path.display()))?;
            }
            (None, tar::EntryType::Regular) => {
                // A new file only: an earlier layer's symlink at this path would be written
                // through (O_EXCL does not follow it).
                let file = File::options()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .with_context(|| {
                        format!("creating {} (a path listed twice?)", path.display())
                    })?;
                let mut out = Hashing::new(BufWriter::new(file));
                io::copy(&mut entry, &mut out).with_context(|| format!("reading {name}"))?;
                let (w, sha256, size) = out.finish();
                w.into_inner().map_err(|e| e.into_error())?;
                if Some(&sha256) != want.sha256.as_ref() || size != want.size {
                    bail!(
                        "{name} is corrupt: its sha256 is {sha256} ({size} bytes), the manifest \
                         says {} ({} bytes)",
                        want.sha256.as_deref().unwrap_or("-"),
                        want.size
                    );
                }
                fs::set_permissions(
                    &path,
                    fs::Permissions::from_mode(want.mode & crate::cache::KEPT_MODE),
                )?;
            }
            (_, kind) => bail!("{name} is a {kind:?} entry, not what the manifest lists"),
        }
        last = name;
    }
    if let Some(missing) = expected.keys().next() {
        bail!("{missing} is in the manifest but not in the layer");
    }
    Ok(())
}

/// Refuses `relative` when a directory on its way under `dest` is a symbolic link (an earlier
/// entry's `x -> /elsewhere` would carry `x/f` out of the bundle), or when the path itself
/// already exists (a link and a file at one path).
fn no_link_on_the_way(dest: &Path, relative: &str) -> Result<()> {
    let mut at = dest.to_path_buf();
    let parts: Vec<_> = Path::new(relative).components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Err(_) => return Ok(()),
            Ok(m) if i + 1 == parts.len() => {
                bail!(
                    "{relative}: listed after something else at that path ({:?})",
                    m.file_type()
                )
            }
            Ok(m) if m.file_type().is_symlink() => bail!(
                "{relative}: {} is a symbolic link; a bundle's files stay inside it",
                at.strip_prefix(dest).unwrap_or(&at).display()
            ),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// `dest/relative`, refusing absolute paths and `..`.
fn safe_join(dest: &Path, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        bail!("{relative}: a path outside the bundle");
    }
    Ok(dest.join(rel))
}

#[cfg(test)]
mod tests;
