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

/// `circuits_import`: the first byte picks the format (ShapedDevices.csv, network.json, the
/// TOML form, or a CSV and a network file split at the first NUL), the rest is the file. Any
/// text is refused with problems or loads, never panics; a set that loads builds its prefix
/// table, and the first address of every device prefix is found in its own circuit (validation
/// refused every overlap between circuits).
pub fn circuits_import(data: &[u8]) {
    use circuits::Format;
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let files: Vec<(Format, &str, &str)> = match which % 4 {
        0 => vec![(Format::ShapedDevices, "ShapedDevices.csv", &text)],
        1 => vec![(Format::NetworkJson, "network.json", &text)],
        2 => vec![(Format::Native, "circuits.toml", &text)],
        _ => {
            let (csv, json) = text.split_once('\0').unwrap_or((&text, "{}"));
            vec![
                (Format::NetworkJson, "network.json", json),
                (Format::ShapedDevices, "ShapedDevices.csv", csv),
            ]
        }
    };
    let Ok((set, _warnings)) = circuits::load(files) else {
        return;
    };
    let _ = circuits::summary::Summary::of(&set).to_string();
    let table = circuits::prefix_table(&set).expect("a loaded set builds its table");
    for (p, circuit, _) in set.prefixes() {
        assert_eq!(
            table.lookup(p.addr()),
            Some(circuit as u32),
            "{p} must answer with its own circuit"
        );
    }
}

/// `lpm_build`: prefixes from the fuzzer's bytes (family, bits, length, answer; 19 bytes
/// each, up to 256), then probe addresses: the table answers every probe, and the first and
/// last address of every prefix, exactly as a linear scan does, one address at a time and in
/// bursts ([`circuits::Lpm::lookup_v4_batch`], [`circuits::Lpm::lookup_v6_batch`]). So does
/// the same table built with an IPv6 block for every /32 that holds two longer prefixes.
pub fn lpm_build(data: &[u8]) {
    use circuits::lpm::{linear_scan, Lpm};
    use circuits::prefix::mask;
    use circuits::{Family, Prefix};
    let mut b = Bytes(data);
    let count = usize::from(b.u8());
    let mut prefixes = Vec::with_capacity(count);
    for _ in 0..count {
        let family = if b.bool() { Family::V6 } else { Family::V4 };
        let hi = b.u64();
        let lo = b.u64();
        let len = b.u8() % (family.bits() + 1);
        // Few distinct top bits, so prefixes nest and share nodes.
        let bits = match family {
            Family::V4 => (u128::from(hi as u32) << 96) & mask(32),
            Family::V6 => (u128::from(hi) << 64) | u128::from(lo),
        };
        let bits = (bits & !mask(4)) & mask(len);
        prefixes.push((Prefix { family, bits, len }, u32::from(b.u16())));
    }
    let table = Lpm::build(prefixes.iter().copied()).expect("16-bit answers always fit");
    let blocked =
        Lpm::build_with_block_min(prefixes.iter().copied(), 2).expect("16-bit answers always fit");
    let mut probes: Vec<std::net::IpAddr> = Vec::new();
    for (p, _) in &prefixes {
        let last = Prefix {
            bits: p.bits | (!mask(p.len) & mask(p.family.bits())),
            len: p.family.bits(),
            family: p.family,
        };
        probes.push(p.addr());
        probes.push(last.addr());
    }
    while !b.is_empty() {
        let v6 = b.bool();
        let hi = b.u64();
        let lo = b.u64();
        probes.push(if v6 {
            std::net::IpAddr::V6(std::net::Ipv6Addr::from((u128::from(hi) << 64) | u128::from(lo)))
        } else {
            std::net::IpAddr::V4(std::net::Ipv4Addr::from(hi as u32))
        });
    }
    let expected: Vec<Option<u32>> = probes.iter().map(|&a| linear_scan(&prefixes, a)).collect();
    for table in [&table, &blocked] {
        lpm_agrees(table, &probes, &expected);
    }
}

