//! Longest-prefix-match cost per packet (ns) of the circuit table, IPv4 and IPv6, at 10 000
//! and 100 000 prefixes.
//!
//! Tables look like an ISP's: IPv4 mostly /32 subscribers with some /29 and /30 inside
//! 100.64.0.0/10; IPv6 /56 delegations with some /64 inside one /32. No two prefixes
//! overlap (validation refuses that across circuits). Addresses come in two mixes, measured
//! side by side:
//! * `skewed`: the traffic of a busy hour, 90 % from 1 000 active subscribers and 10 % from
//!   anywhere in the table;
//! * `uniform`: every packet from a prefix drawn uniformly from the whole table (the worst
//!   case for the caches).
//!
//! Each iteration looks up a batch of 4096 precomputed addresses (reported per address). The
//! `bsearch` rows are the obvious alternative for a table without overlaps, a binary search
//! over sorted ranges, run on the same addresses.
//!
//! Run: `cargo bench -p circuits --bench lpm -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;

use circuits::prefix::mask;
use circuits::{Family, Lpm, Prefix};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

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

/// `n` distinct, non-overlapping prefixes of `family`.
fn table(family: Family, n: usize, rng: &mut Rng) -> Vec<(Prefix, u32)> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (base, len) = match family {
            // 100.64.0.0/10; 1 in 8 a /29 or /30.
            Family::V4 => {
                let len = match rng.below(16) {
                    0 => 29,
                    1 => 30,
                    _ => 32,
                };
                (u128::from(0x6440_0000u32) << 96, len)
            }
            // 2001:db8::/32; 1 in 8 a /64.
            Family::V6 => {
                let len = if rng.below(8) == 0 { 64 } else { 56 };
                (0x2001_0db8u128 << 96, len)
            }
        };
        // The host part below the family's fixed top bits: random, then cut to the length.
        let top = match family {
            Family::V4 => 10,
            Family::V6 => 32,
        };
        let random = (u128::from(rng.next()) << 64) | u128::from(rng.next());
        let bits = (base & mask(top)) | (random & !mask(top));
        let p = Prefix {
            family,
            bits: bits & mask(len),
            len,
        };
        // Keep only prefixes that do not overlap an earlier one (checked at /29 and /56
        // granularity, the shortest lengths used).
        let coarse = p.bits & mask(if family == Family::V4 { 29 } else { 56 });
        if seen.insert(coarse) {
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

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("lpm");
    g.throughput(Throughput::Elements(BATCH as u64));
    for family in [Family::V4, Family::V6] {
        for n in [10_000, 100_000] {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
            let t = table(family, n, &mut rng);
            let lpm = Lpm::build(t.iter().copied()).unwrap();
            let ranges = Ranges::new(&t);
            let fam = if family == Family::V4 { "v4" } else { "v6" };
            eprintln!(
                "lpm {fam} {n}: {:.1} MiB",
                lpm.memory_bytes() as f64 / (1 << 20) as f64
            );
            for skewed in [true, false] {
                let addrs = addresses(&t, skewed, &mut rng);
                // Every address is in the table: the answers must all be found.
                for &a in &addrs {
                    let found = match family {
                        Family::V4 => lpm.lookup_v4((a >> 96) as u32),
                        Family::V6 => lpm.lookup_v6(a),
                    };
                    assert!(found.is_some() && found == ranges.lookup(a));
                }
                let mix = if skewed { "skewed" } else { "uniform" };
                g.bench_with_input(
                    BenchmarkId::new(format!("poptrie_{fam}_{mix}"), n),
                    &addrs,
                    |b, addrs| {
                        b.iter(|| {
                            let mut sum = 0u32;
                            for &a in addrs {
                                let found = match family {
                                    Family::V4 => lpm.lookup_v4((a >> 96) as u32),
                                    Family::V6 => lpm.lookup_v6(a),
                                };
                                sum = sum.wrapping_add(found.unwrap_or(0));
                            }
                            black_box(sum)
                        })
                    },
                );
                g.bench_with_input(
                    BenchmarkId::new(format!("bsearch_{fam}_{mix}"), n),
                    &addrs,
                    |b, addrs| {
                        b.iter(|| {
                            let mut sum = 0u32;
                            for &a in addrs {
                                sum = sum.wrapping_add(ranges.lookup(a).unwrap_or(0));
                            }
                            black_box(sum)
                        })
                    },
                );
            }
        }
    }
    g.finish();
}

criterion_group!(lpm_benches, benches);
criterion_main!(lpm_benches);
