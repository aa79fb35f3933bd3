//! The `hugepage-setup` binary against fake sysfs trees (`--root`): dry runs, status, and the
//! error text and exit code for bad input. Nothing here touches the real /sys.

use std::path::Path;
use std::process::Command;

fn tree(reserved: u64) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t
        .path()
        .join("sys/devices/system/node/node0/hugepages/hugepages-2048kB");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("nr_hugepages"), format!("{reserved}\n")).unwrap();
    std::fs::write(d.join("free_hugepages"), format!("{reserved}\n")).unwrap();
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    std::fs::write(t.path().join("proc/mounts"), "proc /proc proc rw 0 0\n").unwrap();
    t
}

fn run(root: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hugepage-setup"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_dry_run_prints_the_plan_and_changes_nothing() {
    let t = tree(0);
    let (ok, out, _) = run(t.path(), &["--dry-run", "reserve", "--pages", "64"]);
    assert!(ok);
    assert!(
        out.contains("would set 2M pages on node 0: 0 -> 64"),
        "{out}"
    );
    assert!(
        out.contains("would mount hugetlbfs at /dev/hugepages"),
        "{out}"
    );
    let nr = t
        .path()
        .join("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages");
    assert_eq!(std::fs::read_to_string(nr).unwrap(), "0\n");
}

#[test]
fn status_lists_each_pool() {
    let t = tree(32);
    let (ok, out, _) = run(t.path(), &["status"]);
    assert!(ok);
    assert!(out.contains("reserved") && out.contains("32"), "{out}");
    assert!(out.contains("hugetlbfs: not mounted"), "{out}");
}

#[test]
fn a_bad_size_fails_with_the_fix() {
    let t = tree(0);
    let (ok, _, err) = run(t.path(), &["reserve", "--pages", "8", "--size", "3X"]);
    assert!(!ok);
    assert!(
        err.contains("'3X' is not a size; try '2M' or '1G'"),
        "{err}"
    );
}

#[test]
fn reserving_what_exists_is_a_no_op_that_needs_no_root() {
    let t = tree(64);
    std::fs::write(
        t.path().join("proc/mounts"),
        "hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n",
    )
    .unwrap();
    let (ok, out, err) = run(t.path(), &["reserve", "--pages", "64"]);
    assert!(ok, "{err}");
    assert!(out.contains("nothing to do"), "{out}");
}

#[test]
fn a_missing_sysfs_is_reported() {
    let t = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(t.path(), &["status"]);
    assert!(!ok);
    assert!(err.contains("no hugepage pools under"), "{err}");
}
