//! Unit tests of the preflight checks, run against fixture trees of `/sys` and `/proc`: each
//! failing check names its fix, and a good box passes.

use super::*;
use crate::port::afpacket::{LinkFacts, Offloads};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

fn opts(name: &str) -> Options {
    Options {
        root: fixture(name),
        ports: vec!["0000:03:00.0".into()],
        queues: 2,
        cores: vec![2, 3],
        min_hugepage_mib: 512,
        config: Some(Ok(())),
        ..Options::default()
    }
}

/// An AF_PACKET box under fixture `name` with ports a = `a`, b = `b`.
fn afpacket_opts(name: &str, a: &str, b: &str) -> Options {
    let mut ports = crate::port::PortsConfig::default();
    for (spec, iface) in [(&mut ports.a, a), (&mut ports.b, b)] {
        spec.kind = crate::port::PortKind::Afpacket;
        spec.iface = iface.into();
    }
    Options {
        root: fixture(name),
        links: Links::Sysfs,
        config: Some(Ok(())),
        ..Options::default()
    }
    .with_ports(&ports)
}

fn link(up: bool, carrier: bool, mtu: u32, offloads: Option<Offloads>) -> LinkFacts {
    LinkFacts {
        index: 2,
        up,
        carrier,
        mtu,
        offloads,
        driver: None,
    }
}

#[test]
fn an_afpacket_box_with_both_interfaces_up_is_ready_without_dpdk_checks() {
    let r = run(&afpacket_opts("afpacket-good", "lan0", "wan0"));
    assert!(r.may_start(), "{r}");
    for name in [
        "capabilities",
        "link a",
        "mtu a",
        "link b",
        "mtu b",
        "ports",
    ] {
        assert_eq!(
            r.get(name).map(|c| c.status),
            Some(Status::Ok),
            "{name}: {r}"
        );
    }
    // A fake tree has no offload state; the kernel is asked on a real box.
    assert_eq!(r.get("offloads a").unwrap().status, Status::Skip, "{r}");
    assert_eq!(r.get("dpdk").unwrap().status, Status::Skip, "{r}");
    assert!(
        r.get("hugepages").is_none(),
        "no DPDK port, no hugepage check: {r}"
    );
    let text = r.to_string();
    assert!(
        text.starts_with("preflight checks the machine tree under"),
        "{text}"
    );
}

#[test]
fn a_missing_interface_a_down_one_and_no_cap_net_raw_fail_with_their_fixes() {
    let r = run(&afpacket_opts("afpacket-bad", "lan0", "wan0"));
    assert!(!r.may_start());
    let missing = r.get("link a").unwrap();
    assert_eq!(missing.status, Status::Fail);
    assert!(
        missing.detail.contains("no interface 'lan0'") && missing.detail.contains("wan0"),
        "{r}"
    );
    assert!(missing.fix.as_deref().unwrap().contains("[ports.a]"), "{r}");
    let down = r.get("link b").unwrap();
    assert_eq!(
        (down.status, down.fix.as_deref()),
        (Status::Fail, Some("ip link set wan0 up"))
    );
    let mtu = r.get("mtu b").unwrap();
    assert_eq!(mtu.status, Status::Fail, "{r}");
    assert!(
        mtu.detail
            .contains("9014 bytes, longer than ports.buffer_size = 2048"),
        "{r}"
    );
    assert_eq!(
        mtu.fix.as_deref(),
        Some("raise ports.buffer_size to 9018 (--set ports.buffer_size=9018), or lower the MTU: ip link set wan0 mtu 2030")
    );
    let caps = r.get("capabilities").unwrap();
    assert_eq!(caps.status, Status::Fail);
    assert!(
        caps.fix.as_deref().unwrap().contains("setcap cap_net_raw"),
        "{r}"
    );
    assert!(r.get("ports").is_none(), "one interface was not found: {r}");
    assert!(
        r.to_string()
            .ends_with("not ready: 4 check(s) failed, 0 warning(s)"),
        "{r}"
    );
}

