//! `include_tuned!("...")` registers a shipped records file before `main`.
#![allow(clippy::unwrap_used)]

tensor_dsl::include_tuned!("tests/data/shipped.jsonl");

#[test]
fn embedded_records_are_registered_before_main() {
    let index = tensor_dsl::tuned::embedded_index();
    // Two shapes, the fastest config of each; the garbage line is skipped.
    assert_eq!(index.len(), 2);
    let r = index.iter().find(|r| r.shapes[0] == [4]).unwrap();
    assert_eq!(r.seconds, Some(1e-6));
}
