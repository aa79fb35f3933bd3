//! Longest-prefix-match cost per packet (ns) of the circuit table, IPv4 and IPv6, at 10 000
//! and 100 000 prefixes.
//!
//! Tables look like an ISP's: IPv4 mostly /32 subscribers with some /29 and /30 inside
//! 100.64.0.0/10. IPv6 delegations from four /32 allocations (two of them sharing their top
//! 16 bits, as the /32s of one /29 do), each carved into pools as operators do: 70 % /56s
//! drawn at random from two /40 pools, 15 % /48s from a /34, 12 % /64s from a /48 and 3 %
//! /128 hosts numbered in the last 24 bits of one /64. No two prefixes overlap (validation
//! refuses that across circuits). Addresses come in two mixes, measured side by side:
//! * `skewed`: the traffic of a busy hour, 90 % from 1 000 active subscribers and 10 % from
//!   anywhere in the table;
//! * `uniform`: every packet from a prefix drawn uniformly from the whole table (the worst
//!   case for the caches).
//!
//! Each iteration looks up 4096 precomputed addresses (reported per address). Rows, all on
//! the same addresses:
//! * `poptrie`: [`Lpm::lookup_v4`] / [`Lpm::lookup_v6`], one address after the other;
//! * `poptrie_batch`: [`Lpm::lookup_v4_batch`] / [`Lpm::lookup_v6_batch`], bursts of 32 as
//!   the forwarder classifies them;
//! * `bsearch`: the obvious alternative for a table without overlaps, a binary search over
//!   sorted ranges;
//! * `treebitmap`: the `ip_network_table` crate (a tree bitmap, the poptrie's ancestor);
//! * `prefix_trie`: the `prefix-trie` crate (a binary trie, the most used maintained one).
//!
//! Time is the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not the wall clock:
//! on a machine shared with other work, time the thread spends descheduled is not counted
//! (what the others do to the caches still is). Criterion prints it per 4096 lookups.
//!
//! Before the rows, each table prints its memory and the mean number of dependent loads per
//! lookup (`Lpm::dependent_loads`) for each mix.
//!
//! Run: `cargo bench -p circuits --bench lpm -- --warm-up-time 1 --measurement-time 2`
//!
//! With `LPM_PROBE=FAMILY,PREFIXES,MIX,ROUNDS` (say `v6,100000,skewed,10`) the binary instead
//! builds that one table and looks its 4096 addresses up ROUNDS times in bursts of 32, for
//! callgrind: two runs with different ROUNDS give the instructions per lookup, which the load
//! of a shared machine does not change.

use std::hint::black_box;

use std::net::{Ipv4Addr, Ipv6Addr};

use circuits::prefix::mask;
use circuits::{Family, Lpm, Prefix};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use ip_network_table::IpNetworkTable;
use ipnet::{Ipv4Net, Ipv6Net};
use prefix_trie::PrefixMap;

const BATCH: usize = 4096;
const ACTIVE: usize = 1000;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The IPv6 allocations (/32s) the table's delegations come from.
const V6_BLOCKS: [u128; 4] = [
    0x2001_0db8 << 96,
    0x3fff_0000 << 96,
    0x3fff_0001 << 96,
    0x3fff_0a00 << 96,
];

/// `n` distinct, non-overlapping IPv6 delegations from the pools of [`V6_BLOCKS`].
fn table_v6(n: usize, rng: &mut Rng) -> Vec<(Prefix, u32)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let block = V6_BLOCKS[rng.below(V6_BLOCKS.len())];
        // (pool, pool length, delegation length); pools sit at different offsets in the /32.
        let (pool, pool_len, len) = match rng.below(100) {
            0..=69 => ((0x80 + rng.below(2) as u128) << 88, 40, 56),
            70..=84 => (1 << 94, 34, 48),
            85..=96 => (0xc000 << 80, 48, 64),
            _ => ((0xc001 << 80) | 0xff00_0000, 104, 128),
        };
        let random = (u128::from(rng.next()) << 64) | u128::from(rng.next());
        let bits = (block | pool | (random & !mask(pool_len))) & mask(len);
        if seen.insert(bits) {
            let p = Prefix {
                family: Family::V6,
                bits,
                len,
            };
            out.push((p, out.len() as u32));
        }
    }
    out
}

