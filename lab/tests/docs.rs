//! The documentation against the code, in seconds and without a VM or the network:
//!
//! - every `lab ...` or `cargo run -p lab -- ...` line in a shell block (```` ```sh ````) of
//!   README.md and docs/*.md names verbs today's CLI has (`lab help VERB [SUBVERB]` exits 0) and
//!   only long options that verb's help lists (a verb that passes its arguments on, as `lab test`
//!   does to nextest, is checked for its verbs only). Other lines of a shell block are ignored;
//!   so is everything after `--` (a guest's command, a bundled lab's arguments);
//! - every repository path the docs name, in a link or in backticks outside code blocks
//!   (`tests/provisioning.rs`, `docs/X.md`, `topologies/...`), exists. Placeholders (`NAME`,
//!   `<run>`, `*`, `...`) and the reader's own files of "Your first own test" (`my-...`, `my_...`)
//!   are not paths to check.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `lab` binary: nextest's path for it (remapped in an archive run), else cargo's.
fn lab_binary() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_lab")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lab")))
}

/// README.md and docs/*.md, as (path relative to the repository, text).
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut pages: Vec<String> = std::fs::read_dir(lab::repo_path("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    names.extend(pages);
    names
        .into_iter()
        .map(|n| {
            let text =
                std::fs::read_to_string(lab::repo_path(&n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (n, text)
        })
        .collect()
}

/// The lines of a document's shell blocks (```` ```sh ````), continuations (`\`) joined, each
/// with its first line's number.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut in_other = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            if in_sh || in_other {
                in_sh = false;
                in_other = false;
            } else if matches!(info.trim(), "sh" | "bash" | "shell" | "console") {
                in_sh = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if !in_sh {
            continue;
        }
        let (number, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        let body = line.trim_end();
        match body.strip_suffix('\\') {
            Some(start) => {
                joined.push_str(start);
                joined.push(' ');
                pending = Some((number, joined));
            }
            None => {
                joined.push_str(body);
                out.push((number, joined));
            }
        }
    }
    out
}

/// Split a shell line into words: whitespace outside quotes separates, quotes are removed, and a
/// word starting with `#` ends the line (a comment).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None if c == '#' && !in_word => break,
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The lab's arguments on a shell line, or None when the line runs something else. `sudo` and
/// `VAR=value` prefixes are skipped; `lab ARGS` and `cargo run -p lab [--] ARGS` are the lab.
fn lab_arguments(line: &str) -> Option<Vec<String>> {
    let words = words(line);
    let mut rest = words.as_slice();
    while let Some(first) = rest.first() {
        let assignment = first.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        });
        if first == "sudo" || assignment {
            rest = &rest[1..];
        } else {
            break;
        }
    }
    match rest {
        [lab, args @ ..] if lab == "lab" => Some(args.to_vec()),
        [cargo, run, p, lab, args @ ..]
            if cargo == "cargo" && run == "run" && p == "-p" && lab == "lab" =>
        {
            Some(match args {
                [dashes, args @ ..] if dashes == "--" => args.to_vec(),
                args => args.to_vec(),
            })
        }
        _ => None,
    }
}

