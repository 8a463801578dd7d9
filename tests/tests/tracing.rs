//! tensor-dsl logs through `tracing`: with a subscriber installed, a first call reports the
//! dispatch decision and the compile time as events (and prints nothing itself). Its own
//! test binary: it installs the process's global subscriber.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn scale_add(x: &Tensor<f32>, y: &Tensor<f32>, z: &mut Tensor<f32>) {
    z[[i]] = 3.0 * x[[i]] + y[[i]];
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_first_call_reports_its_decision_and_compile_time_as_events() {
    std::env::remove_var("TENSOR_DSL_LOG");
    // A fresh cache, so the kernel is compiled here.
    let dir = std::env::temp_dir().join(format!("tensor-dsl-tracing-{}", std::process::id()));
    std::env::set_var("TENSOR_DSL_CACHE", &dir);
    let out = Captured::default();
    let writer = out.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("tensor_dsl=debug"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let x = Tensor::from_vec(vec![5], vec![1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
    let y = Tensor::from_vec(vec![5], vec![1.0f32; 5]).unwrap();
    let mut z = Tensor::<f32>::zeros(&[5]);
    scale_add::with(&Options::new().device(Device::Cpu))(&x, &y, &mut z).unwrap();
    assert_eq!(z.as_slice(), &[4.0, 7.0, 10.0, 13.0, 16.0]);

    let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let dispatch = log
        .lines()
        .find(|l| l.contains("tensor_dsl::dispatch"))
        .unwrap_or_else(|| panic!("no dispatch event in:\n{log}"));
    assert!(
        dispatch.contains("kernel=\"scale_add\"")
            && dispatch.contains("device=\"cpu\"")
            && dispatch.contains("source="),
        "{dispatch}"
    );
    // Compiled unless no C compiler is installed (then the call fell back, with a warning).
    if tensor_dsl::runtime::cpu::compiler().is_ok() {
        assert!(
            log.lines()
                .any(|l| l.contains("tensor_dsl::compile") && l.contains("seconds=")),
            "no compile event in:\n{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
