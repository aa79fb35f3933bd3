//! The bodies of cakewalk's fuzz targets, shared by the libFuzzer binaries in
//! `fuzz_targets/` and by the stable replay test below, which runs every committed corpus
//! file through them (`scripts/test fuzz-smoke`). Each body states the property it checks;
//! a violated property panics, which is what libFuzzer reports.

use forwarder::config::keywords::CakeOptions;
use forwarder::config::{tc, Config};
use forwarder::wire;

/// `wire_parse`: the parser and the in-place rewrites accept any bytes without panicking;
/// offsets stay inside the frame; a malformed frame is reported as non-IP; marking and
/// washing keep a valid IPv4 header checksum valid and change only the TOS byte and the
/// checksum.
pub fn wire_parse(data: &[u8]) {
    let p = wire::parse(data);
    assert!(usize::from(p.l4_offset) <= data.len());
    if p.malformed.is_some() {
        assert_eq!(p.meta.keys.l3, qdisc::L3Kind::NonIp);
    }
    let _ = wire::tcp_ack_info(data);

    let ipv4_ok = |f: &[u8]| {
        let l3 = usize::from(wire::parse(f).l3_offset);
        f.get(l3..)
            .and_then(|b| wire::ipv4::Ipv4Packet::new_checked(b).ok())
            .map(|ip| ip.verify_checksum())
    };
    let before = ipv4_ok(data);
    let mut marked = data.to_vec();
    let capable = wire::set_ce(&mut marked);
    if capable {
        let q = wire::parse(&marked);
        if q.malformed.is_none() {
            assert_eq!(q.meta.ecn, 3);
        }
    } else {
        assert_eq!(marked, data, "a non-ECN-capable frame is left alone");
    }
    if before == Some(true) {
        assert_eq!(ipv4_ok(&marked), Some(true), "set_ce broke the checksum");
    }
    let changed = marked.iter().zip(data).filter(|(a, b)| a != b).count();
    assert!(changed <= 3, "set_ce changed {changed} bytes");

    let mut washed = data.to_vec();
    if wire::wash_dscp(&mut washed) {
        let q = wire::parse(&washed);
        if q.malformed.is_none() && p.malformed.is_none() {
            assert_eq!((q.meta.dscp, q.meta.ecn), (0, p.meta.ecn));
        }
    }
    if before == Some(true) {
        assert_eq!(ipv4_ok(&washed), Some(true), "wash broke the checksum");
    }
    let _ = wire::set_ce_at(&mut washed, usize::from(p.l3_offset));

    differential(data);
}

