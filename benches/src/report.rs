//! Result tables: Markdown rendering, writing `benches/results/<name>.md`, and updating one
//! harness's section of `BENCHMARKS.md` in place. Each harness owns the text between
//! `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`; other sections and any text
//! outside the markers are left as they are.

use std::path::Path;

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

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- bench:{name}:begin -->"),
        format!("<!-- bench:{name}:end -->"),
    )
}

/// Widest prose line [`update_section`] writes: BENCHMARKS.md is read in terminals and diffs.
pub const PROSE_WIDTH: usize = 100;

/// Wraps the prose lines of Markdown `text` at `width` characters, at spaces. Table rows,
/// headings, images, HTML comments and fenced code are left as they are, and so is a word
/// longer than the width; a list item's continuation lines are indented under its text.
/// Lines are only split, never joined, so wrapping wrapped text changes nothing.
pub fn wrap_prose(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / width.max(1));
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let verbatim = fenced
            || line.chars().count() <= width
            || ["|", "#", "!", "<!--", "```"]
                .iter()
                .any(|p| line.trim_start().starts_with(p));
        if verbatim {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let body = line.trim_start();
        let indent = line.len() - body.len();
        let marker = ["* ", "- "]
            .iter()
            .find(|m| body.starts_with(*m))
            .map_or(0, |m| m.len());
        let hang = " ".repeat(indent + marker);
        let mut current = line[..indent + marker].to_string();
        let mut empty = true;
        for word in body[marker..].split(' ').filter(|w| !w.is_empty()) {
            let fits = current.chars().count() + 1 + word.chars().count() <= width;
            if !empty && !fits {
                out.push_str(&current);
                out.push('\n');
                current = hang.clone();
                empty = true;
            }
            if !empty {
                current.push(' ');
            }
            current.push_str(word);
            empty = false;
        }
        out.push_str(&current);
        out.push('\n');
    }
    if !text.ends_with('\n') {
        out.pop();
    }
    out
}

/// Replaces the section `name` of the Markdown file at `path` with `body` (creating the file
/// with a title, or appending the section, when missing). Text outside the section is kept.
///
/// # Errors
/// I/O errors reading or writing the file.
pub fn update_section(path: &Path, name: &str, body: &str) -> std::io::Result<()> {
    let (begin, end) = markers(name);
    let old = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::from(
            "# Benchmarks\n\nMeasured by the harnesses in `benches/` (one section each, rewritten \
             by the\nharness that owns it). Kernel numbers are context, not pass/fail.\n",
        ),
        Err(e) => return Err(e),
    };
    let section = format!(
        "{begin}\n{}\n{end}",
        wrap_prose(body.trim_end(), PROSE_WIDTH)
    );
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{section}{}", &old[..b], &old[e + end.len()..])
        }
        _ => format!("{}\n{section}\n", old.trim_end()),
    };
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(path, new)
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

/// Returns "YYYY-MM-DD HH:MM UTC" for now (no date crate needed).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Returns a one-line description of the machine (CPU model, cores, kernel) for result headers.
pub fn machine_line() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1).map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}")
}

/// Returns the 1-minute load average ("1.52"), or "?" when unknown. Other work on the machine
/// skews timer-driven shapers, so every result header carries it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
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
