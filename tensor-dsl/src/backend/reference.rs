//! The reference interpreter as a backend: no schedule (the unit type), no records, no
//! tuning; it walks the IR point by point ([`crate::reference`]). Slow and obviously right.

use super::{Backend, Decision};
use crate::autotune::{TuneOptions, TuneOutcome};
use crate::backend::cpu::HostBuffers;
use crate::ir::Kernel;
use crate::records::{Key, Record};
use crate::tuned::Memo;
use crate::Error;
use std::sync::OnceLock;

/// The interpreter.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceBackend;

impl Backend for ReferenceBackend {
    type Schedule = ();
    type Buffers<'a> = HostBuffers<'a>;
    const NAME: &'static str = "reference";

    fn memo(&self) -> &'static Memo<Decision<()>> {
        static M: OnceLock<Memo<Decision<()>>> = OnceLock::new();
        M.get_or_init(Memo::default)
    }

    fn default_schedule(&self, _kernel: &Kernel, _extents: &[usize]) {}

    /// None: the interpreter has nothing to choose, so `decide` stops at the default.
    fn has_space(&self, _kernel: &Kernel, _extents: &[usize]) -> bool {
        false
    }

    fn key(&self, kernel: &Kernel, _shapes: &[&[usize]]) -> Result<Key, Error> {
        Err(no_schedules(kernel))
    }

    fn schedule_of(&self, _kernel: &Kernel, _extents: &[usize], _record: &Record) -> Option<()> {
        None
    }

    fn can_tune(&self) -> bool {
        false
    }

    fn tune(
        &self,
        kernel: &Kernel,
        _shapes: &[Vec<usize>],
        _opts: &TuneOptions,
        _progress: &mut dyn FnMut(usize),
    ) -> Result<TuneOutcome<()>, Error> {
        Err(no_schedules(kernel))
    }

    fn run(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut HostBuffers<'_>,
        _schedule: &(),
    ) -> Result<(), Error> {
        crate::reference::run(
            kernel,
            extents,
            shapes,
            buffers.data,
            buffers.out.reborrow(),
        );
        Ok(())
    }

    fn not_slower(
        &self,
        _kernel: &Kernel,
        _extents: &[usize],
        _shapes: &[&[usize]],
        _buffers: &mut HostBuffers<'_>,
        _candidate: &(),
        _default: &(),
    ) -> Result<bool, Error> {
        Ok(true)
    }
}

fn no_schedules(kernel: &Kernel) -> Error {
    Error::Backend {
        kernel: kernel.name.clone(),
        message: "the reference interpreter has no schedules to record or tune".into(),
    }
}
