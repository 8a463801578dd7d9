//! Records on disk: corrupt files are skipped and repaired, and concurrent writers (real
//! processes) never lose each other's records.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use tensor_dsl::records::{append, read, Index, Record, Target, RECORD_VERSION};

fn record(kernel: &str, shape: usize, seconds: Option<f64>) -> Record {
    Record {
        version: RECORD_VERSION,
        kernel: kernel.into(),
        kernel_text: "c[[i]] = a[[i]];".into(),
        shapes: vec![vec![shape], vec![shape]],
        dtype: "f32".into(),
        target: Target {
            device: "cpu".into(),
            name: "test".into(),
            detail: "".into(),
        },
        codegen: 2,
        config: format!("vector={shape}"),
        seconds,
        samples: seconds.into_iter().collect(),
        error: seconds.is_none().then(|| "bad".to_string()),
        gflops: None,
        strategy: "test".into(),
        unix_time: 0,
    }
}

fn temp_file(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tensor-dsl-records-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("records.jsonl")
}

#[test]
fn corrupt_truncated_and_foreign_lines_are_skipped_and_repaired() {
    let path = temp_file("corrupt");
    let good = serde_json::to_string(&record("k", 4, Some(1.0))).unwrap();
    let mut foreign: serde_json::Value = serde_json::from_str(&good).unwrap();
    foreign["version"] = serde_json::json!(999);
    std::fs::write(
        &path,
        format!(
            "garbage {{{{\n{good}\n{}\n{}",
            foreign,
            &good[..good.len() / 2]
        ),
    )
    .unwrap();
    let (records, skipped) = read(&path).unwrap();
    assert_eq!((records.len(), skipped), (1, 3));
    append(&path, &[record("k", 8, Some(2.0))]).unwrap();
    let (records, skipped) = read(&path).unwrap();
    assert_eq!(
        (records.len(), skipped),
        (2, 0),
        "the write repaired the file"
    );
    // Pure garbage (even binary) is not an error either.
    std::fs::write(&path, [0xffu8, 0xfe, 0x00, b'{']).unwrap();
    assert_eq!(read(&path).unwrap().0.len(), 0);
}

/// Records carry their kernel's element types; a type this build does not know (a newer
/// build's) is skipped like a foreign-version line, and known half types are kept.
#[test]
fn records_with_unknown_element_types_are_skipped() {
    let path = temp_file("dtype");
    let mut half = record("k", 4, Some(1.0));
    half.dtype = "a=bf16,c=f32".into();
    let mut unknown = record("k", 8, Some(1.0));
    unknown.dtype = "a=fp8e4m3,c=f32".into();
    let lines: Vec<String> = [&half, &unknown]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let (records, skipped) = read(&path).unwrap();
    assert_eq!((records.len(), skipped), (1, 1));
    assert_eq!(records[0].dtype, "a=bf16,c=f32");
    let k = tensor_dsl::ir::parse_text("k", "c[[i]] += a[[i, j]]", None).unwrap();
    assert_eq!(tensor_dsl::records::dtype_key(&k), "f32");
    let h = k.with_dtypes("a=bf16").unwrap();
    assert_eq!(tensor_dsl::records::dtype_key(&h), "a=bf16,c=f32");
}

#[test]
fn index_keeps_the_fastest_valid_record_and_finds_the_nearest_shape() {
    let mut index = Index::new();
    let rs = [
        record("k", 64, Some(3.0)),
        record("k", 64, Some(1.0)),
        record("k", 64, None),
        record("k", 512, Some(9.0)),
        record("other", 100, Some(1.0)),
    ];
    index.extend(&rs);
    assert_eq!(index.len(), 3);
    assert_eq!(index.best(&rs[0].key()).unwrap().seconds, Some(1.0));
    let probe = record("k", 100, Some(1.0)).key();
    assert!(index.best(&probe).is_none());
    assert_eq!(index.nearest(&probe).unwrap().shapes[0], vec![64]);
}

/// Run as a child process by the concurrency test.
#[test]
fn child_writer() {
    let (Ok(path), Ok(id)) = (
        std::env::var("TD_RECORDS_CHILD_PATH"),
        std::env::var("TD_RECORDS_CHILD_ID"),
    ) else {
        return;
    };
    let id: usize = id.parse().unwrap();
    for n in 0..20 {
        append(
            PathBuf::from(&path).as_path(),
            &[record(&format!("p{id}"), n + 1, Some(1.0))],
        )
        .unwrap();
    }
}

#[test]
fn concurrent_processes_lose_no_records() {
    let path = temp_file("concurrent");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|id| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads", "1"])
                .env("TD_RECORDS_CHILD_PATH", &path)
                .env("TD_RECORDS_CHILD_ID", id.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let (records, skipped) = read(&path).unwrap();
    assert_eq!((records.len(), skipped), (80, 0));
}
