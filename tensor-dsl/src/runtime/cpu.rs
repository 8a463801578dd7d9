//! CPU runtime (stub).
use crate::ir::Kernel;
use crate::Error;
pub enum CpuError { NoCompiler(String), Other(Error) }
pub fn run(_k: &Kernel, _e: &[usize], _s: &[&[usize]], _d: &[&[f32]], _o: &mut [f32]) -> Result<(), CpuError> {
    Err(CpuError::NoCompiler("stub".into()))
}
