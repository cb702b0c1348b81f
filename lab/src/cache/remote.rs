//! The cache's remote layer: entries as OCI artifacts in a registry (`LAB_CACHE_REMOTE`), one
//! artifact per (kind, key), tagged `<kind>-<key>`, spoken to with the oras project's
//! `oci-client`. What an artifact holds is [`super::artifact`]'s.
//!
//! Plain http only for a loopback registry (127.0.0.1, localhost, [::1]); https otherwise.
//! Credentials from `LAB_CACHE_USER`/`LAB_CACHE_PASSWORD`, else anonymous. Every request is
//! bounded (connect and read timeouts, and a limit on each whole manifest exchange), so a
//! registry that is down or stalls costs seconds, never a hang.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use oci_client::client::{Certificate, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::artifact::{self, EntryConfig, FileRecord, LayerInfo, Packed};

mod names;
use names::parse_url;
pub(crate) use names::{entry_name, tag_of};

mod credentials;
mod download;
pub use credentials::keep_password_from_children;
use credentials::read_certificates;
use download::{blob_deadline, Capped};

/// The variable naming the remote: `oci://HOST[:PORT]/REPO`.
pub(crate) const REMOTE_ENV: &str = "LAB_CACHE_REMOTE";
/// Registry user and password (both, or neither: anonymous).
pub(crate) const USER_ENV: &str = "LAB_CACHE_USER";
pub(crate) const PASSWORD_ENV: &str = "LAB_CACHE_PASSWORD";
/// A PEM file of certificates trusted beside the system's (a registry behind a CA of its own).
pub(crate) const CA_ENV: &str = "LAB_CACHE_CA";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest silence inside one response (a stalled transfer).
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest exchange of small documents (a manifest, a config, a tag check).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// A registry holding cache entries.
pub(crate) struct Remote {
    /// `oci://HOST[:PORT]/REPO` as given: what every message names.
    url: String,
    registry: String,
    repository: String,
    auth: RegistryAuth,
    user: Option<String>,
    client: Client,
    /// Set at the first error that makes the remote unusable (down, credentials refused):
    /// later lookups of this process go straight to building instead of failing again.
    unusable: Mutex<Option<String>>,
    /// Tags this process found missing: asked once, not at every lookup of the key.
    missing: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

/// What a push did.
#[derive(Debug, Clone, PartialEq)]
pub enum Pushed {
    /// The artifact was uploaded: its layers' names and compressed sizes.
    Uploaded {
        /// (layer name, compressed bytes)
        layers: Vec<(String, u64)>,
        /// The entry's bytes on disk, uncompressed.
        entry_bytes: u64,
    },
    /// The tag was already there and was left alone (keys hash inputs: never overwritten).
    AlreadyThere,
}

/// Why a remote operation failed, for the cache to decide what to do next.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The remote cannot be used by this process (down, credentials refused): the message.
    Unusable(anyhow::Error),
    /// This entry could not be pulled (corrupt, refused by verification, a bad artifact).
    Entry(anyhow::Error),
}

impl Remote {
    /// The remote `LAB_CACHE_REMOTE` names, if set; a malformed value is an error naming it.
    pub(crate) fn from_env() -> Result<Option<Remote>> {
        let Some(url) = std::env::var(REMOTE_ENV).ok().filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let user = std::env::var(USER_ENV).ok().filter(|v| !v.is_empty());
        let password = credentials::password();
        let ca = match std::env::var_os(CA_ENV).filter(|v| !v.is_empty()) {
            Some(path) => {
                let path = std::path::PathBuf::from(path);
                read_certificates(&path).with_context(|| format!("{CA_ENV}={}", path.display()))?
            }
            None => Vec::new(),
        };
        Remote::new(&url, user, password, ca)
            .with_context(|| format!("{REMOTE_ENV}={url}"))
            .map(Some)
    }

