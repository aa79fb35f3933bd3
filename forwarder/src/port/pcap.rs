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
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

#[cfg(test)]
use pcap_file::pcap::PcapHeader;
use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

use super::pool::{Pool, PoolBuf};
use super::{PortBuf, PortRx, PortTx, Refused};
use crate::clock;

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
    #[error("cannot write pcap output '{path}': {reason}; check that the directory exists, is writable and has free space")]
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
    /// pcap (not pcapng): where the record the file ended in starts, its byte order and the
    /// file's snaplen, to tell a capture cut short from a damaged record length.
    cut_record: Option<(u64, bool, u32)>,
    damaged: Option<DamagedRecord>,
}

/// A record whose length field is impossible: larger than the capture's snaplen and any
/// frame, so the file ends "inside" it. The file is damaged there, not cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DamagedRecord {
    /// Frames before it (all kept).
    pub frames_before: usize,
    /// Its byte offset in the file.
    pub offset: u64,
    /// The length it claims.
    pub claimed_len: u32,
    /// The capture's snaplen.
    pub snaplen: u32,
}

/// No frame a port can carry is longer: a record claiming more (and more than the file's
/// snaplen) has a damaged length field.
const MAX_FRAME_IN_A_CAPTURE: u32 = crate::config::limits::MAX_BUFFER_SIZE as u32;

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
        let mut frames = PcapFrames::read(BufReader::new(file), len, path)?;
        if let Some((offset, big_endian, snaplen)) = frames.cut_record {
            frames.check_cut_record(path, offset, big_endian, snaplen);
        }
        Ok(frames)
    }

    /// Reads the header of the record the file ended in and, when its length is impossible,
    /// calls the file damaged at that record rather than cut short.
    fn check_cut_record(&mut self, path: &Path, offset: u64, big_endian: bool, snaplen: u32) {
        use std::io::{Seek, SeekFrom};
        let mut header = [0u8; 16];
        let read = File::open(path).and_then(|mut f| {
            f.seek(SeekFrom::Start(offset))?;
            f.read_exact(&mut header)
        });
        if read.is_err() {
            return; // Not even a whole record header: cut short.
        }
        let field: [u8; 4] = header[8..12].try_into().unwrap_or_default();
        let claimed_len = if big_endian {
            u32::from_be_bytes(field)
        } else {
            u32::from_le_bytes(field)
        };
        if claimed_len > snaplen.max(MAX_FRAME_IN_A_CAPTURE) {
            self.truncated = false;
            self.damaged = Some(DamagedRecord {
                frames_before: self.len(),
                offset,
                claimed_len,
                snaplen,
            });
        }
    }

    /// Set when a record's length field is impossible (see [`DamagedRecord`]): the frames
    /// before it were kept.
    pub fn damaged(&self) -> Option<DamagedRecord> {
        self.damaged
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
            let big_endian = r.header().endianness == pcap_file::Endianness::Big;
            let snaplen = r.header().snaplen;
            let mut offset = 24u64;
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
                        offset += 16 + p.data.len() as u64;
                        frames.push(&p.data)
                    }
                    Err(e) if is_eof(&e) => {
                        frames.truncated = true;
                        frames.cut_record = Some((offset, big_endian, snaplen));
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
    /// Frames written to the output, by all its transmit queues: counted once the write
    /// that carried them succeeded.
    pub written: AtomicU64,
    /// Frames that could not be written (I/O error), by all transmit queues.
    pub write_errors: AtomicU64,
    /// The first write error, with the output it concerns: the port can no longer do its
    /// job, and the run stops with it.
    pub failure: OnceLock<String>,
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

/// Where a [`PcapSink`] writes: a file, or in tests something that fails on cue.
pub trait SinkFile: Write + Send {
    /// Cuts the output back to its first `len` bytes, so that a write that failed half way
    /// leaves no partial record behind.
    fn cut_to(&mut self, len: u64) -> std::io::Result<()>;
}

impl SinkFile for File {
    fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
        use std::io::Seek;
        // A device such as /dev/full has no length to set: nothing partial stays there.
        if self.metadata()?.is_file() {
            self.set_len(len)?;
            self.seek(std::io::SeekFrom::Start(len))?;
        }
        Ok(())
    }
}

/// The pcap file header: nanosecond timestamps, native byte order, Ethernet.
fn file_header() -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_3c4du32.to_ne_bytes());
    h[4..6].copy_from_slice(&2u16.to_ne_bytes());
    h[6..8].copy_from_slice(&4u16.to_ne_bytes());
    h[16..20].copy_from_slice(&SNAPLEN.to_ne_bytes());
    h[20..24].copy_from_slice(&1u32.to_ne_bytes());
    h
}

