//! Writing one section of `BENCHMARKS.md` in place: each harness owns the text between
//! `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`, and other sections and any text
//! outside the markers are left as they are. It lives here, not in `cakewalk-benches`, so that
//! the labs among this crate's tests can write their sections too ([`write_if_asked`]); the
//! benches re-export it (`cakewalk_benches::report`).

use std::path::Path;

/// The environment variable that, set to `1`, lets a lab test rewrite its section of
/// `BENCHMARKS.md` ([`write_if_asked`]). Never set in CI: a CI run's numbers are not kept.
pub const WRITE_BENCHMARKS: &str = "CAKEWALK_WRITE_BENCHMARKS";

/// Rewrites the section `name` of the repository's `BENCHMARKS.md` with `body` when
/// [`WRITE_BENCHMARKS`] is `1`; otherwise does nothing. Returns whether it wrote.
///
/// # Panics
/// When the file cannot be written: the run was asked to record its numbers and could not.
pub fn write_if_asked(name: &str, body: &str) -> bool {
    if !std::env::var(WRITE_BENCHMARKS).is_ok_and(|v| v.trim() == "1") {
        return false;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("forwarder/ sits in the workspace root")
        .join("BENCHMARKS.md");
    update_section(&path, name, body).unwrap_or_else(|e| {
        panic!(
            "{WRITE_BENCHMARKS}=1 but {} could not be written: {e}",
            path.display()
        )
    });
    println!("wrote the {name} section of {}", path.display());
    true
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
/// Sections are separated by one line: a section's end marker and the next one's begin
/// marker share it, and a section appended after another is written so.
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
        _ if old.trim_end().ends_with(":end -->") => format!("{}{section}\n", old.trim_end()),
        _ => format!("{}\n{section}\n", old.trim_end()),
    };
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(path, new)
}

/// What a lab's section says of its checks: "met", or the first miss and how many more (the
/// test's output has them all).
pub fn verdict(misses: &[String]) -> String {
    match misses {
        [] => "met".to_string(),
        [only] => format!("missed ({only})"),
        [first, rest @ ..] => format!("missed ({first}; {} more)", rest.len()),
    }
}

/// The sentence each section's paragraph opens with: when, which commit (left out when
/// empty: a run that recorded none), the machine, its 1-minute load average, and the command
/// that reproduces the table.
pub fn provenance(date: &str, commit: &str, machine: &str, load: &str, command: &str) -> String {
    let at = if commit.is_empty() {
        String::new()
    } else {
        format!(" at {commit}")
    };
    format!("{date}{at} on {machine}, load {load}: `{command}`.")
}

/// The commit checked out ("5e4b6d3", "5e4b6d3 (with uncommitted changes)" when tracked
/// files other than BENCHMARKS.md differ from it: a run that writes several sections has
/// changed that file by its second), "unknown" outside a git checkout.
pub fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_string();
    };
    let id = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ":(top)",
        ":(top,exclude)BENCHMARKS.md",
    ])
    .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{id} (with uncommitted changes)")
    } else {
        id
    }
}

/// [`provenance`] for a run ending now, on this machine, at this commit.
pub fn run_line(command: &str) -> String {
    provenance(
        &utc_now(),
        &commit(),
        &machine_line(),
        &load_average(),
        command,
    )
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

/// Returns a one-line description of the machine (CPU model and cores) for result headers.
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
    format!("{cpu}, {cores} cores")
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
    fn the_verdict_names_the_first_miss_and_counts_the_rest() {
        assert_eq!(verdict(&[]), "met");
        assert_eq!(verdict(&["a".into()]), "missed (a)");
        assert_eq!(
            verdict(&["a".into(), "b".into(), "c".into()]),
            "missed (a; 2 more)"
        );
    }

    #[test]
    fn provenance_says_when_where_and_how() {
        assert_eq!(
            provenance(
                "2026-12-06 03:41 UTC",
                "5e4b6d3",
                "AMD EPYC, 2 cores",
                "1.5",
                "x --write"
            ),
            "2026-12-06 03:41 UTC at 5e4b6d3 on AMD EPYC, 2 cores, load 1.5: `x --write`."
        );
        assert_eq!(
            provenance("2026-12-04 06:25 UTC", "", "AMD EPYC, 2 cores", "1.76", "x"),
            "2026-12-04 06:25 UTC on AMD EPYC, 2 cores, load 1.76: `x`."
        );
        assert!(run_line("y").ends_with(": `y`."));
    }
}
