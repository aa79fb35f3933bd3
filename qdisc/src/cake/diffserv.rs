//! Diffserv: the DSCP → tin tables of the five modes, each tin's share of the rate and its
//! DRR quantum, and the display order, as sch_cake.c's `cake_config_diffserv*` functions set
//! them up. Pure tables; no state.

use super::config::DiffservMode;

/// The most tins any mode uses.
pub const MAX_TINS: usize = 8;

const fn table(default: u8, entries: &[(u8, u8)]) -> [u8; 64] {
    let mut t = [default; 64];
    let mut i = 0;
    while i < entries.len() {
        t[entries[i].0 as usize] = entries[i].1;
        i += 1;
    }
    t
}

// DSCP code points by name, for readable tables.
const LE: u8 = 1;
const TOS2: u8 = 2;
const TOS4: u8 = 4;
const CS1: u8 = 8;
const AF11: u8 = 10;
const AF12: u8 = 12;
const AF13: u8 = 14;
const CS2: u8 = 16;
const AF21: u8 = 18;
const AF22: u8 = 20;
const AF23: u8 = 22;
const CS3: u8 = 24;
const AF31: u8 = 26;
const AF32: u8 = 28;
const AF33: u8 = 30;
const CS4: u8 = 32;
const AF41: u8 = 34;
const AF42: u8 = 36;
const AF43: u8 = 38;
const CS5: u8 = 40;
const VA: u8 = 44;
const EF: u8 = 46;
const CS6: u8 = 48;
const CS7: u8 = 56;

/// diffserv3: 0 Best Effort, 1 Bulk, 2 Voice.
static DIFFSERV3: [u8; 64] = table(
    0,
    &[
        (LE, 1),
        (CS1, 1),
        (TOS4, 2),
        (VA, 2),
        (EF, 2),
        (CS6, 2),
        (CS7, 2),
    ],
);

/// diffserv4: 0 Best Effort, 1 Bulk, 2 Video, 3 Voice. AF1x stays best effort.
static DIFFSERV4: [u8; 64] = table(
    0,
    &[
        (LE, 1),
        (CS1, 1),
        (TOS4, 2),
        (CS2, 2),
        (AF21, 2),
        (AF22, 2),
        (AF23, 2),
        (CS3, 2),
        (AF31, 2),
        (AF32, 2),
        (AF33, 2),
        (AF41, 2),
        (AF42, 2),
        (AF43, 2),
        (CS4, 3),
        (CS5, 3),
        (VA, 3),
        (EF, 3),
        (CS6, 3),
        (CS7, 3),
    ],
);

/// diffserv8: best effort is tin 2, background tin 0, network control tin 7.
static DIFFSERV8: [u8; 64] = table(
    2,
    &[
        (LE, 0),
        (TOS2, 1),
        (CS1, 1),
        (AF11, 1),
        (AF12, 1),
        (AF13, 1),
        (CS3, 3),
        (AF31, 3),
        (AF32, 3),
        (AF33, 3),
        (AF41, 3),
        (AF42, 3),
        (AF43, 3),
        (TOS4, 4),
        (AF21, 4),
        (AF22, 4),
        (AF23, 4),
        (CS2, 5),
        (CS4, 6),
        (CS5, 6),
        (VA, 6),
        (EF, 6),
        (CS6, 7),
        (CS7, 7),
    ],
);

static PRECEDENCE: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (i >> 3) as u8;
        i += 1;
    }
    t
};

static BESTEFFORT: [u8; 64] = [0; 64];

/// Returns the DSCP → tin table of `mode` (64 entries).
pub fn diffserv_table(mode: DiffservMode) -> &'static [u8; 64] {
    match mode {
        DiffservMode::Besteffort => &BESTEFFORT,
        DiffservMode::Diffserv3 => &DIFFSERV3,
        DiffservMode::Diffserv4 => &DIFFSERV4,
        DiffservMode::Diffserv8 => &DIFFSERV8,
        DiffservMode::Precedence => &PRECEDENCE,
    }
}

