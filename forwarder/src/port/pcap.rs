//! pcap files as ports: [`PcapRx`] replays a pcap or pcapng file (once, or looped), and
//! [`PcapTx`] writes every transmitted frame to a pcap file.
//!
//! The input is read into memory once when the port is made (one contiguous byte buffer plus
//! an index, no allocation per frame afterwards); each frame is copied into a pool buffer as
//! it is received, so the bytes that leave are exactly the bytes that were read unless a
//! configured rewrite (ECN CE, DSCP wash) changed them. Frames keep file order on input; the
//! engine keeps per-flow order, so the output is order-preserving per flow. Input pacing by
//! the file's timestamps is not done: the file is replayed as fast as the pool allows.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

use super::pool::{Pool, PoolBuf};
use super::{PortBuf, PortRx, PortTx, Refused};
use crate::engine::clock;

/// Why a pcap port could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The file could not be opened or read.
    #[error("cannot read pcap input '{path}'; check the path and permissions")]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is neither pcap nor pcapng, or is damaged.
    #[error("'{path}' is not a readable pcap or pcapng file: {reason}; convert it with `editcap -F pcap`")]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// The file ends before its header does (an empty file, or a capture stopped before it
    /// wrote anything).
    #[error("'{path}' is {len} bytes long, too short for a pcap or pcapng file header; check that it is the right file and that the capture wrote anything")]
    Short {
        /// The file.
        path: PathBuf,
        /// Its length in bytes.
        len: u64,
    },
    /// The frames are not Ethernet (a `tcpdump -i any` capture, raw IP, 802.11, ...).
    #[error("'{path}' holds {link:?} frames, but cakewalk replays Ethernet frames only; capture on one interface (tcpdump -i eth0, not -i any) or rewrite the link layer (tcprewrite --dlt=enet)")]
    NotEthernet {
        /// The file.
        path: PathBuf,
        /// The file's link type.
        link: DataLink,
    },
    /// An output file is also an input, or both ports write the same file.
    #[error("'{output}' is {what}: writing it would {harm}; give the output another name")]
    SameFile {
        /// The output file.
        output: PathBuf,
        /// "both an input and an output", "the output of both ports".
        what: &'static str,
        /// What would happen.
        harm: &'static str,
    },
    /// The output file could not be created.
    #[error("cannot write pcap output '{path}': {reason}; check that the directory exists and is writable")]
    Create {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// True when `a` and `b` name one file: the same inode when both exist, else the same
/// path once the directory is resolved (`out.pcap` and `./out.pcap`).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let resolved = |p: &Path| -> Option<PathBuf> {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(dir.canonicalize().ok()?.join(p.file_name()?))
    };
    a == b || matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// Refuses pcap paths that would destroy data before anything is opened: an output that is
/// also an input (creating the output truncates the capture, before or after it is read,
/// depending on the port order), or one output file for both ports (two writers
/// interleave into a damaged file).
///
/// # Errors
/// [`PcapError::SameFile`] naming the output.
pub fn check_paths(inputs: &[&Path], outputs: &[&Path]) -> Result<(), PcapError> {
    for (i, out) in outputs.iter().enumerate() {
        if inputs.iter().any(|input| same_file(input, out)) {
            return Err(PcapError::SameFile {
                output: out.to_path_buf(),
                what: "both an input and an output",
                harm: "overwrite the capture being replayed",
            });
        }
        if outputs[i + 1..].iter().any(|other| same_file(other, out)) {
            return Err(PcapError::SameFile {
                output: out.to_path_buf(),
                what: "the output of both ports",
                harm: "interleave two writers into one damaged file",
            });
        }
    }
    Ok(())
}

/// All frames of an input file, in file order.
#[derive(Debug, Default)]
pub struct PcapFrames {
    bytes: Vec<u8>,
    index: Vec<(usize, usize)>,
    truncated: bool,
    snapped: usize,
}

/// True when the reader stopped because the file ended in the middle of a header or record.
fn is_eof(e: &pcap_file::PcapError) -> bool {
    matches!(e, pcap_file::PcapError::IncompleteBuffer)
        || matches!(e, pcap_file::PcapError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof)
}

impl PcapFrames {
    /// Reads every frame of `path` (pcap or pcapng, detected by the magic number). A file
    /// that ends in the middle of a frame (a capture cut short) keeps its complete frames and
    /// reports [`PcapFrames::truncated`], as tcpdump and Wireshark read such files.
    pub fn load(path: &Path) -> Result<PcapFrames, PcapError> {
        let open_err = |source| PcapError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let len = file.metadata().map_err(open_err)?.len();
        PcapFrames::read(BufReader::new(file), len, path)
    }

