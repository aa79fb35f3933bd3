//! The upper bound of every size and count in the config, in one place: `check-config`,
//! `run` and a SIGHUP reload refuse a value past its bound with the bound in the message,
//! and deploy/cakewalk.toml documents each one beside its key. The bounds keep a typo (an
//! extra digit, a `u32::MAX`) from turning into an allocation that takes the machine's
//! memory, while leaving room far above any real deployment.

/// Largest config file read (1 MiB): a real one is a few KiB, and `check-config /dev/zero`
/// must not read until memory runs out.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Most buffers in one port's pool (`ports.pool_buffers`).
pub const MAX_POOL_BUFFERS: usize = 4 << 20;

/// Largest buffer (`ports.buffer_size`): 256 KiB, above any frame a port can carry (a
/// 64 KiB GRO super-frame with its headers fits).
pub const MAX_BUFFER_SIZE: usize = 256 << 10;

/// Most memory one port's pool may take (`pool_buffers` x `buffer_size`): 4 GiB.
pub const MAX_POOL_BYTES: u64 = 4 << 30;

/// Most receive queues per port (`ports.a.rx_queues`, `ports.b.rx_queues`), as for
/// `engine.tx_queues`.
pub const MAX_RX_QUEUES: usize = 1024;

/// Most flows the built-in generator makes (`ports.synth.flows`); CAKE has 1024 queues per
/// tin, so more only spread the same collisions.
pub const MAX_SYNTH_FLOWS: u32 = 1 << 20;

/// Largest CAKE memory limit (`shaper.memlimit`): 4 GiB, tc's 32-bit limit.
pub const MAX_MEMLIMIT: u64 = 4 << 30;

/// Longest RTT or target the AQM is tuned for (`shaper.rtt`, `shaper.target`): 1 hour,
/// tc's longest preset (`interplanetary`).
pub const MAX_AQM_TIME_NS: u64 = 3_600 * 1_000_000_000;

/// Shortest and longest rate-sync period (`shaper.sync_interval`): 10 µs to 1 s.
pub const SYNC_INTERVAL_NS: std::ops::RangeInclusive<u64> = 10_000..=1_000_000_000;

/// Most cores listed in `engine.cores`, and the largest core number accepted there (Linux's
/// default CONFIG_NR_CPUS is 8192).
pub const MAX_CORES_LISTED: usize = 1024;
/// See [`MAX_CORES_LISTED`].
pub const MAX_CORE_ID: usize = 8191;

/// Largest circuit file read (`[circuits] files`): 256 MiB, room for a few million devices
/// in `ShapedDevices.csv`.
pub const MAX_CIRCUIT_FILE_BYTES: u64 = 256 << 20;
