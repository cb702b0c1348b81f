//! CPUs named by a scenario file, found on whatever topology a run uses, and the CPU sets its
//! pins and metrics name.
//!
//! A CPU expression is words: a parameter's name stands for its value, then
//!
//! | expression | the CPU |
//! |---|---|
//! | `3` | CPU 3 |
//! | `last` | the topology's last CPU |
//! | `start` | the named CPU `start` |
//! | `same-llc X` | the first other CPU of X's LLC |
//! | `cross-llc X` | the first CPU of the next LLC in X's node |
//! | `remote-node X` | the first CPU of the next node |
//! | `sibling X` | X's first SMT sibling |
//! | `outside X Y ...` | the last CPU outside the LLCs of X, Y, ... (none on a small shape) |
//!
//! A CPU set is a CPU expression, `llc X` (X's LLC), `node X` (X's node) or `cpus LIST`
//! (`cpus 0-3,6`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::topology::Topology;

/// What an expression's words may refer to.
pub(super) struct Names<'a> {
    /// The run's parameters (a variant's, after `--set`).
    pub params: &'a serde_json::Map<String, Value>,
    /// CPUs found so far (`None`: an `outside` that found none).
    pub cpus: &'a BTreeMap<String, Option<u32>>,
}

const FUNCTIONS: [&str; 5] = ["same-llc", "cross-llc", "remote-node", "sibling", "outside"];
/// The one CPU a word names on every topology.
const LAST: &str = "last";
const SETS: [&str; 3] = ["llc", "node", "cpus"];

/// The words of `text` with parameters replaced by their values.
fn words(text: &str, params: &serde_json::Map<String, Value>) -> Vec<String> {
    text.split_whitespace().map(|w| word(w, params)).collect()
}

/// `w`, or the value of the parameter it names (strings without their quotes).
pub(super) fn word(w: &str, params: &serde_json::Map<String, Value>) -> String {
    match params.get(w) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => w.to_string(),
    }
}

/// The names `text` refers to that are neither parameters, numbers nor keywords: CPU names,
/// which must be defined (checked before any topology is known).
pub(super) fn referenced_cpus(text: &str, params: &serde_json::Map<String, Value>) -> Vec<String> {
    text.split_whitespace()
        .filter(|w| !params.contains_key(*w))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
        .filter(|w| !FUNCTIONS.contains(w) && !SETS.contains(w) && *w != LAST)
        .map(str::to_string)
        .collect()
}

/// The CPU `text` names on `topology`; `Ok(None)` only from `outside` finding none.
pub(super) fn cpu(text: &str, names: &Names, topology: &Topology) -> Result<Option<u32>, String> {
    let words = words(text, names.params);
    eval(&words, names, topology)
}

fn eval(words: &[String], names: &Names, topology: &Topology) -> Result<Option<u32>, String> {
    let Some((head, rest)) = words.split_first() else {
        return Err("an empty CPU expression".into());
    };
    let one = |rest: &[String]| -> Result<u32, String> {
        match eval(rest, names, topology)? {
            Some(c) => Ok(c),
            None => Err(format!("{} names no CPU", rest.join(" "))),
        }
    };
    let found = match head.as_str() {
        "same-llc" => {
            let x = one(rest)?;
            llc_of(x, topology)?;
            topology.same_llc_cpu(x)
        }
        "cross-llc" => {
            let x = one(rest)?;
            llc_of(x, topology)?;
            node_of(x, topology)?;
            topology.cross_llc_cpu(x)
        }
        "remote-node" => {
            let x = one(rest)?;
            node_of(x, topology)?;
            topology.remote_node_cpu(x)
        }
        "sibling" => topology.sibling_cpu(one(rest)?),
        "outside" => {
            let mut watched = Vec::new();
            for w in rest {
                let x = one(std::slice::from_ref(w))?;
                llc_of(x, topology)?;
                watched.push(x);
            }
            return Ok(topology.cpu_outside_llcs(&watched));
        }
        LAST if rest.is_empty() => topology.nr_cpus().checked_sub(1),
        _ if rest.is_empty() => return single(head, names, topology).map(Some),
        other => {
            return Err(format!(
                "{other:?} is not a CPU function ({})",
                FUNCTIONS.join(", ")
            ))
        }
    };
    match found {
        Some(c) => Ok(Some(c)),
        None => Err(format!(
            "topology {} has no CPU for `{}`",
            topology.name(),
            words.join(" ")
        )),
    }
}

/// A number or a named CPU, checked against the topology.
fn single(word: &str, names: &Names, topology: &Topology) -> Result<u32, String> {
    let cpu = match word.parse::<u32>() {
        Ok(n) => n,
        Err(_) => match names.cpus.get(word) {
            Some(Some(c)) => *c,
            Some(None) => return Err(format!("CPU {word} is none on {}", topology.name())),
            None => {
                return Err(format!(
                    "{word:?} is neither a CPU, a named CPU nor a parameter"
                ))
            }
        },
    };
    if cpu >= topology.nr_cpus() {
        return Err(format!(
            "CPU {cpu} is outside topology {} (CPUs 0-{})",
            topology.name(),
            topology.nr_cpus().saturating_sub(1)
        ));
    }
    Ok(cpu)
}

