//! Where the workers of DPDK ports run: on EAL's worker lcores from `-l`/`--lcores`, one
//! worker per lcore in lcore order, while the main lcore (the thread that started the EAL)
//! supervises, as testpmd's forwarding lcores do. `engine.cores` is for software ports only.
//!
//! [`place`] is the plan, pure and testable: which CPU each worker is pinned to and what is
//! wrong with the layout (a worker sharing a CPU with the supervisor or another worker, on a
//! CPU set of several CPUs, or on a CPU that was busy before start), each warning naming the
//! fix. [`busy_cpus`] measures the last from `/proc/stat`. The EAL query lives in
//! `port::dpdk::eal` (behind the `dpdk` feature).

use std::time::Duration;

/// One EAL lcore and the CPUs its thread may run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lcore {
    /// The lcore id.
    pub id: u32,
    /// Its CPU set, lowest first (one CPU for `-l`; `--lcores` may give several).
    pub cpus: Vec<usize>,
}

/// The plan: per worker, its lcore and the CPU it is pinned to.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Per worker: (lcore id, CPU).
    pub workers: Vec<(u32, usize)>,
    /// What is wrong with the layout, each with its fix.
    pub warnings: Vec<String>,
    /// One line for the log: which lcore does what.
    pub summary: String,
}

/// Plans `workers` workers over EAL's `worker_lcores` with `main` supervising; `busy` are
/// CPUs measured busy before start, with their busy share (0 to 1).
///
/// # Errors
/// More workers than worker lcores (with the fix).
pub fn place(
    workers: usize,
    main: &Lcore,
    worker_lcores: &[Lcore],
    busy: &[(usize, f64)],
) -> Result<Placement, String> {
    let main_cpu = main.cpus.first().copied().unwrap_or(0);
    let mut warnings = Vec::new();
    let chosen: Vec<&Lcore> = if worker_lcores.is_empty() {
        if workers > 1 {
            return Err(format!(
                "engine.workers = {workers} but EAL's -l/--lcores gives no worker lcore (only the main lcore {}, which supervises): list one lcore per worker after the main one (--eal '-l 0-{workers}'), as testpmd does",
                main.id
            ));
        }
        warnings.push(format!(
            "EAL's -l/--lcores gives no worker lcore (only the main lcore {}, on CPU {main_cpu}): the worker shares the supervisor's core, which costs it about half its packet rate; list a second lcore (--eal '-l {main_cpu},N' with N a free CPU; the first is the main lcore)",
            main.id
        ));
        vec![main]
    } else if workers > worker_lcores.len() {
        return Err(format!(
            "engine.workers = {workers} but EAL's -l/--lcores gives {} worker lcore(s) (the main lcore {} supervises): list one lcore per worker after the main one (--eal '-l 0-{workers}'), or set engine.workers = {}",
            worker_lcores.len(),
            main.id,
            worker_lcores.len()
        ));
    } else {
        worker_lcores[..workers].iter().collect()
    };
    let mut placed: Vec<(u32, usize)> = Vec::new();
    for (w, l) in chosen.iter().enumerate() {
        let cpu = l.cpus.first().copied().unwrap_or(main_cpu);
        if l.cpus.len() > 1 {
            warnings.push(format!(
                "worker {w} (lcore {}) may run on CPUs {:?}; it is pinned to CPU {cpu}: give the lcore one CPU of its own (--lcores '{}@{cpu}')",
                l.id, l.cpus, l.id
            ));
        }
        if l.id != main.id && main.cpus.contains(&cpu) {
            warnings.push(format!(
                "worker {w} (lcore {}) shares CPU {cpu} with the main lcore {} that supervises: give the worker's lcore a CPU of its own in -l/--lcores",
                l.id, main.id
            ));
        }
        if let Some((other, _)) = placed.iter().enumerate().find(|(_, (_, c))| *c == cpu) {
            warnings.push(format!(
                "workers {other} and {w} share CPU {cpu} and take turns on it: map each worker lcore to its own CPU in -l/--lcores"
            ));
        }
        if let Some((_, share)) = busy.iter().find(|(c, _)| *c == cpu) {
            warnings.push(format!(
                "CPU {cpu} of worker {w} (lcore {}) was {:.0} % busy before start (another process runs there): list an idle CPU in -l/--lcores, or keep other work off it (isolcpus=, a cpuset)",
                l.id,
                share * 100.0
            ));
        }
        placed.push((l.id, cpu));
    }
    let unused: Vec<u32> = worker_lcores.iter().skip(workers).map(|l| l.id).collect();
    let mut summary = format!(
        "DPDK lcores: main lcore {} (CPU {main_cpu}) supervises; {}",
        main.id,
        placed
            .iter()
            .enumerate()
            .map(|(w, (l, c))| format!("worker {w} on lcore {l} (CPU {c})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !unused.is_empty() {
        summary.push_str(&format!(
            "; lcores {unused:?} idle (engine.workers = {} uses them)",
            workers + unused.len()
        ));
    }
    Ok(Placement {
        workers: placed,
        warnings,
        summary,
    })
}

/// Per-CPU (busy, total) jiffies from `/proc/stat` text.
pub fn cpu_times(stat: &str) -> Vec<(usize, u64, u64)> {
    stat.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
            let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal ...: idle and iowait are idle.
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            Some((cpu, total.saturating_sub(idle), total))
        })
        .collect()
}

