//! Result tables: Markdown rendering, writing `benches/results/<name>.md`, and updating one
//! harness's section of `BENCHMARKS.md` in place. Each harness owns the text between
//! `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`; other sections and any text
//! outside the markers are left as they are. The section writer itself is
//! `forwarder::testing::benchmarks`, re-exported here, so the labs in `forwarder/tests` use
//! the same one.

use std::path::Path;

pub use forwarder::testing::benchmarks::{
    commit, load_average, machine_line, provenance, run_line, update_section, utc_now, wrap_prose,
    PROSE_WIDTH,
};

/// A table with a header row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// Column titles.
    pub headers: Vec<String>,
    /// Rows; each should have as many cells as `headers`.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Returns an empty table with these column titles.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders the table as GitHub Markdown.
    pub fn to_markdown(&self) -> String {
        let esc = |c: &str| c.replace('|', "\\|");
        let mut s = String::new();
        s.push_str(&format!(
            "| {} |\n",
            self.headers
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        s.push_str(&format!(
            "|{}\n",
            self.headers.iter().map(|_| "---|").collect::<String>()
        ));
        for r in &self.rows {
            let mut cells: Vec<String> = r.iter().map(|c| esc(c)).collect();
            cells.resize(self.headers.len(), String::new());
            s.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        s
    }
}

/// Writes a harness's result: `body` to `out/<stem>.md`, printed on stdout, and (unless
/// `to_benchmarks_md` is false) into the section `section` of `root/BENCHMARKS.md`; says on
/// stderr what it wrote, `png` included (the caller drew it).
///
/// # Errors
/// Writing either file, with the path in the message.
pub fn publish(
    root: &Path,
    out: &Path,
    stem: &str,
    png: &Path,
    section: &str,
    body: &str,
    to_benchmarks_md: bool,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let md = out.join(format!("{stem}.md"));
    std::fs::write(&md, body).with_context(|| format!("writing {}", md.display()))?;
    println!("{body}");
    if to_benchmarks_md {
        let bm = root.join("BENCHMARKS.md");
        update_section(&bm, section, body).with_context(|| format!("updating {}", bm.display()))?;
        eprintln!(
            "wrote {}, {} and the {section} section of {}",
            md.display(),
            png.display(),
            bm.display()
        );
    } else {
        eprintln!("wrote {} and {}", md.display(), png.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_escape_pipes_and_pad_short_rows() {
        let mut t = Table::new(&["a", "b"]);
        t.push(vec!["x|y".into()]);
        assert_eq!(t.to_markdown(), "| a | b |\n|---|---|\n| x\\|y |  |\n");
    }

    #[test]
    fn updating_a_section_keeps_the_other_sections_intact() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("BENCHMARKS.md");
        update_section(&p, "accuracy", "## Accuracy\nv1").unwrap();
        update_section(&p, "pktgen", "## Pktgen\nkeep me").unwrap();
        update_section(&p, "accuracy", "## Accuracy\nv2").unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.starts_with("# Benchmarks"));
        assert!(s.contains("v2") && !s.contains("v1"), "{s}");
        assert!(s.contains("keep me"));
        assert!(s.find("Accuracy").unwrap() < s.find("Pktgen").unwrap());
        assert!(
            s.contains("<!-- bench:accuracy:end --><!-- bench:pktgen:begin -->\n## Pktgen"),
            "one line between sections: {s}"
        );
    }

    #[test]
    fn prose_is_wrapped_and_tables_headings_and_code_are_not() {
        let long = "word ".repeat(40);
        let code = "code ".repeat(40);
        let text =
            format!("## {long}\n\n{long}\n* {long}\n| {long} |\n```\n{code}\n```\n<!-- {long} -->");
        let wrapped = wrap_prose(&text, 30);
        let lines: Vec<&str> = wrapped.lines().collect();
        assert!(lines[0].starts_with("## ") && lines[0].len() > 30);
        let prose: Vec<&&str> = lines.iter().filter(|l| l.starts_with("word")).collect();
        assert!(
            prose.len() > 5 && prose.iter().all(|l| l.len() <= 30),
            "{wrapped}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("  word")),
            "list items hang: {wrapped}"
        );
        assert!(lines.iter().any(|l| l.starts_with("| ") && l.len() > 30));
        assert!(lines.iter().any(|l| l.starts_with("<!-- ") && l.len() > 30));
        assert_eq!(
            wrapped.matches(long.trim()).count(),
            3,
            "table kept: {wrapped}"
        );
        assert!(wrapped.contains(code.trim()), "code kept: {wrapped}");
        assert_eq!(
            wrap_prose(&wrapped, 30),
            wrapped,
            "wrapping twice changes nothing"
        );
        assert_eq!(
            wrapped.split_whitespace().filter(|w| *w == "word").count(),
            text.split_whitespace().filter(|w| *w == "word").count()
        );
    }

    #[test]
    fn a_section_is_written_with_its_prose_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("BENCHMARKS.md");
        let body = format!("## T\n\n{}\n\n| a | b |", "x ".repeat(200));
        update_section(&p, "t", &body).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.lines().all(|l| l.len() <= PROSE_WIDTH), "{s}");
        assert!(s.contains("| a | b |\n<!-- bench:t:end -->"), "{s}");
    }

    #[test]
    fn the_date_has_the_expected_shape() {
        let d = utc_now();
        assert_eq!(d.len(), "2026-12-03 07:56 UTC".len(), "{d}");
        assert!(d.starts_with("20"));
    }
}
