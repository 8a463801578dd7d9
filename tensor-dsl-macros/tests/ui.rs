//! Every diagnostic of `#[tensor_kernel]` (`tests/ui/*.rs`, each with the `.stderr` the
//! compiler must print) and code that must compile (`tests/pass/*.rs`).
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test -p tensor-dsl-macros
//! --test ui`, then read every changed `.stderr`: the caret must be on the user's offending
//! tokens and the message must say what to write instead.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/pass/*.rs");
}
