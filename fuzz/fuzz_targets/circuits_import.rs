//! Fuzz target `circuits_import`: feeds libFuzzer's input to [`cakewalk_fuzz::circuits_import`]. Built without
//! `--cfg fuzzing` it replays the files named on the command line instead.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cakewalk_fuzz::circuits_import(data));

#[cfg(not(fuzzing))]
fn main() {
    for path in std::env::args().skip(1) {
        let data = std::fs::read(&path).expect("corpus file is readable");
        cakewalk_fuzz::circuits_import(&data);
    }
}