#[test]
fn two_names_of_one_interface_are_refused() {
    let mut r = Report::default();
    let o = afpacket_opts("afpacket-good", "lan0", "lan0");
    check_afpacket(&o, &mut r);
    let p = r.get("ports").unwrap();
    assert_eq!(p.status, Status::Fail, "{r}");
    assert!(p.detail.contains("are one interface (index 2)"), "{r}");
}

#[test]
fn gro_against_small_buffers_fails_with_the_ethtool_fix() {
    let gro = Offloads {
        gro: true,
        lro: true,
        gso: true,
        tso: true,
    };
    let mut r = Report::default();
    check_link(
        "a",
        "eth1",
        &link(true, true, 1500, Some(gro)),
        2048,
        &mut r,
    );
    let o = r.get("offloads a").unwrap();
    assert_eq!(o.status, Status::Fail, "{r}");
    assert!(
        o.detail.starts_with("gro and lro on 'eth1'")
            && o.detail.contains("dropped as rx_oversize"),
        "{r}"
    );
    assert_eq!(o.fix.as_deref(), Some("ethtool -K eth1 gro off lro off"));
    // Buffers that hold a 64 KiB merged frame take GRO as it is.
    let mut r = Report::default();
    check_link(
        "a",
        "eth1",
        &link(true, true, 1500, Some(gro)),
        65_549,
        &mut r,
    );
    assert_eq!(r.get("offloads a").unwrap().status, Status::Ok, "{r}");
    // GRO off: fine, whatever TSO does on a NIC.
    let off = Offloads {
        gro: false,
        lro: false,
        ..gro
    };
    let mut r = Report::default();
    check_link(
        "a",
        "eth1",
        &link(true, true, 1500, Some(off)),
        2048,
        &mut r,
    );
    let o = r.get("offloads a").unwrap();
    assert_eq!(o.status, Status::Ok, "{r}");
    assert!(
        o.detail.starts_with("gro off, lro off, tso on, gso on"),
        "{r}"
    );
    // A veth with segmentation on: its peer likely sends super-frames.
    let veth = LinkFacts {
        driver: Some("veth".into()),
        ..link(true, true, 1500, Some(off))
    };
    let mut r = Report::default();
    check_link("a", "va", &veth, 2048, &mut r);
    let o = r.get("offloads a").unwrap();
    assert_eq!(o.status, Status::Warn, "{r}");
    assert!(o.fix.as_deref().unwrap().contains("tso off gso off"), "{r}");
}

#[test]
fn no_carrier_warns_and_a_tagged_full_frame_that_does_not_fit_warns() {
    let mut r = Report::default();
    check_link("b", "wan0", &link(true, false, 2034, None), 2048, &mut r);
    assert_eq!(r.get("link b").unwrap().status, Status::Warn, "{r}");
    let m = r.get("mtu b").unwrap();
    assert_eq!(m.status, Status::Warn, "{r}");
    assert!(
        m.detail.contains("VLAN-tagged frames are 2052 bytes"),
        "{r}"
    );
}

#[test]
fn a_good_box_may_start_with_every_check_ok() {
    let r = run(&opts("good"));
    assert!(r.may_start(), "{r}");
    for c in &r.checks {
        assert_eq!(c.status, Status::Ok, "{r}");
    }
    assert!(r.to_string().ends_with("ready: 0 warning(s)"), "{r}");
}

#[test]
fn missing_hugepages_fail_with_the_reserve_command() {
    let r = run(&opts("no-hugepages"));
    assert!(!r.may_start());
    let h = r.get("hugepages").unwrap();
    assert_eq!(h.status, Status::Fail);
    assert!(
        h.fix.as_deref().unwrap().contains("hugepage-setup reserve"),
        "{r}"
    );
    assert_eq!(r.get("hugetlbfs").unwrap().status, Status::Fail, "{r}");
}

