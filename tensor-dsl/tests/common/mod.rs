//! Helpers shared by the backend-vs-reference tests.

use rand::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;
use tensor_dsl::ir::{bind, DType, Kernel};
use tensor_dsl::Buffer;

/// Kernels covering the language: many inputs, diagonals, scalars, outer products,
/// transposes, affine (padded) accesses, epilogues with every built-in: every backend is
/// checked against the reference on each of them, at random awkward shapes.
#[allow(dead_code)] // each test file compiles this module; not all of them use the list
pub const KERNELS: &[&str] = &[
    "o[[i, j]] = log(abs(a[[i, j]]) + 1.0) + pow(abs(b[[i, j]]), 1.5) + erf(a[[i, j]]) + silu(b[[i, j]]) + rsqrt(a[[i, j]] * a[[i, j]] + 1.0)",
    "c[[i, j]] += a[[i, k]] * b[[k, j]]",
    "c[[i, j]] += a[[k, i]] * b[[j, k]]",
    "c[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]",
    "c[[b, i, j]] += x[[b, k, i]] * y[[b, k, j]]",
    "o[[i, j]] = a[[i]] * b[[j]]",
    "s[[]] += a[[i]] * b[[i]]",
    "t[[]] += a[[i, i]]",
    "d[[i]] = a[[i, i]]",
    "o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]",
    "o[[i, l]] += a[[i, j]] * b[[j, k]] * c[[k, l]]",
    "o[[i, j]] = a[[i, j]] + b[[i, j]] * 2.0 - a[[i, j]] / 3.0",
    "o[[i, j]] = max(a[[i, j]], b[[i, j]]) - min(a[[i, j]], -b[[i, j]])",
    "o[[j, i]] = a[[i, j]]",
    "o[[i]] += a[[i + k]] * w[[k]]",
    "o[[i]] += a[[2 * i + k - 1]] * w[[k]]",
    "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
    "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
    "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = gelu(o[[i, j]]); o[[i, j]] = sigmoid(o[[i, j]]) + tanh(o[[i, j]])",
    "o[[i, j]] = exp(a[[i, j]]) + sqrt(a[[i, j]] * a[[i, j]] + 1.0)",
    "o[[i]] += exp(a[[i, k]]) * -b[[k]]",
    "o[[i, j, l]] += a[[i, k]] * b[[j, k]] * c[[l, k]]",
    "o[[i, j]] += a[[i, j, k, m]] * b[[m, k]]",
    "o[[i, j]] += a[[i, k]] * a[[k, j]]",
    "o[[i, j]] += a[[i - 2, j + k]] * b[[k]]; o[[i, j]] = o[[i, j]] * 0.5 + 1.0",
];

/// Shapes for `kernel` at the given index extents: a plain dimension takes its index's
/// extent, an affine one `affine_size(hi)` where `hi` is the largest coordinate it reads (a
/// size around it exercises zero padding); the output takes the spatial extents. Returns
/// the bound extents and the shapes, or `None` when they are inconsistent (e.g. one tensor
/// read with two different extents).
#[allow(dead_code)]
pub fn shapes_for(
    kernel: &Kernel,
    extents: &[usize],
    mut affine_size: impl FnMut(i64) -> usize,
) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; kernel.params.len()];
    for a in kernel.accesses() {
        if shapes[a.tensor].is_none() {
            let dims = a
                .dims
                .iter()
                .map(|m| match m.as_var() {
                    Some(v) => extents[v],
                    None => affine_size(m.range(extents).1),
                })
                .collect();
            shapes[a.tensor] = Some(dims);
        }
    }
    shapes[kernel.output] = Some(kernel.spatial().iter().map(|&s| extents[s]).collect());
    let shapes: Vec<Vec<usize>> = shapes.into_iter().map(|s| s.unwrap_or_default()).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let extents = bind(kernel, &refs).ok()?;
    Some((extents, shapes))
}

/// A snapshot case file in `tests/kernels/`: `kernel: <statements>`, `shapes: a=2x3 b=3 s=`
/// (an empty shape is rank 0; tensors in parameter order, the output last) and, optionally,
/// `dtypes: a=bf16,b=bf16` (the others `f32`).
#[allow(dead_code)]
pub struct Case {
    pub name: String,
    pub kernel: Kernel,
    pub shapes: Vec<Vec<usize>>,
}

