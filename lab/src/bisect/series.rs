//! The changes a bisect walks through, in order: change `k` turns point `k - 1` into point `k`
//! (point 0 is good, the last point is bad). Each change is one patch file in the bisect's own
//! recipe directory, so a probe is an ordinary recipe: the good kernel's recipe and the first
//! `k` changes.
//!
//! They come from a posted series (an mbox of several patches, or a directory of numbered
//! patch files), from a bad recipe that extends the good one by patches, or from a git range
//! (each first-parent commit's diff against the commit before it).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::kernel::{Recipe, RecipeDirs};

/// Where a bisect's patches go, inside its recipe directory's `patches/`.
pub(crate) const PATCH_SUBDIR: &str = "bisect";

/// One step from point `k - 1` to point `k`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The patch's subject (`sched/fair: ...`), or the commit's.
    pub subject: String,
    /// The patch file's name as a recipe's `patches` lists it.
    pub patch: String,
    /// The commit it is the diff of, in a git range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The patches of a posted series: an mbox (`git format-patch --stdout`, or a thread saved
/// from a mail client) with one or more messages, or a directory of patch files taken in name
/// order (`0001-...patch`). Messages without a diff (a cover letter) are left out. Each patch
/// is written to `dirs.patches/bisect/NN-<slug>.patch`.
pub(crate) fn from_series(path: &Path, dirs: &RecipeDirs) -> Result<Vec<Change>> {
    let mut messages: Vec<(String, String)> = Vec::new();
    if path.is_dir() {
        let mut files: Vec<PathBuf> = fs::read_dir(path)
            .with_context(|| format!("reading the series directory {}", path.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .is_some_and(|e| e == "patch" || e == "diff" || e == "mbox")
            })
            .collect();
        files.sort();
        for file in files {
            let text = read_text(&file)?;
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            for (i, m) in split_mbox(&text).into_iter().enumerate() {
                messages.push((format!("{name} (message {})", i + 1), m));
            }
        }
    } else {
        let text = read_text(path)?;
        for (i, m) in split_mbox(&text).into_iter().enumerate() {
            messages.push((format!("{} (message {})", path.display(), i + 1), m));
        }
    }
    let patches: Vec<(String, String)> =
        messages.into_iter().filter(|(_, m)| has_diff(m)).collect();
    if patches.is_empty() {
        bail!(
            "{}: no patch with a diff (give an mbox of the series or a directory of patch files)",
            path.display()
        );
    }
    let out_dir = dirs.patches.join(PATCH_SUBDIR);
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut changes = Vec::new();
    for (i, (origin, text)) in patches.iter().enumerate() {
        let subject = subject(text).unwrap_or_else(|| origin.clone());
        let file = format!("{:02}-{}.patch", i + 1, slug(&subject));
        fs::write(out_dir.join(&file), text)
            .with_context(|| format!("writing {}", out_dir.join(&file).display()))?;
        changes.push(Change {
            subject,
            patch: format!("{PATCH_SUBDIR}/{file}"),
            commit: None,
        });
    }
    Ok(changes)
}

/// The patches `bad` adds to `good`: `bad`'s patch list must start with `good`'s, on the same
/// source and config, so that the points between them differ by patches only.
pub(crate) fn from_recipes(good: &Recipe, bad: &Recipe) -> Result<Vec<Change>> {
    let same_build = good.source == bad.source
        && good.defconfig == bad.defconfig
        && good.kconfig_targets == bad.kconfig_targets
        && good.config == bad.config;
    if !same_build {
        bail!(
            "kernel {} differs from {} in its source or config, not only in patches: give the \
             changes as --series FILE, or bisect a git range",
            bad.name,
            good.name
        );
    }
    if bad.patches.len() <= good.patches.len() || !bad.patches.starts_with(&good.patches) {
        bail!(
            "kernel {}'s patches do not extend {}'s ({} and {} patches): nothing lies between them \
             to bisect (give --series FILE)",
            bad.name,
            good.name,
            bad.patches.len(),
            good.patches.len()
        );
    }
    bad.patches[good.patches.len()..]
        .iter()
        .map(|p| {
            let text = read_text(&p.path)?;
            Ok(Change {
                subject: subject(&text).unwrap_or_else(|| p.name.clone()),
                patch: p.name.clone(),
                commit: None,
            })
        })
        .collect()
}

