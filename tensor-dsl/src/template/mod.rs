//! Schedule templates: for a kernel at concrete extents, the space of schedules and a
//! sound default.
//!
//! A [`Template`] is one extension point: its space (a `tuner::SearchSpace`), how a point
//! decodes into a schedule, its default point, how a record's text becomes a point, and the
//! loop nest ([`crate::lower::Nest`]) a schedule stands for. A new template is one
//! file implementing the trait, plus the backend that runs its schedules.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::{cpu::CpuTemplate, Template};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let t = CpuTemplate::new(&k, &[64, 64, 64], 16).unwrap();
//! let text = t.space().format(&Template::default_point(&t).unwrap()).unwrap();
//! let schedule = tensor_dsl::template::schedule_from_text(&t, &text).unwrap();
//! assert_eq!(schedule, t.decode(&t.default_config()).unwrap());
//! ```
pub mod cpu;
pub mod cpu_conv;
pub mod cpu_machine;
pub mod cuda;
pub mod gpu;
pub mod gpu_simt;
pub mod rows;
pub mod tensorcore;
pub mod wgmma;

use crate::ir::Kernel;
use crate::lower::Nest;
use tuner::{Config, SearchSpace};

/// A schedule space for one kernel at one shape on one target.
pub trait Template {
    /// What a point decodes into (the code generators' input).
    type Schedule;

    /// The knobs.
    fn space(&self) -> &SearchSpace;

    /// The template's default, as a point of the space.
    fn default_point(&self) -> Result<Config, String>;

    /// The schedule a point stands for.
    fn decode(&self, point: &Config) -> Result<Self::Schedule, String>;

    /// A point from its text form (a record's `config`).
    fn parse(&self, text: &str) -> Result<Config, String> {
        self.space().parse(text).map_err(|e| e.to_string())
    }

    /// The loop nest a schedule stands for (what the code generators print and the
    /// analytic features read).
    fn lower<'a>(
        &self,
        kernel: &'a Kernel,
        extents: &[usize],
        shapes: &'a [&'a [usize]],
        schedule: &Self::Schedule,
    ) -> Result<Nest<'a>, String>;
}

/// The schedule a record's config text stands for, if it is a point of `template`.
pub fn schedule_from_text<T: Template>(template: &T, text: &str) -> Option<T::Schedule> {
    let point = template.parse(text).ok()?;
    template.decode(&point).ok()
}

impl Template for cpu::CpuTemplate {
    type Schedule = cpu::CpuConfig;

    fn space(&self) -> &SearchSpace {
        cpu::CpuTemplate::space(self)
    }

    fn default_point(&self) -> Result<Config, String> {
        Ok(self.default_config())
    }

    fn decode(&self, point: &Config) -> Result<cpu::CpuConfig, String> {
        cpu::CpuTemplate::decode(self, point)
    }

    fn parse(&self, text: &str) -> Result<Config, String> {
        cpu::CpuTemplate::parse(self, text)
    }

    fn lower<'a>(
        &self,
        kernel: &'a Kernel,
        extents: &[usize],
        shapes: &'a [&'a [usize]],
        schedule: &cpu::CpuConfig,
    ) -> Result<Nest<'a>, String> {
        crate::lower::cpu::lower(kernel, extents, shapes, schedule)
    }
}

impl Template for gpu::GpuTemplate {
    type Schedule = gpu::GpuSchedule;

    fn space(&self) -> &SearchSpace {
        gpu::GpuTemplate::space(self)
    }

    fn default_point(&self) -> Result<Config, String> {
        self.default_config()
    }

    fn decode(&self, point: &Config) -> Result<gpu::GpuSchedule, String> {
        gpu::GpuTemplate::decode(self, point)
    }

    fn lower<'a>(
        &self,
        kernel: &'a Kernel,
        extents: &[usize],
        shapes: &'a [&'a [usize]],
        schedule: &gpu::GpuSchedule,
    ) -> Result<Nest<'a>, String> {
        crate::lower::gpu::lower(kernel, extents, shapes, schedule)
    }
}