    /// Reads every frame from `input`, a whole pcap or pcapng file of `len` bytes; `path`
    /// only names it in errors. [`PcapFrames::load`] is this on a file; the fuzz target
    /// `pcap_file` drives it with arbitrary bytes.
    ///
    /// # Errors
    /// As [`PcapFrames::load`], but for opening the file.
    pub fn read<R: Read>(mut input: R, len: u64, path: &Path) -> Result<PcapFrames, PcapError> {
        let open_err = |source| PcapError::Open {
            path: path.to_path_buf(),
            source,
        };
        let fmt_err = |e: pcap_file::PcapError| PcapError::Format {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let short_err = || PcapError::Short {
            path: path.to_path_buf(),
            len,
        };
        // A header error caused by the end of the file means the file is too short.
        let header_err = |e: pcap_file::PcapError| {
            if is_eof(&e) {
                short_err()
            } else {
                fmt_err(e)
            }
        };
        let mut magic = [0u8; 4];
        input.read_exact(&mut magic).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                short_err()
            } else {
                open_err(e)
            }
        })?;
        // The readers want the magic number too: put it back in front.
        let input = (&magic[..]).chain(input);
        let mut frames = PcapFrames::default();
        if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
            let mut r = PcapNgReader::new(input).map_err(header_err)?;
            while let Some(block) = r.next_block() {
                match block {
                    Ok(Block::EnhancedPacket(p)) => {
                        if p.original_len as usize > p.data.len() {
                            frames.snapped += 1;
                        }
                        frames.push(&p.data)
                    }
                    Ok(Block::SimplePacket(p)) => frames.push(&p.data),
                    Ok(Block::Packet(p)) => frames.push(&p.data),
                    Ok(Block::InterfaceDescription(i)) if i.linktype != DataLink::ETHERNET => {
                        return Err(PcapError::NotEthernet {
                            path: path.to_path_buf(),
                            link: i.linktype,
                        })
                    }
                    Ok(_) => {}
                    Err(e) if is_eof(&e) => {
                        frames.truncated = true;
                        break;
                    }
                    Err(e) => return Err(fmt_err(e)),
                }
            }
        } else {
            let mut r = PcapReader::new(input).map_err(header_err)?;
            let link = r.header().datalink;
            if link != DataLink::ETHERNET {
                return Err(PcapError::NotEthernet {
                    path: path.to_path_buf(),
                    link,
                });
            }
            // The raw records, not `next_packet`: pcap_file refuses a record whose wire
            // length exceeds the file's snaplen, which is every long frame of a
            // `tcpdump -s N` capture. Only the captured bytes matter here (timestamps are
            // not replayed), and those are exactly `incl_len` bytes whatever the header says.
            while let Some(p) = r.next_raw_packet() {
                match p {
                    Ok(p) => {
                        if p.orig_len > p.incl_len {
                            frames.snapped += 1;
                        }
                        frames.push(&p.data)
                    }
                    Err(e) if is_eof(&e) => {
                        frames.truncated = true;
                        break;
                    }
                    Err(e) => return Err(fmt_err(e)),
                }
            }
        }
        Ok(frames)
    }

    /// True when the file ended in the middle of a frame: the frames before it were kept, the
    /// partial one was not.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Frames the capture holds only the start of (a snaplen shorter than the frame, as
    /// `tcpdump -s 96` writes): they are replayed as captured, shorter than on the wire.
    pub fn snapped(&self) -> usize {
        self.snapped
    }

    /// How many frames are longer than `size` bytes, and the longest frame: frames that
    /// will not fit a pool buffer of that size.
    pub fn longer_than(&self, size: usize) -> (usize, usize) {
        let over = self.index.iter().filter(|(_, len)| *len > size).count();
        let longest = self.index.iter().map(|(_, len)| *len).max().unwrap_or(0);
        (over, longest)
    }

    fn push(&mut self, frame: &[u8]) {
        self.index.push((self.bytes.len(), frame.len()));
        self.bytes.extend_from_slice(frame);
    }

    /// Frames in the file.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True for a file with no frames.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Frame `i`.
    pub fn frame(&self, i: usize) -> &[u8] {
        let (off, len) = self.index[i];
        &self.bytes[off..off + len]
    }
}