/// The first-parent commits after `good` up to `bad` in `repo`, oldest first, each as its diff
/// against the commit before it (for a merge: against its first parent), written to
/// `dirs.patches/bisect/NN-<commit>.patch`. Applied in order on `good`'s tree they give each
/// commit's tree (text files; a binary diff does not apply and its probe is skipped). Returns
/// `good`'s full commit id too.
pub(crate) fn from_git(
    repo: &Path,
    good: &str,
    bad: &str,
    dirs: &RecipeDirs,
) -> Result<(String, Vec<Change>)> {
    let git = |args: &[&str]| -> Result<String> {
        let out = crate::process::output(
            crate::process::command("git")
                .arg("-C")
                .arg(repo)
                .args(args),
        )
        .with_context(|| format!("running git in {}", repo.display()))?;
        if !out.status.success() {
            bail!(
                "git {} in {}: {}",
                args.join(" "),
                repo.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    for r in [good, bad] {
        if r.is_empty() || r.starts_with('-') {
            bail!("{r:?} is not a git ref");
        }
    }
    let good_id = git(&["rev-parse", "--verify", &format!("{good}^{{commit}}")])?
        .trim()
        .to_string();
    let bad_id = git(&["rev-parse", "--verify", &format!("{bad}^{{commit}}")])?
        .trim()
        .to_string();
    git(&["merge-base", "--is-ancestor", &good_id, &bad_id]).with_context(|| {
        format!(
            "{good} is not an ancestor of {bad} in {}: nothing to bisect",
            repo.display()
        )
    })?;
    let range = format!("{good_id}..{bad_id}");
    let commits: Vec<String> = git(&["rev-list", "--first-parent", "--reverse", &range])?
        .lines()
        .map(str::to_string)
        .collect();
    if commits.is_empty() {
        bail!("{good}..{bad} in {} holds no commit", repo.display());
    }
    let out_dir = dirs.patches.join(PATCH_SUBDIR);
    fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut changes = Vec::new();
    let mut parent = good_id.clone();
    for (i, commit) in commits.iter().enumerate() {
        let subject = git(&["log", "-1", "--format=%s", commit])?
            .trim()
            .to_string();
        // Plain diffs whatever the tree's attributes or the user's config say: no external diff
        // program or text conversion runs (a tree's `.gitattributes` names them), no colour.
        let diff = git(&[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--full-index",
            "--no-renames",
            &parent,
            commit,
        ])?;
        let file = format!("{:02}-{}.patch", i + 1, &commit[..12]);
        let text =
            format!("From {commit} Mon Sep 17 00:00:00 2001\nSubject: {subject}\n\n---\n{diff}");
        fs::write(out_dir.join(&file), text)
            .with_context(|| format!("writing {}", out_dir.join(&file).display()))?;
        changes.push(Change {
            subject,
            patch: format!("{PATCH_SUBDIR}/{file}"),
            commit: Some(commit.clone()),
        });
        parent = commit.clone();
    }
    Ok((good_id, changes))
}

fn read_text(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{}: not UTF-8 text", path.display()))
}

/// The messages of an mbox: each starts at a separator line (`From <id> <date>`, the date
/// ending in its year; lines of a diff start with a space, `+` or `-`, so none is one, and a
/// body's own `From ` line has no date). A file without separators is one message.
fn split_mbox(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.split_inclusive('\n') {
        if is_separator(line) && !current.trim().is_empty() {
            out.push(std::mem::take(&mut current));
        }
        current.push_str(line);
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

fn is_separator(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("From ") else {
        return false;
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    words.len() >= 3
        && words
            .last()
            .is_some_and(|y| y.len() == 4 && y.chars().all(|c| c.is_ascii_digit()))
}

fn has_diff(message: &str) -> bool {
    message
        .lines()
        .any(|l| l.starts_with("+++ ") || l.starts_with("diff --git "))
}

/// The `Subject:` header (folded lines joined) without its `[PATCH n/m]` tag.
fn subject(message: &str) -> Option<String> {
    let mut lines = message.lines().take_while(|l| !l.is_empty());
    let mut subject = lines.find_map(|l| l.strip_prefix("Subject: "))?.to_string();
    for l in message
        .lines()
        .skip_while(|l| !l.starts_with("Subject: "))
        .skip(1)
    {
        if l.starts_with(' ') || l.starts_with('\t') {
            subject.push(' ');
            subject.push_str(l.trim());
        } else {
            break;
        }
    }
    let mut s = subject.trim();
    while let Some(rest) = s.strip_prefix('[') {
        match rest.split_once(']') {
            Some((_, after)) => s = after.trim_start(),
            None => break,
        }
    }
    (!s.is_empty()).then(|| s.to_string())
}

/// A file-name-safe short form of a subject.
fn slug(subject: &str) -> String {
    let mut out = String::new();
    for c in subject.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 40 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "patch".to_string()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn message(n: usize, of: usize, subject: &str, file: &str) -> String {
        format!(
            "From 000000000000000000000000000000000000000{n} Mon Sep 17 00:00:00 2001\n\
             From: a <a@b>\nSubject: [PATCH {n}/{of}] {subject}\n\nbody\nFrom the start, text.\n---\n\
             diff --git a/{file} b/{file}\n--- a/{file}\n+++ b/{file}\n@@ -1 +1 @@\n-a\n+b{n}\n"
        )
    }

    #[test]
    fn an_mbox_gives_one_change_per_patch_and_skips_the_cover_letter() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = RecipeDirs::at(dir.path().join("kernels"));
        let cover = "From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH 0/2] a series\n\nwhy\n";
        let mbox = format!(
            "{cover}{}{}",
            message(1, 2, "sched/fair: one thing", "k/f.c"),
            message(2, 2, "sched: a long\n subject folded", "k/g.c")
        );
        let path = dir.path().join("series.mbox");
        fs::write(&path, mbox).unwrap();
        let changes = from_series(&path, &dirs).unwrap();
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(changes[0].subject, "sched/fair: one thing");
        assert_eq!(changes[1].subject, "sched: a long subject folded");
        assert_eq!(changes[0].patch, "bisect/01-sched-fair-one-thing.patch");
        let written = fs::read_to_string(dirs.patches.join(&changes[1].patch)).unwrap();
        assert!(written.contains("+b2"), "{written}");
        assert!(!written.contains("+b1"), "one patch per file: {written}");
    }

    #[test]
    fn a_directory_is_taken_in_name_order_and_an_empty_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = RecipeDirs::at(dir.path().join("kernels"));
        let series = dir.path().join("series");
        fs::create_dir(&series).unwrap();
        fs::write(series.join("0002-b.patch"), message(2, 2, "second", "b")).unwrap();
        fs::write(series.join("0001-a.patch"), message(1, 2, "first", "a")).unwrap();
        fs::write(series.join("notes.txt"), "not a patch").unwrap();
        let changes = from_series(&series, &dirs).unwrap();
        let subjects: Vec<&str> = changes.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(subjects, ["first", "second"]);
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let err = from_series(&empty, &dirs).unwrap_err().to_string();
        assert!(err.contains("no patch with a diff"), "{err}");
    }

    #[test]
    fn a_git_range_applied_in_order_gives_each_commits_tree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir(&repo).unwrap();
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        git(&["init", "-q", "-b", "main"]);
        fs::write(repo.join("f.c"), "a\nb\nc\n").unwrap();
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "base"]);
        let mut trees = Vec::new();
        for (i, text) in ["a\nB\nc\n", "a\nB\nC\n", "A\nB\nC\n"].iter().enumerate() {
            fs::write(repo.join("f.c"), text).unwrap();
            if i == 1 {
                fs::write(repo.join("new.h"), "#define X 1\n").unwrap();
            }
            git(&["add", "."]);
            git(&["commit", "-q", "-m", &format!("change {}", i + 1)]);
            trees.push(git(&["rev-parse", "HEAD^{tree}"]).trim().to_string());
        }
        // A hostile tree's config and attributes ask for an external diff program and a text
        // conversion: neither may run, and the patches stay plain.
        let marker = dir.path().join("ran");
        let run = format!("sh -c 'touch {}'", marker.display());
        git(&["config", "diff.external", &run]);
        git(&["config", "diff.conv.textconv", &run]);
        fs::write(repo.join(".git/info/attributes"), "* diff=conv\n").unwrap();
        let dirs = RecipeDirs::at(dir.path().join("kernels"));
        let (good, changes) = from_git(&repo, "HEAD~3", "HEAD", &dirs).unwrap();
        assert!(!marker.exists(), "git ran a program the tree named");
        assert_eq!(good.len(), 40);
        assert_eq!(changes.len(), 3);
        assert_eq!(changes[2].subject, "change 3");
        // Applied with the lab's own patch step onto the good commit's files, each prefix gives
        // its commit's tree, byte for byte (checked through git's tree hash).
        let work = dir.path().join("work");
        git(&["worktree", "add", "-q", work.to_str().unwrap(), &good]);
        for (change, tree) in changes.iter().zip(&trees) {
            let patch = crate::kernel::recipe::PatchRef {
                name: change.patch.clone(),
                sha256: String::new(),
                path: dirs.patches.join(&change.patch),
            };
            crate::kernel::patch::apply(&work, &patch, &mut std::io::sink()).unwrap();
            let out = Command::new("git")
                .arg("-C")
                .arg(&work)
                .args(["add", "-A"])
                .output()
                .unwrap();
            assert!(out.status.success());
            let got = Command::new("git")
                .arg("-C")
                .arg(&work)
                .args(["write-tree"])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8(got.stdout).unwrap().trim(),
                tree,
                "{}",
                change.subject
            );
        }
        let err = from_git(&repo, "HEAD", "HEAD~1", &dirs).unwrap_err();
        assert!(format!("{err:#}").contains("not an ancestor"), "{err:#}");
    }
}