#[allow(dead_code)]
impl Case {
    /// A case from its parts (`shapes` written as in a case file).
    pub fn new(name: &str, kernel: &str, shapes: &str, dtypes: &str) -> Case {
        let params: Vec<(String, Vec<usize>)> = shapes
            .split_whitespace()
            .map(|p| {
                let (name, dims) = p.split_once('=').unwrap();
                let dims = if dims.is_empty() {
                    vec![]
                } else {
                    dims.split('x').map(|d| d.parse().unwrap()).collect()
                };
                (name.to_string(), dims)
            })
            .collect();
        let decl: Vec<(String, bool)> = params
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i + 1 == params.len()))
            .collect();
        let kernel = tensor_dsl::ir::parse_text(name, kernel, Some(&decl))
            .unwrap()
            .with_dtypes(dtypes)
            .unwrap();
        Case {
            name: name.into(),
            kernel,
            shapes: params.into_iter().map(|(_, s)| s).collect(),
        }
    }

    pub fn shape_refs(&self) -> Vec<&[usize]> {
        self.shapes.iter().map(Vec::as_slice).collect()
    }

    pub fn extents(&self) -> Vec<usize> {
        bind(&self.kernel, &self.shape_refs()).unwrap()
    }
}

/// Every case file in `tests/kernels/`, by file name.
#[allow(dead_code)]
pub fn kernel_cases() -> Vec<Case> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    entries.sort();
    entries
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let field = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .map(|v| v.trim().to_string())
            };
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            Case::new(
                &name,
                &field("kernel:").unwrap_or_else(|| panic!("{path:?}: missing `kernel:`")),
                &field("shapes:").unwrap_or_else(|| panic!("{path:?}: missing `shapes:`")),
                &field("dtypes:").unwrap_or_default(),
            )
        })
        .collect()
}

/// The C++ compiler that builds generated CUDA against `cuda_emu.h` (`$CXX`, else `g++`),
/// if it runs.
#[allow(dead_code)] // used by the emulator tests only
pub fn gxx() -> Option<PathBuf> {
    let cxx = std::env::var_os("CXX").map_or_else(|| PathBuf::from("g++"), PathBuf::from);
    Command::new(&cxx)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cxx)
}

/// A folder for emulator programs, `tensor-dsl-{name}-{pid}` in the temp dir, holding the
/// emulator headers (`cuda_emu.h`, `cuda_emu_sm90.h`) they include.
#[allow(dead_code)] // used by the emulator tests only
pub fn emulator_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cuda_emu.h"), include_str!("../cuda_emu.h")).unwrap();
    std::fs::write(
        dir.join("cuda_emu_sm90.h"),
        include_str!("../cuda_emu_sm90.h"),
    )
    .unwrap();
    dir
}

/// Writes `cpp` to `base.cpp` and builds `base.exe` from it with `cxx` against the emulator
/// headers in `dir` ([`emulator_dir`]); the error names the file and gives g++'s message.
#[allow(dead_code)] // used by the emulator tests only
pub fn build_emulated(cxx: &Path, dir: &Path, base: &Path, cpp: &str) -> Result<PathBuf, String> {
    let cpp_path = base.with_extension("cpp");
    std::fs::write(&cpp_path, cpp).map_err(|e| e.to_string())?;
    let exe = base.with_extension("exe");
    let out = Command::new(cxx)
        .args(["-std=c++17", "-O1", "-w", "-I"])
        .arg(dir)
        .arg(&cpp_path)
        .arg("-o")
        .arg(&exe)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "g++ failed on {}:\n{}",
            cpp_path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

/// The relative tolerance of an emulated output against the reference: `1e-4` for `f32`,
/// the measurer's half-precision tolerance otherwise.
#[allow(dead_code)] // used by the emulator tests only
pub fn emulator_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-4,
        other => tensor_dsl::measure::tolerance(other),
    }
}

/// Whether NVRTC, `ptxas` and `nvdisasm` are here for a static SASS profile. Without them
/// the reason is printed and the calling test passes, unless `TENSOR_DSL_REQUIRE_NVRTC=1`
/// (CI) makes that a failure.
#[allow(dead_code)] // used by the SASS profile tests only
pub fn sass_tools_present() -> bool {
    use tensor_dsl::runtime::{nvrtc, ptxas, sass};
    let why = if !nvrtc::available() {
        "NVRTC (libnvrtc.so.13) is not on the library path"
    } else if ptxas::find().is_none() {
        "ptxas is not on PATH (or TENSOR_DSL_PTXAS)"
    } else if sass::find_nvdisasm().is_none() {
        "nvdisasm is not on PATH (or TENSOR_DSL_NVDISASM); pip install nvidia-cuda-nvdisasm"
    } else {
        return true;
    };
    assert!(
        std::env::var("TENSOR_DSL_REQUIRE_NVRTC").as_deref() != Ok("1"),
        "TENSOR_DSL_REQUIRE_NVRTC=1 but {why}"
    );
    println!("skipped: {why}");
    false
}

