//! Starting and stopping DPDK's Environment Abstraction Layer. [`Eal::init`] runs
//! `rte_eal_init` at most once per process (DPDK cannot restart it) after checking the
//! hugepage set-up itself, so a missing reservation is a message with the fix instead of a
//! page of EAL log. The last [`Eal`] handle to go calls `rte_eal_cleanup`.

use std::ffi::{c_char, CString};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::error::{rte_errno, strerror, DpdkError, PortError};
use crate::port::lcores::Lcore;

static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// A handle on the running EAL. Cheap to clone; pools and devices hold one.
#[derive(Clone)]
pub struct Eal {
    inner: Arc<EalInner>,
}

pub(crate) struct EalInner {
    /// Set when a pool had to be leaked because mbufs were still out: cleaning up the EAL
    /// would then free memory those mbufs point into.
    leaked: AtomicBool,
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal").finish_non_exhaustive()
    }
}

impl Eal {
    /// Starts the EAL with `args` (without the program name; "cakewalk" is put first), e.g.
    /// `["-l", "0", "--no-huge", "--vdev=net_null0"]`.
    ///
    /// # Errors
    /// [`PortError::EalAlreadyStarted`] on a second call in one process;
    /// [`PortError::NoHugepages`]/[`PortError::NoHugetlbfs`] when neither hugepages nor
    /// `--no-huge`/`--in-memory` make memory available; [`PortError::EalInit`] when DPDK
    /// refuses (unknown option, unknown vdev driver, lock held by another DPDK process).
    pub fn init<I, S>(args: I) -> Result<Eal, PortError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let args: Vec<String> = args.into_iter().map(|s| s.as_ref().to_owned()).collect();
        check_memory(&args, Path::new("/"))?;
        let mut owned = Vec::with_capacity(args.len() + 1);
        for a in std::iter::once("cakewalk").chain(args.iter().map(String::as_str)) {
            owned.push(CString::new(a).map_err(|_| PortError::BadArgument(a.to_owned()))?);
        }
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(PortError::EalAlreadyStarted);
        }
        // EAL may keep pointers into argv (and reorders it), so argv lives for the process.
        let owned: &'static mut [CString] = Box::leak(owned.into_boxed_slice());
        let argv: &'static mut [*mut c_char] = Box::leak(
            owned
                .iter_mut()
                .map(|c| c.as_ptr().cast_mut())
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let argc = i32::try_from(owned.len())
            .map_err(|_| PortError::Invalid("too many EAL arguments".into()))?;
        // SAFETY: argv holds argc valid NUL-terminated strings and a final NULL, all leaked so
        // they outlive the EAL; EAL_STARTED guarantees this runs once per process.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            return Err(PortError::EalInit {
                args,
                reason: strerror(errno),
                hint: eal_hint(errno),
            });
        }
        // The engine's clock reads the TSC between monotonic-clock readings (a third of the
        // cost). It measures the rate itself and re-anchors every 200 µs, so a counter that is
        // not invariant only blurs the time within such a span.
        crate::clock::use_ticks(super::rdtsc);
        Ok(Eal {
            inner: Arc::new(EalInner {
                leaked: AtomicBool::new(false),
            }),
        })
    }

    /// Records that a pool was leaked, so `rte_eal_cleanup` must not run.
    pub(crate) fn mark_leaked(&self) {
        self.inner.leaked.store(true, Ordering::Relaxed);
    }

    /// Registers the calling (non-EAL) thread as a DPDK lcore so that mempool caches work for
    /// it; the registration ends when the guard drops. Worker threads call this first.
    ///
    /// # Errors
    /// `rte_thread_register` fails when all `RTE_MAX_LCORE` ids are taken.
    pub fn register_thread(&self) -> Result<LcoreGuard, DpdkError> {
        // SAFETY: rte_thread_register only touches EAL state, which is initialised (self
        // proves it) and thread-safe.
        let ret = unsafe { dpdk_sys::rte_thread_register() };
        if ret < 0 {
            return Err(DpdkError::from_ret("rte_thread_register", None, ret));
        }
        Ok(LcoreGuard {
            _eal: self.clone(),
            _not_send: std::marker::PhantomData,
        })
    }

    /// The lcore id of the calling thread (`u32::MAX` for a thread that is not registered).
    pub fn lcore_id(&self) -> u32 {
        // SAFETY: reads the calling thread's per-lcore id variable.
        unsafe { dpdk_sys::cw_rte_lcore_id() }
    }

    /// The main lcore (the thread that called `rte_eal_init`: cakewalk's supervisor).
    pub fn main_lcore(&self) -> Lcore {
        // SAFETY: reads EAL configuration, valid after init (self proves it).
        let id = unsafe { dpdk_sys::rte_get_main_lcore() };
        lcore_with_cpus(id)
    }

    /// The worker lcores of `-l`/`--lcores` (every lcore but the main one), in lcore order:
    /// where cakewalk's workers run, as testpmd's forwarding lcores do.
    pub fn worker_lcores(&self) -> Vec<Lcore> {
        let mut out = Vec::new();
        // rte_get_next_lcore(-1 as unsigned, ...) starts the walk at lcore 0.
        let mut i = u32::MAX;
        loop {
            // SAFETY: walks the EAL's lcore table, valid after init; returns RTE_MAX_LCORE
            // once no enabled lcore follows `i`.
            i = unsafe { dpdk_sys::rte_get_next_lcore(i, 1, 0) };
            if i >= dpdk_sys::RTE_MAX_LCORE {
                break;
            }
            out.push(lcore_with_cpus(i));
        }
        out
    }

    /// Names of all ethdev ports DPDK knows about, in port-id order.
    pub fn port_names(&self) -> Vec<(u16, String)> {
        let mut out = Vec::new();
        let mut port: u16 = 0;
        loop {
            // SAFETY: rte_eth_find_next walks the ethdev table, valid after EAL init; it
            // returns RTE_MAX_ETHPORTS when no port at or after `port` is in use.
            let next = unsafe { dpdk_sys::rte_eth_find_next(port) };
            if u32::from(next) >= dpdk_sys::RTE_MAX_ETHPORTS {
                break;
            }
            if let Ok(name) = super::ethdev::port_name(next) {
                out.push((next, name));
            }
            port = next + 1;
        }
        out
    }
}

