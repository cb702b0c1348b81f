//! Linux cpulist syntax ("0-3,8-11"), as used in topology files and printed by sysfs
//! (`cache/index3/shared_cpu_list`, `node/nodeN/cpulist`, ...).

/// Highest CPU id accepted in a cpulist. QEMU's q35 stops at 4096 vCPUs; the cap also keeps a
/// typo such as `0-4000000000` from allocating gigabytes.
pub(crate) const MAX_CPU_ID: u32 = 4095;

/// Why a cpulist did not parse. The caller adds the file and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// An entry between two commas is empty.
    #[error("empty entry in cpulist {list:?} (entries are CPU ids or ranges like 0-3, separated by single commas)")]
    EmptyEntry {
        /// The list.
        list: String,
    },
    /// An entry is neither a CPU id nor a range.
    #[error("{entry:?} in cpulist {list:?} is not a CPU id or a range like 0-3")]
    NotACpu {
        /// The list.
        list: String,
        /// The entry.
        entry: String,
    },
    /// A range ends below its start.
    #[error("range {entry:?} in cpulist {list:?} runs backwards")]
    Backwards {
        /// The list.
        list: String,
        /// The range.
        entry: String,
    },
    /// A CPU is listed twice.
    #[error("CPU {cpu} appears twice in cpulist {list:?}")]
    Duplicate {
        /// The list.
        list: String,
        /// The CPU.
        cpu: u32,
    },
    /// A CPU id above the highest one accepted (4095).
    #[error("CPU {cpu} in cpulist {list:?} is above the maximum CPU id {MAX_CPU_ID}")]
    TooLarge {
        /// The list.
        list: String,
        /// The CPU.
        cpu: u32,
    },
}

/// Parses a Linux cpulist such as `"0-3,8"` into sorted CPU ids (`[0, 1, 2, 3, 8]`).
///
/// Surrounding whitespace (sysfs ends its lines with a newline) is ignored and an empty list is
/// an empty set, as sysfs prints it. A CPU listed twice is an error: in a topology file that is
/// always a mistake.
pub fn parse_cpulist(text: &str) -> Result<Vec<u32>, CpuListError> {
    let list = text.trim();
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    for entry in list.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(CpuListError::EmptyEntry {
                list: list.to_string(),
            });
        }
        let (first, last) = match entry.split_once('-') {
            Some((a, b)) => (cpu_id(list, entry, a)?, cpu_id(list, entry, b)?),
            None => {
                let cpu = cpu_id(list, entry, entry)?;
                (cpu, cpu)
            }
        };
        if last < first {
            return Err(CpuListError::Backwards {
                list: list.to_string(),
                entry: entry.to_string(),
            });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    if let Some(pair) = cpus.windows(2).find(|w| w[0] == w[1]) {
        return Err(CpuListError::Duplicate {
            list: list.to_string(),
            cpu: pair[0],
        });
    }
    Ok(cpus)
}

fn cpu_id(list: &str, entry: &str, digits: &str) -> Result<u32, CpuListError> {
    let digits = digits.trim();
    // `u32::from_str` would accept "+3"; sysfs never prints that, so neither do we.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::NotACpu {
            list: list.to_string(),
            entry: entry.to_string(),
        });
    }
    match digits.parse::<u32>() {
        Ok(cpu) if cpu <= MAX_CPU_ID => Ok(cpu),
        _ => Err(CpuListError::TooLarge {
            list: list.to_string(),
            cpu: digits
                .parse::<u64>()
                .map_or(u32::MAX, |v| v.min(u32::MAX as u64) as u32),
        }),
    }
}

/// Formats CPU ids the way the kernel prints cpulists: sorted ranges, a run of two or more as
/// `a-b`, single CPUs alone (`[0, 1, 2, 3, 8]` -> `"0-3,8"`). Duplicates are ignored.
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Contiguous runs of the (sorted, distinct) `cpus`, as inclusive `(first, last)` pairs.
pub(crate) fn ranges(cpus: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &cpu in cpus {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == cpu => *last = cpu,
            _ => out.push((cpu, cpu)),
        }
    }
    out
}
