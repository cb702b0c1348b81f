//! The lab's own guest programs, built static for the guest by `lab/build.rs` and embedded here:
//! the agent (`/init` of every image) and the workloads an image carries when its recipe lists
//! them (`lab_programs`, today `lab-numa01`). Below every other module (images embed them, the
//! guest side talks to the agent), so it imports none.

/// One embedded guest program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabProgram {
    /// Its binary's name in the agent crate, as `lab/build.rs`'s `GUEST_BINARIES` and image
    /// recipes' `lab_programs` spell it.
    pub name: &'static str,
    /// Where an image puts it.
    pub guest_path: &'static str,
    /// The static x86_64 binary.
    pub bytes: &'static [u8],
    /// Its sha256 (hex), computed by `lab/build.rs` when it was built (not on every run of the
    /// lab), for the cache key of the images that carry it.
    pub sha256: &'static str,
}

/// The [`LabProgram`] `lab/build.rs` left in `OUT_DIR` under `$name` (and `$name.sha256`).
macro_rules! embedded {
    ($name:literal, $guest_path:expr) => {
        LabProgram {
            name: $name,
            guest_path: $guest_path,
            bytes: include_bytes!(concat!(env!("OUT_DIR"), "/", $name)),
            sha256: include_str!(concat!(env!("OUT_DIR"), "/", $name, ".sha256")),
        }
    };
}

/// The guest agent (no PT_INTERP); every image has it at `/init`.
pub(crate) const AGENT: LabProgram = embedded!("lab-agent", "/init");

/// Where an image that lists `lab-numa01` (seed S4's numa01_THREAD_ALLOC-shaped workload) puts
/// it.
pub(crate) const NUMA01_GUEST_PATH: &str = "/usr/bin/lab-numa01";

/// Where an image that lists `lab-udp-sink` (a UDP receiver, the task a NIC's interrupt wakes)
/// puts it.
pub(crate) const UDP_SINK_GUEST_PATH: &str = "/usr/bin/lab-udp-sink";

/// Every program the lab builds for its guests. A new one is a line here and its name in
/// `lab/build.rs`'s `GUEST_BINARIES`.
pub(crate) const LAB_PROGRAMS: &[LabProgram] = &[
    AGENT,
    embedded!("lab-numa01", NUMA01_GUEST_PATH),
    embedded!("lab-udp-sink", UDP_SINK_GUEST_PATH),
];

/// The programs an image recipe may list in `lab_programs`: all but the agent, which every
/// image has anyway.
pub(crate) fn listable_programs() -> impl Iterator<Item = &'static LabProgram> {
    LAB_PROGRAMS.iter().filter(|p| p.name != AGENT.name)
}

/// The listable program called `name`.
pub(crate) fn listable_program(name: &str) -> Option<&'static LabProgram> {
    listable_programs().find(|p| p.name == name)
}

/// Path of the agent binary on the build host (the file [`AGENT`]'s bytes were read from), for
/// the tests that run it as a host process.
#[cfg(test)]
pub(crate) const AGENT_BINARY_PATH: &str = concat!(env!("OUT_DIR"), "/lab-agent");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_is_embedded_with_its_digest_and_named_once() {
        let mut names: Vec<&str> = LAB_PROGRAMS.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), LAB_PROGRAMS.len(), "a name twice in {names:?}");
        for p in LAB_PROGRAMS {
            // An ELF binary and the sha256 of those very bytes, as build.rs left them.
            assert!(p.bytes.starts_with(b"\x7fELF"), "{}", p.name);
            use sha2::Digest as _;
            assert_eq!(
                hex::encode(sha2::Sha256::digest(p.bytes)),
                p.sha256,
                "{}",
                p.name
            );
            assert!(p.guest_path.starts_with('/'), "{}", p.name);
        }
        assert_eq!(
            listable_program("lab-numa01").unwrap().guest_path,
            NUMA01_GUEST_PATH
        );
        assert_eq!(
            listable_program("lab-agent"),
            None,
            "the agent is never listed"
        );
    }
}