/// [`lpm_build`]'s checks of one table: each probe, one at a time and in bursts.
fn lpm_agrees(table: &circuits::Lpm, probes: &[std::net::IpAddr], expected: &[Option<u32>]) {
    for (&a, &want) in probes.iter().zip(expected) {
        assert_eq!(table.lookup(a), want, "address {a}");
    }
    // The burst walks, over each family's probes in order (several bursts and a short last
    // one): the same answers as the scan.
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for (&a, &want) in probes.iter().zip(expected) {
        match a {
            std::net::IpAddr::V4(a) => v4.push((u32::from(a), want)),
            std::net::IpAddr::V6(a) => v6.push((u128::from(a), want)),
        }
    }
    let mut out = vec![Some(u32::MAX); v4.len().max(v6.len())];
    let addrs: Vec<u32> = v4.iter().map(|p| p.0).collect();
    table.lookup_v4_batch(&addrs, &mut out);
    for ((a, want), got) in v4.iter().zip(&out) {
        assert_eq!(got, want, "burst, address {}", std::net::Ipv4Addr::from(*a));
    }
    let addrs: Vec<u128> = v6.iter().map(|p| p.0).collect();
    table.lookup_v6_batch(&addrs, &mut out);
    for ((a, want), got) in v6.iter().zip(&out) {
        assert_eq!(got, want, "burst, address {}", std::net::Ipv6Addr::from(*a));
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
        // The flow hash key is no tc option: the forwarder draws it per process unless the
        // config sets a seed (forwarder::flow_key), so it is left out of the comparison.
        Ok(c) => assert_eq!(c.shaper.cake, want, "{toml}"),
        Err(e) => assert!(want.validate().is_err(), "{toml} refused: {e}"),
    }
}

/// Reads the fuzzer's bytes as numbers; past the end it reads zeros.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// A CAKE configuration from the fuzzer's bytes; `None` when the validator refuses it.
fn cake_config(b: &mut Bytes) -> Option<qdisc::cake::CakeConfig> {
    use qdisc::cake::{AckFilterMode, AtmMode, CakeConfig, DiffservMode, FlowMode};
    let mut c = CakeConfig {
        diffserv: DiffservMode::ALL[usize::from(b.u8()) % DiffservMode::ALL.len()],
        flow_mode: FlowMode::ALL[usize::from(b.u8()) % FlowMode::ALL.len()],
        ..CakeConfig::default()
    };
    c.rate = match b.u8() % 4 {
        0 => qdisc::Rate::UNLIMITED,
        // Any rate at all, from absurdly slow to absurdly fast.
        1 => qdisc::Rate::from_bits_per_sec(b.u64()),
        _ => qdisc::Rate::from_bits_per_sec(u64::from(b.u32()) * 1000),
    };
    let flags = b.u8();
    c.ingress = flags & 1 != 0;
    c.autorate_ingress = flags & 2 != 0;
    c.nat = flags & 4 != 0;
    c.wash = flags & 8 != 0;
    c.split_gso = flags & 16 != 0;
    c.raw = flags & 32 != 0;
    c.ack_filter = match b.u8() % 3 {
        0 => AckFilterMode::Off,
        1 => AckFilterMode::Filter,
        _ => AckFilterMode::Aggressive,
    };
    c.atm = match b.u8() % 3 {
        0 => AtmMode::None,
        1 => AtmMode::Atm,
        _ => AtmMode::Ptm,
    };
    c.overhead = i32::from(b.u16() as i16);
    c.mpu = u32::from(b.u16());
    c.packet_limit = u32::from(b.u16()) % 4096;
    if b.bool() {
        c.memlimit = Some(u64::from(b.u32()));
    }
    c.fwmark_mask = b.u32();
    if b.bool() {
        c.target_ns = u64::from(b.u32());
        c.interval_ns = u64::from(b.u32()) * 16;
    }
    c.validate().ok()?;
    Some(c)
}