#[test]
fn a_box_without_iommu_or_vfio_fails_with_the_fixes() {
    let r = run(&opts("no-iommu"));
    assert!(!r.may_start());
    assert!(
        r.get("iommu")
            .unwrap()
            .fix
            .as_deref()
            .unwrap()
            .contains("intel_iommu=on"),
        "{r}"
    );
    assert_eq!(
        r.get("vfio-pci").unwrap().fix.as_deref(),
        Some("modprobe vfio-pci")
    );
    assert_eq!(r.get("/dev/vfio").unwrap().status, Status::Fail);
}

#[test]
fn a_nic_on_its_kernel_driver_fails_with_the_bind_command() {
    let r = run(&opts("kernel-driver"));
    assert!(!r.may_start());
    let nic = r.get("nic 0000:03:00.0").unwrap();
    assert_eq!(nic.status, Status::Fail);
    assert!(nic.detail.contains("kernel driver ixgbe (if=eth1)"), "{r}");
    assert_eq!(
        nic.fix.as_deref(),
        Some("ip link set eth1 down && dpdk-devbind.py --bind=vfio-pci 0000:03:00.0")
    );
    let q = r.get("queues 0000:03:00.0").unwrap();
    assert_eq!(q.status, Status::Warn, "{r}");
    assert!(
        q.fix
            .as_deref()
            .unwrap()
            .contains("ethtool -L eth1 combined 2"),
        "{r}"
    );
}

#[test]
fn a_nic_can_be_named_by_interface_or_short_pci_address() {
    for port in ["eth1", "03:00.0"] {
        let o = Options {
            ports: vec![port.into()],
            ..opts("kernel-driver")
        };
        assert_eq!(
            run(&o).get("nic 0000:03:00.0").unwrap().status,
            Status::Fail,
            "{port}"
        );
    }
    let o = Options {
        ports: vec!["0000:09:00.0".into()],
        ..opts("good")
    };
    let r = run(&o);
    assert!(
        r.get("port 0000:09:00.0")
            .unwrap()
            .detail
            .contains("found: 0000:03:00.0"),
        "{r}"
    );
}

#[test]
fn busy_irqs_on_a_worker_core_are_reported_with_the_affinity_fix() {
    let r = run(&opts("kernel-driver"));
    let c = r.get("core 3").unwrap();
    assert_eq!(c.status, Status::Warn, "{r}");
    assert!(
        c.detail.contains("IRQ 42 (eth1-TxRx-0)") && c.detail.contains("not isolated"),
        "{r}"
    );
    assert_eq!(
        c.fix.as_deref(),
        Some("echo 0,1 > /proc/irq/42/smp_affinity_list")
    );
    assert_eq!(
        r.get("core 2").unwrap().status,
        Status::Warn,
        "core 2 is not isolated either: {r}"
    );
    let o = Options {
        cores: vec![7],
        ..opts("good")
    };
    assert_eq!(run(&o).get("core 7").unwrap().status, Status::Fail);
}

#[test]
fn virtual_devices_need_no_iommu_or_binding() {
    let o = Options {
        ports: vec!["net_null0".into(), "net_pcap0,rx_pcap=a.pcap".into()],
        ..opts("no-iommu")
    };
    let r = run(&o);
    assert_eq!(r.get("iommu").unwrap().status, Status::Skip, "{r}");
    assert_eq!(r.get("port net_pcap0").unwrap().status, Status::Ok);
    assert!(r.get("vfio-pci").is_none());
}

#[test]
fn without_ports_a_missing_iommu_only_warns() {
    let o = Options {
        ports: vec![],
        ..opts("no-iommu")
    };
    let r = run(&o);
    assert_eq!(r.get("iommu").unwrap().status, Status::Warn, "{r}");
    assert_eq!(r.get("vfio-pci").unwrap().status, Status::Warn, "{r}");
    assert!(
        r.get("iommu")
            .unwrap()
            .detail
            .contains("virtual devices work without"),
        "{r}"
    );
}

