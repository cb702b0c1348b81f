//! Patch application: plain unified diffs and mbox (`git format-patch`) files, applied with GNU
//! `patch -p1` and no fuzz (like `git am`). Each patch is dry-run first so a failure names the
//! patch, the file and the hunk and leaves the tree as the previous patch left it; the build runs
//! in a staging dir, so nothing half-applied reaches the cache.

use std::path::Path;

use anyhow::{Context, Result};

use super::recipe::PatchRef;

/// Why a patch did not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatchError {
    #[error("patch {patch} does not apply: {file}: hunk #{hunk} `{header}` FAILED at line {line} (patch output: {output})")]
    HunkFailed {
        patch: String,
        file: String,
        hunk: usize,
        header: String,
        line: String,
        output: String,
    },
    #[error("patch {patch} does not apply: {file}: file not found in the source tree")]
    MissingFile { patch: String, file: String },
    #[error("patch {patch} does not apply: {file}: hunk #{hunk} `{header}` is already applied (reversed patch detected)")]
    AlreadyApplied {
        patch: String,
        file: String,
        hunk: usize,
        header: String,
    },
    #[error("patch {patch} contains no diff (is it a patch file?)")]
    Empty { patch: String },
    #[error("patch {patch} does not apply: {output}")]
    Other { patch: String, output: String },
}

/// One file section of a diff: the path (one component stripped) and its hunk headers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    file: String,
    hunks: Vec<String>,
}

/// The file sections of a unified diff or mbox, in order (what `patch` walks through).
fn sections(text: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut old: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("--- ") {
            old = Some(rest.to_string());
        } else if let Some(rest) = line.strip_prefix("+++ ") {
            if let Some(old) = old.take() {
                let new = strip_one(rest);
                // A deleted file names /dev/null as the new side.
                let file = if new == "/dev/null" {
                    strip_one(&old)
                } else {
                    new
                };
                out.push(Section {
                    file,
                    hunks: Vec::new(),
                });
            }
        } else if line.starts_with("@@ ") {
            if let Some(section) = out.last_mut() {
                section.hunks.push(line.to_string());
            }
            old = None;
        } else {
            old = None;
        }
    }
    out
}

fn strip_one(path: &str) -> String {
    let path = path.split('\t').next().unwrap_or(path).trim();
    if path == "/dev/null" {
        return path.to_string();
    }
    path.split_once('/')
        .map_or(path, |(_, rest)| rest)
        .to_string()
}

/// Applies `patch` to `tree`: a dry run, then the real thing.
pub(crate) fn apply(tree: &Path, patch: &PatchRef, log: &mut dyn std::io::Write) -> Result<()> {
    let text = std::fs::read_to_string(&patch.path)
        .with_context(|| format!("reading patch {}", patch.path.display()))?;
    let secs = sections(&text);
    if secs.is_empty() {
        return Err(PatchError::Empty {
            patch: patch.name.clone(),
        }
        .into());
    }
    let dry = run_patch(tree, &patch.path, true)?;
    writeln!(log, "$ patch --dry-run {}\n{}", patch.name, dry.1)?;
    if !dry.0 {
        return Err(diagnose(&patch.name, &secs, &dry.1).into());
    }
    let real = run_patch(tree, &patch.path, false)?;
    writeln!(log, "$ patch {}\n{}", patch.name, real.1)?;
    if !real.0 {
        return Err(diagnose(&patch.name, &secs, &real.1).into());
    }
    Ok(())
}