/// Packet metadata from the fuzzer's bytes: any DSCP, ECN, mark, L2 length, GSO count and NIC
/// hash; addresses and ports come from a small set so that flows and hosts repeat.
fn packet_meta(b: &mut Bytes) -> qdisc::PacketMeta {
    let mut m = qdisc::PacketMeta::default();
    m.keys.l3 = match b.u8() % 3 {
        0 => qdisc::L3Kind::NonIp,
        1 => qdisc::L3Kind::Ipv4,
        _ => qdisc::L3Kind::Ipv6,
    };
    // Few distinct hosts and ports, so flows and hosts collide and repeat.
    let host = b.u8();
    m.keys.src_addr[15] = host & 0x0f;
    m.keys.dst_addr[15] = host >> 4;
    m.keys.src_port = u16::from(b.u8());
    m.keys.dst_port = u16::from(b.u8() & 3);
    m.keys.protocol = b.u8();
    m.keys.flow_label = u32::from(b.u8() & 3);
    m.dscp = b.u8();
    m.ecn = b.u8();
    if b.bool() {
        m.l4_hash = Some(b.u32());
    }
    m.keys_rewritten = b.bool();
    m.mark = u32::from(b.u8());
    m.l2_len = u16::from(b.u8());
    m.gso_segs = u16::from(b.u8() & 7);
    m
}

/// `cake_ops`: CAKE takes any configuration the validator accepts and then any sequence of
/// packets (any metadata, any length, any ACK facts), dequeues, clock steps (backwards
/// too), rate changes, full reconfigurations and bypass attempts without panicking. Its own
/// invariants hold after every step; every enqueue reports exactly the drops it counted;
/// after a final drain nothing is lost or made up: packets in = out + dropped (by every
/// reason: overflow and purges, the ACK filter, COBALT at dequeue) + still queued.
pub fn cake_ops(data: &[u8]) {
    use qdisc::testing::TestPacket;
    use qdisc::{Dequeue, Qdisc};
    let mut b = Bytes(data);
    let Some(config) = cake_config(&mut b) else {
        return;
    };
    let Ok(mut q) = qdisc::cake::Cake::<TestPacket>::new(&config) else {
        panic!("a configuration that validates must build");
    };
    let (mut now, mut seq) = (1_000_000u64, 0u64);
    let drops = |q: &qdisc::cake::Cake<TestPacket>| q.stats().drops.iter().sum::<u64>();
    let (mut queued_in, mut out) = (0u64, 0u64);
    let mut ops = 0;
    while !b.is_empty() && ops < 4096 {
        ops += 1;
        match b.u8() % 8 {
            0..=3 => {
                let meta = packet_meta(&mut b);
                let len = match b.u8() % 8 {
                    0 => 0,
                    1 => usize::MAX,
                    2 => 65_536 * 4,
                    _ => usize::from(b.u16() % 1600),
                };
                seq += 1;
                let mut p = TestPacket::new(len, u32::from(meta.keys.src_port), seq);
                p.ect = meta.ecn & 3 != 0;
                if b.bool() {
                    p.ack = Some(qdisc::TcpAckInfo {
                        flags: b.u8(),
                        ack_seq: u32::from(b.u16()),
                        payload_len: u16::from(b.u8() & 1),
                        timestamp: b.bool().then(|| (u32::from(b.u8()), u32::from(b.u8()))),
                        ..Default::default()
                    });
                }
                let before = drops(&q);
                let e = q.enqueue(now, p, &meta);
                queued_in += 1;
                assert_eq!(
                    u64::from(e.dropped_packets),
                    drops(&q) - before,
                    "an enqueue reports the drops it counts"
                );
            }
            4 | 5 => {
                // Mostly forward, sometimes backwards (a clock that stepped back).
                let step = u64::from(b.u16()) * 1000;
                now = if b.u8() == 0 {
                    now.saturating_sub(step)
                } else {
                    now.saturating_add(step)
                };
                for _ in 0..(b.u8() % 16) {
                    match q.dequeue(now) {
                        Dequeue::Packet(_) => out += 1,
                        _ => break,
                    }
                }
            }
            6 => {
                let meta = packet_meta(&mut b);
                let p = TestPacket::new(usize::from(b.u16() % 1600), 0, 0);
                // A bypassed packet is sent by the caller: it never enters the queue.
                let _ = q.try_bypass(now, &p, &meta);
            }
            _ => {
                if b.bool() {
                    q.set_rate(qdisc::Rate::from_bits_per_sec(u64::from(b.u32()) * 1000));
                } else if let Some(c) = cake_config(&mut b) {
                    q.reconfigure(&c)
                        .expect("a configuration that validates applies");
                }
            }
        }
        if let Err(e) = q.check_invariants() {
            panic!("invariant broken after op {ops}: {e}");
        }
    }
    // Drain: whatever is queued leaves within a bounded number of dequeues.
    let mut budget = 4 * (q.len() as u64) + 64;
    while q.len() > 0 && budget > 0 {
        budget -= 1;
        now = now.saturating_add(10_000_000);
        match q.dequeue(now) {
            Dequeue::Packet(_) => out += 1,
            Dequeue::NotBefore(t) => now = t.max(now),
            Dequeue::Empty => break,
        }
    }
    assert_eq!(
        queued_in,
        out + drops(&q) + q.len() as u64,
        "packets in = out + dropped + queued"
    );
}