/// The snaplen written in the header: tcpdump's maximum, above any buffer size.
const SNAPLEN: u32 = 262_144;

/// A pcap output shared by the transmit queues of one port. Each burst is written with one
/// unbuffered write, so a frame counted as written is in the file, and a failed write is
/// charged to the burst (and the frames) that made it. The file is closed once, when the
/// last transmit queue holding it is gone.
pub struct PcapSink {
    out: Box<dyn SinkFile>,
    /// Bytes of whole records (and the header) in the output.
    good_len: u64,
    /// The output's name, for messages.
    path: PathBuf,
    wall_base_ns: u64,
    mono_base_ns: u64,
}

impl PcapSink {
    /// Creates (truncates) `path` and writes a pcap header (Ethernet, ns timestamps).
    pub fn create(path: &Path) -> Result<PcapSink, PcapError> {
        let file = File::create(path).map_err(|e| PcapError::Create {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        PcapSink::on(Box::new(file), path)
    }

    /// A sink writing to `out`, named `path` in messages; writes the pcap header.
    ///
    /// # Errors
    /// [`PcapError::Create`] when the header cannot be written.
    pub fn on(mut out: Box<dyn SinkFile>, path: &Path) -> Result<PcapSink, PcapError> {
        let header = file_header();
        out.write_all(&header).map_err(|e| PcapError::Create {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mono_base_ns = clock::now_ns();
        Ok(PcapSink {
            out,
            good_len: header.len() as u64,
            path: path.to_path_buf(),
            wall_base_ns: clock::wall_ns_at(mono_base_ns),
            mono_base_ns,
        })
    }

    /// Writes `records` (whole records, each ending at an offset in `ends`) and returns how
    /// many of them are in the output, and the error when not all are. A write that fails
    /// half way is cut back to the last whole record.
    fn write_records(&mut self, records: &[u8], ends: &[usize]) -> (usize, Option<String>) {
        let mut done = 0;
        let err = loop {
            if done == records.len() {
                break None;
            }
            match self.out.write(&records[done..]) {
                Ok(0) => break Some("the output takes no more bytes".to_string()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e.to_string()),
            }
        };
        let whole = ends.iter().take_while(|&&end| end <= done).count();
        let whole_bytes = if whole == 0 { 0 } else { ends[whole - 1] };
        if err.is_some() && whole_bytes < done {
            if let Err(e) = self.out.cut_to(self.good_len + whole_bytes as u64) {
                crate::log_line!(
                    "error: cannot cut '{}' back to its last whole frame: {e}; its last record is partial",
                    self.path.display()
                );
            }
        }
        self.good_len += whole_bytes as u64;
        (whole, err)
    }
}

/// The transmit half: writes frames to the shared [`PcapSink`], or counts and drops them
/// when the port has no output file.
pub struct PcapTx {
    sink: Option<Arc<Mutex<PcapSink>>>,
    counters: Arc<PcapCounters>,
    /// The burst's records, built before the sink is locked (reused, grows to a burst).
    records: Vec<u8>,
    /// Where each record of `records` ends.
    ends: Vec<usize>,
    /// Frames and bytes whose write failed since the engine last asked.
    refused: Refused,
}

impl PcapTx {
    /// A transmit queue writing to `sink` (or discarding when `None`).
    pub fn new(sink: Option<Arc<Mutex<PcapSink>>>, counters: Arc<PcapCounters>) -> PcapTx {
        PcapTx {
            sink,
            counters,
            records: Vec::new(),
            ends: Vec::new(),
            refused: Refused::default(),
        }
    }
}

impl PortTx for PcapTx {
    type Buf = PoolBuf;

    fn tx_burst(&mut self, burst: &mut Vec<PoolBuf>) -> usize {
        let n = burst.len();
        let Some(sink) = &self.sink else {
            self.counters.written.fetch_add(n as u64, Relaxed);
            burst.clear();
            return n;
        };
        let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
        let (written, failure) = if self.counters.failure.get().is_some() {
            // The output failed before: nothing more is written to it (the run stops).
            (0, None)
        } else {
            let ts = s.wall_base_ns + clock::recent_ns().saturating_sub(s.mono_base_ns);
            let (sec, ns) = ((ts / 1_000_000_000) as u32, (ts % 1_000_000_000) as u32);
            self.records.clear();
            self.ends.clear();
            for b in burst.iter() {
                let data = b.data();
                let len = data.len() as u32;
                for field in [sec, ns, len, len] {
                    self.records.extend_from_slice(&field.to_ne_bytes());
                }
                self.records.extend_from_slice(data);
                self.ends.push(self.records.len());
            }
            s.write_records(&self.records, &self.ends)
        };
        if let Some(e) = failure {
            let what = format!("writing pcap output '{}' failed: {e}", s.path.display());
            crate::log_line!("error: {what}");
            let _ = self.counters.failure.set(what);
        }
        drop(s);
        for b in &burst[written..] {
            self.refused.count(b.data().len());
        }
        self.counters.written.fetch_add(written as u64, Relaxed);
        self.counters
            .write_errors
            .fetch_add((n - written) as u64, Relaxed);
        burst.clear();
        n
    }

    fn take_refused(&mut self) -> (u64, u64) {
        self.refused.take()
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

    fn bufs(pool: Pool, frames: &[Vec<u8>]) -> Vec<PoolBuf> {
        frames.iter().map(|f| pool.alloc_copy(f).unwrap()).collect()
    }

    #[test]
    fn transmit_queues_sharing_an_output_all_count_and_the_last_one_closes_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.pcap");
        let sink = Arc::new(Mutex::new(PcapSink::create(&out).unwrap()));
        let c = Arc::new(PcapCounters::default());
        let mut first = PcapTx::new(Some(sink.clone()), c.clone());
        let mut second = PcapTx::new(Some(sink), c.clone());
        let pool = Pool::new(16, 2048);
        assert_eq!(first.tx_burst(&mut bufs(pool, &frames(3))), 3);
        // The first queue stops (its worker is done) while the second still drains.
        first.flush();
        drop(first);
        assert_eq!(second.tx_burst(&mut bufs(pool, &frames(4))), 4);
        assert_eq!(second.take_refused(), (0, 0));
        assert_eq!(c.written.load(Relaxed), 7, "both queues count");
        assert_eq!(c.write_errors.load(Relaxed), 0);
        assert_eq!(PcapFrames::load(&out).unwrap().len(), 7, "all on disk");
        drop(second);
        assert_eq!(PcapFrames::load(&out).unwrap().len(), 7);
    }

    /// An output that takes `room` bytes and then fails as a full disk does.
    struct Filling {
        bytes: Arc<Mutex<Vec<u8>>>,
        room: usize,
    }

    impl Write for Filling {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut b = self.bytes.lock().unwrap();
            let n = buf.len().min(self.room - b.len().min(self.room));
            if n == 0 {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            b.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl SinkFile for Filling {
        fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
            self.bytes.lock().unwrap().truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_keeps_whole_records_counts_them_alone_and_refuses_the_rest() {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        // The header, two whole records of 60 and 61 bytes, and part of a third.
        let room = 24 + (16 + 60) + (16 + 61) + 30;
        let out = Filling {
            bytes: bytes.clone(),
            room,
        };
        let sink = PcapSink::on(Box::new(out), Path::new("full.pcap")).unwrap();
        let c = Arc::new(PcapCounters::default());
        let mut tx = PcapTx::new(Some(Arc::new(Mutex::new(sink))), c.clone());
        let pool = Pool::new(16, 2048);
        assert_eq!(tx.tx_burst(&mut bufs(pool, &frames(5))), 5);
        assert_eq!(tx.take_refused(), (3, 62 + 63 + 64));
        assert_eq!(c.written.load(Relaxed), 2);
        assert_eq!(c.write_errors.load(Relaxed), 3);
        let failure = c.failure.get().expect("the failure is kept");
        assert!(
            failure.contains("'full.pcap' failed") && failure.contains("No space left"),
            "{failure}"
        );
        // What is there reads back as exactly the two frames counted.
        let written = bytes.lock().unwrap().clone();
        let back = PcapFrames::read(&written[..], written.len() as u64, Path::new("x")).unwrap();
        assert_eq!(back.len(), 2);
        assert!(!back.truncated(), "no partial record left");
        // Later bursts are refused without touching the output.
        assert_eq!(tx.tx_burst(&mut bufs(pool, &frames(2))), 2);
        assert_eq!(tx.take_refused().0, 2);
        assert_eq!(c.written.load(Relaxed), 2);
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
    fn a_record_with_an_impossible_length_is_called_damaged_not_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.pcap");
        write_pcap(&path, &frames(3)).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        // The third record's incl_len (write_pcap writes native byte order).
        let third = 24 + (16 + 60) + (16 + 61);
        bytes[third + 8..third + 12].copy_from_slice(&0x7fff_ffffu32.to_ne_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let f = PcapFrames::load(&path).unwrap();
        assert_eq!(f.len(), 2);
        assert!(!f.truncated(), "not cut short");
        assert_eq!(
            f.damaged(),
            Some(DamagedRecord {
                frames_before: 2,
                offset: third as u64,
                claimed_len: 0x7fff_ffff,
                snaplen: 65535,
            })
        );
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
