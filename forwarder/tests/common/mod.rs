//! Helpers shared by the integration tests that run the real binary on pcap files: write
//! the frames a test made into a capture, run the binary, read back what port b
//! transmitted and the final report.

use std::path::Path;
use std::process::Command;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;

/// Writes `frames` to `path` as an Ethernet capture, 100 µs apart.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).expect("create the input pcap");
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(file, header).expect("write a pcap header");
    for (i, f) in frames.iter().enumerate() {
        let ts = std::time::Duration::from_micros(i as u64 * 100);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .expect("write a frame");
    }
}

/// Every frame of the capture at `path`, in order.
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).expect("open the output pcap");
    let mut r = PcapReader::new(file).expect("the output is a pcap");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.expect("a readable frame").data.into_owned());
    }
    out
}

/// Runs `cakewalk run --config CONFIG` on pcap ports with `extra` arguments: port a
/// replays `frames` (written to `dir`), port b writes what it transmits. Checks that it
/// succeeded and returns its final JSON report and the frames port b wrote.
pub(crate) fn run_pcap(
    dir: &Path,
    config: &Path,
    frames: &[Vec<u8>],
    extra: &[&str],
) -> (serde_json::Value, Vec<Vec<u8>>) {
    let (input, output, stats) = (
        dir.join("in.pcap"),
        dir.join("out.pcap"),
        dir.join("stats.jsonl"),
    );
    write_pcap(&input, frames);
    let out = Command::new(env!("CARGO_BIN_EXE_cakewalk"))
        .args(["run", "--config"])
        .arg(config)
        .args(["--port-kind", "pcap", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .arg("--stats-json")
        .arg(&stats)
        .args(["--control", "off"])
        .args(extra)
        .output()
        .expect("run cakewalk");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    let report = serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no final report ({e}): {text}"));
    (report, read_pcap(&output))
}
