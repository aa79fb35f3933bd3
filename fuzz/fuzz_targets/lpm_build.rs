//! Fuzz target `lpm_build`: feeds libFuzzer's input to [`cakewalk_fuzz::lpm_build`]. Built without
//! `--cfg fuzzing` it replays the files named on the command line instead.
#![cfg_attr(fuzzing, no_main)]

#[cfg(fuzzing)]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cakewalk_fuzz::lpm_build(data));

#[cfg(not(fuzzing))]
fn main() {
    for path in std::env::args().skip(1) {
        let data = std::fs::read(&path).expect("corpus file is readable");
        cakewalk_fuzz::lpm_build(&data);
    }
}