/// `packet_spec`: any text is either refused or parses to a spec whose packet, built as real
/// bytes and parsed as the data path would, carries what the spec said; explaining it
/// never panics, for CAKE and FIFO and any queue count.
pub fn packet_spec(data: &[u8]) {
    use forwarder::config::QueueKind;
    use forwarder::explain::{explain_queue, PacketSpec};

    let text = String::from_utf8_lossy(data);
    let Ok(spec) = PacketSpec::parse(&text) else {
        return;
    };
    assert!(
        spec.dscp < 64 && spec.ecn < 4 && spec.flow_label < 1 << 20,
        "{spec:?}"
    );
    let meta = spec.meta();
    assert_eq!(meta.dscp, spec.dscp, "{text}");
    assert_eq!(meta.ecn, spec.ecn, "{text}");
    assert_eq!(meta.keys.protocol, spec.protocol, "{text}");
    let queues = usize::from(data.first().copied().unwrap_or(1) % 9);
    for kind in [QueueKind::Cake, QueueKind::Fifo] {
        let e = explain_queue(&spec, kind, &qdisc::cake::CakeConfig::default(), queues)
            .expect("the default CAKE configuration is valid");
        assert!(!e.to_string().is_empty());
    }
}

/// `control_command`: any command line gets a one-line-or-more reply that starts with
/// `ok` or `error:` (or is a stats report), and no sequence of commands leaves the live
/// CAKE configuration in a state that `cakewalk run` would refuse.
pub fn control_command(data: &[u8]) {
    use forwarder::control::{handle_command, ControlState, LiveTarget};
    use qdisc::cake::CakeConfig;
    use qdisc::Rate;
    use std::sync::{Arc, Mutex};

    /// Applies what it is told, as the engine's queues would, and refuses what the
    /// qdisc refuses.
    struct Queues(Mutex<CakeConfig>);
    impl LiveTarget for Queues {
        fn set_rate(&self, rate: Rate) {
            self.0.lock().expect("not poisoned").rate = rate;
        }
        fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String> {
            cake.validate().map_err(|e| e.to_string())?;
            *self.0.lock().expect("not poisoned") = cake.clone();
            Ok(())
        }
        fn rate(&self) -> Rate {
            self.0.lock().expect("not poisoned").rate
        }
    }

    let queues = Arc::new(Queues(Mutex::new(CakeConfig::default())));
    let state = ControlState {
        directions: vec![forwarder::control::DirectionTarget::new(
            forwarder::config::direction::Direction::Download,
            "a",
            queues.clone(),
            CakeConfig::default(),
        )],
        started_with: Config::from_toml_str("").expect("the empty config loads"),
        latest_text: Arc::new(Mutex::new("report".into())),
        latest_json: Arc::new(Mutex::new("{}".into())),
        fresh: Mutex::new(None),
        circuits: None,
    };
    // One command per line, as a client would send them over one connection each.
    for line in String::from_utf8_lossy(data).lines().take(32) {
        let reply = handle_command(&state, line);
        assert!(
            reply.starts_with("ok")
                || reply.starts_with("error: ")
                || reply == "report"
                || reply == "{}",
            "{line:?} -> {reply:?}"
        );
        let live = state.directions[0].cake();
        live.validate()
            .unwrap_or_else(|e| panic!("{line:?} left an invalid config: {e}"));
        assert_eq!(
            queues.rate(),
            live.rate,
            "{line:?}: the queues' rate and the state's differ"
        );
    }
}