/// Random inputs of `kernel` at `shapes`, uniform in [-1, 1) and stored in each parameter's
/// element type; the output's buffer is empty.
#[allow(dead_code)]
pub fn random_inputs(kernel: &Kernel, shapes: &[Vec<usize>], rng: &mut impl Rng) -> Vec<Buffer> {
    shapes
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let count = if p == kernel.output {
                0
            } else {
                s.iter().product()
            };
            let values: Vec<f32> = (0..count).map(|_| rng.gen_range(-1.0..1.0)).collect();
            Buffer::from_f32(kernel.params[p].dtype, &values)
        })
        .collect()
}

/// The reference interpreter's output of `kernel` on `data`, widened to `f32`.
#[allow(dead_code)]
pub fn reference_output(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[Vec<usize>],
    data: &[Buffer],
) -> Vec<f32> {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let views: Vec<tensor_dsl::Data> = data.iter().map(Buffer::view).collect();
    let n_out: usize = shapes[kernel.output].iter().product();
    let mut want = Buffer::zeros(kernel.params[kernel.output].dtype, n_out);
    tensor_dsl::reference::run(kernel, extents, &refs, &views, want.view_mut());
    want.to_f32()
}

/// Runs the row template's CUDA for each of `configs` on the CPU emulator
/// (`tests/cuda_emu.h`, which must be in `dir`): one C++ program named after `tag` holds
/// every configuration's kernel, built with `cxx` (`g++ -O1`) and run once on `data` (the
/// case's buffers in parameter order; the output's is ignored). Returns each
/// configuration's output widened to `f32`, or why the program did not build or run.
#[allow(dead_code)] // used by the row emulator tests only
pub fn emulate_rows(
    cxx: &std::path::Path,
    dir: &std::path::Path,
    tag: &str,
    case: &Case,
    extents: &[usize],
    data: &[Buffer],
    configs: &[tensor_dsl::template::rows::RowsGpuConfig],
) -> Result<Vec<Vec<f32>>, String> {
    let mut all = emulate_rows_many(cxx, dir, tag, &[(case, extents, data, configs)])?;
    Ok(all.pop().unwrap_or_default())
}

/// One kernel for [`emulate_rows_many`]: the case, its extents, its buffers (parameter order,
/// the output's ignored) and the GPU configurations to run.
#[allow(dead_code)]
pub type EmulatedJob<'a> = (
    &'a Case,
    &'a [usize],
    &'a [Buffer],
    &'a [tensor_dsl::template::rows::RowsGpuConfig],
);

