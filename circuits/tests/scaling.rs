//! Reading the circuit files stays linear in their size. Each lookup by circuit ID or node
//! name, and each item's line number, once scanned from the start, so that a file of 100 000
//! circuits took seconds to minutes to read. Measured as a ratio of two sizes timed side by
//! side, best of three runs each (no wall-clock threshold): a file four times as large must
//! read in less than eight times as long; one quadratic step makes it sixteen.

use std::fmt::Write;
use std::time::{Duration, Instant};

use circuits::summary::Summary;
use circuits::Format;

/// A ShapedDevices.csv of `n` circuits under a network.json of `n / 4` access points in
/// sites of ten, and a native TOML file of `n` circuits under `n / 8` nodes.
fn files(n: usize) -> (String, String, String) {
    let aps = n / 4 / 10 * 10;
    let mut net = String::from("{");
    for site in 0..aps / 10 {
        let _ = write!(
            net,
            "{}\"site{site}\": {{\"downloadBandwidthMbps\": 10000, \
             \"uploadBandwidthMbps\": 10000, \"children\": {{",
            if site > 0 { "," } else { "" }
        );
        for ap in 0..10 {
            let _ = write!(
                net,
                "{}\n\"ap{}\": {{\"downloadBandwidthMbps\": 1000, \"uploadBandwidthMbps\": 1000}}",
                if ap > 0 { "," } else { "" },
                site * 10 + ap
            );
        }
        net.push_str("}}\n");
    }
    net.push('}');
    let mut csv = String::from(
        "Circuit ID,Circuit Name,Device ID,Device Name,Parent Node,MAC,IPv4,IPv6,\
         Download Min Mbps,Upload Min Mbps,Download Max Mbps,Upload Max Mbps,Comment\n",
    );
    for i in 0..n {
        let _ = writeln!(
            csv,
            "{i},c{i},{i},d{i},ap{},,10.{}.{}.{},2001:db8:{:x}::/64,,,100,20,",
            i % aps,
            i >> 16,
            (i >> 8) & 255,
            i & 255,
            i
        );
    }
    let nodes = n / 8;
    let mut toml = String::new();
    for k in 0..nodes {
        let parent = if k > 0 {
            format!("parent = \"n{}\"\n", (k - 1) / 4)
        } else {
            String::new()
        };
        let _ = write!(toml, "[[node]]\nname = \"n{k}\"\n{parent}\n");
    }
    for i in 0..n {
        let _ = write!(
            toml,
            "[[circuit]]\nid = \"t{i}\"\ndownload_mbps = 100\nupload_mbps = 20\n\
             parent = \"n{}\"\naddresses = [\"100.{}.{}.{}\"]\n\n",
            i % nodes,
            64 + (i >> 16),
            (i >> 8) & 255,
            i & 255
        );
    }
    (csv, net, toml)
}

/// The fastest of three reads of the files, each validated and summarised as
/// `cakewalk check-circuits` does.
fn read_time((csv, net, toml): &(String, String, String)) -> Duration {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            let libreqos = circuits::load([
                (Format::ShapedDevices, "ShapedDevices.csv", csv.as_str()),
                (Format::NetworkJson, "network.json", net.as_str()),
            ])
            .expect("the generated LibreQoS files are valid");
            let native = circuits::load([(Format::Native, "circuits.toml", toml.as_str())])
                .expect("the generated TOML file is valid");
            std::hint::black_box((Summary::of(&libreqos.0), Summary::of(&native.0)));
            start.elapsed()
        })
        .min()
        .expect("three runs")
}

#[test]
fn reading_the_files_is_linear_in_their_size() {
    let n = 4_000;
    let t_small = read_time(&files(n));
    let t_large = read_time(&files(4 * n));
    let ratio = t_large.as_secs_f64() / t_small.as_secs_f64();
    assert!(
        ratio < 8.0,
        "{n} circuits read in {t_small:?}, {} in {t_large:?}: {ratio:.1} times as long for \
         four times the size (quadratic would be 16)",
        4 * n
    );
}
