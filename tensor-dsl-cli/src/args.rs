//! Parsing of the command line's kernel, shapes and config selections.

use tensor_dsl::ir::parse_text;
pub use tensor_dsl::ir::Problem;

/// Parses `a=512x1024,b=1024x64,c=512x64` (a rank-0 tensor is `s=` or `s=[]`).
pub fn parse_shapes(text: &str) -> Result<Vec<(String, Vec<usize>)>, String> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, dims) = item
            .split_once('=')
            .ok_or_else(|| format!("`{item}`: expected NAME=D0xD1x..., e.g. a=512x1024"))?;
        let dims = dims.trim().trim_start_matches('[').trim_end_matches(']');
        let dims = if dims.is_empty() {
            Vec::new()
        } else {
            dims.split('x')
                .map(|d| {
                    d.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("`{item}`: `{d}` is not a dimension"))
                })
                .collect::<Result<_, _>>()?
        };
        if out
            .iter()
            .any(|(n, _): &(String, Vec<usize>)| n == name.trim())
        {
            return Err(format!(
                "tensor `{}` is given twice in --shapes",
                name.trim()
            ));
        }
        out.push((name.trim().to_string(), dims));
    }
    Ok(out)
}

/// Parses the kernel text with its parameters in the order of `--shapes` and the element
/// types of `--dtypes` (`a=bf16,b=bf16`; unnamed tensors are `f32`); the output is the tensor
/// on the left of the first statement.
pub fn problem(name: &str, kernel: &str, shapes: &str, dtypes: &str) -> Result<Problem, String> {
    let shapes = parse_shapes(shapes)?;
    // The name is printed into generated code and file headers: a C identifier only.
    let name = tensor_dsl::codegen::c_identifier(name);
    let name = name.as_str();
    let inferred = parse_text(name, kernel, None)?;
    let output = inferred.params[inferred.output].name.clone();
    for p in &inferred.params {
        if !shapes.iter().any(|(n, _)| *n == p.name) {
            return Err(format!("--shapes has no shape for tensor `{}`", p.name));
        }
    }
    for (n, _) in &shapes {
        if !inferred.params.iter().any(|p| p.name == *n) {
            return Err(format!(
                "--shapes names `{n}`, which the kernel does not use"
            ));
        }
    }
    let decl: Vec<(String, bool)> = shapes
        .iter()
        .map(|(n, _)| (n.clone(), *n == output))
        .collect();
    let kernel = parse_text(name, kernel, Some(&decl))?
        .with_dtypes(dtypes)
        .map_err(|e| format!("--dtypes: {e}"))?;
    let shapes: Vec<Vec<usize>> = shapes.into_iter().map(|(_, s)| s).collect();
    Problem::new(kernel, shapes).map_err(|e| e.to_string())
}

/// `default` or `random:N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    Default,
    Random(usize),
}

pub fn parse_selection(text: &str) -> Result<Selection, String> {
    match text.trim() {
        "default" => Ok(Selection::Default),
        t => t
            .strip_prefix("random:")
            .and_then(|n| n.parse().ok())
            .map(Selection::Random)
            .ok_or_else(|| format!("`{t}`: expected `default` or `random:N`")),
    }
}

/// `cpu` or `cuda[:sm_XY[a]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Cpu,
    /// Compute capability `sm` (major*10+minor); `arch_specific`: the `a` target
    /// (`sm_90a`: `wgmma`), whose code runs on that compute capability only.
    Cuda {
        sm: u32,
        arch_specific: bool,
    },
}

impl Target {
    /// The GPU the CUDA templates plan for: an H100's resources at this compute capability.
    pub fn gpu(sm: u32, arch_specific: bool) -> tensor_dsl::template::gpu::GpuTarget {
        tensor_dsl::template::gpu::GpuTarget {
            sm,
            arch_specific,
            ..tensor_dsl::template::gpu::GpuTarget::h100()
        }
    }
}

pub fn parse_target(text: &str) -> Result<Target, String> {
    let bad = |t: &str| {
        format!(
            "`{t}`: expected `cpu`, `cuda:sm_XY` or `cuda:sm_XYa` (e.g. cuda:sm_90, cuda:sm_90a)"
        )
    };
    match text.trim() {
        "cpu" => Ok(Target::Cpu),
        "cuda" => Ok(Target::Cuda {
            sm: 90,
            arch_specific: false,
        }),
        t => {
            let n = t.strip_prefix("cuda:sm_").ok_or_else(|| bad(t))?;
            let (n, arch_specific) = match n.strip_suffix('a') {
                Some(n) => (n, true),
                None => (n, false),
            };
            let sm = n.parse().map_err(|_| bad(t))?;
            Ok(Target::Cuda { sm, arch_specific })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_problem() {
        assert_eq!(
            parse_shapes("a=2x3, s=,t=[]").unwrap(),
            vec![
                ("a".into(), vec![2, 3]),
                ("s".into(), vec![]),
                ("t".into(), vec![])
            ]
        );
        assert!(parse_shapes("a=2xq").is_err());
        let mm = "c[[i,j]] += a[[i,k]] * b[[k,j]]";
        let p = problem("k", mm, "c=2x4,b=3x4,a=2x3", "").unwrap();
        assert_eq!(p.kernel.output, 0);
        assert_eq!(p.extents, vec![2, 4, 3]);
        assert!(problem("k", mm, "a=2x3,b=3x4", "").is_err());
        assert!(problem("k", mm, "a=2x3,b=4x4,c=2x4", "").is_err());
        let h = problem("k", mm, "a=2x3,b=3x4,c=2x4", "a=bf16,b=bf16,c=f32").unwrap();
        assert_eq!(h.kernel.dtypes_text(), "a=bf16,b=bf16,c=f32");
        let e = problem("k", mm, "a=2x3,b=3x4,c=2x4", "a=f64").unwrap_err();
        assert!(e.contains("--dtypes") && e.contains("f64"), "{e}");
        assert_eq!(parse_selection("random:50").unwrap(), Selection::Random(50));
        assert_eq!(
            parse_target("cuda:sm_90").unwrap(),
            Target::Cuda {
                sm: 90,
                arch_specific: false
            }
        );
        assert_eq!(
            parse_target("cuda:sm_90a").unwrap(),
            Target::Cuda {
                sm: 90,
                arch_specific: true
            }
        );
        assert_eq!(Target::gpu(90, true).virtual_arch(), "compute_90a");
        assert!(parse_target("tpu").is_err());
        assert!(parse_target("cuda:sm_9x").is_err());
        assert!(parse_target("cuda:sm_a").is_err());
    }
}
