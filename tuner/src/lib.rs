//! Generic auto-tuning: search spaces of knobs, search strategies, cost models and the
//! measurement protocol. It knows nothing about tensors: it searches any space whose points
//! a measurer can time.
//!
//! This crate is a placeholder in the foundation milestone; the search spaces, strategies
//! and cost models land with the templates and tuner issues.
