//! The CPU baselines: the `matrixmultiply` crate's `sgemm` (threading feature, its AVX-512 /
//! AVX2+FMA micro-kernels picked at run time) for matmuls, one `sgemm` per batch for batched
//! matmuls (transposed operands as strides), and im2col + the same `sgemm` per image for
//! convolutions.
//!
//! `matrixmultiply` threads a GEMM only when it is large enough (`(m·k + k·n) / 2^14`
//! threads at most). When it would run each batch's or image's GEMM on one thread, the
//! batches/images are split across the cores instead (each thread with its own im2col
//! buffer), which is what a caller of a single-threaded BLAS would do; otherwise they run
//! one after the other, each GEMM threaded by `matrixmultiply`, with im2col split across
//! the cores.
//!
//! The batching and im2col logic is generic over the GEMM library ([`Sgemm`]), so the
//! OpenBLAS baseline (`crate::openblas`) runs the very same plan with `cblas_sgemm`.

use crate::workloads::{Conv, Op};

/// The baseline's name, for the report.
pub fn name(op: &Op) -> &'static str {
    match op {
        Op::Matmul { .. } => "matrixmultiply 0.3 sgemm (threading)",
        Op::GemmBiasRelu { .. } => "matrixmultiply 0.3 sgemm (threading), then bias + ReLU",
        Op::BatchMatmul { .. } => "matrixmultiply 0.3 sgemm per batch (threading)",
        Op::Conv2d(_) => "im2col + matrixmultiply 0.3 sgemm per image (threading)",
        Op::Stage(_) => crate::stages::NAIVE,
    }
}

/// A single-precision GEMM library the batched-matmul and im2col plans run on.
pub trait Sgemm: Sync {
    /// Whether each batch's (or image's) GEMM of this size should run on one thread, with
    /// the batches (images) split across the cores instead.
    fn split_batches(&self, g: &Gemm, batches: usize) -> bool;
    /// Called before a batch of calls: `split` says whether they run concurrently (then
    /// each call should use one thread), else each call may use every core.
    fn threads_for(&self, _split: bool) {}
    /// `C = A · B` (`beta = 0`).
    ///
    /// # Safety
    /// Every element the GEMM's sizes and non-negative strides reach lies inside the
    /// allocations `a`, `b` and `c` point into, and `c` does not overlap `a` or `b`
    /// ([`Gemm::run_on`] checks this on slices).
    unsafe fn sgemm(
        &self,
        g: &Gemm,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
    ) -> Result<(), String>;
}

/// The `matrixmultiply` crate.
pub struct MatrixMultiply;

impl Sgemm for MatrixMultiply {
    fn split_batches(&self, g: &Gemm, batches: usize) -> bool {
        // `matrixmultiply` runs an m×k·k×n GEMM on one thread below this size.
        batches > 1 && (g.m * g.k + g.k * g.n) / (1 << 14) < 2
    }

    unsafe fn sgemm(
        &self,
        g: &Gemm,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
    ) -> Result<(), String> {
        // SAFETY: the caller guarantees every access lies inside the operands.
        unsafe {
            matrixmultiply::sgemm(
                g.m, g.k, g.n, 1.0, a, g.rsa, g.csa, b, g.rsb, g.csb, 0.0, c, g.rsc, g.csc,
            );
        }
        Ok(())
    }
}

/// The cores the baselines may use (as many as our OpenMP kernels use).
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A GEMM `C = A · B` over raw parts: sizes and element strides.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub rsa: isize,
    pub csa: isize,
    pub rsb: isize,
    pub csb: isize,
    pub rsc: isize,
    pub csc: isize,
}

impl Gemm {
    /// Runs the GEMM on slices with `lib`, checking every access stays inside them.
    pub fn run_on(
        &self,
        lib: &dyn Sgemm,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
    ) -> Result<(), String> {
        let span = |rows: usize, cols: usize, rs: isize, cs: isize| {
            if rows == 0 || cols == 0 {
                return 0;
            }
            (rows as isize - 1) * rs + (cols as isize - 1) * cs + 1
        };
        let need_a = span(self.m, self.k, self.rsa, self.csa);
        let need_b = span(self.k, self.n, self.rsb, self.csb);
        let need_c = span(self.m, self.n, self.rsc, self.csc);
        let strides_ok = [self.rsa, self.csa, self.rsb, self.csb, self.rsc, self.csc]
            .iter()
            .all(|&s| s >= 0);
        if !strides_ok
            || need_a > a.len() as isize
            || need_b > b.len() as isize
            || need_c > c.len() as isize
        {
            return Err("baseline GEMM out of bounds (a bug in the bench)".into());
        }
        // SAFETY: all strides are non-negative and the largest offset touched in each
        // operand (computed above) lies inside its slice; `c` is borrowed mutably, so it
        // does not alias `a` or `b`.
        unsafe { lib.sgemm(self, a.as_ptr(), b.as_ptr(), c.as_mut_ptr()) }
    }
}