#[test]
fn an_invalid_config_fails_and_no_config_is_skipped() {
    let o = Options {
        config: Some(Err("rate '2gbps' is not a rate; try '2gbit'".into())),
        ..opts("good")
    };
    let r = run(&o);
    assert!(!r.may_start());
    assert!(
        r.to_string()
            .contains("[FAIL] config: rate '2gbps' is not a rate"),
        "{r}"
    );
    let o = Options {
        config: None,
        ..opts("good")
    };
    assert_eq!(run(&o).get("config").unwrap().status, Status::Skip);
}

#[test]
fn without_ports_every_pci_nic_is_listed_like_devbind_status() {
    let o = Options {
        ports: vec![],
        ..opts("kernel-driver")
    };
    let r = run(&o);
    let nic = r.get("nic 0000:03:00.0").unwrap();
    assert!(nic.detail.starts_with("drv=ixgbe (if=eth1)"), "{r}");
    assert!(
        r.get("nic 0000:00:1f.2").is_none(),
        "a SATA controller is no NIC: {r}"
    );
}

#[test]
fn cpu_lists_and_interrupt_tables_parse() {
    assert_eq!(parse_cpu_list("0-2,5\n"), vec![0, 1, 2, 5]);
    assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
    let t = "           CPU0       CPU1\n  0:         10          0   IO-APIC    2-edge      timer\nNMI:          1          1   Non-maskable interrupts\n";
    let p = parse_interrupts(t);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].1, vec![10, 0]);
    assert_eq!(p[0].2, "timer");
}

#[test]
fn hugepages_are_read_per_node_else_from_the_global_pools() {
    let dir = tempfile::tempdir().unwrap();
    let pool = |path: &str, reserved: u64, free: u64| {
        let p = dir.path().join(path);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("nr_hugepages"), format!("{reserved}\n")).unwrap();
        std::fs::write(p.join("free_hugepages"), format!("{free}\n")).unwrap();
    };
    pool("sys/kernel/mm/hugepages/hugepages-2048kB", 512, 500);
    let detail = |r: &Report| r.get("hugepages").unwrap().detail.clone();
    let mut r = Report::default();
    dpdk::check_hugepages(dir.path(), 512, &mut r);
    assert!(detail(&r).contains("all: 512 x 2M (500 free)"), "{r}");
    // With nodes, their pools count and the global view (their sum) does not.
    pool(
        "sys/devices/system/node/node0/hugepages/hugepages-2048kB",
        256,
        256,
    );
    pool(
        "sys/devices/system/node/node1/hugepages/hugepages-2048kB",
        256,
        244,
    );
    pool(
        "sys/devices/system/node/node1/hugepages/hugepages-1048576kB",
        0,
        0,
    );
    let mut r = Report::default();
    dpdk::check_hugepages(dir.path(), 512, &mut r);
    let d = detail(&r);
    assert!(d.starts_with("1024 MiB reserved, 1000 MiB free"), "{d}");
    assert!(
        d.contains("node0: 256 x 2M (256 free), node1: 256 x 2M (244 free)"),
        "{d}"
    );
}

#[test]
fn transparent_huge_pages_off_warns_and_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let thp = dir.path().join("sys/kernel/mm/transparent_hugepage");
    let run_with = |mode: Option<&str>| {
        if let Some(mode) = mode {
            std::fs::create_dir_all(&thp).unwrap();
            std::fs::write(thp.join("enabled"), format!("{mode}\n")).unwrap();
        }
        let o = Options {
            root: dir.path().to_path_buf(),
            dpdk: false,
            ..Options::default()
        };
        run(&o).get("huge pages (heap)").unwrap().clone()
    };
    assert_eq!(run_with(None).status, Status::Skip);
    let ok = run_with(Some("always [madvise] never"));
    assert_eq!(ok.status, Status::Ok, "{}", ok.detail);
    assert!(ok.detail.contains("'madvise'"), "{}", ok.detail);
    assert_eq!(run_with(Some("[always] madvise never")).status, Status::Ok);
    let off = run_with(Some("always madvise [never]"));
    assert_eq!(off.status, Status::Warn, "{}", off.detail);
    assert!(off.detail.contains("'never'"), "{}", off.detail);
    assert!(off.fix.unwrap().contains("transparent_hugepage/enabled"));
}
