//! The IR that `#[tensor_kernel]` embeds, and calls through the generated functions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::ir::{Affine, BodyKind, Expr, Func, IndexKind};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

/// Matrix product with the output first in the parameter list.
#[tensor_kernel]
pub fn matmul_out_first(c: &mut Tensor<f32>, a: &Tensor<f32>, b: &tensor_dsl::Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// 3x3 convolution, stride 2, padding 1, bias + ReLU.
#[tensor_kernel]
pub fn conv_bias_relu(x: &Tensor<f32>, w: &Tensor<f32>, bias: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
    y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);
}

/// Rank-0 output.
#[tensor_kernel]
fn dot(x: &Tensor<f32>, y: &Tensor<f32>, s: &mut Tensor<f32>) {
    s[[]] += x[[i]] * y[[i]];
}

fn reference() -> Options {
    Options::new().device(Device::Reference)
}

#[test]
fn matmul_with_output_first() {
    let k = matmul_out_first::kernel();
    assert_eq!(k.name, "matmul_out_first");
    let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["c", "a", "b"]);
    assert_eq!(k.output, 0);
    assert!(k.params[0].is_output && !k.params[1].is_output && !k.params[2].is_output);
    assert!(k.params.iter().all(|p| p.rank == 2));
    assert_eq!(k.inputs(), [1, 2]);
    let idx: Vec<(&str, IndexKind)> = k
        .indices
        .iter()
        .map(|i| (i.name.as_str(), i.kind))
        .collect();
    assert_eq!(
        idx,
        [
            ("i", IndexKind::Spatial),
            ("j", IndexKind::Spatial),
            ("k", IndexKind::Reduction)
        ]
    );
    assert_eq!(k.kind, BodyKind::Sum);
    assert!(k.epilogue.is_empty());
    assert_eq!(k.to_string(), "c[[i, j]] += (a[[i, k]] * b[[k, j]]);");
    // The IR is built once.
    assert!(std::ptr::eq(k, matmul_out_first::kernel()));
}

#[test]
fn conv_with_epilogue() {
    let k = conv_bias_relu::kernel();
    assert_eq!(k.name, "conv_bias_relu");
    assert_eq!(k.output, 3);
    let ranks: Vec<usize> = k.params.iter().map(|p| p.rank).collect();
    assert_eq!(ranks, [4, 4, 1, 4]);
    let names: Vec<&str> = k.indices.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["n", "f", "p", "q", "c", "r", "s"]);
    assert_eq!(k.spatial(), [0, 1, 2, 3]);
    assert_eq!(k.reduction(), [4, 5, 6]);
    let x = k.accesses()[0];
    assert_eq!(x.tensor, 0);
    assert_eq!(
        x.dims[2],
        Affine {
            terms: vec![(2, 2), (5, 1)],
            offset: -1
        }
    );
    assert_eq!(k.epilogue.len(), 1);
    let Expr::Call(Func::Relu, args) = &k.epilogue[0] else {
        panic!("epilogue: {:?}", k.epilogue[0]);
    };
    assert!(matches!(&args[0], Expr::Bin(_, out, _) if **out == Expr::Output));
    // Same meaning as the text form the CLI parses.
    let text = tensor_dsl::ir::parse_text(
        "conv_bias_relu",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]];
         y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]]);",
        Some(&[
            ("x".into(), false),
            ("w".into(), false),
            ("bias".into(), false),
            ("y".into(), true),
        ]),
    )
    .unwrap();
    assert_eq!(*k, text);
}

#[test]
fn rank_zero_dot() {
    let k = dot::kernel();
    assert_eq!(k.name, "dot");
    assert_eq!(k.params[k.output].rank, 0);
    assert_eq!(k.spatial(), Vec::<usize>::new());
    assert_eq!(k.reduction(), [0]);

    let x = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let y = Tensor::from_vec(vec![3], vec![4.0f32, 5.0, 6.0]).unwrap();
    let mut s = Tensor::<f32>::zeros(&[]);
    dot::with(&reference())(&x, &y, &mut s).unwrap();
    assert_eq!(s.as_slice(), &[32.0]);
}

#[test]
fn runs_on_the_reference_device() {
    // a: 2x3, b: 3x2
    let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let b = Tensor::from_vec(vec![3, 2], vec![7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0]).unwrap();
    let mut c = Tensor::<f32>::from_vec(vec![2, 2], vec![-1.0; 4]).unwrap();
    // The closure owns its options: it may outlive them.
    let run = matmul_out_first::with(&reference());
    run(&mut c, &a, &b).unwrap();
    assert_eq!(c.as_slice(), &[58.0, 64.0, 139.0, 154.0]);
}

#[test]
fn shape_errors_are_errors() {
    let a = Tensor::<f32>::zeros(&[2, 3]);
    let b = Tensor::<f32>::zeros(&[4, 2]);
    let mut c = Tensor::<f32>::zeros(&[2, 2]);
    let err = matmul_out_first::with(&reference())(&mut c, &a, &b).unwrap_err();
    assert!(err.to_string().contains("index `k`"), "{err}");
}

/// `name::device` takes device tensors in the declaration's order and element types; without
/// a GPU no `DeviceTensor` exists, so this checks the signature.
#[test]
fn device_function_is_typed_like_the_declaration() {
    use tensor_dsl::{bf16, DeviceTensor, Error};
    #[tensor_kernel]
    fn mixed(a: &Tensor<bf16>, c: &mut Tensor<f32>, b: &Tensor<bf16>) {
        c[[i, j]] += a[[i, k]] * b[[k, j]];
    }
    type Mixed =
        fn(&DeviceTensor<bf16>, &mut DeviceTensor<f32>, &DeviceTensor<bf16>) -> Result<(), Error>;
    let _: Mixed = mixed::device;
    let _: fn(&mut DeviceTensor, &DeviceTensor, &DeviceTensor) -> Result<(), Error> =
        matmul_out_first::device;
}