    /// A remote at `url` (`oci://HOST[:PORT]/REPO`), trusting `ca` beside the system's roots.
    pub(crate) fn new(
        url: &str,
        user: Option<String>,
        password: Option<String>,
        ca: Vec<Certificate>,
    ) -> Result<Remote> {
        let (registry, repository) = parse_url(url)?;
        let auth = match (&user, password) {
            (Some(u), Some(p)) => RegistryAuth::Basic(u.clone(), p),
            (None, None) => RegistryAuth::Anonymous,
            (Some(_), None) => bail!("{USER_ENV} is set but {PASSWORD_ENV} is not"),
            (None, Some(_)) => bail!("{PASSWORD_ENV} is set but {USER_ENV} is not"),
        };
        let host = registry
            .rsplit_once(':')
            .map_or(registry.as_str(), |(h, _)| h);
        let protocol = if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
            ClientProtocol::HttpsExcept(vec![registry.clone()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            // One PUT per blob, streamed from the packed file (no 4 MiB chunk round trips).
            use_monolithic_push: true,
            user_agent: concat!("lab/", env!("CARGO_PKG_VERSION")),
            extra_root_certificates: ca,
            ..Default::default()
        };
        // reqwest is built without a crypto provider of its own (lab/Cargo.toml): ring is this
        // process's. Installing fails only when one is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Not `Client::new`, which logs a bad configuration and goes on with the default one.
        let client = Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("setting up the registry client: {}", chain(&e)))?;
        Ok(Remote {
            url: url.to_string(),
            registry,
            repository,
            auth,
            user,
            client,
            unusable: Mutex::new(None),
            missing: Mutex::new(HashSet::new()),
        })
    }

    /// `oci://HOST[:PORT]/REPO`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Why this process stopped using the remote, if it did.
    pub(crate) fn unusable(&self) -> Option<String> {
        self.unusable.lock().unwrap().clone()
    }