/// [`emulate_rows`] for several kernels in one C++ program (one compiler start for all):
/// for each job, each configuration's output.
#[allow(dead_code)] // used by the row emulator tests only
pub fn emulate_rows_many(
    cxx: &std::path::Path,
    dir: &std::path::Path,
    tag: &str,
    jobs: &[EmulatedJob<'_>],
) -> Result<Vec<Vec<Vec<f32>>>, String> {
    use std::fmt::Write as _;
    use tensor_dsl::codegen::{rows, storage_type};
    let mut cpp = String::from("#include \"cuda_emu.h\"\n");
    let mut main = String::from(
        "int main(int argc, char **argv) {\n    (void)argc;\n    FILE *f = fopen(argv[1], \"rb\");\n    FILE *o = fopen(argv[2], \"wb\");\n",
    );
    let mut input: Vec<u8> = Vec::new();
    let mut sizes: Vec<(DType, usize, usize)> = Vec::new();
    for (job, &(case, extents, data, configs)) in jobs.iter().enumerate() {
        let k = &case.kernel;
        let out_dtype = k.params[k.output].dtype;
        let n_out: usize = case.shapes[k.output].iter().product();
        sizes.push((out_dtype, n_out, configs.len()));
        for &q in &k.inputs() {
            let ty = storage_type(k.params[q].dtype);
            let bytes = data[q].view().bytes();
            input.extend_from_slice(bytes);
            let _ = writeln!(
                main,
                "    {ty} *j{job}t{q} = ({ty} *)td_read_bytes(f, {});",
                bytes.len()
            );
        }
        for (id, config) in configs.iter().enumerate() {
            let src = rows::generate_cuda(k, extents, &case.shape_refs(), config)
                .map_err(|e| format!("{} {config:?}: no CUDA: {e}", case.name))?;
            let _ = writeln!(
                cpp,
                "namespace j{job}cfg{id} {{\n{}}}\n",
                src.source.replace("extern \"C\" ", "")
            );
            let args: Vec<String> = k
                .inputs()
                .iter()
                .map(|q| format!("j{job}t{q}"))
                .chain(["out".into()])
                .collect();
            let (ty, bytes) = (storage_type(out_dtype), n_out * out_dtype.size());
            let _ = writeln!(
                main,
                "    {{\n        {ty} *out = ({ty} *)td_alloc_nan_bytes({bytes});\n        \
                 fprintf(stderr, \"job {job} config {id}\\n\");\n        \
                 td_launch({}, {}, [&] {{ j{job}cfg{id}::{}({}); }});\n        \
                 fwrite(out, 1, {bytes}, o);\n        free(out);\n    }}",
                src.grid[0],
                src.block[0],
                src.entry,
                args.join(", ")
            );
        }
    }
    main.push_str("    fclose(o);\n    fclose(f);\n    return 0;\n}\n");
    cpp.push_str(&main);
    let base = dir.join(tag);
    let cpp_path = base.with_extension("cpp");
    let exe = build_emulated(cxx, dir, &base, &cpp).map_err(|e| format!("{tag}: {e}"))?;
    let input_path = base.with_extension("in");
    std::fs::write(&input_path, input).map_err(|e| e.to_string())?;
    let output = base.with_extension("out");
    let run = Command::new(&exe)
        .arg(&input_path)
        .arg(&output)
        .output()
        .map_err(|e| e.to_string())?;
    if !run.status.success() {
        return Err(format!(
            "{tag}: emulated kernel failed ({}) in {}:\n{}",
            run.status,
            cpp_path.display(),
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let bytes = std::fs::read(&output).map_err(|e| e.to_string())?;
    let total: usize = sizes.iter().map(|&(d, n, c)| d.size() * n * c).sum();
    if bytes.len() != total {
        return Err(format!(
            "{tag}: {} output bytes, expected {total}",
            bytes.len()
        ));
    }
    let mut at = 0;
    Ok(sizes
        .iter()
        .map(|&(dtype, n, count)| {
            (0..count)
                .map(|_| {
                    let size = dtype.size() * n;
                    let got = Buffer::from_bytes(dtype, &bytes[at..at + size]).to_f32();
                    at += size;
                    got
                })
                .collect()
        })
        .collect())
}

/// Why NVRTC and `ptxas` cannot compile CUDA here (the `cuda` feature off, no
/// `libnvrtc.so.13` on the library path, no `ptxas` on `PATH` or in `TENSOR_DSL_PTXAS`), or
/// `None`.
#[allow(dead_code)] // used by the NVRTC compile tests only
pub fn nvrtc_unavailable() -> Option<String> {
    if cfg!(not(feature = "cuda")) {
        return Some("the `cuda` feature is off".into());
    }
    #[cfg(feature = "cuda")]
    if !tensor_dsl::runtime::nvrtc::available() {
        return Some("NVRTC (libnvrtc.so.13) is not on the library path (LD_LIBRARY_PATH)".into());
    }
    if tensor_dsl::runtime::ptxas::find().is_none() {
        return Some("ptxas is not on PATH (or TENSOR_DSL_PTXAS)".into());
    }
    None
}

/// Whether a test that needs the tools `why` says are missing goes on: `false` (after
/// printing why) where they are missing, a panic instead where `TENSOR_DSL_REQUIRE_NVRTC=1`
/// (CI, which installs them).
#[allow(dead_code)] // used by the NVRTC compile tests only
pub fn tools_present(why: Option<String>) -> bool {
    let Some(why) = why else {
        return true;
    };
    if std::env::var("TENSOR_DSL_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        panic!("TENSOR_DSL_REQUIRE_NVRTC=1 but {why}");
    }
    println!("skipped: {why}");
    false
}
