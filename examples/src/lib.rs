//! Runnable examples live beside this crate: `cargo run --release --example matmul`.