impl Drop for EalInner {
    fn drop(&mut self) {
        if !self.leaked.load(Ordering::Relaxed) {
            // SAFETY: the last handle is going: every pool and device (which hold handles) has
            // been released, and no pool was leaked with mbufs still out.
            unsafe { dpdk_sys::rte_eal_cleanup() };
        }
    }
}

/// Lcore `id` with its CPU set.
fn lcore_with_cpus(id: u32) -> Lcore {
    let mut cpus = [0u32; 64];
    // SAFETY: the shim writes at most `cpus.len()` entries into the array it is given and
    // reads EAL configuration, valid after init.
    let n = unsafe { dpdk_sys::cw_rte_lcore_cpus(id, cpus.as_mut_ptr(), cpus.len() as u32) };
    Lcore {
        id,
        cpus: cpus[..(n as usize).min(cpus.len())]
            .iter()
            .map(|c| *c as usize)
            .collect(),
    }
}

/// Keeps the calling thread registered as a DPDK lcore; see [`Eal::register_thread`].
pub struct LcoreGuard {
    _eal: Eal,
    /// Unregistering must happen on the thread that registered.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for LcoreGuard {
    fn drop(&mut self) {
        // SAFETY: this thread registered itself in Eal::register_thread (the guard is !Send).
        unsafe { dpdk_sys::rte_thread_unregister() };
    }
}

/// What to suggest when `rte_eal_init` fails with `errno`.
fn eal_hint(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "run as root, or pass --no-huge --in-memory for a test run",
        libc::ENOMEM => "reserve more hugepages (`hugepage-setup reserve --pages N`) or pass --no-huge",
        libc::EALREADY => "the EAL was started before in this process",
        libc::EBUSY => "another DPDK process holds the lock; give this one its own --file-prefix or pass --in-memory",
        libc::EINVAL => "check the EAL arguments (`-l`, `--vdev`, `-a`); see `dpdk-testpmd --help` for the list",
        libc::ENODEV | libc::ENOTSUP => {
            "a device could not be probed: check the --vdev driver names (net_null, net_ring, net_pcap, net_af_packet) and their arguments"
        }
        _ => "see the EAL log above",
    }
}

/// Refuses to start when DPDK would fail for lack of hugepages, unless the arguments ask
/// for memory that needs none. `root` is the file-system root (tests use a fake tree).
pub(crate) fn check_memory(args: &[String], root: &Path) -> Result<(), PortError> {
    let no_huge = args.iter().any(|a| a == "--no-huge");
    let in_memory = args.iter().any(|a| a == "--in-memory");
    if no_huge {
        return Ok(());
    }
    let free = free_hugepages(root);
    if free == 0 {
        return Err(PortError::NoHugepages);
    }
    if !in_memory && !hugetlbfs_mounted(root) {
        return Err(PortError::NoHugetlbfs);
    }
    Ok(())
}

/// Free hugepages of all sizes, summed over `/sys/kernel/mm/hugepages`.
fn free_hugepages(root: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(root.join("sys/kernel/mm/hugepages")) else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("free_hugepages")).ok())
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .sum()
}

/// True when a hugetlbfs is listed in `/proc/mounts`.
fn hugetlbfs_mounted(root: &Path) -> bool {
    std::fs::read_to_string(root.join("proc/mounts"))
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(free: &str, mounts: &str) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let hp = t.path().join("sys/kernel/mm/hugepages/hugepages-2048kB");
        std::fs::create_dir_all(&hp).unwrap();
        std::fs::write(hp.join("free_hugepages"), free).unwrap();
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        std::fs::write(t.path().join("proc/mounts"), mounts).unwrap();
        t
    }

    #[test]
    fn missing_hugepages_are_reported_before_eal_init() {
        let t = tree("0\n", "");
        let err = check_memory(&["-l".into(), "0".into()], t.path()).unwrap_err();
        assert!(err.to_string().contains("hugepage-setup reserve"), "{err}");
    }

    #[test]
    fn no_huge_needs_no_hugepages() {
        let t = tree("0\n", "");
        check_memory(&["--no-huge".into()], t.path()).unwrap();
    }

    #[test]
    fn reserved_but_unmounted_hugepages_are_reported() {
        let t = tree("512\n", "proc /proc proc rw 0 0\n");
        assert!(matches!(
            check_memory(&[], t.path()),
            Err(PortError::NoHugetlbfs)
        ));
        check_memory(&["--in-memory".into()], t.path()).unwrap();
        let t = tree(
            "512\n",
            "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
        );
        check_memory(&[], t.path()).unwrap();
    }
}
