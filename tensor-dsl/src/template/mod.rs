//! Schedule templates: for a kernel at concrete extents, the space of schedules and a
//! sound default.
pub mod cpu;
pub mod gpu;
