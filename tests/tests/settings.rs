//! Settings: the `Options` builder, the environment variables that override it, and
//! unknown values rejected with the accepted ones named. Its own test binary: it sets the
//! process environment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::{tensor_kernel, Device, Error, Options, Tensor, TunePolicy};

#[tensor_kernel]
fn double(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    y[[i]] = 2.0 * x[[i]];
}

#[test]
fn builder_then_variables_and_unknown_values_are_errors() {
    // The builder's values, with no variable set.
    for name in [
        "TENSOR_DSL_TUNE",
        "TENSOR_DSL_TRIALS",
        "TENSOR_DSL_STRATEGY",
        "TENSOR_DSL_LOG",
    ] {
        std::env::remove_var(name);
    }
    let opts = Options::new()
        .device(Device::Cpu)
        .tune(TunePolicy::FirstCall)
        .trials(7)
        .tune_seconds(9.0)
        .strategy("droplet");
    let (policy, tune) = opts.tune_settings().unwrap();
    assert_eq!(policy, TunePolicy::FirstCall);
    assert_eq!(
        (tune.trials, tune.seconds, tune.strategy.as_str()),
        (7, Some(9.0), "droplet")
    );

    // A variable overrides the builder.
    std::env::set_var("TENSOR_DSL_TRIALS", "3");
    std::env::set_var("TENSOR_DSL_TUNE", "off");
    let (policy, tune) = opts.tune_settings().unwrap();
    assert_eq!((policy, tune.trials), (TunePolicy::Off, 3));
    // Zero trials is a budget (the model's pick, unmeasured); a fraction is not.
    std::env::set_var("TENSOR_DSL_TRIALS", "0");
    assert_eq!(opts.tune_settings().unwrap().1.trials, 0);
    std::env::remove_var("TENSOR_DSL_TRIALS");
    assert_eq!(
        Options::new().trials(0).tune_settings().unwrap().1.trials,
        0
    );
    std::env::set_var("TENSOR_DSL_TRIALS", "2.5");
    assert!(opts.tune_settings().is_err());
    std::env::set_var("TENSOR_DSL_TRIALS", "3");

    // Unknown values name what is accepted.
    let bad = Options::new()
        .strategy("annealing")
        .tune_settings()
        .unwrap_err();
    assert!(bad.to_string().contains("opevo-droplet"), "{bad}");
    std::env::set_var("TENSOR_DSL_TUNE", "always");
    assert!(opts
        .tune_settings()
        .unwrap_err()
        .to_string()
        .contains("first-call"));
    std::env::remove_var("TENSOR_DSL_TUNE");

    // TENSOR_DSL_LOG=debug is not silently ignored: the first call says what it accepts.
    std::env::set_var("TENSOR_DSL_LOG", "debug");
    let x = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]).unwrap();
    let mut y = Tensor::<f32>::zeros(&[3]);
    match double::with(&Options::new().device(Device::Reference))(&x, &mut y) {
        Err(Error::InvalidSetting { name, expected, .. }) => {
            assert_eq!(name, "TENSOR_DSL_LOG");
            assert!(expected.contains("dispatch"), "{expected}");
        }
        other => panic!("expected an invalid-setting error, got {other:?}"),
    }
    std::env::set_var("TENSOR_DSL_LOG", "dispatch");
    double::with(&Options::new().device(Device::Reference))(&x, &mut y).unwrap();
    assert_eq!(y.as_slice(), &[2.0, 4.0, 6.0]);
}