/// `n` distinct, non-overlapping prefixes of `family`.
fn table(family: Family, n: usize, rng: &mut Rng) -> Vec<(Prefix, u32)> {
    if family == Family::V6 {
        return table_v6(n, rng);
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // 100.64.0.0/10; 1 in 8 a /29 or /30.
        let len = match rng.below(16) {
            0 => 29,
            1 => 30,
            _ => 32,
        };
        let base = u128::from(0x6440_0000u32) << 96;
        // The host part below the fixed top bits: random, then cut to the length.
        let random = (u128::from(rng.next()) << 64) | u128::from(rng.next());
        let bits = (base & mask(10)) | (random & !mask(10));
        let p = Prefix {
            family,
            bits: bits & mask(len),
            len,
        };
        // Keep only prefixes that do not overlap an earlier one (checked at /29, the shortest
        // length used).
        if seen.insert(p.bits & mask(29)) {
            out.push((p, out.len() as u32));
        }
    }
    out
}

/// A random address inside prefix `p`.
fn inside(p: &Prefix, rng: &mut Rng) -> u128 {
    let random = (u128::from(rng.next()) << 64) | u128::from(rng.next());
    let host = random & !mask(p.len);
    match p.family {
        Family::V4 => (p.bits | host) & mask(32),
        Family::V6 => p.bits | host,
    }
}

fn addresses(table: &[(Prefix, u32)], skewed: bool, rng: &mut Rng) -> Vec<u128> {
    let active: Vec<usize> = (0..ACTIVE).map(|_| rng.below(table.len())).collect();
    (0..BATCH)
        .map(|_| {
            let i = if skewed && rng.below(10) != 0 {
                active[rng.below(ACTIVE)]
            } else {
                rng.below(table.len())
            };
            inside(&table[i].0, rng)
        })
        .collect()
}

/// Sorted, non-overlapping ranges searched by bisection: the alternative measured beside.
struct Ranges {
    starts: Vec<u128>,
    ends: Vec<u128>,
    values: Vec<u32>,
}

impl Ranges {
    fn new(table: &[(Prefix, u32)]) -> Ranges {
        let mut r: Vec<(u128, u128, u32)> = table
            .iter()
            .map(|(p, v)| {
                let end = p.bits | !mask(p.len);
                (p.bits, end, *v)
            })
            .collect();
        r.sort_unstable();
        Ranges {
            starts: r.iter().map(|x| x.0).collect(),
            ends: r.iter().map(|x| x.1).collect(),
            values: r.iter().map(|x| x.2).collect(),
        }
    }

    fn lookup(&self, key: u128) -> Option<u32> {
        let i = self.starts.partition_point(|&s| s <= key).checked_sub(1)?;
        (key <= self.ends[i]).then(|| self.values[i])
    }
}

/// The answers for `addrs` added up (so none is optimised away), one lookup after the other.
/// Generic, so `f` is inlined: a call through a pointer would cost each row a few ns.
#[inline(always)]
fn sum(addrs: &[u128], f: impl Fn(u128) -> Option<u32>) -> u32 {
    addrs
        .iter()
        .fold(0u32, |s, &a| s.wrapping_add(f(a).unwrap_or(0)))
}

/// The same table in the crates measured beside the poptrie.
struct Others {
    treebitmap: IpNetworkTable<u32>,
    trie_v4: PrefixMap<Ipv4Net, u32>,
    trie_v6: PrefixMap<Ipv6Net, u32>,
}

impl Others {
    fn new(table: &[(Prefix, u32)]) -> Others {
        let mut o = Others {
            treebitmap: IpNetworkTable::new(),
            trie_v4: PrefixMap::new(),
            trie_v6: PrefixMap::new(),
        };
        for (p, v) in table {
            match p.family {
                Family::V4 => {
                    let a = Ipv4Addr::from((p.bits >> 96) as u32);
                    let n = ip_network::Ipv4Network::new(a, p.len).unwrap();
                    o.treebitmap.insert(n, *v);
                    o.trie_v4.insert(Ipv4Net::new(a, p.len).unwrap(), *v);
                }
                Family::V6 => {
                    let a = Ipv6Addr::from(p.bits);
                    let n = ip_network::Ipv6Network::new(a, p.len).unwrap();
                    o.treebitmap.insert(n, *v);
                    o.trie_v6.insert(Ipv6Net::new(a, p.len).unwrap(), *v);
                }
            }
        }
        o
    }

