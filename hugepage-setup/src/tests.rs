//! Unit tests of the hugepage planner against fixture trees of `/sys` and `/proc`: page size
//! spellings, per-node and global pools, and the plan a reservation makes.

use super::*;
use std::collections::HashMap;

/// A fake sysfs tree: `nodes` NUMA nodes with 2M and 1G pools, given counts.
fn tree(nodes: u32, reserved_2m: u64, mounted: bool) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for n in 0..nodes {
        for size in ["hugepages-2048kB", "hugepages-1048576kB"] {
            let d = t
                .path()
                .join(format!("sys/devices/system/node/node{n}/hugepages/{size}"));
            std::fs::create_dir_all(&d).unwrap();
            let r = if size.starts_with("hugepages-2048") {
                reserved_2m
            } else {
                0
            };
            std::fs::write(d.join("nr_hugepages"), format!("{r}\n")).unwrap();
            std::fs::write(d.join("free_hugepages"), format!("{r}\n")).unwrap();
        }
    }
    std::fs::create_dir_all(t.path().join("proc")).unwrap();
    let mounts = if mounted {
        "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n"
    } else {
        "proc /proc proc rw 0 0\n"
    };
    std::fs::write(t.path().join("proc/mounts"), mounts).unwrap();
    std::fs::write(
        t.path().join("proc/meminfo"),
        "MemTotal: 16777216 kB\nHugepagesize:    2048 kB\n",
    )
    .unwrap();
    t
}

/// A kernel that gives at most `cap` pages per pool and records mounts.
struct FakeKernel {
    root: PathBuf,
    cap: u64,
    root_user: bool,
    mounts: Vec<PathBuf>,
    writes: HashMap<PathBuf, String>,
}

impl System for FakeKernel {
    fn read(&self, rel: &Path) -> io::Result<String> {
        std::fs::read_to_string(self.root.join(rel))
    }
    fn write(&mut self, rel: &Path, value: &str) -> io::Result<()> {
        let asked: u64 = value.trim().parse().unwrap();
        self.writes.insert(rel.to_path_buf(), value.to_owned());
        std::fs::write(self.root.join(rel), format!("{}\n", asked.min(self.cap)))
    }
    fn mount_hugetlbfs(&mut self, target: &Path, _size: PageSize) -> io::Result<()> {
        self.mounts.push(target.to_path_buf());
        Ok(())
    }
    fn is_root(&self) -> bool {
        self.root_user
    }
}

fn kernel(t: &tempfile::TempDir, cap: u64) -> FakeKernel {
    FakeKernel {
        root: t.path().into(),
        cap,
        root_user: true,
        mounts: vec![],
        writes: HashMap::new(),
    }
}

const RESERVE_512: Request = Request::Reserve {
    pages: 512,
    size: PageSize::TWO_MB,
    node: None,
};

#[test]
fn page_sizes_parse_in_the_usual_spellings() {
    for (s, kib) in [
        ("2M", 2048),
        ("2mb", 2048),
        ("2048kB", 2048),
        ("1G", 1_048_576),
        ("1GB", 1_048_576),
    ] {
        assert_eq!(s.parse::<PageSize>().unwrap().kib, kib, "{s}");
    }
    let err = "2X".parse::<PageSize>().unwrap_err().to_string();
    assert!(err.contains("'2X'") && err.contains("try '2M'"), "{err}");
}

#[test]
fn snapshot_reads_per_node_pools_and_mounts() {
    let t = tree(2, 64, true);
    let s = Snapshot::read(t.path()).unwrap();
    assert_eq!(s.nodes(), vec![0, 1]);
    assert_eq!(s.sizes(), vec![PageSize::TWO_MB, PageSize::ONE_GB]);
    assert_eq!(s.pools[0].reserved, 64);
    assert_eq!(s.default_size, Some(PageSize::TWO_MB));
    assert!(s.mount_for(PageSize::TWO_MB).is_some());
    assert!(s.mount_for(PageSize::ONE_GB).is_none());
}

#[test]
fn snapshot_falls_back_to_the_global_pool_without_numa() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("sys/kernel/mm/hugepages/hugepages-2048kB");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("nr_hugepages"), "8\n").unwrap();
    std::fs::write(d.join("free_hugepages"), "8\n").unwrap();
    let s = Snapshot::read(t.path()).unwrap();
    assert_eq!(s.pools.len(), 1);
    assert_eq!(s.pools[0].node, None);
    let plan = plan(&s, &RESERVE_512).unwrap();
    assert!(
        matches!(&plan[0], Action::SetPages { path, to: 512, .. } if path.ends_with("hugepages-2048kB/nr_hugepages"))
    );
}

#[test]
fn reserve_plans_every_node_and_a_mount() {
    let t = tree(2, 0, false);
    let s = Snapshot::read(t.path()).unwrap();
    let p = plan(&s, &RESERVE_512).unwrap();
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(matches!(
        p[0],
        Action::SetPages {
            node: Some(0),
            to: 512,
            ..
        }
    ));
    assert!(matches!(
        p[1],
        Action::SetPages {
            node: Some(1),
            to: 512,
            ..
        }
    ));
    assert_eq!(
        p[2],
        Action::Mount {
            target: "/dev/hugepages".into(),
            size: PageSize::TWO_MB
        }
    );
}

#[test]
fn reserve_on_one_node_touches_only_that_node() {
    let t = tree(2, 0, true);
    let s = Snapshot::read(t.path()).unwrap();
    let p = plan(
        &s,
        &Request::Reserve {
            pages: 8,
            size: PageSize::TWO_MB,
            node: Some(1),
        },
    )
    .unwrap();
    assert_eq!(p.len(), 1);
    assert!(matches!(p[0], Action::SetPages { node: Some(1), .. }));
}

