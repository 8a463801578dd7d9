//! The unfused half of Bolt's epilogue comparison: after the cuBLAS GEMM has written
//! `t = a · b` (row-major `m × n`, `f32`), a separate elementwise kernel computes
//! `y = relu(t + bias)` (`bias` one value per column). It is the tiny kernel a framework
//! launches after a library GEMM; compiled with NVRTC through
//! [`tensor_dsl::runtime::cuda::compile_source`], with `float4` accesses when the row length
//! allows, so the baseline pays one read and one write of the output, no more.

use tensor_dsl::codegen::cuda::CudaSource;
use tensor_dsl::ir::{parse_text, Kernel};

/// Threads per block of the elementwise kernel.
const THREADS: u32 = 256;

/// The kernel's parameters as the runtime checks them: `t` (`m × n`), `bias` (`n`), then
/// the output `y` (`m × n`), all `f32`. The statement only names the tensors for the
/// runtime's parameter checks; what runs is [`source`].
pub fn kernel() -> Result<Kernel, String> {
    let decl = [
        ("t".to_string(), false),
        ("bias".to_string(), false),
        ("y".to_string(), true),
    ];
    parse_text(
        "bias_relu",
        "y[[i, j]] = relu(t[[i, j]] + bias[[j]])",
        Some(&decl),
    )
    .map_err(|e| format!("the bias + ReLU kernel: {e}"))
}

/// CUDA C for `y = relu(t + bias)` over `m × n` (one thread per element, or per four when
/// `n % 4 == 0`), with its launch geometry.
pub fn source(m: usize, n: usize) -> Result<CudaSource, String> {
    let total = m
        .checked_mul(n)
        .filter(|&t| t > 0 && t < (1usize << 31))
        .ok_or_else(|| format!("a {m}×{n} bias + ReLU does not fit one 32-bit index"))?;
    let vec4 = n.is_multiple_of(4);
    let items = if vec4 { total / 4 } else { total };
    let body = if vec4 {
        format!(
            "    if (i >= {items}u) return;
    float4 v = reinterpret_cast<const float4 *>(t)[i];
    float4 b = reinterpret_cast<const float4 *>(bias)[i % {cols}u];
    v.x = fmaxf(v.x + b.x, 0.0f);
    v.y = fmaxf(v.y + b.y, 0.0f);
    v.z = fmaxf(v.z + b.z, 0.0f);
    v.w = fmaxf(v.w + b.w, 0.0f);
    reinterpret_cast<float4 *>(y)[i] = v;",
            cols = n / 4
        )
    } else {
        format!(
            "    if (i >= {items}u) return;
    y[i] = fmaxf(t[i] + bias[i % {n}u], 0.0f);"
        )
    };
    let source = format!(
        "extern \"C\" __global__ void __launch_bounds__({THREADS}) td_bias_relu(
    const float *__restrict__ t, const float *__restrict__ bias, float *__restrict__ y) {{
    unsigned i = blockIdx.x * {THREADS}u + threadIdx.x;
{body}
}}
"
    );
    let blocks = u32::try_from(items.div_ceil(THREADS as usize))
        .map_err(|_| format!("{items} elements need too many blocks"))?;
    Ok(CudaSource {
        source,
        entry: "td_bias_relu".into(),
        grid: [blocks, 1, 1],
        block: [THREADS, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_names_its_tensors_in_launch_order() {
        let k = kernel().unwrap();
        let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["t", "bias", "y"]);
        assert_eq!(k.inputs(), vec![0, 1]);
    }

    #[test]
    fn geometry_covers_every_element_once() {
        let s = source(512, 3072).unwrap();
        assert!(s.source.contains("float4") && !s.source.contains("#include"));
        assert_eq!(s.grid[0] as usize * 256, 512 * 3072 / 4);
        let odd = source(7, 13).unwrap();
        assert!(!odd.source.contains("float4"));
        assert_eq!(odd.grid[0], 1);
        assert!(source(0, 5).is_err());
        assert!(source(1 << 20, 1 << 12).is_err());
    }

    /// NVRTC accepts both variants (skipped where NVRTC is not installed).
    #[test]
    fn nvrtc_compiles_it() {
        if !tensor_dsl::runtime::nvrtc::available() {
            eprintln!("skipped: no NVRTC");
            return;
        }
        for (m, n) in [(512, 4096), (5, 7)] {
            let s = source(m, n).unwrap();
            let ptx = tensor_dsl::runtime::nvrtc::compile_ptx("bias_relu", &s.source, "compute_90")
                .unwrap_or_else(|e| panic!("{m}x{n}: {e}"));
            assert!(ptx.contains("td_bias_relu"));
        }
    }
}