/// Counters of a pcap port.
#[derive(Debug, Default)]
pub struct PcapCounters {
    /// Frames read from the input (each loop counts again).
    pub read: AtomicU64,
    /// Input frames skipped because they are larger than a pool buffer.
    pub oversize: AtomicU64,
    /// Frames written to the output.
    pub written: AtomicU64,
    /// Frames that could not be written (I/O error).
    pub write_errors: AtomicU64,
}

/// The receive half: replays the input file.
pub struct PcapRx {
    frames: Arc<PcapFrames>,
    pool: Pool,
    next: usize,
    looped: bool,
    finished: bool,
    counters: Arc<PcapCounters>,
    read: u64,
    oversize: u64,
}

impl PcapRx {
    /// Replays `frames` through buffers from `pool`, forever when `looped`.
    pub fn new(
        frames: Arc<PcapFrames>,
        pool: Pool,
        looped: bool,
        counters: Arc<PcapCounters>,
    ) -> PcapRx {
        PcapRx {
            finished: frames.is_empty(),
            frames,
            pool,
            next: 0,
            looped,
            counters,
            read: 0,
            oversize: 0,
        }
    }
}

impl PortRx for PcapRx {
    type Buf = PoolBuf;

    fn rx_burst(&mut self, burst: &mut Vec<PoolBuf>, max: usize) -> usize {
        let mut n = 0;
        // Frames looked at, skipped ones included: the burst ends after `max` of them, so a
        // looped input whose frames are mostly (or all) too long for a buffer cannot keep
        // the worker here, away from its queues and its stop flag.
        let mut examined = 0;
        while examined < max && !self.finished {
            examined += 1;
            let frame = self.frames.frame(self.next);
            if frame.len() > self.pool.buf_size() {
                self.oversize += 1;
            } else {
                let Some(b) = self.pool.alloc_copy(frame) else {
                    break;
                };
                burst.push(b);
                n += 1;
                self.read += 1;
            }
            self.next += 1;
            if self.next == self.frames.len() {
                self.next = 0;
                self.finished = !self.looped;
            }
        }
        self.counters.read.store(self.read, Relaxed);
        self.counters.oversize.store(self.oversize, Relaxed);
        n
    }

    fn is_finished(&self) -> bool {
        self.finished
    }
}

/// A pcap file writer shared by the transmit queues of one port.
pub struct PcapSink {
    /// `None` once flushed and closed.
    writer: Option<PcapWriter<BufWriter<File>>>,
    wall_base_ns: u64,
    mono_base_ns: u64,
}

