//! Tunes the application's kernels at `cargo build`; the best configs land in OUT_DIR and
//! `include_tuned!()` embeds them. Already-tuned shapes are not tuned again.
use app_kernels::shapes::{BATCH, IN, OUT};

fn main() -> Result<(), tensor_dsl::Error> {
    tensor_dsl::build::tune()
        .kernel(
            app_kernels::dense_relu::kernel(),
            &[&[BATCH, IN], &[IN, OUT], &[OUT], &[BATCH, OUT]],
        )
        .kernel(app_kernels::row_norms::kernel(), &[&[BATCH, IN], &[BATCH]])
        .trials(16)
        .run()?;
    Ok(())
}