/// `control_conversation`: a whole control conversation against a live-like forwarder: one
/// port's real cake_mq queues (one to three TX queues) carrying traffic between commands.
/// Each line of the input is a command, as a client would send it; before it, packets
/// (flows, DSCPs and sizes drawn from the line's bytes) are offered and the queues run.
/// Checked after every command: the reply is well formed (`ok ...`, `error: ...` or a
/// report), the live configuration is one `cakewalk run` would accept, the queues run at
/// the rate the state says, applying the change at the queues' next safe point drops
/// nothing, and every packet is accounted for (offered = sent + dropped + queued), also
/// after a final drain.
pub fn control_conversation(data: &[u8]) {
    use forwarder::control::{handle_command, ControlState, LiveTarget};
    use qdisc::cake::{Cake, CakeConfig, DiffservMode};
    use qdisc::mq::{Intake, MultiQueue, TxQueueOptions};
    use qdisc::testing::TestPacket;
    use qdisc::Rate;
    use std::sync::{Arc, Mutex};

    type Queues = MultiQueue<TestPacket, Cake<TestPacket>>;
    /// The running port, as the forwarder's own live target drives it.
    struct Port(Queues);
    impl LiveTarget for Port {
        fn set_rate(&self, rate: Rate) {
            self.0.set_rate(rate);
        }
        fn reconfigure(&self, cake: &CakeConfig) -> Result<(), String> {
            self.0.reconfigure(cake).map_err(|e| e.to_string())
        }
        fn rate(&self) -> Rate {
            self.0.rate()
        }
    }

    let queues = data.len() % 3 + 1;
    let start = CakeConfig {
        rate: Rate::from_bits_per_sec(10_000_000),
        diffserv: DiffservMode::Diffserv4,
        ..CakeConfig::default()
    };
    let port = Arc::new(Port(
        Queues::from_config(queues, TxQueueOptions::default(), &start)
            .expect("the start configuration is valid"),
    ));
    let started_with = Config::from_toml_str(&format!(
        "[shaper]\nrate = \"10mbit\"\ndiffserv = \"diffserv4\"\n[engine]\ntx_queues = {queues}"
    ))
    .expect("the start config loads");
    let state = ControlState {
        directions: vec![forwarder::control::DirectionTarget::new(
            forwarder::config::direction::Direction::Download,
            "a",
            port.clone(),
            start,
        )],
        started_with,
        latest_text: Arc::new(Mutex::new("report".into())),
        latest_json: Arc::new(Mutex::new("{}".into())),
        fresh: Mutex::new(None),
        circuits: None,
    };
    let mq = &port.0;
    let (mut now, mut seq) = (1_000_000u64, 0u64);
    let (mut offered, mut sent) = (0u64, 0u64);
    let run_all = |now: u64, budget: usize, sent: &mut u64| {
        for q in mq.queues() {
            let mut out = Vec::new();
            let _ = q.run(now, budget, &mut out, |o: &mut Vec<TestPacket>| {
                *sent += o.len() as u64;
                o.clear();
            });
        }
    };
    let accounted = |sent: u64| {
        let st = mq.stats();
        let queued: u64 = mq.queues().iter().map(|q| q.backlog() as u64).sum();
        sent + st.total_drops() + queued
    };
    const DSCPS: [u8; 6] = [0, 8, 10, 34, 46, 48];
    for line in data.split(|&b| b == b'\n').take(64) {
        // Traffic drawn from the line: what a busy forwarder queues while commands arrive.
        let h = line.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        for k in 0..(h % 48) {
            let x = h.rotate_left(k as u32 * 7);
            let mut meta = qdisc::PacketMeta::default();
            meta.keys.l3 = qdisc::L3Kind::Ipv4;
            meta.keys.src_addr[15] = (x & 7) as u8;
            meta.keys.src_port = (x >> 3 & 15) as u16;
            meta.keys.protocol = 17;
            meta.dscp = DSCPS[(x >> 8) as usize % DSCPS.len()];
            meta.l2_len = 14;
            seq += 1;
            let pkt = TestPacket::new(
                64 + (x >> 16) as usize % 1451,
                u32::from(meta.keys.src_port),
                seq,
            );
            offered += 1;
            if let Intake::Bypass(_) = mq.queue(k as usize % queues).enqueue(now, pkt, &meta) {
                sent += 1;
            }
        }
        now += 50_000 + h % 2_000_000;
        run_all(now, 8, &mut sent);

        let command = String::from_utf8_lossy(line);
        let reply = handle_command(&state, &command);
        assert!(
            reply.starts_with("ok")
                || reply.starts_with("error: ")
                || reply == "report"
                || reply == "{}",
            "{command:?} -> {reply:?}"
        );
        // The change reaches each queue at its next run: at the same instant and with a
        // dequeue budget of 0 that run only applies it, so any drop is the change's.
        let drops = mq.stats().total_drops();
        run_all(now, 0, &mut sent);
        assert_eq!(
            mq.stats().total_drops(),
            drops,
            "{command:?} dropped queued packets"
        );
        let live = state.directions[0].cake();
        live.validate()
            .unwrap_or_else(|e| panic!("{command:?} left an invalid config: {e}"));
        assert_eq!(
            mq.rate(),
            live.rate,
            "{command:?}: the queues' rate and the state's differ"
        );
        assert_eq!(
            offered,
            accounted(sent),
            "{command:?}: offered = sent + dropped + queued"
        );
    }
    // Drain: at an unlimited rate whatever is queued leaves in a bounded number of runs.
    mq.set_rate(Rate::UNLIMITED);
    for _ in 0..64 {
        if mq.queues().iter().all(|q| q.backlog() == 0) {
            break;
        }
        now += 100_000_000;
        run_all(now, 1024, &mut sent);
    }
    assert_eq!(
        offered,
        accounted(sent),
        "after the drain: offered = sent + dropped + queued"
    );
}