    fn reference(&self, kind: &str, key: &str) -> Result<Reference> {
        let tag = tag_of(kind, key)?;
        Ok(Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag,
        ))
    }

    /// Pulls the required layers of `kind`/`key` into `dest` (an empty staging dir), each file
    /// verified against the artifact's list. `Ok(false)`: the remote has no such entry.
    /// `scratch` holds the downloaded blobs.
    pub(crate) fn pull(
        &self,
        kind: &str,
        key: &str,
        dest: &Path,
        scratch: &Path,
    ) -> Result<bool, Failure> {
        let tag = tag_of(kind, key).map_err(Failure::Entry)?;
        if self.missing.lock().unwrap().contains(&tag) {
            return Ok(false);
        }
        let pulled = self.pull_entry(kind, key, dest, scratch);
        if let Err(Failure::Entry(_)) = &pulled {
            // Refused once: the lookup after it (a build's) builds without asking again.
            self.missing.lock().unwrap().insert(tag);
        }
        pulled
    }

    fn pull_entry(
        &self,
        kind: &str,
        key: &str,
        dest: &Path,
        scratch: &Path,
    ) -> Result<bool, Failure> {
        let what = entry_name(kind, key);
        let Some((manifest, config)) = self.manifest_and_config(kind, key)? else {
            return Ok(false);
        };
        let reference = self.reference(kind, key).map_err(Failure::Entry)?;
        for layer in config.layers.iter().filter(|l| !l.optional) {
            let files = layer.files.as_deref().ok_or_else(|| {
                Failure::Entry(anyhow::anyhow!(
                    "{what} on {}: required layer {} lists no files: refused",
                    self.url,
                    layer.name
                ))
            })?;
            self.pull_layer(&reference, &manifest, layer, files, dest, scratch, &what)?;
        }
        Ok(true)
    }

    /// Pulls optional layer `layer` of `kind`/`key` into `dest` (its files land under
    /// `dest/<layer>`), verified. `Ok(false)`: the remote has no such entry or layer.
    pub(crate) fn pull_optional(
        &self,
        kind: &str,
        key: &str,
        layer: &str,
        dest: &Path,
        scratch: &Path,
    ) -> Result<bool, Failure> {
        let what = entry_name(kind, key);
        let Some((manifest, config)) = self.manifest_and_config(kind, key)? else {
            return Ok(false);
        };
        let Some(info) = config.layers.iter().find(|l| l.name == layer) else {
            return Ok(false);
        };
        let reference = self.reference(kind, key).map_err(Failure::Entry)?;
        let list_digest = info.files_digest.as_deref().ok_or_else(|| {
            Failure::Entry(anyhow::anyhow!(
                "{what} on {}: layer {layer} has no file list: refused",
                self.url
            ))
        })?;
        let list_desc = manifest
            .layers
            .iter()
            .find(|d| d.digest == list_digest)
            .cloned()
            .ok_or_else(|| {
                Failure::Entry(anyhow::anyhow!(
                    "{what} on {}: the manifest lacks layer {layer}'s file list: refused",
                    self.url
                ))
            })?;
        let mut list = Vec::new();
        self.run(
            self.client.pull_blob(&reference, &list_desc, &mut list),
            READ_TIMEOUT,
        )
        .map_err(|e| self.classify(e, &format!("pulling {what}'s {layer} file list")))?;
        let files: Vec<FileRecord> = serde_json::from_slice(&list)
            .with_context(|| format!("{what} on {}: layer {layer}'s file list", self.url))
            .map_err(Failure::Entry)?;
        self.pull_layer(&reference, &manifest, info, &files, dest, scratch, &what)?;
        Ok(true)
    }

    /// Pushes the entry at `entry` as `kind`/`key` unless the tag exists. `scratch` holds the
    /// packed layers while they upload.
    pub(crate) fn push(
        &self,
        kind: &str,
        key: &str,
        entry: &Path,
        scratch: &Path,
    ) -> Result<Pushed, Failure> {
        let what = entry_name(kind, key);
        let reference = self.reference(kind, key).map_err(Failure::Entry)?;
        self.authenticate(&reference, RegistryOperation::Push)?;
        match self.run(
            self.client.fetch_manifest_digest(&reference, &self.auth),
            EXCHANGE_TIMEOUT,
        ) {
            Ok(_) => return Ok(Pushed::AlreadyThere),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(self.classify(e, &format!("looking for {what}"))),
        }
        let entry_bytes = dir_bytes(entry)
            .with_context(|| format!("reading {}", entry.display()))
            .map_err(Failure::Entry)?;
        let mut layers = Vec::new();
        let mut blobs: Vec<(OciDescriptor, std::path::PathBuf)> = Vec::new();
        let packed = artifact::pack(entry, artifact::FILES_LAYER, &scratch.join("files"))
            .with_context(|| format!("packing {what}"))
            .map_err(Failure::Entry)?;
        layers.push(layer_info(artifact::FILES_LAYER, &packed, false, None));
        blobs.push((descriptor(&packed, "files.tar.zst"), scratch.join("files")));
        for dir in artifact::optional_dirs_of(entry) {
            let packed = artifact::pack(entry, dir, &scratch.join(dir))
                .with_context(|| format!("packing {what}'s {dir}"))
                .map_err(Failure::Entry)?;
            let list = serde_json::to_vec(&packed.files).expect("file lists serialize");
            let list_path = scratch.join(format!("{dir}.files.json"));
            std::fs::write(&list_path, &list)
                .with_context(|| format!("writing {}", list_path.display()))
                .map_err(Failure::Entry)?;
            let list_desc = OciDescriptor {
                media_type: artifact::LIST_MEDIA_TYPE.into(),
                digest: sha256_digest(&list),
                size: list.len() as i64,
                annotations: Some(title(&format!("{dir}.files.json"))),
                ..Default::default()
            };
            layers.push(layer_info(
                dir,
                &packed,
                true,
                Some(list_desc.digest.clone()),
            ));
            blobs.push((
                descriptor(&packed, &format!("{dir}.tar.zst")),
                scratch.join(dir),
            ));
            blobs.push((list_desc, list_path));
        }
        let config = EntryConfig {
            kind: kind.into(),
            key: key.into(),
            layers,
        };
        let config_bytes = serde_json::to_vec_pretty(&config).expect("configs serialize");
        let config_desc = OciDescriptor {
            media_type: artifact::CONFIG_MEDIA_TYPE.into(),
            digest: sha256_digest(&config_bytes),
            size: config_bytes.len() as i64,
            ..Default::default()
        };
        let push = || format!("pushing {what}");
        self.run(
            self.client
                .push_blob(&reference, config_bytes, &config_desc.digest),
            EXCHANGE_TIMEOUT,
        )
        .map_err(|e| self.classify(e, &push()))?;
        for (desc, path) in &blobs {
            let there = self
                .run(
                    self.client.blob_exists(&reference, &desc.digest),
                    EXCHANGE_TIMEOUT,
                )
                .map_err(|e| self.classify(e, &push()))?;
            if !there {
                self.upload(&reference, desc, path)
                    .map_err(|e| self.classify(e, &push()))?;
            }
        }
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.into()),
            config: config_desc,
            layers: blobs.iter().map(|(d, _)| d.clone()).collect(),
            subject: None,
            artifact_type: Some(artifact::ARTIFACT_TYPE.into()),
            annotations: None,
        };
        self.run(
            self.client
                .push_manifest(&reference, &OciManifest::Image(manifest)),
            EXCHANGE_TIMEOUT,
        )
        .map_err(|e| self.classify(e, &push()))?;
        self.missing
            .lock()
            .unwrap()
            .remove(&tag_of(kind, key).map_err(Failure::Entry)?);
        Ok(Pushed::Uploaded {
            layers: blobs
                .iter()
                .map(|(d, _)| (title_of(d), d.size as u64))
                .collect(),
            entry_bytes,
        })
    }

    /// Streams the blob at `path` up (no copy in memory: a kernel tree's layer is ~400 MB).
    fn upload(
        &self,
        reference: &Reference,
        desc: &OciDescriptor,
        path: &Path,
    ) -> std::result::Result<(), OciDistributionError> {
        let path = path.to_path_buf();
        let size = desc.size as u64;
        let digest = desc.digest.clone();
        block_on(async move {
            let file = tokio::fs::File::open(&path).await?;
            let stream = futures::stream::try_unfold(file, |mut file| async move {
                use tokio::io::AsyncReadExt;
                let mut buf = vec![0u8; 1 << 20];
                let n = file.read(&mut buf).await?;
                if n == 0 {
                    return Ok(None);
                }
                buf.truncate(n);
                Ok::<_, OciDistributionError>(Some((bytes::Bytes::from(buf), file)))
            });
            self.client
                .push_blob_stream(reference, stream, &digest, Some(size))
                .await
                .map(|_| ())
        })
    }

    /// The manifest and config of `kind`/`key`; `None` when the tag does not exist.
    fn manifest_and_config(
        &self,
        kind: &str,
        key: &str,
    ) -> Result<Option<(OciImageManifest, EntryConfig)>, Failure> {
        let what = entry_name(kind, key);
        let reference = self.reference(kind, key).map_err(Failure::Entry)?;
        self.authenticate(&reference, RegistryOperation::Pull)?;
        let manifest = match self.run(
            self.client.pull_image_manifest(&reference, &self.auth),
            EXCHANGE_TIMEOUT,
        ) {
            Ok((manifest, _digest)) => manifest,
            Err(e) if not_found(&e) => {
                self.missing
                    .lock()
                    .unwrap()
                    .insert(tag_of(kind, key).map_err(Failure::Entry)?);
                return Ok(None);
            }
            Err(e) => return Err(self.classify(e, &format!("looking for {what}"))),
        };
        if manifest.config.media_type != artifact::CONFIG_MEDIA_TYPE {
            return Err(Failure::Entry(anyhow::anyhow!(
                "{what} on {}: its config is {}, not {}: not a lab cache entry, refused",
                self.url,
                manifest.config.media_type,
                artifact::CONFIG_MEDIA_TYPE
            )));
        }
        let mut bytes = Vec::new();
        self.run(
            self.client
                .pull_blob(&reference, &manifest.config, &mut bytes),
            EXCHANGE_TIMEOUT,
        )
        .map_err(|e| match e {
            OciDistributionError::DigestError(d) => Failure::Entry(anyhow::anyhow!(
                "{what} on {}: its config blob (the file list) does not match its digest: \
                 refused ({d})",
                self.url
            )),
            e => self.classify(e, &format!("pulling {what}'s config")),
        })?;
        let config: EntryConfig = serde_json::from_slice(&bytes)
            .with_context(|| format!("{what} on {}: parsing its config", self.url))
            .map_err(Failure::Entry)?;
        if config.kind != kind || config.key != key {
            return Err(Failure::Entry(anyhow::anyhow!(
                "{what} on {}: its config describes {}/{}: refused",
                self.url,
                config.kind,
                config.key
            )));
        }
        Ok(Some((manifest, config)))
    }

    /// Downloads `layer` into `scratch` and unpacks it into `dest`, every file checked against
    /// `files`; the downloaded blob is removed after.
    #[allow(clippy::too_many_arguments)]
    fn pull_layer(
        &self,
        reference: &Reference,
        manifest: &OciImageManifest,
        layer: &LayerInfo,
        files: &[FileRecord],
        dest: &Path,
        scratch: &Path,
        what: &str,
    ) -> Result<(), Failure> {
        // A name of the lab's own, not the registry's layer name (`../x` or an absolute path
        // would put the registry's bytes anywhere, issue W2); removed pass or fail.
        let blob = scratch.join("layer.tar.zst");
        let pulled = self
            .fetch_blob(reference, manifest, layer, &blob, what, files)
            .and_then(|()| {
                artifact::unpack_verified(&blob, dest, files, what)
                    .with_context(|| {
                        format!("pulling {what}'s {} layer from {}", layer.name, self.url)
                    })
                    .map_err(Failure::Entry)
            });
        std::fs::remove_file(&blob).ok();
        pulled
    }

    /// Downloads layer `layer` to `path`; a blob whose bytes do not match its digest is refused,
    /// naming the entry, the layer and the files it holds.
    fn fetch_blob(
        &self,
        reference: &Reference,
        manifest: &OciImageManifest,
        layer: &LayerInfo,
        path: &Path,
        what: &str,
        files: &[FileRecord],
    ) -> Result<(), Failure> {
        let desc = manifest
            .layers
            .iter()
            .find(|d| d.digest == layer.digest)
            .cloned()
            .ok_or_else(|| {
                Failure::Entry(anyhow::anyhow!(
                    "{what} on {}: the manifest lacks layer {}: refused",
                    self.url,
                    layer.name
                ))
            })?;
        let target = path.to_path_buf();
        let declared = u64::try_from(desc.size).unwrap_or(0);
        let deadline = blob_deadline(declared);
        let result = block_on(async {
            let file = tokio::fs::File::create(&target).await?;
            let capped = Capped {
                inner: file,
                left: declared,
            };
            match tokio::time::timeout(deadline, self.client.pull_blob(reference, &desc, capped))
                .await
            {
                Ok(pulled) => pulled,
                Err(_) => Err(OciDistributionError::GenericError(Some(format!(
                    "no answer within {} s: the whole layer of {declared} bytes did not come \
                     within its deadline",
                    deadline.as_secs()
                )))),
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(OciDistributionError::IoError(e))
                if e.kind() == std::io::ErrorKind::FileTooLarge =>
            {
                Err(Failure::Entry(anyhow::anyhow!(
                    "{what} on {}: layer {} sends more than its declared {declared} bytes: \
                     refused",
                    self.url,
                    layer.name
                )))
            }
            Err(OciDistributionError::DigestError(e)) => Err(Failure::Entry(anyhow::anyhow!(
                "{what} on {}: layer {} ({}) is corrupt: its bytes do not match the digest the \
                 manifest names ({e}): refused",
                self.url,
                layer.name,
                artifact::describe_files(files)
            ))),
            Err(e) => Err(self.classify(e, &format!("pulling {what}'s layer {}", layer.name))),
        }
    }

    /// Logs in for `op` (a GET of `/v2/`, which also shows whether the registry is up).
    fn authenticate(&self, reference: &Reference, op: RegistryOperation) -> Result<(), Failure> {
        if let Some(why) = self.unusable() {
            return Err(Failure::Unusable(anyhow::anyhow!(why)));
        }
        self.run(
            self.client.auth(reference, &self.auth, op),
            EXCHANGE_TIMEOUT,
        )
        .map(|_| ())
        .map_err(|e| self.classify(e, "connecting"))
    }

    /// Runs `future` on the remote's runtime within `limit`.
    fn run<T: Send>(
        &self,
        future: impl Future<Output = std::result::Result<T, OciDistributionError>> + Send,
        limit: Duration,
    ) -> std::result::Result<T, OciDistributionError> {
        block_on(async move {
            match tokio::time::timeout(limit, future).await {
                Ok(result) => result,
                Err(_) => Err(OciDistributionError::GenericError(Some(format!(
                    "no answer within {} s",
                    limit.as_secs()
                )))),
            }
        })
    }

    /// Sorts an error into "the remote is unusable" (down, timed out, credentials refused;
    /// remembered for the process) or "this entry failed", with a message naming the remote.
    fn classify(&self, e: OciDistributionError, doing: &str) -> Failure {
        let unusable = match &e {
            OciDistributionError::RequestError(r) => {
                r.is_connect() || r.is_timeout() || r.is_request()
            }
            OciDistributionError::GenericError(Some(m)) => m.starts_with("no answer within"),
            _ => false,
        };
        let refused = matches!(
            &e,
            OciDistributionError::UnauthorizedError { .. }
                | OciDistributionError::AuthenticationFailure(_)
        ) || matches!(&e, OciDistributionError::RegistryError { envelope, .. }
            if envelope.errors.iter().any(|x| matches!(x.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)));
        if refused {
            let who = match &self.user {
                Some(u) => format!("the credentials of {USER_ENV}={u}"),
                None => format!("anonymous access (set {USER_ENV} and {PASSWORD_ENV})"),
            };
            let message = format!(
                "cache remote {}: the registry refused {who} while {doing}: {}",
                self.url,
                chain(&e)
            );
            *self.unusable.lock().unwrap() = Some(message.clone());
            return Failure::Unusable(anyhow::anyhow!(message));
        }
        if unusable {
            let cause = chain(&e);
            // rustls's refusal comes as a connect error: say what to do about it.
            let message = if cause.contains("certificate") {
                format!(
                    "cache remote {}: its TLS certificate is not trusted ({doing}): {cause}; \
                     set {CA_ENV} to a PEM file of the CA that signed it",
                    self.url
                )
            } else {
                format!(
                    "cache remote {} is unreachable ({doing}): {cause}",
                    self.url
                )
            };
            *self.unusable.lock().unwrap() = Some(message.clone());
            return Failure::Unusable(anyhow::anyhow!(message));
        }
        Failure::Entry(anyhow::anyhow!(
            "cache remote {}: {doing}: {}",
            self.url,
            chain(&e)
        ))
    }
}

impl Failure {
    /// The error, whatever kind.
    pub(crate) fn into_error(self) -> anyhow::Error {
        match self {
            Failure::Unusable(e) | Failure::Entry(e) => e,
        }
    }
}

/// An error and its sources on one line (reqwest's top level says only "error sending
/// request"; the cause, "Connection refused", is below it).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Whether a registry answer means "no such tag".
fn not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|x| {
            matches!(
                x.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NotFound | OciErrorCode::NameUnknown
            )
        }),
        _ => false,
    }
}

