//! Finds the system libdpdk with pkg-config, generates bindings with bindgen from the same
//! cflags DPDK's own build uses, and compiles the C shim for DPDK's static inline functions.
//! Nothing here names a DPDK library or a `-march` flag: pkg-config's answer is used verbatim.

use std::env;
use std::path::PathBuf;

const MIN_VERSION: &str = "22.11";

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "error: libdpdk not found by pkg-config: install libdpdk-dev (Debian/Ubuntu) \
                 or build without --features dpdk (need libdpdk >= {MIN_VERSION}; pkg-config said: {e})"
            );
            panic!(
                "libdpdk not found by pkg-config: install libdpdk-dev (Debian/Ubuntu) or build \
                 without --features dpdk"
            );
        }
    };

    let cflags = cflags();
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));

    let mut cc = cc::Build::new();
    cc.file(manifest.join("shim/shim.c"))
        .include(&manifest)
        .opt_level(3)
        .warnings(true);
    for flag in &cflags {
        cc.flag(flag);
    }
    cc.compile("cw_shim");

    let bindings = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_string_lossy())
        .clang_args(&cflags)
        .clang_arg(format!("-I{}", manifest.display()))
        .allowlist_function("rte_.*|cw_.*")
        .allowlist_type("rte_.*|RTE_.*|cw_.*")
        .allowlist_var("rte_.*|RTE_.*|cw_.*")
        .derive_default(true)
        .derive_debug(false)
        // Packed protocol headers from rte_flow.h that Rust cannot lay out (a packed struct
        // holding an aligned union); cakewalk never touches them, so they stay opaque.
        .opaque_type("rte_l2tpv2_.*|rte_gtp_psc_.*")
        .layout_tests(true)
        .generate_comments(false)
        .prepend_enum_name(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen could not read the DPDK headers (libdpdk {}): {e}",
                lib.version
            )
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("OUT_DIR is writable");
}

/// Returns `pkg-config --cflags libdpdk`, split on whitespace, verbatim: DPDK's pkg-config file
/// carries `-include rte_config.h` and the `-march` the library was built for.
fn cflags() -> Vec<String> {
    let out =
        std::process::Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
            .args(["--cflags", "libdpdk"])
            .output()
            .expect("pkg-config ran a moment ago");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}