/// `lab help VERB...`'s output, or None when the CLI has no such verb; asked once per path.
fn help(cache: &mut HashMap<Vec<String>, Option<String>>, path: &[String]) -> Option<String> {
    cache
        .entry(path.to_vec())
        .or_insert_with(|| {
            let out = Command::new(lab_binary())
                .arg("help")
                .args(path)
                .env_remove("LAB_LOG")
                .output()
                .expect("run lab help");
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
}

/// The long options (`--name`, without `=value`) a word names, also inside brackets as in
/// `[--group-by accelerator|kernel]`.
fn long_options(word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = word;
    while let Some(at) = rest.find("--") {
        let after = &rest[at + 2..];
        let end = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(after.len());
        let name = &after[..end];
        if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            out.push(format!("--{name}"));
        }
        rest = &after[end..];
    }
    out
}

/// Whether `help` lists `option` as a whole word (`--set` is not `--settings`).
fn lists(help: &str, option: &str) -> bool {
    help.match_indices(option).any(|(at, _)| {
        let next = help[at + option.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// What is wrong with one line's lab arguments, if anything.
fn check_command(
    cache: &mut HashMap<Vec<String>, Option<String>>,
    args: &[String],
) -> Option<String> {
    let args: Vec<&String> = args.iter().take_while(|a| a.as_str() != "--").collect();
    let mut path: Vec<String> = Vec::new();
    for word in &args {
        if word.starts_with('-') || word.starts_with('[') {
            break;
        }
        let mut longer = path.clone();
        longer.push(word.to_string());
        if help(cache, &longer).is_some() {
            path = longer;
        } else if path.is_empty() {
            return Some(format!("`lab help {word}` fails: no verb {word:?}"));
        } else {
            break;
        }
    }
    if path.is_empty() {
        return None;
    }
    let text = help(cache, &path).expect("checked above");
    // A verb whose trailing arguments go to another program takes options it does not list.
    if text.contains("NEXTEST_ARGS") {
        return None;
    }
    let unknown: Vec<String> = args
        .iter()
        .flat_map(|w| long_options(w))
        .filter(|o| o != "--help" && !lists(&text, o))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "`lab help {}` lists no {}",
            path.join(" "),
            unknown.join(", ")
        )
    })
}

#[test]
fn every_lab_command_line_in_the_docs_parses_with_todays_cli() {
    let mut cache = HashMap::new();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (name, text) in documents() {
        for (line_number, line) in shell_lines(&text) {
            let Some(args) = lab_arguments(&line) else {
                continue;
            };
            checked += 1;
            if let Some(problem) = check_command(&mut cache, &args) {
                problems.push(format!("{name}:{line_number}: {problem}\n    {line}"));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} lab command lines found in the docs"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A document's text outside fenced code blocks (fenced lines blanked, so line numbers hold).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where each inline code span starts, with its text (spans may run over a line break).
fn code_spans(prose: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut rest = prose;
    let mut offset = 0;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let body_start = open + ticks;
        let closing = "`".repeat(ticks);
        let Some(len) = rest[body_start..].find(&closing) else {
            break;
        };
        out.push((
            offset + open,
            rest[body_start..body_start + len].to_string(),
        ));
        let next = body_start + len + ticks;
        offset += next;
        rest = &rest[next..];
    }
    out
}

/// Link targets `[text](target)` and `<img src="target">`, with where they start.
fn link_targets(prose: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (marker, end) in [("](", ')'), ("<img src=\"", '"')] {
        for (at, _) in prose.match_indices(marker) {
            let start = at + marker.len();
            if let Some(len) = prose[start..].find(end) {
                let target = &prose[start..start + len];
                if !target.contains(char::is_whitespace) {
                    out.push((at, target.to_string()));
                }
            }
        }
    }
    out
}

/// The top-level directories whose paths the docs name in backticks.
const REPOSITORY_DIRS: &[&str] = &[
    "lab/",
    "tests/",
    "docs/",
    "topologies/",
    "images/",
    "hosts/",
    ".ci/",
    ".config/",
    ".github/",
];

/// Words that stand for a name the reader picks (`hosts/NAME.toml`).
const PLACEHOLDERS: &[&str] = &["NAME", "KIND", "KEY", "FILE", "DIR", "PATH", "N"];

/// The paths a backticked text names: none when it is not a repository path or holds a
/// placeholder; `tests/{a,b}.rs` gives both.
fn named_paths(code: &str) -> Vec<String> {
    if !REPOSITORY_DIRS.iter().any(|d| code.starts_with(d))
        || code.contains(|c: char| "<>*$| \n".contains(c))
        || code.contains("...")
    {
        return Vec::new();
    }
    let code = code.split([':', '#']).next().unwrap_or(code);
    let placeholder = code.split('/').any(|segment| {
        let stem = segment.split('.').next().unwrap_or(segment);
        PLACEHOLDERS.contains(&stem) || segment.contains("my-") || segment.contains("my_")
    });
    if placeholder {
        return Vec::new();
    }
    match (code.find('{'), code.find('}')) {
        (Some(open), Some(close)) if open < close => code[open + 1..close]
            .split(',')
            .map(|choice| format!("{}{choice}{}", &code[..open], &code[close + 1..]))
            .collect(),
        _ => vec![code.to_string()],
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = lab::repo_path("");
    let mut checked = 0;
    let mut missing = Vec::new();
    for (name, text) in documents() {
        let prose = prose(&text);
        let dir = Path::new(&name).parent().unwrap_or(Path::new(""));
        for (at, code) in code_spans(&prose) {
            for path in named_paths(&code) {
                checked += 1;
                if !root.join(&path).exists() {
                    missing.push(format!(
                        "{name}:{}: `{code}`: no {path}",
                        line_of(&prose, at)
                    ));
                }
            }
        }
        for (at, target) in link_targets(&prose) {
            if target.starts_with("http:")
                || target.starts_with("https:")
                || target.starts_with("mailto:")
                || target.starts_with('#')
            {
                continue;
            }
            let file = target.split('#').next().unwrap_or(&target);
            if file
                .split('/')
                .any(|segment| segment.contains("my-") || segment.contains("my_"))
            {
                continue;
            }
            checked += 1;
            if !root.join(dir).join(file).exists() {
                missing.push(format!(
                    "{name}:{}: link to {target}: no {}",
                    line_of(&prose, at),
                    dir.join(file).display()
                ));
            }
        }
    }
    assert!(checked >= 50, "only {checked} paths found in the docs");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_readme_is_a_guide_of_at_most_300_lines_of_at_most_200_characters() {
    let text = std::fs::read_to_string(lab::repo_path("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines");
    let long: Vec<String> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > 200)
        .map(|(i, l)| format!("README.md:{}: {} characters", i + 1, l.chars().count()))
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

#[test]
fn the_parsers_of_this_file_read_what_the_docs_write() {
    assert_eq!(
        lab_arguments(
            "sudo LAB_HOST=x lab compare dma-wakeup --set placement=remote-node  # a comment"
        ),
        Some(vec![
            "compare".into(),
            "dma-wakeup".into(),
            "--set".into(),
            "placement=remote-node".into()
        ])
    );
    assert_eq!(
        lab_arguments("cargo run -p lab -- test --quick -E 'binary(vm)'"),
        Some(vec![
            "test".into(),
            "--quick".into(),
            "-E".into(),
            "binary(vm)".into()
        ])
    );
    assert_eq!(
        lab_arguments("cargo nextest run -p lab bench::budget"),
        None
    );
    assert_eq!(lab_arguments("export LAB_CACHE_REMOTE=oci://x/lab"), None);
    assert_eq!(long_options("[--group-by"), vec!["--group-by"]);
    assert_eq!(long_options("--primary=seconds=5%"), vec!["--primary"]);
    assert!(lists("  --set <PARAM=VALUE>\n", "--set") && !lists("  --settings\n", "--set"));
    let joined = shell_lines("```sh\nlab compare a \\\n    --seed 1\n```\n```toml\nlab = 1\n```\n");
    assert_eq!(joined, vec![(2, "lab compare a      --seed 1".to_string())]);
    assert_eq!(
        named_paths("tests/{bisect,bundle}.rs"),
        vec!["tests/bisect.rs", "tests/bundle.rs"]
    );
    assert!(named_paths("hosts/NAME.toml").is_empty() && named_paths("results/x").is_empty());
    assert_eq!(named_paths("lab/src/cache.rs"), vec!["lab/src/cache.rs"]);
    assert_eq!(code_spans("a `x` b ``y`z`` c").len(), 2);
}
