//! The house rules of Keymux's workspace, kept as tests (`tests/house_rules.rs`): no import circles
//! between files or between a crate's top-level modules, no non-test source file over 500 lines, no
//! non-test function over 80 lines. The tests read every crate's source; `cargo test -p keymux-house`
//! runs them alone.
