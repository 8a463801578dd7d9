//! `bf16` pairs (`kernel=pairs`, [`CpuConfig::pairs`]) against the reference interpreter:
//! matmuls and batched matmuls with the reduction index contiguous in the broadcast operand
//! and strided (a transposed operand), a transposed packed operand, an epilogue, `f32` and
//! `bf16` outputs; odd reductions (a last point paired with zero), vector tiles of 16 to 64
//! lanes with partial last tiles, reduction blocks of even and odd sizes; through the entry
//! point and through the prepacked one; and convolutions in pairs of input channels. The C is
//! the same on every machine (with AVX-512 BF16 it uses `vdpbf16ps`, elsewhere shifts and
//! FMAs), so this runs wherever a C compiler does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, SeedableRng};
use tensor_dsl::codegen::c;
use tensor_dsl::ir::{bind, parse_text, DType, Kernel};
use tensor_dsl::runtime::cpu;
use tensor_dsl::template::cpu::{packed_access, CpuConfig, CpuTemplate};
use tensor_dsl::template::cpu_conv::{ConvShape, ConvTile};
use tensor_dsl::{Buffer, Data};

/// (name, kernel, output type).
const CASES: &[(&str, &str, DType)] = &[
    ("matmul", "c[[i, j]] += a[[i, k]] * b[[k, j]]", DType::F32),
    (
        "batched_bf16_out",
        "c[[n, i, j]] += a[[n, i, k]] * b[[n, k, j]]",
        DType::BF16,
    ),
    (
        "batched_transposed",
        "c[[n, i, j]] += a[[n, k, i]] * b[[n, k, j]]",
        DType::F32,
    ),
    (
        "packed_transposed_epilogue",
        "c[[i, j]] += a[[i, k]] * b[[j, k]]; c[[i, j]] = relu(c[[i, j]] * 0.5 + d[[j]])",
        DType::F32,
    ),
];

/// `name`'s kernel with `bf16` operands (`a`, `b`), `out` as the output's type.
fn kernel(name: &str, text: &str, out: DType) -> Kernel {
    let mut k = parse_text(name, text, None).unwrap();
    for p in &mut k.params {
        if p.is_output {
            p.dtype = out;
        } else if p.name == "a" || p.name == "b" {
            p.dtype = DType::BF16;
        }
    }
    k
}

fn check(kernel: &Kernel, shapes: &[Vec<usize>], configs: &[CpuConfig], rng: &mut StdRng) {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs).unwrap();
    let data = common::random_inputs(kernel, shapes, rng);
    let views: Vec<Data> = data.iter().map(Buffer::view).collect();
    let want = common::reference_output(kernel, &extents, shapes, &data);
    let out_dtype = kernel.params[kernel.output].dtype;
    let n_out: usize = shapes[kernel.output].iter().product();
    let terms: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
    let tol = 1e-4 * (terms as f32 / 1000.0).sqrt().max(1.0)
        + match out_dtype {
            DType::F32 => 0.0,
            d => tensor_dsl::measure::tolerance(d),
        };
    // Versions for every input: where the config has a prepacked form, it is used.
    let versions: Vec<Option<u64>> = (0..kernel.params.len()).map(|p| Some(p as u64)).collect();
    for cfg in configs {
        assert!(cfg.validate(kernel).is_ok(), "{cfg:?}");
        for prepacked in [false, true] {
            let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; n_out]);
            let v: &[Option<u64>] = if prepacked { &versions } else { &[] };
            match cpu::run_with_versions(kernel, &extents, &refs, &views, v, got.view_mut(), cfg) {
                Err(cpu::CpuError::Other(e)) => panic!("{} {shapes:?} {cfg:?}: {e}", kernel.name),
                Err(cpu::CpuError::NoCompiler(_)) => return,
                Ok(()) => {}
            }
            for (n, (g, w)) in got.to_f32().iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{} shapes {shapes:?} {cfg:?} (prepacked {prepacked}): element {n}: cpu {g} vs reference {w}",
                    kernel.name
                );
            }
        }
    }
}

/// Set in the child process of [`the_fallback_without_avx512_bf16_matches_too`]: compile
/// with `-mno-avx512bf16`, so the pairs code takes its shifts-and-FMAs branch.
const NO_BF16_ENV: &str = "TD_TEST_PAIRS_WITHOUT_AVX512BF16";