/// Compares [`wire::parse`] with etherparse, an independent parser: where etherparse reads a
/// well-formed IP packet, cakewalk must not call it malformed and must find the same
/// addresses, DSCP, ECN, protocol, flow label and (for unfragmented TCP/UDP) ports.
pub fn differential(data: &[u8]) {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    let Ok(theirs) = SlicedPacket::from_ethernet(data) else {
        return;
    };
    if theirs
        .link_exts
        .iter()
        .any(|e| !matches!(e, etherparse::LinkExtSlice::Vlan(_)))
    {
        // MACsec (802.1AE): etherparse reads through an unencrypted SecTAG; cakewalk, like
        // the kernel's dissector, treats the frame as non-IP.
        return;
    }
    let ours = wire::parse(data);
    let k = &ours.meta.keys;
    let (src, dst, dscp, ecn, proto, label) = match &theirs.net {
        Some(NetSlice::Ipv4(v4)) => {
            let h = v4.header();
            if h.protocol().0 == 51 {
                // etherparse walks an AH header after IPv4 (even in non-first fragments);
                // cakewalk, like the kernel's dissector, keys IPv4 AH packets on protocol 51.
                return;
            }
            (
                h.source_addr().to_ipv6_mapped().octets(),
                h.destination_addr().to_ipv6_mapped().octets(),
                h.dcp().value(),
                h.ecn().value(),
                v4.payload().ip_number.0,
                0,
            )
        }
        Some(NetSlice::Ipv6(v6)) => {
            let h = v6.header();
            if h.payload_length() == 0 {
                // etherparse reads a zero payload length as a jumbogram that runs to the end
                // of the frame; cakewalk reads it as an empty payload (no jumbo option
                // support), so the transport layer differs by design.
                return;
            }
            (
                h.source_addr().octets(),
                h.destination_addr().octets(),
                h.dscp().value(),
                h.ecn().value(),
                // After a non-first fragment header etherparse keeps walking "headers" that
                // are really fragment data; cakewalk stops there, as the kernel does.
                if v6.payload().fragmented {
                    k.protocol
                } else {
                    v6.payload().ip_number.0
                },
                h.flow_label().value(),
            )
        }
        Some(NetSlice::Arp(_)) => {
            assert_eq!(ours.meta.dscp, wire::ARP_DSCP);
            return;
        }
        None => return,
    };
    // etherparse reads only some transport headers (TCP, UDP, ICMP over the matching IP
    // version, IGMP); where it did not read one, a transport header too short for cakewalk
    // (SCTP, DCCP or UDP-Lite ports, ICMP type/code) is cakewalk's own finding.
    if ours.malformed == Some(wire::Malformed::TruncatedL4) && theirs.transport.is_none() {
        return;
    }
    if matches!(theirs.net, Some(NetSlice::Ipv6(_)))
        && matches!(k.protocol, 135 | 139 | 140 | 253 | 254)
    {
        // Mobility, HIP, shim6 and experimental headers: etherparse walks past them,
        // cakewalk (like the kernel's ipv6_ext_hdr()) stops and keys on them.
        return;
    }
    assert_eq!(ours.malformed, None, "etherparse read this frame as IP");
    assert_eq!((k.src_addr, k.dst_addr), (src, dst));
    assert_eq!((ours.meta.dscp, ours.meta.ecn), (dscp, ecn));
    assert_eq!(k.protocol, proto);
    assert_eq!(k.flow_label, label);
    match &theirs.transport {
        Some(TransportSlice::Tcp(t)) => {
            assert_eq!(
                (k.src_port, k.dst_port),
                (t.source_port(), t.destination_port())
            );
        }
        Some(TransportSlice::Udp(u)) => {
            assert_eq!(
                (k.src_port, k.dst_port),
                (u.source_port(), u.destination_port())
            );
        }
        _ => {}
    }
}

/// `config_parse`: any text is either refused with an error or loads; a loaded config's
/// effective `[shaper]` section loads back to the same CAKE configuration.
pub fn config_parse(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(config) = Config::from_toml_str(&text) {
        let again = Config::from_toml_str(&config.shaper.to_toml())
            .expect("the effective shaper section always loads");
        assert_eq!(again.to_cake_config(), config.to_cake_config());
        assert_eq!(again.shaper.queue, config.shaper.queue);
    }
}

/// `tc_options`: any tc option string is either refused or converts to TOML that loads to
/// the same CAKE configuration (unless the configuration itself is invalid, which the
/// loader reports).
pub fn tc_options(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(toml) = tc::to_toml(&text) else {
        return;
    };
    let words = tc::option_words(&text).expect("to_toml accepted it");
    let mut options = CakeOptions::default();
    options
        .apply_words(&words)
        .expect("to_toml accepted the same words");
    let want = options.to_cake_config();
    match Config::from_toml_str(&toml) {
        Ok(c) => assert_eq!(c.to_cake_config(), want, "{toml}"),
        Err(e) => assert!(want.validate().is_err(), "{toml} refused: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn replay(target: &str, body: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(target);
        let mut n = 0;
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let data = std::fs::read(&path).expect("corpus file is readable");
            body(&data);
            n += 1;
        }
        assert!(n > 0, "corpus/{target} is empty");
    }

    #[test]
    fn wire_parse_corpus_replays_cleanly() {
        replay("wire_parse", super::wire_parse);
    }

    #[test]
    fn config_parse_corpus_replays_cleanly() {
        replay("config_parse", super::config_parse);
    }

    #[test]
    fn tc_options_corpus_replays_cleanly() {
        replay("tc_options", super::tc_options);
    }

    #[test]
    fn regressions_found_by_earlier_runs_replay_cleanly() {
        // Crashes that were fixed are kept under regressions/<target>/ as regression inputs.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
        for (target, body) in [
            ("wire_parse", super::wire_parse as fn(&[u8])),
            ("config_parse", super::config_parse),
            ("tc_options", super::tc_options),
        ] {
            let Ok(dir) = std::fs::read_dir(root.join(target)) else {
                continue;
            };
            for entry in dir {
                let path = entry.expect("artifact entry").path();
                body(&std::fs::read(&path).expect("artifact is readable"));
            }
        }
    }
}
