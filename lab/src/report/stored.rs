//! Records stored on disk, found and shown again: `lab report` prints each one's table or writes
//! its page, and `files_under` is the one search of a results tree (`lab report`,
//! `super::merge::record_files`).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{Picture, RunRecord};

/// Every file under `dir` (searched to any depth) that `keep` accepts, sorted.
pub(crate) fn files_under(dir: &Path, keep: impl Fn(&Path) -> bool) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else if keep(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What `lab report` shows of one file.
#[derive(Debug)]
pub enum Shown {
    /// A record's table, headed by its path (and why it stopped early, if it did).
    Table {
        /// The record.
        path: PathBuf,
        /// Why its run stopped early, if it did.
        failure: Option<String>,
        /// Its comparison's table.
        table: String,
    },
    /// The page written next to a record (`--html`).
    Page(PathBuf),
    /// A JSON file found by searching that is not a record: skipped, with why. A file named on
    /// the command line must be a record (an error instead).
    Skipped {
        /// The file.
        path: PathBuf,
        /// Why it is not a record.
        error: anyhow::Error,
    },
}

impl Shown {
    /// Whether this is a record (shown as a table or a page), not a skipped file.
    pub fn is_record(&self) -> bool {
        !matches!(self, Shown::Skipped { .. })
    }
}

/// The standard-output text of a record: `== PATH`, the table; or the page's path. A skipped
/// file is a warning for standard error: `skipping PATH: why`.
impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shown::Table {
                path,
                failure,
                table,
            } => {
                writeln!(f, "== {}", path.display())?;
                if let Some(failure) = failure {
                    writeln!(f, "(stopped early: {failure})")?;
                }
                write!(f, "{table}")
            }
            Shown::Page(path) => writeln!(f, "{}", path.display()),
            Shown::Skipped { path, error } => write!(f, "skipping {}: {error:#}", path.display()),
        }
    }
}

/// The stored records under `roots` (record files, or directories searched for `*.json`), each
/// shown as its table or, with `html`, as a page written next to it (`record.json` ->
/// `record.html`). One at a time, as the caller iterates, so what came before a bad record named
/// on the command line is printed before its error. `picture_of` finds the scenario's picture
/// for records older than the manifest's own (the scenario registry is above this module). A
/// root that does not exist holds no records.
pub fn show<'a>(
    roots: &[PathBuf],
    html: bool,
    picture_of: &'a dyn Fn(&RunRecord) -> Option<Picture>,
) -> Result<impl Iterator<Item = Result<Shown>> + 'a> {
    let mut files = Vec::new();
    for root in roots {
        if root.is_file() {
            files.push((root.clone(), true));
        } else if root.exists() {
            let found = files_under(root, |p| p.extension().is_some_and(|e| e == "json"))?;
            files.extend(found.into_iter().map(|f| (f, false)));
        }
    }
    Ok(files
        .into_iter()
        .map(move |(path, named)| show_one(path, named, html, picture_of)))
}

fn show_one(
    path: PathBuf,
    named: bool,
    html: bool,
    picture_of: &dyn Fn(&RunRecord) -> Option<Picture>,
) -> Result<Shown> {
    let record = match RunRecord::read_json(&path) {
        Ok(record) => record,
        Err(e) if named => return Err(e),
        Err(error) => return Ok(Shown::Skipped { path, error }),
    };
    if html {
        let page = super::html::write(&record, &path, picture_of(&record).as_ref())?;
        return Ok(Shown::Page(page));
    }
    Ok(Shown::Table {
        failure: record.failure.clone(),
        table: record.comparison().table(),
        path,
    })
}

/// `lab report`'s line when `roots` hold no record.
pub fn nothing_found(roots: &[PathBuf]) -> String {
    let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    format!("no comparison records under {}", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    #[test]
    fn a_search_shows_every_record_and_skips_other_json() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("s1/run-a");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::copy(
            fixtures().join("s1-cross-llc-a.record.json"),
            run.join("record.json"),
        )
        .unwrap();
        std::fs::write(dir.path().join("s1/notes.json"), "{}").unwrap();
        std::fs::write(dir.path().join("s1/notes.txt"), "not json").unwrap();
        let no_picture = |_: &RunRecord| None;
        let shown: Vec<Shown> = show(&[dir.path().to_path_buf()], false, &no_picture)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(shown.len(), 2, "{shown:?}");
        // Sorted: s1/notes.json before s1/run-a/record.json.
        assert!(!shown[0].is_record());
        assert!(
            shown[0].to_string().starts_with("skipping "),
            "{}",
            shown[0]
        );
        let record = RunRecord::read_json(&run.join("record.json")).unwrap();
        assert_eq!(
            shown[1].to_string(),
            format!(
                "== {}\n{}",
                run.join("record.json").display(),
                record.comparison().table()
            )
        );

        // Pages go next to their records, and the path is what is shown.
        let shown: Vec<Shown> = show(&[run.join("record.json")], true, &no_picture)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(
            shown[0].to_string(),
            format!("{}\n", run.join("record.html").display())
        );
        assert!(run.join("record.html").is_file());
    }

    #[test]
    fn a_named_file_must_be_a_record_and_a_missing_root_holds_none() {
        let dir = tempfile::tempdir().unwrap();
        let broken = dir.path().join("broken.json");
        std::fs::write(&broken, "{\"schema_version\": 2}").unwrap();
        let no_picture = |_: &RunRecord| None;
        let err = show(&[broken], false, &no_picture)
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(format!("{err:#}").contains("broken.json"), "{err:#}");
        let missing = [dir.path().join("results")];
        assert_eq!(show(&missing, false, &no_picture).unwrap().count(), 0);
        assert_eq!(
            nothing_found(&missing),
            format!("no comparison records under {}", missing[0].display())
        );
    }

    #[test]
    fn files_under_searches_every_depth_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b/record.json", "a/x/record.json", "a/other.json"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let found = files_under(dir.path(), |p| {
            p.file_name().is_some_and(|n| n == "record.json")
        })
        .unwrap();
        assert_eq!(
            found,
            [
                dir.path().join("a/x/record.json"),
                dir.path().join("b/record.json")
            ]
        );
    }
}