/// In the child process of [`the_fallback_without_avx512_bf16_matches_too`], points `CC` at
/// a wrapper that adds `-mno-avx512bf16` (once per process, before the first compile: the
/// compiler is probed once per process). Then whether a C compiler is there.
fn compiler_ready() -> bool {
    static SETUP: std::sync::Once = std::sync::Once::new();
    SETUP.call_once(|| {
        if std::env::var_os(NO_BF16_ENV).is_some() {
            let dir = std::env::temp_dir().join(format!("td-pairs-cc-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let cc = dir.join("cc");
            std::fs::write(&cc, "#!/bin/sh\nexec cc \"$@\" -mno-avx512bf16\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::env::set_var("CC", &cc);
            std::env::set_var("TENSOR_DSL_CACHE", dir.join("cache"));
        }
    });
    match cpu::compiler() {
        Ok(_) => true,
        Err(why) => {
            println!("skipped: no C compiler ({why})");
            false
        }
    }
}

#[test]
fn bf16_pairs_match_the_reference() {
    if !compiler_ready() {
        return;
    }
    for (n, &(name, text, out)) in CASES.iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(n as u64 + 40);
        let kernel = kernel(name, text, out);
        for (i, j, k) in [
            (9, 40, 13),
            (8, 32, 1),
            (17, 67, 64),
            (3, 16, 33),
            (12, 100, 7),
        ] {
            let extent = |x: &str| match x {
                "i" => i,
                "j" => j,
                "k" => k,
                _ => 2,
            };
            let wanted: Vec<usize> = kernel.indices.iter().map(|x| extent(&x.name)).collect();
            let (extents, shapes) =
                common::shapes_for(&kernel, &wanted, |hi| hi as usize + 1).unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            // The 16-lane template, whatever this machine's width: the pairs code is plain C.
            let template = CpuTemplate::new(&kernel, &extents, 16).unwrap();
            let base = CpuConfig {
                vector_code: 16,
                pairs: true,
                pack: true,
                ..CpuConfig::einsum_heuristic(&kernel, &extents, 16)
            };
            let mut configs = Vec::new();
            for (vector, unroll, k_block) in [(16, 4, 0), (32, 8, 0), (48, 3, 4), (64, 2, 5)] {
                let k_block = if out == DType::F32 && k_block < k {
                    k_block
                } else {
                    0
                };
                configs.push(CpuConfig {
                    vector,
                    unroll,
                    k_block,
                    unroll_outer: false,
                    ..base.clone()
                });
            }
            // Random points of the space with the pairs kernel.
            let mut found = 0;
            for _ in 0..200 {
                let point = template.space().sample_uniform(&mut rng).unwrap();
                let cfg = template.decode(&point).unwrap();
                if cfg.pairs {
                    configs.push(cfg);
                    found += 1;
                    if found == 2 {
                        break;
                    }
                }
            }
            assert!(found > 0, "{name}: no pairs point in 200 samples");
            // The tiles are pairs code wherever `j` is the vector axis and a panel is packed.
            for cfg in &configs {
                let src = c::generate(&kernel, &extents, &refs, cfg);
                let on_j = cfg.vector_axis == kernel.indices.iter().position(|x| x.name == "j");
                if on_j && packed_access(&kernel, &extents, cfg).is_some() {
                    assert!(src.contains("td_dot2("), "{name} {cfg:?}:\n{src}");
                }
            }
            check(&kernel, &shapes, &configs, &mut rng);
        }
    }
}

/// Convolutions in pairs of input channels (`conv_vector=pairs` and `pixel_pairs`,
/// [`ConvShape::pair_index`]):
/// NCHW with odd channel counts (the last channel paired with zero), stride 2 and a 7×7
/// window over 3 channels, a 1×1 stride-2 one (the compact copy), NHWC with HWIO weights,
/// an epilogue and a `bf16` output, channel tiles past the last channel; the default with
/// pairs, its other loop order and scalar stores, part-row tiles, pixel pairs (runs of a
/// batch copied per pixel tile, a padded row) and random pairs points of the space; through the entry point and
/// the prepacked one.
#[test]
fn bf16_conv_pairs_match_the_reference() {
    if !compiler_ready() {
        return;
    }
    let conv = |stride: usize, pad: usize| {
        format!(
            "y[[n, f, p, q]] += x[[n, c, {stride} * p + r - {pad}, {stride} * q + s - {pad}]] \
             * w[[f, c, r, s]]"
        )
    };
    let epilogue = "; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])";
    // (kernel, output type, n f p q c r s)
    let cases: Vec<(String, DType, [usize; 7])> = vec![
        (conv(1, 1), DType::F32, [1, 16, 7, 7, 5, 3, 3]),
        (conv(2, 1), DType::F32, [2, 33, 5, 6, 13, 3, 3]),
        (conv(2, 3), DType::F32, [1, 37, 8, 9, 3, 7, 7]),
        (conv(2, 0), DType::F32, [1, 40, 4, 3, 16, 1, 1]),
        // Pixel pairs: runs of 81 pixels over a batch (the last vector moved back) with 23
        // input channels; one 18-pixel row of the padded copy.
        (conv(1, 0), DType::F32, [2, 20, 9, 9, 23, 1, 1]),
        (conv(1, 1), DType::F32, [1, 12, 6, 18, 5, 3, 3]),
        (
            format!("{}{epilogue}", conv(1, 1)),
            DType::BF16,
            [1, 48, 4, 5, 19, 3, 3],
        ),
        (
            "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[r, s, c, f]]; \
             y[[n, p, q, f]] = relu(y[[n, p, q, f]] + bias[[f]])"
                .into(),
            DType::F32,
            [2, 40, 5, 3, 7, 3, 3],
        ),
    ];
    let (mut pixel_pairs, mut fused) = (0, 0);
    for (n, (src, out, named)) in cases.iter().enumerate() {
        let mut rng = StdRng::seed_from_u64(n as u64 + 70);
        let mut k = parse_text("conv", src, None).unwrap();
        for p in &mut k.params {
            if p.is_output {
                p.dtype = *out;
            } else if p.name == "x" || p.name == "w" {
                p.dtype = DType::BF16;
            }
        }
        let id = |x: &str| k.indices.iter().position(|i| i.name == x).unwrap();
        let mut e = vec![0; k.indices.len()];
        for (name, &x) in ["n", "f", "p", "q", "c", "r", "s"].iter().zip(named) {
            e[id(name)] = x;
        }
        let (extents, shapes) = common::shapes_for(&k, &e, |hi| hi.max(0) as usize + 1).unwrap();
        let shape = ConvShape::of(&k).unwrap();
        assert_eq!(shape.pair_index(&k), Some(id("c")), "{src}");
        // The 16-lane template, whatever this machine's width: the pairs code is plain C.
        let template = CpuTemplate::new(&k, &extents, 16).unwrap();
        let base = template.decode(&template.default_config()).unwrap();
        let mut default = base.clone();
        default.pairs = true;
        default.vector = if extents[id("f")] > 16 { 32 } else { 16 };
        default.wide_simd = true;
        if let Some(t) = default.conv.as_mut() {
            t.pad = true;
            t.transpose = false;
            t.pixel_vector = false;
        }
        let default = CpuConfig {
            conv: pixels_capped(&default),
            ..default
        };
        assert!(template.encode(&default).is_some(), "{src} {default:?}");
        let mut configs = vec![default.clone()];
        let mut vary = |f: &dyn Fn(&mut ConvTile, &mut CpuConfig)| {
            let mut c = default.clone();
            let mut t = c.conv.clone().unwrap();
            f(&mut t, &mut c);
            c.conv = Some(t);
            if template.encode(&c).is_some() && !configs.contains(&c) {
                configs.push(c);
            }
        };
        vary(&|t, _| t.pixels_outer = !t.pixels_outer);
        vary(&|t, _| t.vector_store = !t.vector_store);
        vary(&|_, c| c.vector = 16);
        vary(&|_, c| c.parallel = !c.parallel);
        for (v, px) in [(8, 32), (4, 16), (16, 16)] {
            vary(&|t, c| {
                (t.pixel_vector, t.pixels, t.pixels_outer) = (true, px, true);
                c.vector = v;
            });
        }
        let q = extents[id("q")];
        for px in (1..=q).rev().filter(|d| q % d == 0).take(2) {
            vary(&|t, _| t.pixels = px);
        }
        let mut found = 0;
        for _ in 0..300 {
            let point = template.space().sample_uniform(&mut rng).unwrap();
            let cfg = template.decode(&point).unwrap();
            if cfg.pairs && found < 3 {
                configs.push(cfg);
                found += 1;
            }
        }
        assert!(found > 0, "{src}: no pairs point in 300 samples");
        pixel_pairs += configs
            .iter()
            .filter(|c| c.conv.as_ref().is_some_and(|t| t.pixel_vector))
            .count();
        // Pixel pairs over a 1×1, stride-1, unpadded input copy per pixel tile.
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        fused += configs
            .iter()
            .filter(|c| c::generate(&k, &extents, &refs, c).contains("td_conv_xtile("))
            .count();
        for cfg in &configs {
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let text = c::generate(&k, &extents, &refs, cfg);
            assert!(text.contains("td_dot2("), "{src} {cfg:?}:\n{text}");
        }
        check(&k, &shapes, &configs, &mut rng);
    }
    assert!(pixel_pairs >= 4, "{pixel_pairs} pixel-pair tiles checked");
    assert!(
        fused >= 2,
        "{fused} pixel-pair tiles with the per-tile copy checked"
    );
}

/// The pixel tile a config of up to 32 channels keeps within the registers the space allows.
fn pixels_capped(c: &CpuConfig) -> Option<ConvTile> {
    c.conv.clone().map(|t| ConvTile {
        pixels: t.pixels.min(14),
        ..t
    })
}

/// The space offers `kernel=pairs` only where it can mean something, and the default takes
/// it on a machine with the instruction.
#[test]
fn pairs_are_a_point_of_bf16_product_spaces_only() {
    let bf = kernel("mm", "c[[i, j]] += a[[i, k]] * b[[k, j]]", DType::F32);
    let f32_kernel = parse_text("mm", "c[[i, j]] += a[[i, k]] * b[[k, j]]", None).unwrap();
    let scaled = kernel("mm", "c[[i, j]] += a[[i, k]] * b[[k, j]] * 2.0", DType::F32);
    let e = [64, 64, 64];
    let has_pairs = |k: &Kernel, lanes: usize| {
        let t = CpuTemplate::new(k, &e, lanes).unwrap();
        let text = t.space().format(&t.default_config()).unwrap();
        let cfg = CpuConfig {
            pairs: true,
            vector_code: lanes,
            ..t.decode(&t.default_config()).unwrap()
        };
        (t.encode(&cfg).is_some(), text)
    };
    assert!(has_pairs(&bf, 16).0);
    assert!(!has_pairs(&bf, 8).0);
    assert!(!has_pairs(&f32_kernel, 16).0);
    assert!(!has_pairs(&scaled, 16).0);
    // The default asks for pairs exactly where the machine model has the dot product.
    let m = |bf16_dot| tensor_dsl::template::cpu_machine::CpuMachine {
        bf16_dot,
        ..tensor_dsl::template::cpu_machine::CpuMachine::with_lanes(16)
    };
    assert!(CpuConfig::heuristic_for(&bf, &e, &m(true)).pairs);
    assert!(!CpuConfig::heuristic_for(&bf, &e, &m(false)).pairs);
    assert!(!CpuConfig::heuristic_for(&f32_kernel, &e, &m(true)).pairs);
    // Records written before the knob read as they were; a pairs point round-trips.
    let t = CpuTemplate::new(&bf, &e, 16).unwrap();
    let cfg = CpuConfig {
        pairs: true,
        ..CpuConfig::heuristic_for(&bf, &e, &m(true))
    };
    let point = t.encode(&cfg).unwrap();
    let text = t.space().format(&point).unwrap();
    assert!(text.contains("kernel=pairs"), "{text}");
    assert_eq!(t.decode(&t.parse(&text).unwrap()).unwrap(), cfg);
    let json = serde_json::to_string(&CpuConfig {
        pairs: false,
        ..cfg.clone()
    })
    .unwrap();
    assert!(!json.contains("pairs"), "{json}");
}

/// The same checks with the compiler told the CPU has no AVX-512 BF16 (x86-64 with a GCC or
/// Clang `cc` only; elsewhere the child skips): the portable branch of `td_dot2`.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_fallback_without_avx512_bf16_matches_too() {
    if std::env::var_os(NO_BF16_ENV).is_some() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["pairs_match_the_reference", "--nocapture"])
        .env(NO_BF16_ENV, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