impl PcapSink {
    /// Creates (truncates) `path` and writes a pcap header (Ethernet, ns timestamps).
    pub fn create(path: &Path) -> Result<PcapSink, PcapError> {
        let err = |reason: String| PcapError::Create {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::create(path).map_err(|e| err(e.to_string()))?;
        let header = PcapHeader {
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            endianness: pcap_file::Endianness::native(),
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
            .map_err(|e| err(e.to_string()))?;
        let mono_base_ns = clock::now_ns();
        Ok(PcapSink {
            writer: Some(writer),
            wall_base_ns: clock::wall_ns_at(mono_base_ns),
            mono_base_ns,
        })
    }
}

/// The transmit half: writes frames to the shared [`PcapSink`], or counts and drops them
/// when the port has no output file.
pub struct PcapTx {
    sink: Option<Arc<Mutex<PcapSink>>>,
    counters: Arc<PcapCounters>,
    written: u64,
    errors: u64,
    /// Frames and bytes whose write failed since the engine last asked.
    refused: Refused,
}

impl PcapTx {
    /// A transmit queue writing to `sink` (or discarding when `None`).
    pub fn new(sink: Option<Arc<Mutex<PcapSink>>>, counters: Arc<PcapCounters>) -> PcapTx {
        PcapTx {
            sink,
            counters,
            written: 0,
            errors: 0,
            refused: Refused::default(),
        }
    }
}

impl PortTx for PcapTx {
    type Buf = PoolBuf;

    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let n = burst.len();
        if let Some(sink) = &self.sink {
            let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
            let ts = s.wall_base_ns + clock::recent_ns().saturating_sub(s.mono_base_ns);
            let ts = Duration::from_nanos(ts);
            for b in burst.iter() {
                let data = b.data();
                let pkt = PcapPacket::new(ts, data.len() as u32, data);
                let result = match s.writer.as_mut() {
                    Some(w) => w.write_packet(&pkt).map(|_| ()).map_err(|e| e.to_string()),
                    None => Err("the output was already closed".to_string()),
                };
                match result {
                    Ok(()) => self.written += 1,
                    Err(e) => {
                        if self.errors == 0 {
                            crate::log_line!(
                                "error: pcap output write failed: {e}; later frames may be lost"
                            );
                        }
                        self.errors += 1;
                        self.refused.count(data.len());
                    }
                }
            }
        } else {
            self.written += n as u64;
        }
        burst.clear();
        self.counters.written.store(self.written, Relaxed);
        self.counters.write_errors.store(self.errors, Relaxed);
        n
    }

    fn take_refused(&mut self) -> (u64, u64) {
        self.refused.take()
    }

    /// Flushes and closes the shared output file (the engine calls this once it stopped).
    fn flush(&mut self) {
        if let Some(sink) = &self.sink {
            let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = s.writer.take() {
                if let Err(e) = std::io::Write::flush(&mut w.into_writer()) {
                    crate::log_line!("error: flushing pcap output failed: {e}");
                }
            }
        }
    }
}

impl Drop for PcapTx {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Writes `frames` to a new pcap file at `path` (Ethernet, µs timestamps 1 ms apart); for
/// tests and tools.
pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) -> Result<(), PcapError> {
    let err = |reason: String| PcapError::Create {
        path: path.to_path_buf(),
        reason,
    };
    let file = File::create(path).map_err(|e| err(e.to_string()))?;
    let mut w = PcapWriter::new(BufWriter::new(file)).map_err(|e| err(e.to_string()))?;
    for (i, f) in frames.iter().enumerate() {
        let pkt = PcapPacket::new(Duration::from_millis(i as u64), f.len() as u32, f);
        w.write_packet(&pkt).map_err(|e| err(e.to_string()))?;
    }
    std::io::Write::flush(&mut w.into_writer()).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i as u8; 60 + i]).collect()
    }

    #[test]
    fn a_written_file_reads_back_frame_for_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &frames(5)).unwrap();
        let f = PcapFrames::load(&path).unwrap();
        assert_eq!(f.len(), 5);
        assert_eq!(f.frame(3), &frames(5)[3][..]);
    }

    #[test]
    fn replay_once_finishes_and_replay_looped_wraps_around() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &frames(3)).unwrap();
        let f = Arc::new(PcapFrames::load(&path).unwrap());
        let pool = Pool::new(16, 2048);
        let c = Arc::new(PcapCounters::default());
        let mut once = PcapRx::new(f.clone(), pool, false, c.clone());
        let mut burst = Vec::new();
        assert_eq!(once.rx_burst(&mut burst, 32), 3);
        assert!(once.is_finished());
        burst.clear();
        let mut looped = PcapRx::new(f, pool, true, c);
        assert_eq!(looped.rx_burst(&mut burst, 7), 7);
        assert!(!looped.is_finished());
        assert_eq!(burst[6].data(), &frames(3)[0][..]);
    }

    /// Runs `f` on a thread of its own and returns its result, or None if it has not returned
    /// after a minute: a hang guard (a receive path that never returns), not a speed check.
    fn returns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    #[test]
    fn a_looped_input_of_frames_too_long_for_a_buffer_still_returns_to_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &[vec![0x45; 3000], vec![0x45; 2500]]).unwrap();
        let f = Arc::new(PcapFrames::load(&path).unwrap());
        let c = Arc::new(PcapCounters::default());
        let counters = c.clone();
        let got = returns(move || {
            let mut rx = PcapRx::new(f, Pool::new(16, 2048), true, counters);
            let mut burst = Vec::new();
            (rx.rx_burst(&mut burst, 32), rx.is_finished())
        });
        assert_eq!(got, Some((0, false)), "rx_burst never returned");
        assert_eq!(c.oversize.load(Relaxed), 32, "one burst looks at 32 frames");
        // One usable frame among long ones: each burst still ends after 32 frames.
        write_pcap(
            &path,
            &[vec![0x45; 3000], vec![0x45; 100], vec![0x45; 3000]],
        )
        .unwrap();
        let f = Arc::new(PcapFrames::load(&path).unwrap());
        let mut rx = PcapRx::new(f, Pool::new(64, 2048), true, c.clone());
        let mut burst = Vec::new();
        assert_eq!(rx.rx_burst(&mut burst, 32), 11);
    }

    #[test]
    fn transmitted_frames_land_in_the_output_file_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.pcap");
        let sink = Arc::new(Mutex::new(PcapSink::create(&out).unwrap()));
        let c = Arc::new(PcapCounters::default());
        let mut tx = PcapTx::new(Some(sink), c.clone());
        let pool = Pool::new(8, 2048);
        let mut burst: Vec<PoolBuf> = frames(4)
            .iter()
            .map(|f| pool.alloc_copy(f).unwrap())
            .collect();
        assert_eq!(tx.tx_burst(&mut burst), 4);
        drop(tx);
        let back = PcapFrames::load(&out).unwrap();
        assert_eq!(back.len(), 4);
        for (i, f) in frames(4).iter().enumerate() {
            assert_eq!(back.frame(i), &f[..]);
        }
        assert_eq!(c.written.load(Relaxed), 4);
    }

    #[test]
    fn an_empty_or_header_short_file_is_called_too_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &frames(1)).unwrap();
        let whole = std::fs::read(&path).unwrap();
        for len in [0, 3, 10, 23] {
            let short = dir.path().join(format!("short{len}.pcap"));
            std::fs::write(&short, &whole[..len]).unwrap();
            let e = PcapFrames::load(&short).unwrap_err();
            assert!(matches!(e, PcapError::Short { .. }), "{len}: {e}");
            assert!(
                e.to_string().contains(&format!("is {len} bytes long")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_capture_cut_short_keeps_its_complete_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &frames(3)).unwrap();
        let whole = std::fs::read(&path).unwrap();
        // Cut inside the third record's header, then inside its data.
        for cut in [whole.len() - (60 + 2) - 10, whole.len() - 5] {
            let cut_path = dir.path().join("cut.pcap");
            std::fs::write(&cut_path, &whole[..cut]).unwrap();
            let f = PcapFrames::load(&cut_path).unwrap();
            assert_eq!(f.len(), 2, "cut at {cut}");
            assert!(f.truncated());
            assert_eq!(f.frame(1), &frames(3)[1][..]);
        }
        assert!(!PcapFrames::load(&path).unwrap().truncated());
    }

    #[test]
    fn a_capture_that_is_not_ethernet_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (link, name) in [(DataLink::LINUX_SLL, "LINUX_SLL"), (DataLink::RAW, "RAW")] {
            let path = dir.path().join("in.pcap");
            let header = PcapHeader {
                datalink: link,
                ..PcapHeader::default()
            };
            let file = File::create(&path).unwrap();
            let mut w = PcapWriter::with_header(BufWriter::new(file), header).unwrap();
            let frame = [0x45u8; 40];
            w.write_packet(&PcapPacket::new(Duration::ZERO, 40, &frame))
                .unwrap();
            drop(w);
            let e = PcapFrames::load(&path).unwrap_err();
            assert!(matches!(e, PcapError::NotEthernet { .. }), "{e}");
            assert!(e.to_string().contains(name), "{e}");
        }
    }

    #[test]
    fn a_capture_with_a_short_snaplen_replays_what_it_holds() {
        // `tcpdump -s 64`: the header's snaplen is 64 and long frames are recorded with
        // their wire length but only 64 bytes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        let header = PcapHeader {
            snaplen: 64,
            ..PcapHeader::default()
        };
        let file = File::create(&path).unwrap();
        let mut w = PcapWriter::with_header(BufWriter::new(file), header).unwrap();
        let long = [0x11u8; 100];
        let short = [0x22u8; 60];
        w.write_packet(&PcapPacket::new(Duration::ZERO, 100, &long[..64]))
            .unwrap();
        w.write_packet(&PcapPacket::new(Duration::ZERO, 60, &short))
            .unwrap();
        drop(w);
        let f = PcapFrames::load(&path).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.frame(0), &long[..64]);
        assert_eq!(f.frame(1), &short[..]);
        assert_eq!(f.snapped(), 1);
    }

    #[test]
    fn an_output_that_is_an_input_or_the_other_ports_output_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        write_pcap(&input, &frames(2)).unwrap();
        let before = std::fs::read(&input).unwrap();
        let out = dir.path().join("out.pcap");
        let same_input = dir.path().join(".").join("in.pcap");
        let e = check_paths(&[&input], &[&same_input]).unwrap_err();
        assert!(e.to_string().contains("both an input and an output"), "{e}");
        let e = check_paths(&[&input], &[&out, &dir.path().join("./out.pcap")]).unwrap_err();
        assert!(e.to_string().contains("the output of both ports"), "{e}");
        assert!(check_paths(&[&input], &[&out]).is_ok());
        assert_eq!(std::fs::read(&input).unwrap(), before);
    }

    #[test]
    fn a_missing_input_file_names_the_path() {
        let e = PcapFrames::load(Path::new("/nonexistent/x.pcap")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.pcap"), "{e}");
    }
}