/// Reusable scratch (im2col buffers), so timed runs do not allocate.
#[derive(Default)]
pub struct Scratch {
    cols: Vec<Vec<f32>>,
}

/// Runs the baseline: `inputs` are the kernel's inputs in parameter order (the output's
/// slot is skipped), `out` the output buffer.
pub fn run(
    op: &Op,
    inputs: &[&[f32]],
    out: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(), String> {
    if let Op::Stage(stage) = op {
        return crate::stages::naive(stage, inputs, out);
    }
    run_on(&MatrixMultiply, op, inputs, out, scratch)
}

/// [`run`] with another GEMM library: one GEMM per matmul, one per batch, im2col + one per
/// image.
pub fn run_on(
    lib: &dyn Sgemm,
    op: &Op,
    inputs: &[&[f32]],
    out: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(), String> {
    let (a, b) = match inputs {
        [a, b, ..] => (*a, *b),
        _ => return Err("the baseline needs two inputs".into()),
    };
    match op {
        Op::GemmBiasRelu { m, n, k } => {
            let bias = inputs
                .get(2)
                .ok_or("a GEMM with a bias needs three inputs")?;
            let plain = Op::Matmul {
                m: *m,
                n: *n,
                k: *k,
            };
            run_on(lib, &plain, inputs, out, scratch)?;
            // The epilogue as a separate pass over the output, as an unfused library runs it.
            for row in out.chunks_mut(*n).take(*m) {
                for (y, b) in row.iter_mut().zip(bias.iter()) {
                    *y = (*y + b).max(0.0);
                }
            }
            Ok(())
        }
        Op::Matmul { m, n, k } => {
            lib.threads_for(false);
            Gemm {
                m: *m,
                k: *k,
                n: *n,
                rsa: *k as isize,
                csa: 1,
                rsb: *n as isize,
                csb: 1,
                rsc: *n as isize,
                csc: 1,
            }
            .run_on(lib, a, b, out)
        }
        Op::BatchMatmul {
            b: batch, m, n, k, ..
        } => {
            let Some([la, lb, lc]) = op.batch_strides() else {
                return Err("a batched matmul without strides (a bug in the bench)".into());
            };
            let (sa, sb, sc) = (
                |c| la.of(c) as isize,
                |c| lb.of(c) as isize,
                |c| lc.of(c) as isize,
            );
            let gemm = Gemm {
                m: *m,
                k: *k,
                n: *n,
                rsa: sa('m'),
                csa: sa('k'),
                rsb: sb('k'),
                csb: sb('n'),
                rsc: sc('m'),
                csc: sc('n'),
            };
            let (ba, bb, bc) = (sa('b') as usize, sb('b') as usize, sc('b') as usize);
            if bc == m * n {
                // Batch outermost in the output: each batch owns a contiguous block.
                batched(lib, *batch, gemm, a, ba, b, bb, out, bc)
            } else {
                // The output interleaves batches: run them in order on one buffer.
                lib.threads_for(false);
                for i in 0..*batch {
                    gemm.run_on(lib, &a[i * ba..], &b[i * bb..], &mut out[i * bc..])?;
                }
                Ok(())
            }
        }
        Op::Conv2d(cv) => conv(lib, cv, a, b, out, scratch),
        Op::Stage(_) => Err("a row kernel has no GEMM baseline".into()),
    }
}

/// `batch` GEMMs whose outputs are the contiguous blocks of `out` of `bc` elements each,
/// spread across the cores when each is single-threaded.
#[allow(clippy::too_many_arguments)]
fn batched(
    lib: &dyn Sgemm,
    batch: usize,
    gemm: Gemm,
    a: &[f32],
    ba: usize,
    b: &[f32],
    bb: usize,
    out: &mut [f32],
    bc: usize,
) -> Result<(), String> {
    let workers = threads().min(batch).max(1);
    let split = workers > 1 && lib.split_batches(&gemm, batch);
    lib.threads_for(split);
    if !split {
        for (i, c) in out.chunks_mut(bc).take(batch).enumerate() {
            gemm.run_on(lib, &a[i * ba..], &b[i * bb..], c)?;
        }
        return Ok(());
    }
    let per = batch.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = out
            .chunks_mut(per * bc)
            .enumerate()
            .map(|(w, chunk)| {
                s.spawn(move || {
                    for (j, c) in chunk.chunks_mut(bc).enumerate() {
                        let i = w * per + j;
                        gemm.run_on(lib, &a[i * ba..], &b[i * bb..], c)?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a baseline thread panicked".into()))
        })
    })
}

/// im2col of one image: `col[(c·R + r)·S + s][p·Q + q] = x[c][S·p + r − P][S·q + s − P]`
/// (zero outside the image), rows `rows` of the full `C·R·S × P·Q` matrix.
fn im2col_rows(cv: &Conv, image: &[f32], rows: std::ops::Range<usize>, col: &mut [f32]) {
    let (p_out, q_out) = cv.out_hw();
    let pq = p_out * q_out;
    for (row, dst) in rows.zip(col.chunks_mut(pq)) {
        let c = row / (cv.r * cv.s);
        let r = (row / cv.s) % cv.r;
        let s = row % cv.s;
        let plane = &image[c * cv.h * cv.w..(c + 1) * cv.h * cv.w];
        for p in 0..p_out {
            let y = (cv.stride * p + r) as isize - cv.pad as isize;
            let line = &mut dst[p * q_out..(p + 1) * q_out];
            if y < 0 || y >= cv.h as isize {
                line.fill(0.0);
                continue;
            }
            let src = &plane[y as usize * cv.w..(y as usize + 1) * cv.w];
            for (q, v) in line.iter_mut().enumerate() {
                let x = (cv.stride * q + s) as isize - cv.pad as isize;
                *v = if x < 0 || x >= cv.w as isize {
                    0.0
                } else {
                    src[x as usize]
                };
            }
        }
    }
}

/// im2col of one image into `col` (`C·R·S × P·Q`), split across `workers` threads.
fn im2col(cv: &Conv, image: &[f32], col: &mut [f32], workers: usize) {
    let (p_out, q_out) = cv.out_hw();
    let pq = p_out * q_out;
    let rows = cv.c * cv.r * cv.s;
    if workers <= 1 || rows < 2 {
        im2col_rows(cv, image, 0..rows, col);
        return;
    }
    let per = rows.div_ceil(workers);
    std::thread::scope(|s| {
        for (w, chunk) in col.chunks_mut(per * pq).enumerate() {
            let start = w * per;
            let end = (start + per).min(rows);
            s.spawn(move || im2col_rows(cv, image, start..end, chunk));
        }
    });
}

/// Whether im2col is the identity (a 1×1, stride-1, unpadded convolution).
fn im2col_is_identity(cv: &Conv) -> bool {
    cv.r == 1 && cv.s == 1 && cv.stride == 1 && cv.pad == 0
}

/// One image: im2col (unless it is the identity), then `Y[F × PQ] = W[F × CRS] · col`.
#[allow(clippy::too_many_arguments)]
fn conv_image(
    lib: &dyn Sgemm,
    cv: &Conv,
    gemm: Gemm,
    image: &[f32],
    w: &[f32],
    y: &mut [f32],
    col: &mut Vec<f32>,
    im2col_workers: usize,
) -> Result<(), String> {
    if im2col_is_identity(cv) {
        return gemm.run_on(lib, w, image, y);
    }
    let need = gemm.k * gemm.n;
    if col.len() < need {
        col.resize(need, 0.0);
    }
    im2col(cv, image, &mut col[..need], im2col_workers);
    gemm.run_on(lib, w, &col[..need], y)
}

fn conv(
    lib: &dyn Sgemm,
    cv: &Conv,
    x: &[f32],
    w: &[f32],
    y: &mut [f32],
    scratch: &mut Scratch,
) -> Result<(), String> {
    let (p_out, q_out) = cv.out_hw();
    let (crs, pq) = (cv.c * cv.r * cv.s, p_out * q_out);
    let gemm = Gemm {
        m: cv.f,
        k: crs,
        n: pq,
        rsa: crs as isize,
        csa: 1,
        rsb: pq as isize,
        csb: 1,
        rsc: pq as isize,
        csc: 1,
    };
    let (image_len, out_len) = (cv.c * cv.h * cv.w, cv.f * pq);
    let workers = threads().min(cv.n).max(1);
    if scratch.cols.len() < workers {
        scratch.cols.resize_with(workers, Vec::new);
    }
    let split = workers > 1 && lib.split_batches(&gemm, cv.n);
    lib.threads_for(split);
    if !split {
        let col = &mut scratch.cols[0];
        for (i, out) in y.chunks_mut(out_len).take(cv.n).enumerate() {
            let image = &x[i * image_len..(i + 1) * image_len];
            conv_image(lib, cv, gemm, image, w, out, col, threads())?;
        }
        return Ok(());
    }
    let per = cv.n.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = y
            .chunks_mut(per * out_len)
            .zip(scratch.cols.iter_mut())
            .enumerate()
            .map(|(t, (chunk, col))| {
                s.spawn(move || {
                    for (j, out) in chunk.chunks_mut(out_len).enumerate() {
                        let i = t * per + j;
                        let image = &x[i * image_len..(i + 1) * image_len];
                        conv_image(lib, cv, gemm, image, w, out, col, 1)?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a baseline thread panicked".into()))
        })
    })
}

/// Small awkward cases and their reference results, shared by the baselines' tests.
#[cfg(test)]
pub mod testing {
    use crate::workloads::{kernel_text, Conv, Op, Workload};

    /// Matmul (plain and with the bias + ReLU epilogue), every batched layout the bench
    /// uses (and an interleaved output), and convolutions with 1×1, padded, strided and wide
    /// windows.
    pub fn cases() -> Vec<Op> {
        let mut ops = vec![
            Op::Matmul { m: 7, n: 13, k: 5 },
            Op::GemmBiasRelu { m: 7, n: 13, k: 5 },
        ];
        for (lhs, rhs, out) in [
            ("bmk", "bkn", "bmn"),
            ("bkm", "bkn", "bmn"),
            ("bkm", "bnk", "bmn"),
            ("mbk", "bkn", "mbn"),
        ] {
            ops.push(Op::BatchMatmul {
                b: 5,
                m: 6,
                n: 7,
                k: 9,
                lhs: lhs.into(),
                rhs: rhs.into(),
                out: out.into(),
            });
        }
        for (n, c, f, stride, pad, r) in [
            (3, 2, 4, 1, 0, 1),
            (3, 2, 4, 1, 1, 3),
            (3, 2, 4, 2, 1, 3),
            (3, 2, 4, 3, 0, 2),
            (3, 2, 4, 2, 3, 7),
            // Channels in oneDNN's blocks (16), one image.
            (1, 32, 48, 1, 1, 3),
        ] {
            ops.push(Op::Conv2d(Conv {
                n,
                c,
                h: 11,
                w: 9,
                f,
                r,
                s: r,
                stride,
                pad,
            }));
        }
        ops
    }

    /// The inputs (seeded) of `op`'s kernel and the reference interpreter's output.
    pub fn reference(op: &Op) -> (Vec<Vec<f32>>, Vec<f32>) {
        let p = problem(op);
        let data: Vec<Vec<f32>> = tensor_dsl::measure::random_inputs(&p.kernel, &p.shapes, 3)
            .iter()
            .map(tensor_dsl::Buffer::to_f32)
            .collect();
        reference_on(op, &data)
    }

    fn problem(op: &Op) -> crate::workloads::Problem {
        let w = Workload {
            suite: "t".into(),
            name: "t".into(),
            op: op.clone(),
            shape: serde_json::Value::Null,
        };
        w.problem().unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// `data` (the kernel's inputs, the output's slot empty) and the reference interpreter's
    /// output on them.
    pub fn reference_on(op: &Op, data: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<f32>) {
        let p = problem(op);
        let data = data.to_vec();
        let views: Vec<tensor_dsl::Data<'_>> = data.iter().map(Into::into).collect();
        let out_len: usize = p.shapes[p.kernel.output].iter().product();
        let mut want = vec![0.0f32; out_len];
        tensor_dsl::reference::run(
            &p.kernel,
            &p.extents,
            &p.shape_refs(),
            &views,
            (&mut want).into(),
        );
        (data, want)
    }

    /// Asserts `got` matches `want` to 1e-4 relative.
    pub fn assert_close(what: &str, op: &Op, got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (n, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{what}: {op:?} element {n}: {g} vs {w} ({})",
                kernel_text(op).0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn baselines_match_the_reference() {
        for op in cases() {
            let (data, want) = reference(&op);
            let refs: Vec<&[f32]> = data.iter().map(Vec::as_slice).collect();
            let mut got = vec![f32::NAN; want.len()];
            run(&op, &refs, &mut got, &mut Scratch::default()).unwrap();
            assert_close("matrixmultiply", &op, &got, &want);
        }
    }
}
