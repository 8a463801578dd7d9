//! `Options::cache_dir`: a call's records and compiled objects go to the folder it names
//! (and `TENSOR_DSL_CACHE` overrides it). Its own test binary: it sets the environment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::{tensor_kernel, Device, Options, Tensor, TunePolicy};

#[tensor_kernel]
fn mm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

#[test]
fn a_calls_cache_folder_holds_its_records_and_objects() {
    for v in ["TENSOR_DSL_CACHE", "TENSOR_DSL_TUNE", "TENSOR_DSL_TRIALS"] {
        std::env::remove_var(v);
    }
    let base = std::env::temp_dir().join(format!("tensor-dsl-cache-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mine = base.join("mine");
    let opts = Options::new()
        .device(Device::Cpu)
        .tune(TunePolicy::FirstCall)
        .trials(2)
        .cache_dir(&mine);
    let a = Tensor::from_vec(vec![6, 5], (0..30).map(|x| x as f32).collect()).unwrap();
    let b = Tensor::from_vec(vec![5, 7], (0..35).map(|x| x as f32 * 0.5).collect()).unwrap();
    let mut c = Tensor::<f32>::zeros(&[6, 7]);
    mm::with(&opts)(&a, &b, &mut c).unwrap();
    let mut want = Tensor::<f32>::zeros(&[6, 7]);
    mm::with(&Options::new().device(Device::Reference))(&a, &b, &mut want).unwrap();
    assert_eq!(c.as_slice(), want.as_slice());
    let records = std::fs::read_to_string(mine.join("records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 2, "{records}");
    if tensor_dsl::runtime::cpu::compiler().is_ok() {
        assert!(std::fs::read_dir(mine.join("objects")).unwrap().count() > 0);
    }

    // The variable overrides the builder.
    let env = base.join("env");
    std::env::set_var("TENSOR_DSL_CACHE", &env);
    let mut c = Tensor::<f32>::zeros(&[3, 7]);
    let a3 = Tensor::from_vec(vec![3, 5], vec![1.0f32; 15]).unwrap();
    mm::with(&opts)(&a3, &b, &mut c).unwrap();
    assert!(env.join("records.jsonl").exists());
    assert_eq!(
        std::fs::read_to_string(mine.join("records.jsonl"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    std::env::remove_var("TENSOR_DSL_CACHE");
    let _ = std::fs::remove_dir_all(&base);
}