/// Returns the tin `mode` puts a packet with `dscp` in (only the low 6 bits are used).
pub fn diffserv_tin(mode: DiffservMode, dscp: u8) -> usize {
    diffserv_table(mode)[usize::from(dscp & 63)] as usize
}

/// Returns how many tins `mode` uses.
pub fn tin_count(mode: DiffservMode) -> usize {
    match mode {
        DiffservMode::Besteffort => 1,
        DiffservMode::Diffserv3 => 3,
        DiffservMode::Diffserv4 => 4,
        DiffservMode::Diffserv8 | DiffservMode::Precedence => 8,
    }
}

/// Returns the tin names of `mode`, indexed by tin.
pub fn tin_names(mode: DiffservMode) -> &'static [&'static str] {
    match mode {
        DiffservMode::Besteffort => &["Best Effort"],
        DiffservMode::Diffserv3 => &["Best Effort", "Bulk", "Voice"],
        DiffservMode::Diffserv4 => &["Best Effort", "Bulk", "Video", "Voice"],
        DiffservMode::Diffserv8 => &[
            "Background",
            "High Throughput",
            "Best Effort",
            "Video",
            "Low Latency",
            "Interactive",
            "Minimum Latency",
            "Network Control",
        ],
        DiffservMode::Precedence => &[
            "Precedence 0",
            "Precedence 1",
            "Precedence 2",
            "Precedence 3",
            "Precedence 4",
            "Precedence 5",
            "Precedence 6",
            "Precedence 7",
        ],
    }
}

/// Returns the display order of the tins (`tc -s` columns, and what a mark or priority
/// override of `n` means: tin `tin_order[n - 1]`). diffserv3/4 list Bulk first.
pub fn tin_order(mode: DiffservMode) -> &'static [usize] {
    match mode {
        DiffservMode::Besteffort => &[0],
        DiffservMode::Diffserv3 => &[1, 0, 2],
        DiffservMode::Diffserv4 => &[1, 0, 2, 3],
        DiffservMode::Diffserv8 | DiffservMode::Precedence => &[0, 1, 2, 3, 4, 5, 6, 7],
    }
}

/// One tin's share: its threshold rate (bytes/s, 0 = unlimited) and its DRR quantum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TinShare {
    /// Threshold rate in bytes per second (0 when the instance is unlimited).
    pub threshold_bytes_per_sec: u64,
    /// Tin quantum for the unlimited-mode DRR between tins.
    pub tin_quantum: u16,
}