fn llc_of(cpu: u32, topology: &Topology) -> Result<&crate::topology::Llc, String> {
    topology
        .llc_of(cpu)
        .ok_or_else(|| format!("CPU {cpu} has no LLC in {}", topology.name()))
}

fn node_of(cpu: u32, topology: &Topology) -> Result<u32, String> {
    topology
        .node_of(cpu)
        .map(|n| n.id)
        .ok_or_else(|| format!("CPU {cpu} has no node in {}", topology.name()))
}

/// The CPUs of set expression `text` on `topology`, sorted.
pub(super) fn set(text: &str, names: &Names, topology: &Topology) -> Result<Vec<u32>, String> {
    let words = words(text, names.params);
    let one = |rest: &[String]| match eval(rest, names, topology)? {
        Some(c) => Ok(c),
        None => Err(format!("{} names no CPU", rest.join(" "))),
    };
    let mut cpus = match words.split_first() {
        Some((h, rest)) if h == "llc" => llc_of(one(rest)?, topology)?.cpus.clone(),
        Some((h, rest)) if h == "node" => {
            let node = node_of(one(rest)?, topology)?;
            topology
                .nodes()
                .iter()
                .find(|n| n.id == node)
                .map(|n| n.cpus.clone())
                .unwrap_or_default()
        }
        Some((h, rest)) if h == "cpus" => {
            let list = crate::topology::parse_cpulist(&rest.join(""))
                .map_err(|e| format!("cpus {}: {e}", rest.join(" ")))?;
            for c in &list {
                single(&c.to_string(), names, topology)?;
            }
            list
        }
        _ => vec![one(&words)?],
    };
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Finds every named CPU of `exprs` in dependency order; an error names the CPU.
pub(super) fn resolve_all(
    exprs: &BTreeMap<String, String>,
    params: &serde_json::Map<String, Value>,
    topology: &Topology,
) -> Result<BTreeMap<String, Option<u32>>, (String, String)> {
    let mut found: BTreeMap<String, Option<u32>> = BTreeMap::new();
    while found.len() < exprs.len() {
        let before = found.len();
        for (name, text) in exprs {
            if found.contains_key(name) {
                continue;
            }
            let waiting = referenced_cpus(text, params)
                .iter()
                .any(|r| exprs.contains_key(r) && !found.contains_key(r));
            if waiting {
                continue;
            }
            let names = Names {
                params,
                cpus: &found,
            };
            let cpu = cpu(text, &names, topology).map_err(|e| (name.clone(), e))?;
            found.insert(name.clone(), cpu);
        }
        if found.len() == before {
            let left: Vec<&String> = exprs.keys().filter(|k| !found.contains_key(*k)).collect();
            let name = left[0].clone();
            return Err((
                name,
                format!("named CPUs refer to each other in a circle: {left:?}"),
            ));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci() -> Topology {
        Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
    }

    fn params() -> serde_json::Map<String, Value> {
        serde_json::json!({"start_cpu": 0, "placement": "cross-llc"})
            .as_object()
            .unwrap()
            .clone()
    }

    fn exprs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn named_cpus_follow_parameters_and_each_other_on_the_ci_topology() {
        // ci-2node-4llc: LLCs {0,1} {2,3} on node 0, {4,5} {6,7} on node 1.
        let e = exprs(&[
            ("control", "outside start irq"),
            ("irq", "placement start"),
            ("start", "start_cpu"),
            ("far", "remote-node start"),
            ("near", "same-llc start"),
        ]);
        let found = resolve_all(&e, &params(), &ci()).unwrap();
        let want = [
            ("control", 7),
            ("far", 4),
            ("irq", 2),
            ("near", 1),
            ("start", 0),
        ];
        for (name, cpu) in want {
            assert_eq!(found[name], Some(cpu), "{name}");
        }
        let names = Names {
            params: &params(),
            cpus: &found,
        };
        assert_eq!(set("llc irq", &names, &ci()).unwrap(), [2, 3]);
        assert_eq!(set("node far", &names, &ci()).unwrap(), [4, 5, 6, 7]);
        assert_eq!(set("cpus 0-1,6", &names, &ci()).unwrap(), [0, 1, 6]);
        assert_eq!(set("irq", &names, &ci()).unwrap(), [2]);
    }

    #[test]
    fn a_cpu_outside_the_topology_or_a_circle_is_named() {
        let (name, err) = resolve_all(&exprs(&[("start", "12")]), &params(), &ci()).unwrap_err();
        assert_eq!(name, "start");
        assert!(
            err.contains("CPU 12 is outside topology ci-2node-4llc (CPUs 0-7)"),
            "{err}"
        );
        let (_, err) = resolve_all(
            &exprs(&[("a", "same-llc b"), ("b", "same-llc a")]),
            &params(),
            &ci(),
        )
        .unwrap_err();
        assert!(err.contains("circle"), "{err}");
        let (_, err) = resolve_all(&exprs(&[("a", "nearby 0")]), &params(), &ci()).unwrap_err();
        assert!(err.contains("not a CPU function"), "{err}");
    }

    #[test]
    fn only_cpu_names_are_referenced() {
        assert_eq!(
            referenced_cpus("outside start irq", &params()),
            ["start", "irq"]
        );
        assert_eq!(
            referenced_cpus("placement start_cpu", &params()),
            Vec::<String>::new()
        );
        assert_eq!(referenced_cpus("cpus 0-3", &params()), Vec::<String>::new());
    }
}