#[test]
fn reserving_what_is_already_there_plans_nothing() {
    let t = tree(1, 512, true);
    let s = Snapshot::read(t.path()).unwrap();
    assert!(plan(&s, &RESERVE_512).unwrap().is_empty());
    let more = tree(1, 1024, true);
    let s = Snapshot::read(more.path()).unwrap();
    assert!(
        plan(&s, &RESERVE_512).unwrap().is_empty(),
        "reserve never lowers"
    );
}

#[test]
fn applying_twice_is_idempotent() {
    let t = tree(2, 0, false);
    let mut k = kernel(&t, u64::MAX);
    let p = plan(&Snapshot::read(t.path()).unwrap(), &RESERVE_512).unwrap();
    let out = apply(&mut k, &p, "reserve --pages 512").unwrap();
    assert_eq!(out.done.len(), 3);
    // The fake kernel does not list its mounts, so mark it mounted as a real one would.
    std::fs::write(
        t.path().join("proc/mounts"),
        "hugetlbfs /dev/hugepages hugetlbfs rw 0 0\n",
    )
    .unwrap();
    let again = plan(&Snapshot::read(t.path()).unwrap(), &RESERVE_512).unwrap();
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_short_reservation_says_memory_is_fragmented_and_puts_the_old_one_back() {
    let t = tree(1, 64, true);
    let mut k = kernel(&t, 300);
    let p = plan(&Snapshot::read(t.path()).unwrap(), &RESERVE_512).unwrap();
    let err = apply(&mut k, &p, "reserve --pages 512")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("asked for 512, kernel reserved only 300")
            && err
                .contains("memory is fragmented; put the reservation back to 64; try fewer pages"),
        "{err}"
    );
    let after = Snapshot::read(t.path()).unwrap();
    assert_eq!(
        after.pools[0].reserved, 64,
        "the partial 300 is not left behind"
    );
}

#[test]
fn a_reservation_larger_than_the_machine_is_refused_before_any_write() {
    // 16 GiB of memory in the fake tree; 2 nodes x 5000 x 2 MiB = 20000 MiB.
    let t = tree(2, 0, true);
    let big = Request::Reserve {
        pages: 5000,
        size: PageSize::TWO_MB,
        node: None,
    };
    let err = plan(&Snapshot::read(t.path()).unwrap(), &big)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "5000 2M pages on each of 2 nodes is 20000 MiB, but the machine has 16384 MiB; \
         ask for fewer pages (DPDK needs a few hundred MiB per port)"
    );
    let one_node = Request::Reserve {
        pages: 5000,
        size: PageSize::TWO_MB,
        node: Some(1),
    };
    assert!(plan(&Snapshot::read(t.path()).unwrap(), &one_node).is_ok());
}

#[test]
fn changing_reservations_needs_root_but_a_no_op_does_not() {
    let t = tree(1, 0, true);
    let mut k = kernel(&t, u64::MAX);
    k.root_user = false;
    let p = plan(&Snapshot::read(t.path()).unwrap(), &RESERVE_512).unwrap();
    let err = apply(&mut k, &p, "reserve --pages 512")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("needs root") && err.contains("sudo hugepage-setup reserve --pages 512"),
        "{err}"
    );
    assert!(apply(&mut k, &[], "status").is_ok());
}

#[test]
fn release_zeroes_only_reserved_pools() {
    let t = tree(2, 16, true);
    let s = Snapshot::read(t.path()).unwrap();
    let p = plan(
        &s,
        &Request::Release {
            size: None,
            node: None,
        },
    )
    .unwrap();
    assert_eq!(p.len(), 2, "only the two 2M pools hold pages: {p:?}");
    let mut k = kernel(&t, u64::MAX);
    apply(&mut k, &p, "release").unwrap();
    let s = Snapshot::read(t.path()).unwrap();
    assert!(s.pools.iter().all(|p| p.reserved == 0));
    assert!(plan(
        &s,
        &Request::Release {
            size: None,
            node: None
        }
    )
    .unwrap()
    .is_empty());
}

#[test]
fn unknown_sizes_and_nodes_are_refused_with_the_choices() {
    let t = tree(1, 0, true);
    let s = Snapshot::read(t.path()).unwrap();
    let e = plan(
        &s,
        &Request::Reserve {
            pages: 1,
            size: PageSize { kib: 64 },
            node: None,
        },
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("offers no 64K hugepages (it has: 2M, 1G)"),
        "{e}"
    );
    let e = plan(
        &s,
        &Request::Reserve {
            pages: 1,
            size: PageSize::TWO_MB,
            node: Some(3),
        },
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("NUMA node 3 does not exist (nodes: 0)"),
        "{e}"
    );
}

#[test]
fn a_second_size_mounts_beside_the_default() {
    let t = tree(1, 0, true);
    let s = Snapshot::read(t.path()).unwrap();
    let p = plan(
        &s,
        &Request::Reserve {
            pages: 1,
            size: PageSize::ONE_GB,
            node: None,
        },
    )
    .unwrap();
    assert_eq!(
        p.last(),
        Some(&Action::Mount {
            target: "/dev/hugepages-1G".into(),
            size: PageSize::ONE_GB
        })
    );
}

#[test]
fn status_shows_reserved_free_and_mounts() {
    let t = tree(1, 64, true);
    let table = status_table(&Snapshot::read(t.path()).unwrap());
    assert!(
        table.contains("0            2M         64         64          0"),
        "{table}"
    );
    assert!(
        table.contains("hugetlbfs: /dev/hugepages (pagesize 2M)"),
        "{table}"
    );
}