/// `config_reload`: SIGHUP's decision for any pair of files. The input is the file the
/// forwarder started with and the file it re-reads, separated by a line `%%` (without one,
/// it started from an empty file); command-line overrides (none, `--rate`, `--diffserv`)
/// are picked by the input's length. The reload never panics and is one of: refused (the
/// running configuration is kept as it was), or applied, where the applied list names a
/// change exactly when CAKE's configuration changed, the restart list names a key exactly
/// when something only a restart applies changed, each log line starts with `reload:`,
/// and reading the same file again changes nothing more.
pub fn config_reload(data: &[u8]) {
    use forwarder::config::Overrides;
    use forwarder::reload::{cake_changes, reload_once};

    let text = String::from_utf8_lossy(data);
    let (old, new) = match text.strip_prefix("%%\n") {
        Some(b) => (String::new(), b.to_string()),
        None => match text.split_once("\n%%\n") {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (String::new(), text.to_string()),
        },
    };
    /// A directory of its own per call (the replay tests run this body on several threads
    /// at once), removed when the call ends however it ends.
    struct Scratch(std::path::PathBuf);
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Scratch(std::env::temp_dir().join(format!(
        "cakewalk-fuzz-reload-{}-{call}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let (old_path, new_path) = (dir.0.join("old.toml"), dir.0.join("new.toml"));
    std::fs::write(&old_path, old).expect("temp file");
    std::fs::write(&new_path, new).expect("temp file");
    let mut overrides = Overrides::default();
    match data.len() % 3 {
        1 => overrides.set("shaper.rate", "10mbit", "--rate"),
        2 => overrides.set("shaper.diffserv", "besteffort", "--diffserv"),
        _ => {}
    }
    let Ok(started) = Config::load(Some(&old_path), &overrides) else {
        return;
    };
    let mut current = started.clone();
    let out = reload_once(&new_path, &overrides, &mut current, &started);
    let lines = out.log_lines("new.toml");
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.starts_with("reload: ")),
        "{lines:?}"
    );
    if let Some(e) = &out.error {
        assert_eq!(
            current, started,
            "a refused reload changed the running config: {e}"
        );
        assert!(
            out.applied.is_empty() && out.needs_restart.is_empty(),
            "{out:?}"
        );
        return;
    }
    let loaded = Config::load(Some(&new_path), &overrides).expect("reload_once loaded it");
    assert_eq!(current, loaded, "the running config is the file's");
    assert_eq!(
        out.applied,
        cake_changes(&started.shaper.cake, &current.shaper.cake)
    );
    assert_eq!(
        out.applied.is_empty(),
        started.shaper.cake == current.shaper.cake,
        "a CAKE change not named (or one named that did not happen): {:?}",
        out.applied
    );
    let (a, b) = (&started, &current);
    let same_for_restart = a.ports == b.ports
        && a.engine == b.engine
        && a.stats == b.stats
        && a.shaper.queue == b.shaper.queue
        && a.shaper.bypass == b.shaper.bypass
        && a.shaper.sync_policy == b.shaper.sync_policy
        && a.shaper.sync_interval_ns == b.shaper.sync_interval_ns;
    assert_eq!(
        out.needs_restart.is_empty(),
        same_for_restart,
        "a restart-only change not named (or one named that did not happen): {:?}",
        out.needs_restart
    );
    let again = reload_once(&new_path, &overrides, &mut current, &started);
    assert!(
        again.error.is_none() && again.applied.is_empty(),
        "{again:?}"
    );
    assert_eq!(again.needs_restart, out.needs_restart);
}

/// `pcap_file`: any bytes are either refused with an error or read as frames that lie
/// inside the input (no frame is invented, none is longer than the file).
pub fn pcap_file(data: &[u8]) {
    use forwarder::port::pcap::PcapFrames;
    let path = std::path::Path::new("fuzz.pcap");
    let Ok(frames) = PcapFrames::read(data, data.len() as u64, path) else {
        return;
    };
    let mut total = 0usize;
    for i in 0..frames.len() {
        total += frames.frame(i).len();
    }
    assert!(
        total <= data.len(),
        "{total} frame bytes from {} input bytes",
        data.len()
    );
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
    fn circuits_import_corpus_replays_cleanly() {
        replay("circuits_import", super::circuits_import);
    }

    #[test]
    fn lpm_build_corpus_replays_cleanly() {
        replay("lpm_build", super::lpm_build);
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
    fn cake_ops_corpus_replays_cleanly() {
        replay("cake_ops", super::cake_ops);
    }

    #[test]
    fn packet_spec_corpus_replays_cleanly() {
        replay("packet_spec", super::packet_spec);
    }

    #[test]
    fn control_command_corpus_replays_cleanly() {
        replay("control_command", super::control_command);
    }

    #[test]
    fn control_conversation_corpus_replays_cleanly() {
        replay("control_conversation", super::control_conversation);
    }

    #[test]
    fn config_reload_corpus_replays_cleanly() {
        replay("config_reload", super::config_reload);
    }

    #[test]
    fn pcap_file_corpus_replays_cleanly() {
        replay("pcap_file", super::pcap_file);
    }

    #[test]
    fn regressions_found_by_earlier_runs_replay_cleanly() {
        // Crashes that were fixed are kept under regressions/<target>/ as regression inputs.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
        for (target, body) in [
            ("wire_parse", super::wire_parse as fn(&[u8])),
            ("config_parse", super::config_parse),
            ("tc_options", super::tc_options),
            ("cake_ops", super::cake_ops),
            ("packet_spec", super::packet_spec),
            ("control_command", super::control_command),
            ("control_conversation", super::control_conversation),
            ("config_reload", super::config_reload),
            ("pcap_file", super::pcap_file),
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
