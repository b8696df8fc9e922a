#![no_main]

#[path = "../entries.rs"]
#[allow(dead_code, reason = "each target runs one of the entries")]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::facts(data));