    fn treebitmap(&self, family: Family, key: u128) -> Option<u32> {
        match family {
            Family::V4 => self
                .treebitmap
                .longest_match_ipv4(Ipv4Addr::from((key >> 96) as u32))
                .map(|(_, v)| *v),
            Family::V6 => self
                .treebitmap
                .longest_match_ipv6(Ipv6Addr::from(key))
                .map(|(_, v)| *v),
        }
    }

    fn prefix_trie(&self, family: Family, key: u128) -> Option<u32> {
        match family {
            Family::V4 => {
                let host = Ipv4Net::new(Ipv4Addr::from((key >> 96) as u32), 32).unwrap();
                self.trie_v4.get_lpm(&host).map(|(_, v)| *v)
            }
            Family::V6 => {
                let host = Ipv6Net::new(Ipv6Addr::from(key), 128).unwrap();
                self.trie_v6.get_lpm(&host).map(|(_, v)| *v)
            }
        }
    }
}

/// The benchmark thread's CPU time, in nanoseconds.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = cpu_time::ThreadTime;
    type Value = std::time::Duration;

    fn start(&self) -> Self::Intermediate {
        cpu_time::ThreadTime::now()
    }

    fn end(&self, i: Self::Intermediate) -> Self::Value {
        i.elapsed()
    }

    fn add(&self, a: &Self::Value, b: &Self::Value) -> Self::Value {
        *a + *b
    }

    fn zero(&self) -> Self::Value {
        std::time::Duration::ZERO
    }

    fn to_f64(&self, v: &Self::Value) -> f64 {
        v.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

impl ValueFormatter for ThreadCpu {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = match typical {
            t if t < 1e3 => (1.0, "ns"),
            t if t < 1e6 => (1e3, "µs"),
            _ => (1e6, "ms"),
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }

    fn scale_throughputs(&self, _: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let n = match t {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n,
        };
        values.iter_mut().for_each(|v| *v = n as f64 * 1e3 / *v);
        "Melem/s"
    }

    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// The table of `family` with `n` prefixes and its addresses, skewed then uniform: the same
/// for the rows and the probe.
fn setup(family: Family, n: usize) -> (Vec<(Prefix, u32)>, [Vec<u128>; 2]) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
    let t = table(family, n, &mut rng);
    let skewed = addresses(&t, true, &mut rng);
    let uniform = addresses(&t, false, &mut rng);
    (t, [skewed, uniform])
}

/// The mean of [`Lpm::dependent_loads`] over `addrs`.
fn mean_loads(lpm: &Lpm, family: Family, addrs: &[u128]) -> f64 {
    let total: u32 = addrs
        .iter()
        .map(|&a| match family {
            Family::V4 => lpm.dependent_loads(Ipv4Addr::from((a >> 96) as u32).into()),
            Family::V6 => lpm.dependent_loads(Ipv6Addr::from(a).into()),
        })
        .sum();
    f64::from(total) / addrs.len() as f64
}

/// `LPM_PROBE=FAMILY,PREFIXES,MIX,ROUNDS`: ROUNDS passes of burst lookups over one table's
/// addresses, for callgrind.
fn probe(spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let [fam, n, mix, rounds] = parts[..] else {
        panic!("LPM_PROBE is FAMILY,PREFIXES,MIX,ROUNDS (say v6,100000,skewed,10), not {spec}");
    };
    let family = if fam == "v4" { Family::V4 } else { Family::V6 };
    let n: usize = n.parse().expect("PREFIXES is a number");
    let rounds: usize = rounds.parse().expect("ROUNDS is a number");
    let (t, [skewed, uniform]) = setup(family, n);
    let addrs = if mix == "skewed" { skewed } else { uniform };
    let lpm = Lpm::build(t.iter().copied()).unwrap();
    let v4: Vec<u32> = addrs.iter().map(|&a| (a >> 96) as u32).collect();
    let mut out = [None; 32];
    let mut s = 0u32;
    for _ in 0..rounds {
        for (a4, a6) in v4.chunks(32).zip(addrs.chunks(32)) {
            match family {
                Family::V4 => lpm.lookup_v4_batch(black_box(a4), &mut out),
                Family::V6 => lpm.lookup_v6_batch(black_box(a6), &mut out),
            }
            s = out.iter().fold(s, |s, v| s.wrapping_add(v.unwrap_or(0)));
        }
    }
    println!("{fam} {n} {mix} x{rounds}: {s}");
}

fn benches(c: &mut Criterion<ThreadCpu>) {
    let mut g = c.benchmark_group("lpm");
    g.throughput(Throughput::Elements(BATCH as u64));
    for family in [Family::V4, Family::V6] {
        for n in [10_000, 100_000] {
            let (t, mixes) = setup(family, n);
            let lpm = Lpm::build(t.iter().copied()).unwrap();
            let ranges = Ranges::new(&t);
            let others = Others::new(&t);
            let fam = if family == Family::V4 { "v4" } else { "v6" };
            eprintln!(
                "lpm {fam} {n}: {:.2} MiB, {:.1} bytes per prefix, dependent loads per lookup \
                 {:.2} skewed, {:.2} uniform",
                lpm.memory_bytes() as f64 / (1 << 20) as f64,
                lpm.memory_bytes() as f64 / n as f64,
                mean_loads(&lpm, family, &mixes[0]),
                mean_loads(&lpm, family, &mixes[1]),
            );
            for (skewed, addrs) in [true, false].into_iter().zip(mixes) {
                let v4: Vec<u32> = addrs.iter().map(|&a| (a >> 96) as u32).collect();
                let single = |a: u128| match family {
                    Family::V4 => lpm.lookup_v4((a >> 96) as u32),
                    Family::V6 => lpm.lookup_v6(a),
                };
                let mut batch = vec![None; addrs.len()];
                match family {
                    Family::V4 => lpm.lookup_v4_batch(&v4, &mut batch),
                    Family::V6 => lpm.lookup_v6_batch(&addrs, &mut batch),
                }
                // Every address is in the table: all must find it, and agree.
                for (&a, &b) in addrs.iter().zip(&batch) {
                    let found = single(a);
                    assert!(found.is_some() && found == ranges.lookup(a) && found == b);
                    assert_eq!(found, others.treebitmap(family, a));
                    assert_eq!(found, others.prefix_trie(family, a));
                }
                let mix = if skewed { "skewed" } else { "uniform" };
                let mut row = |name: &str, f: &dyn Fn(&[u128]) -> u32| {
                    g.bench_with_input(
                        BenchmarkId::new(format!("{name}_{fam}_{mix}"), n),
                        &addrs,
                        |b, addrs| b.iter(|| black_box(f(addrs))),
                    );
                };
                row("poptrie", &|addrs| sum(addrs, single));
                row("poptrie_batch", &|addrs| {
                    let mut out = [None; 32];
                    let mut s = 0u32;
                    match family {
                        Family::V4 => {
                            for chunk in v4.chunks(32) {
                                lpm.lookup_v4_batch(chunk, &mut out);
                                s = out.iter().fold(s, |s, v| s.wrapping_add(v.unwrap_or(0)));
                            }
                        }
                        Family::V6 => {
                            for chunk in addrs.chunks(32) {
                                lpm.lookup_v6_batch(chunk, &mut out);
                                s = out.iter().fold(s, |s, v| s.wrapping_add(v.unwrap_or(0)));
                            }
                        }
                    }
                    s
                });
                row("bsearch", &|addrs| sum(addrs, |a| ranges.lookup(a)));
                row("treebitmap", &|addrs| {
                    sum(addrs, |a| others.treebitmap(family, a))
                });
                row("prefix_trie", &|addrs| {
                    sum(addrs, |a| others.prefix_trie(family, a))
                });
            }
        }
    }
    g.finish();
}

criterion_group! {
    name = lpm_benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = benches
}

fn main() {
    match std::env::var("LPM_PROBE") {
        Ok(spec) => probe(&spec),
        Err(_) => {
            lpm_benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