/// Returns every tin's threshold and quantum for `mode` at `rate` bytes/s, as sch_cake.c's
/// `cake_config_diffserv*` functions set them. Entries past [`tin_count`] are zero.
pub fn tin_shares(mode: DiffservMode, rate: u64) -> [TinShare; MAX_TINS] {
    let mut out = [TinShare::default(); MAX_TINS];
    let mut set = |i: usize, r: u64, q: u16| {
        out[i] = TinShare {
            threshold_bytes_per_sec: r,
            tin_quantum: q,
        }
    };
    match mode {
        DiffservMode::Besteffort => set(0, rate, 65535),
        DiffservMode::Diffserv3 => {
            set(0, rate, 1024);
            set(1, rate >> 4, 64);
            set(2, rate >> 2, 256);
        }
        DiffservMode::Diffserv4 => {
            set(0, rate, 1024);
            set(1, rate >> 4, 64);
            set(2, rate >> 1, 512);
            set(3, rate >> 2, 256);
        }
        DiffservMode::Diffserv8 | DiffservMode::Precedence => {
            let (mut r, mut q) = (rate, 256u32);
            for i in 0..MAX_TINS {
                set(i, r, q.max(1) as u16);
                // Each step down gets 7/8 of the one above, as the kernel does.
                r = r.saturating_mul(7) >> 3;
                q = (q * 7) >> 3;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tins_of(mode: DiffservMode) -> Vec<Vec<u8>> {
        let mut v = vec![Vec::new(); tin_count(mode)];
        for d in 0..64u8 {
            v[diffserv_tin(mode, d)].push(d);
        }
        v
    }

    #[test]
    fn diffserv3_puts_le_and_cs1_in_bulk_and_voice_codepoints_in_voice() {
        let t = tins_of(DiffservMode::Diffserv3);
        assert_eq!(t[1], vec![1, 8]);
        assert_eq!(t[2], vec![4, 44, 46, 48, 56]);
        assert_eq!(t[0].len(), 64 - 7);
    }

    #[test]
    fn diffserv4_splits_video_from_voice_and_keeps_af1x_best_effort() {
        let t = tins_of(DiffservMode::Diffserv4);
        assert_eq!(t[1], vec![1, 8]);
        assert_eq!(t[2], vec![4, 16, 18, 20, 22, 24, 26, 28, 30, 34, 36, 38]);
        assert_eq!(t[3], vec![32, 40, 44, 46, 48, 56]);
        for af1x in [10, 12, 14] {
            assert_eq!(diffserv_tin(DiffservMode::Diffserv4, af1x), 0);
        }
    }

    #[test]
    fn diffserv8_uses_eight_tins_with_best_effort_in_tin_2() {
        let t = tins_of(DiffservMode::Diffserv8);
        assert_eq!(t[0], vec![1]);
        assert_eq!(t[1], vec![2, 8, 10, 12, 14]);
        assert_eq!(t[3], vec![24, 26, 28, 30, 34, 36, 38]);
        assert_eq!(t[4], vec![4, 18, 20, 22]);
        assert_eq!(t[5], vec![16]);
        assert_eq!(t[6], vec![32, 40, 44, 46]);
        assert_eq!(t[7], vec![48, 56]);
        assert_eq!(diffserv_tin(DiffservMode::Diffserv8, 0), 2);
    }

    #[test]
    fn precedence_is_the_top_three_bits_and_besteffort_is_one_tin() {
        for d in 0..64u8 {
            assert_eq!(
                diffserv_tin(DiffservMode::Precedence, d),
                usize::from(d >> 3)
            );
            assert_eq!(diffserv_tin(DiffservMode::Besteffort, d), 0);
        }
        // Bits above the DSCP are ignored rather than indexing out of bounds.
        assert_eq!(diffserv_tin(DiffservMode::Precedence, 0xff), 7);
    }

    #[test]
    fn every_table_stays_below_its_tin_count() {
        for mode in [
            DiffservMode::Besteffort,
            DiffservMode::Diffserv3,
            DiffservMode::Diffserv4,
            DiffservMode::Diffserv8,
            DiffservMode::Precedence,
        ] {
            for d in 0..64 {
                assert!(diffserv_tin(mode, d) < tin_count(mode));
            }
            assert_eq!(tin_names(mode).len(), tin_count(mode));
            let mut order = tin_order(mode).to_vec();
            order.sort_unstable();
            assert_eq!(order, (0..tin_count(mode)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn thresholds_and_quanta_match_the_kernel() {
        let r = 1_000_000;
        let s = tin_shares(DiffservMode::Diffserv3, r);
        let got: Vec<_> = s[..3]
            .iter()
            .map(|t| (t.threshold_bytes_per_sec, t.tin_quantum))
            .collect();
        assert_eq!(got, vec![(r, 1024), (r >> 4, 64), (r >> 2, 256)]);
        let s = tin_shares(DiffservMode::Diffserv4, r);
        assert_eq!(
            s[2],
            TinShare {
                threshold_bytes_per_sec: r >> 1,
                tin_quantum: 512
            }
        );
        assert_eq!(s[3].threshold_bytes_per_sec, r >> 2);
        let s = tin_shares(DiffservMode::Besteffort, r);
        assert_eq!(s[0].tin_quantum, 65535);
        assert_eq!(s[1], TinShare::default());
        let s = tin_shares(DiffservMode::Diffserv8, r);
        let quanta: Vec<u16> = s.iter().map(|t| t.tin_quantum).collect();
        assert_eq!(quanta, vec![256, 224, 196, 171, 149, 130, 113, 98]);
        assert_eq!(s[1].threshold_bytes_per_sec, 875_000);
        assert_eq!(s[2].threshold_bytes_per_sec, 765_625);
        assert_eq!(
            tin_shares(DiffservMode::Precedence, 0)[7].threshold_bytes_per_sec,
            0
        );
    }
}
