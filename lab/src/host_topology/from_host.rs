//! `lab topology from-host`: the mirror of a host (or a sysfs tree of one) as a topology file,
//! written where asked and read back as `lab` will read it.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::{HostTopology, Mirror, MirrorOptions};
use crate::topology::{format_cpulist, parse_size, Topology};

/// What to mirror and where to put it.
#[derive(Debug, Clone)]
pub struct FromHost {
    /// The directory read as `/sys`.
    pub sysfs: PathBuf,
    /// At most this many vCPUs (the host's first CPUs in its own order).
    pub max_cpus: Option<u32>,
    /// The topology's name (default: the output file's stem, else `host`).
    pub name: Option<String>,
    /// Memory per NUMA node (bytes or K/M/G/T).
    pub memory: String,
    /// Back guest memory with host hugepages of this size (`2M` or `1G`).
    pub hugepages: Option<String>,
    /// QEMU's `-cpu` model (default: the host's vendor's).
    pub cpu_model: Option<String>,
    /// The file to write (refused if it exists, unless `force`); `None`: the caller prints it.
    pub output: Option<PathBuf>,
    /// Overwrite `output` if it exists.
    pub force: bool,
}

/// A mirror made, and the file it went to, if any.
#[derive(Debug, Clone)]
pub struct MirrorWritten {
    /// The mirror.
    pub mirror: Mirror,
    /// Where it was written; `None`: nowhere, the caller prints `mirror.text`.
    pub file: Option<PathBuf>,
}

impl MirrorWritten {
    /// For a written file: `wrote FILE: N vCPUs in K node(s), L LLC(s), pinned to host CPUs
    /// ...; housekeeping ...`.
    pub fn summary(&self) -> Option<String> {
        let path = self.file.as_ref()?;
        let t = &self.mirror.topology;
        let pinned: Vec<u32> = t.pinning().values().copied().collect();
        let housekeeping = if self.mirror.housekeeping.is_empty() {
            "none".to_string()
        } else {
            format_cpulist(&self.mirror.housekeeping)
        };
        Some(format!(
            "wrote {}: {} vCPUs in {} node(s), {} LLC(s), pinned to host CPUs {}; housekeeping {}",
            path.display(),
            t.nr_cpus(),
            t.nodes().len(),
            t.llcs().len(),
            format_cpulist(&pinned),
            housekeeping
        ))
    }
}

/// Reads the host at `request.sysfs`, mirrors it and writes the file if one is named. The name
/// and the file's stem must agree: `lab` finds topologies by file name.
pub fn write_mirror(request: &FromHost) -> Result<MirrorWritten> {
    let stem = request
        .output
        .as_ref()
        .and_then(|o| o.file_stem())
        .and_then(|s| s.to_str())
        .map(str::to_string);
    if let (Some(name), Some(stem)) = (&request.name, &stem) {
        if name != stem {
            bail!(
                "--name {name:?} differs from the output file's name {stem:?}: lab finds topologies by file name, so the two must agree"
            );
        }
    }
    let name = request
        .name
        .clone()
        .or(stem)
        .unwrap_or_else(|| "host".to_string());
    let node_memory = parse_size(&request.memory).map_err(|e| anyhow::anyhow!("--memory: {e}"))?;
    let host = HostTopology::read(&request.sysfs)?;
    let mut options = MirrorOptions::named(&name);
    options.file = request.output.clone();
    options.max_cpus = request.max_cpus;
    options.node_memory = Some(node_memory);
    options.cpu_model = request.cpu_model.clone();
    options.hugepages = request.hugepages.clone();
    let mirror = host.mirror(&options)?;
    if let Some(path) = &request.output {
        if path.exists() && !request.force {
            bail!("{} exists; pass --force to replace it", path.display());
        }
        std::fs::write(path, &mirror.text)
            .with_context(|| format!("writing {}", path.display()))?;
        // What `lab` will read back, name included.
        Topology::load(path)?;
    }
    Ok(MirrorWritten {
        mirror,
        file: request.output.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(output: Option<PathBuf>) -> FromHost {
        FromHost {
            sysfs: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/hosts/epyc-7313-nps1"),
            max_cpus: None,
            name: None,
            memory: "2G".into(),
            hugepages: None,
            cpu_model: None,
            output,
            force: false,
        }
    }

    #[test]
    fn a_mirror_is_written_once_and_read_back_under_the_files_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epyc.toml");
        let written = write_mirror(&request(Some(path.clone()))).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), written.mirror.text);
        let back = Topology::load(&path).unwrap();
        assert_eq!(back.name(), "epyc");
        let summary = written.summary().unwrap();
        assert!(
            summary.starts_with(&format!(
                "wrote {}: {} vCPUs in ",
                path.display(),
                back.nr_cpus()
            )),
            "{summary}"
        );
        // Not again without --force; with it, yes.
        let err = write_mirror(&request(Some(path.clone()))).unwrap_err();
        assert!(err.to_string().contains("exists; pass --force"), "{err}");
        let mut forced = request(Some(path.clone()));
        forced.force = true;
        write_mirror(&forced).unwrap();
    }

    #[test]
    fn without_a_file_the_text_is_the_callers_and_names_must_agree() {
        let printed = write_mirror(&request(None)).unwrap();
        assert_eq!(printed.summary(), None);
        assert!(
            printed.mirror.text.contains("name = \"host\""),
            "{}",
            printed.mirror.text
        );
        let dir = tempfile::tempdir().unwrap();
        let mut named = request(Some(dir.path().join("a.toml")));
        named.name = Some("b".into());
        let err = write_mirror(&named).unwrap_err().to_string();
        assert!(err.contains("--name \"b\" differs"), "{err}");
        let mut bad = request(None);
        bad.memory = "lots".into();
        let err = write_mirror(&bad).unwrap_err().to_string();
        assert!(err.starts_with("--memory: "), "{err}");
    }
}