fn layer_info(name: &str, packed: &Packed, optional: bool, list: Option<String>) -> LayerInfo {
    LayerInfo {
        name: name.into(),
        digest: packed.digest.clone(),
        size: packed.size,
        optional,
        files: (!optional).then(|| packed.files.clone()),
        files_digest: list,
    }
}

fn descriptor(packed: &Packed, name: &str) -> OciDescriptor {
    OciDescriptor {
        media_type: artifact::LAYER_MEDIA_TYPE.into(),
        digest: packed.digest.clone(),
        size: packed.size as i64,
        annotations: Some(title(name)),
        ..Default::default()
    }
}

fn title(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_TITLE.to_string(),
        name.to_string(),
    )])
}

fn title_of(desc: &OciDescriptor) -> String {
    desc.annotations
        .as_ref()
        .and_then(|a| a.get(oci_client::annotations::ORG_OPENCONTAINERS_IMAGE_TITLE))
        .cloned()
        .unwrap_or_else(|| desc.digest.clone())
}

fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// Bytes of the regular files under `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let meta = e.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push(e.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// Runs an async registry call from the cache's synchronous API. The cache is called from plain
/// threads, from `spawn_blocking` and from inside async tests (a current-thread runtime, where
/// `block_in_place` panics and a nested `block_on` is refused), so the call runs on a scoped
/// thread of its own, on one small runtime the process keeps for the remote: the connection
/// pool outlives a call, and no caller's runtime is entered.
fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lab-cache-remote")
            .enable_all()
            .build()
            .expect("a tokio runtime for the cache remote")
    });
    std::thread::scope(|s| match s.spawn(|| runtime.block_on(future)).join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

#[cfg(test)]
mod tests;