fn run_patch(tree: &Path, file: &Path, dry_run: bool) -> Result<(bool, String)> {
    let mut cmd = crate::process::command("patch");
    cmd.args([
        "-p1",
        "--batch",
        "--forward",
        "--fuzz=0",
        "--no-backup-if-mismatch",
        "--reject-file=-",
    ]);
    if dry_run {
        cmd.arg("--dry-run");
    }
    // An absolute patch path: `-d` changes the directory before `-i` is opened.
    let file = std::path::absolute(file)?;
    cmd.arg("-d").arg(tree).arg("-i").arg(&file);
    let out = crate::process::output(&mut cmd)
        .context("running GNU patch (install the `patch` package)")?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

/// Turns `patch` output into the first failure, with the file and hunk header it concerns.
fn diagnose(patch: &str, secs: &[Section], output: &str) -> PatchError {
    let mut section: Option<usize> = None;
    let mut next = 0usize;
    let header = |s: Option<usize>, hunk: usize| {
        s.and_then(|i| secs.get(i))
            .and_then(|sec| sec.hunks.get(hunk.wrapping_sub(1)))
            .cloned()
            .unwrap_or_else(|| "?".to_string())
    };
    let file_of = |s: Option<usize>| {
        s.and_then(|i| secs.get(i))
            .map(|sec| sec.file.clone())
            .unwrap_or_else(|| "?".to_string())
    };
    for line in output.lines() {
        let line = line.trim();
        if line.starts_with("checking file ") || line.starts_with("patching file ") {
            section = Some(next);
            next += 1;
        } else if line.starts_with("can't find file to patch") {
            section = Some(next);
            return PatchError::MissingFile {
                patch: patch.to_string(),
                file: file_of(section),
            };
        } else if line.starts_with("Reversed (or previously applied) patch detected") {
            return PatchError::AlreadyApplied {
                patch: patch.to_string(),
                file: file_of(section),
                hunk: 1,
                header: header(section, 1),
            };
        } else if let Some(rest) = line.strip_prefix("Hunk #") {
            // "Hunk #2 FAILED at 7461."
            if let Some((num, tail)) = rest.split_once(' ') {
                if let (Ok(hunk), true) = (num.parse::<usize>(), tail.starts_with("FAILED")) {
                    let at = tail
                        .trim_start_matches("FAILED")
                        .trim()
                        .trim_start_matches("at ")
                        .trim_end_matches('.')
                        .to_string();
                    return PatchError::HunkFailed {
                        patch: patch.to_string(),
                        file: file_of(section),
                        hunk,
                        header: header(section, hunk),
                        line: at,
                        output: output
                            .trim()
                            .lines()
                            .take(6)
                            .collect::<Vec<_>>()
                            .join(" | "),
                    };
                }
            }
        }
    }
    PatchError::Other {
        patch: patch.to_string(),
        output: output.trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBOX: &str = concat!(
        "From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] x\n\n---\n",
        "diff --git a/k/f.c b/k/f.c\nindex 1..2 100644\n--- a/k/f.c\n+++ b/k/f.c\n",
        "@@ -1,3 +1,3 @@ fn(int a)\n a\n-b\n+c\n d\n",
        "@@ -10,2 +10,2 @@ g()\n-x\n+y\n",
        "diff --git a/new.c b/new.c\n--- /dev/null\n+++ b/new.c\n@@ -0,0 +1 @@\n+z\n",
        "-- \n2.39\n",
    );

    #[test]
    fn sections_follow_the_diff() {
        let s = sections(MBOX);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].file, "k/f.c");
        assert_eq!(
            s[0].hunks,
            vec!["@@ -1,3 +1,3 @@ fn(int a)", "@@ -10,2 +10,2 @@ g()"]
        );
        assert_eq!(s[1].file, "new.c");
    }

    #[test]
    fn diagnose_names_file_and_hunk() {
        let s = sections(MBOX);
        let out = "checking file k/f.c\nHunk #2 FAILED at 12.\n1 out of 2 hunks FAILED\n";
        match diagnose("p.patch", &s, out) {
            PatchError::HunkFailed {
                file,
                hunk,
                header,
                line,
                ..
            } => {
                assert_eq!((file.as_str(), hunk, line.as_str()), ("k/f.c", 2, "12"));
                assert_eq!(header, "@@ -10,2 +10,2 @@ g()");
            }
            other => panic!("unexpected {other:?}"),
        }
        let missing = "checking file k/f.c\ncan't find file to patch at input line 20\n";
        assert_eq!(
            diagnose("p.patch", &s, missing),
            PatchError::MissingFile {
                patch: "p.patch".into(),
                file: "new.c".into()
            }
        );
    }
}
