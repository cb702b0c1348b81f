//! A variant's tree made from its base's: the copy (sources linked, objects copied) and the
//! paths the tools' `.cmd` files record, rewritten so make finds nothing to redo there.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Copies a base's tree for a variant: sources as hard links (patch replaces files instead of
/// writing through links), the object tree as a real copy (the compiler and fixdep rewrite their
/// outputs in place, which would corrupt the base through links). Timestamps are kept, so make
/// only redoes what the variant's patches and config touch.
pub(crate) fn copy_tree(base: &Path, dest: &Path, log: &mut File) -> Result<()> {
    fs::create_dir_all(dest)?;
    for entry in fs::read_dir(base)? {
        let entry = entry?;
        let name = entry.file_name();
        let target = dest.join(&name);
        let (args, what): (&[&str], &str) = if name == "obj" {
            (&["-a", "--reflink=auto"], "copy")
        } else {
            (&["-al"], "link")
        };
        let out = crate::process::output(
            crate::process::command("cp")
                .args(args)
                .arg(entry.path())
                .arg(&target),
        )
        .context("running cp")?;
        if !out.status.success() {
            bail!(
                "cannot {what} {} to {}: {}",
                entry.path().display(),
                target.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    writeln!(log, "copied {} -> {}", base.display(), dest.display())?;
    Ok(())
}

/// Rewrites the tree path that the `.cmd` files under `tools` (a copied `obj/tools`) record,
/// the path of the tree they were built in, to `tree`'s, keeping each file's timestamp.
/// Returns how many files changed (0 when they already name `tree` or name no tree).
pub(crate) fn relocate_tool_cmds(tools: &Path, tree: &Path) -> Result<usize> {
    let mut cmds = Vec::new();
    let mut stack = vec![tools.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir)?.flatten() {
            let ft = e.file_type()?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() && name.starts_with('.') && name.ends_with(".cmd") {
                cmds.push(e.path());
            }
        }
    }
    cmds.sort();
    // "cmd_<tree>/obj/tools/objtool/check.o := gcc ...": the target names the old tree.
    let old = cmds.iter().find_map(|f| {
        let text = fs::read_to_string(f).ok()?;
        let target = text
            .lines()
            .next()?
            .strip_prefix("cmd_")?
            .split(" := ")
            .next()?;
        let at = target.find("/obj/tools/")?;
        Some(target[..at].to_string())
    });
    // kbuild runs in the physical directory (make -C resolves symlinks), so compare with that.
    let new = fs::canonicalize(tree)
        .with_context(|| format!("resolving {}", tree.display()))?
        .display()
        .to_string();
    let Some(old) = old.filter(|old| *old != new) else {
        return Ok(0);
    };
    let (old, new) = (format!("{old}/"), format!("{new}/"));
    let mut changed = 0;
    for f in cmds {
        let text = fs::read_to_string(&f)?;
        if !text.contains(&old) {
            continue;
        }
        let when = fs::metadata(&f)?.modified()?;
        fs::write(&f, text.replace(&old, &new))?;
        File::options()
            .write(true)
            .open(&f)?
            .set_modified(when)
            .with_context(|| format!("restoring the timestamp of {}", f.display()))?;
        changed += 1;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copied `obj/tools` whose `.cmd` files name the tree it was built in: after the rewrite
    /// they name the new tree, keep their timestamps, and other files are left alone.
    #[test]
    fn tool_cmds_follow_the_copied_tree() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("staging-b/tree");
        let old = "/cache/kernels/.staging/aaaa-XYZ/tree";
        let objtool = tree.join("obj/tools/objtool");
        fs::create_dir_all(objtool.join("libsubcmd")).unwrap();
        let cmd = |o: &str| {
            format!(
                "cmd_{old}/obj/tools/objtool/{o} := gcc -Wp,-MD,{old}/obj/tools/objtool/.{o}.d \
                 -o {old}/obj/tools/objtool/{o} {old}/tools/objtool/{o}.c\n\
                 source_{old}/obj/tools/objtool/{o} := {old}/tools/objtool/{o}.c\n"
            )
        };
        let files = [
            (objtool.join(".check.o.cmd"), cmd("check.o")),
            (objtool.join("libsubcmd/.help.o.cmd"), cmd("help.o")),
            (objtool.join("check.o"), format!("binary {old}/tools")),
        ];
        let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for (path, text) in &files {
            fs::write(path, text).unwrap();
            File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        }

        assert_eq!(
            relocate_tool_cmds(&tree.join("obj/tools"), &tree).unwrap(),
            2
        );
        let new = fs::canonicalize(&tree).unwrap().display().to_string();
        for (path, _) in &files[..2] {
            let text = fs::read_to_string(path).unwrap();
            assert!(!text.contains(old), "{text}");
            assert!(
                text.starts_with(&format!("cmd_{new}/obj/tools/objtool/")),
                "{text}"
            );
            assert_eq!(fs::metadata(path).unwrap().modified().unwrap(), when);
        }
        assert!(fs::read_to_string(&files[2].0).unwrap().contains(old));
        // Already relocated: nothing to do.
        assert_eq!(
            relocate_tool_cmds(&tree.join("obj/tools"), &tree).unwrap(),
            0
        );
    }
}