/// The CPUs busier than `threshold` (0 to 1) between two `/proc/stat` readings, with their
/// busy share.
pub fn busy_between(before: &str, after: &str, threshold: f64) -> Vec<(usize, f64)> {
    let b = cpu_times(before);
    cpu_times(after)
        .into_iter()
        .filter_map(|(cpu, busy, total)| {
            let (_, b0, t0) = b.iter().find(|(c, _, _)| *c == cpu)?;
            let dt = total.checked_sub(*t0).filter(|d| *d > 0)?;
            let share = busy.saturating_sub(*b0) as f64 / dt as f64;
            (share > threshold).then_some((cpu, share))
        })
        .collect()
}

/// The CPUs more than half busy over `window` (empty when `/proc/stat` cannot be read).
pub fn busy_cpus(window: Duration) -> Vec<(usize, f64)> {
    let Ok(before) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    std::thread::sleep(window);
    let Ok(after) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    busy_between(&before, &after, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(id: u32, cpus: &[usize]) -> Lcore {
        Lcore {
            id,
            cpus: cpus.to_vec(),
        }
    }

    #[test]
    fn workers_go_to_the_worker_lcores_and_the_main_lcore_supervises() {
        let p = place(2, &l(0, &[0]), &[l(1, &[1]), l(2, &[2]), l(3, &[3])], &[]).unwrap();
        assert_eq!(p.workers, vec![(1, 1), (2, 2)]);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert!(
            p.summary.contains("main lcore 0 (CPU 0) supervises")
                && p.summary.contains("lcores [3] idle"),
            "{}",
            p.summary
        );
    }

    #[test]
    fn only_a_main_lcore_is_a_warning_with_the_fix_and_more_workers_than_lcores_an_error() {
        let p = place(1, &l(1, &[1]), &[], &[]).unwrap();
        assert_eq!(p.workers, vec![(1, 1)]);
        assert!(
            p.warnings[0].contains("shares the supervisor's core")
                && p.warnings[0].contains("-l 1,N"),
            "{:?}",
            p.warnings
        );
        let e = place(2, &l(0, &[0]), &[l(1, &[1])], &[]).unwrap_err();
        assert!(
            e.contains("set engine.workers = 1") && e.contains("-l 0-2"),
            "{e}"
        );
        assert!(place(2, &l(0, &[0]), &[], &[]).is_err());
    }

    #[test]
    fn shared_floating_and_busy_cpus_are_warned_about_with_the_fix() {
        // --lcores '0@0,1@0,2@(1,2),3@1': lcore 1 on the main CPU, lcore 2 floating, lcore 3
        // on the CPU lcore 2 is pinned to; CPU 1 busy.
        let p = place(
            3,
            &l(0, &[0]),
            &[l(1, &[0]), l(2, &[1, 2]), l(3, &[1])],
            &[(1, 0.93)],
        )
        .unwrap();
        let all = p.warnings.join("\n");
        assert!(
            all.contains("worker 0 (lcore 1) shares CPU 0 with the main lcore 0"),
            "{all}"
        );
        assert!(
            all.contains("worker 1 (lcore 2) may run on CPUs [1, 2]"),
            "{all}"
        );
        assert!(all.contains("--lcores '2@1'"), "{all}");
        assert!(all.contains("workers 1 and 2 share CPU 1"), "{all}");
        assert!(
            all.contains("CPU 1 of worker 1 (lcore 2) was 93 % busy"),
            "{all}"
        );
    }

    #[test]
    fn busy_cpus_come_from_two_proc_stat_readings() {
        let before = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 0 0 0 100 0 0 0 0 0 0\ncpu1 0 0 0 100 0 0 0 0 0 0\nintr 5\n";
        let after = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 90 0 0 110 0 0 0 0 0 0\ncpu1 5 0 0 195 0 0 0 0 0 0\n";
        let busy = busy_between(before, after, 0.5);
        assert_eq!(busy.len(), 1);
        assert_eq!(busy[0].0, 0);
        assert!((busy[0].1 - 0.9).abs() < 1e-9);
    }
}
