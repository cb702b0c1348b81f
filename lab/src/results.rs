//! `lab report`: what is stored under results directories, comparison records and bisects
//! alike, as the text for standard output and notes for standard error.

use std::path::PathBuf;

use anyhow::Result;

/// What `lab report` prints.
#[derive(Debug, Default)]
pub struct StoredResults {
    /// The comparisons' tables and the bisects' logs (standard output).
    pub text: String,
    /// Pages written and files that were not records, a line each (standard error).
    pub notes: Vec<String>,
}

/// Every comparison record and bisect under `roots` (the lab's results directory when there
/// are none); with `html`, each one's page written beside it. A bisect's directory shows as its
/// log, not as its steps' records.
pub fn stored(roots: Vec<PathBuf>, html: bool) -> Result<StoredResults> {
    let roots = if roots.is_empty() {
        vec![crate::results_root()]
    } else {
        roots
    };
    let mut out = StoredResults::default();
    let bisects = crate::bisect::find_records(&roots);
    for dir in &bisects {
        let record = crate::bisect::BisectRecord::read(dir)?;
        out.text.push_str(&record.log());
        if html {
            let page = crate::bisect::page::write(&record, dir)?;
            out.notes.push(page.display().to_string());
        }
    }
    let roots: Vec<PathBuf> = roots.into_iter().filter(|r| !bisects.contains(r)).collect();
    if roots.is_empty() {
        return Ok(out);
    }
    let mut found = 0;
    for shown in crate::report::stored::show(&roots, html, &crate::scenarios::picture_of)? {
        let shown = shown?;
        if shown.is_record() {
            found += 1;
            out.text.push_str(&shown.to_string());
        } else {
            out.notes.push(shown.to_string());
        }
    }
    if found == 0 {
        out.text
            .push_str(&crate::report::stored::nothing_found(&roots));
        out.text.push('\n');
    }
    Ok(out)
}
