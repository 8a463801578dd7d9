//! Records on disk: corrupt files are skipped and repaired, and concurrent writers (real
//! processes) never lose each other's records.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use tensor_dsl::records::{
    append, append_bounded, compact, read, write, Index, JsonlFile, Record, RecordStore, Target,
    KEEP_PER_KEY, RECORD_VERSION,
};
use tensor_dsl::Error;

fn record(kernel: &str, shape: usize, seconds: Option<f64>) -> Record {
    Record {
        version: RECORD_VERSION,
        kernel: kernel.into(),
        name: String::new(),
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
        pair: None,
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
        (2, 3),
        "an append adds a whole line after the cut one, and rewrites nothing"
    );
    compact(&path, KEEP_PER_KEY, u64::MAX).unwrap();
    let (records, skipped) = read(&path).unwrap();
    assert_eq!(
        (records.len(), skipped),
        (2, 0),
        "compaction repairs the file"
    );
    // Pure garbage (even binary) is not an error either.
    std::fs::write(&path, [0xffu8, 0xfe, 0x00, b'{']).unwrap();
    assert_eq!(read(&path).unwrap().0.len(), 0);
}

/// Appending adds to the file in place (same inode, earlier bytes untouched); past the size
/// bound the file is compacted to the best records per key.
#[cfg(unix)]
#[test]
fn appends_do_not_rewrite_and_compaction_keeps_the_best_under_the_bound() {
    use std::os::unix::fs::MetadataExt;
    let path = temp_file("append");
    append(&path, &[record("k", 4, Some(1.0))]).unwrap();
    let before = std::fs::read(&path).unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    append(&path, &[record("k", 4, Some(2.0))]).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "not replaced"
    );
    assert!(std::fs::read(&path).unwrap().starts_with(&before));

    // 40 trials of each of 3 keys (one invalid per key), bound 20 kB: compacted on append.
    let path = temp_file("compact");
    let line = serde_json::to_string(&record("k", 4, Some(1.0)))
        .unwrap()
        .len() as u64
        + 1;
    for shape in [4, 8, 16] {
        // Each trial a different config.
        let mut trials: Vec<Record> = (1..=40)
            .map(|n| Record {
                config: format!("vector={n}"),
                ..record("k", shape, Some(n as f64))
            })
            .collect();
        trials.push(record("k", shape, None));
        append_bounded(&path, &trials, 20_000).unwrap();
    }
    let (records, skipped) = read(&path).unwrap();
    assert_eq!(skipped, 0);
    assert!(std::fs::metadata(&path).unwrap().len() <= 20_000);
    let index = {
        let mut i = Index::new();
        i.extend(&records);
        i
    };
    for shape in [4, 8, 16] {
        let best = index.best(&record("k", shape, None).key()).unwrap();
        assert_eq!(best.seconds, Some(1.0), "the best of every key is kept");
    }
    assert!(
        records.len() < 3 * 41,
        "an append past the bound compacted the file"
    );
    compact(&path, KEEP_PER_KEY, 20_000).unwrap();
    let (records, _) = read(&path).unwrap();
    assert_eq!(records.len(), 3 * KEEP_PER_KEY);
    assert!(records
        .iter()
        .all(|r| r.error.is_none() && r.seconds.unwrap() <= KEEP_PER_KEY as f64));
    // A tight bound keeps fewer per key, down to the best one.
    compact(&path, KEEP_PER_KEY, 3 * line + 8).unwrap();
    assert_eq!(read(&path).unwrap().0.len(), 3);
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
    let other_config = |seconds| Record {
        config: "vector=32".into(),
        ..record("k", 64, Some(seconds))
    };
    let rs = [
        record("k", 64, Some(3.0)),
        other_config(1.0),
        record("k", 64, None),
        record("k", 512, Some(9.0)),
        record("other", 100, Some(1.0)),
    ];
    index.extend(&rs);
    assert_eq!(index.len(), 3);
    let best = index.best(&rs[0].key()).unwrap();
    assert_eq!(
        (best.seconds, best.config.as_str()),
        (Some(1.0), "vector=32")
    );
    let probe = record("k", 100, Some(1.0)).key();
    assert!(index.best(&probe).is_none());
    assert_eq!(index.nearest(&probe).unwrap().shapes[0], vec![64]);
}

/// A config measured several times is judged by the upper median of its times, not by its
/// luckiest one: one lucky 1.0 among 4.0s does not beat a config measured at 2.0, even when
/// the records come in separate batches.
#[test]
fn index_judges_a_remeasured_config_by_its_median() {
    let lucky = |seconds| record("k", 64, Some(seconds));
    let steady = Record {
        config: "vector=32".into(),
        ..record("k", 64, Some(2.0))
    };
    let mut index = Index::new();
    index.extend(&[lucky(1.0), steady.clone()]);
    assert_eq!(index.best(&steady.key()).unwrap().seconds, Some(1.0));
    index.extend(&[lucky(4.0), lucky(4.5)]);
    let best = index.best(&steady.key()).unwrap();
    assert_eq!(
        (best.seconds, best.config.as_str()),
        (Some(2.0), "vector=32")
    );
    // Two measurements: the slower counts (upper median).
    let mut two = Index::new();
    two.extend(&[lucky(1.0), lucky(3.0), steady.clone()]);
    assert_eq!(two.best(&steady.key()).unwrap().config, "vector=32");
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

/// What is at `path`, without following a link: (is a link, is a character device, is a
/// FIFO, is a regular file).
#[cfg(unix)]
fn kind(path: &std::path::Path) -> (bool, bool, bool, bool) {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(path).unwrap().file_type();
    (t.is_symlink(), t.is_char_device(), t.is_fifo(), t.is_file())
}

#[cfg(unix)]
#[test]
fn records_go_through_a_symlink_to_its_target_and_the_link_stays() {
    let path = temp_file("symlink");
    let dir = path.parent().unwrap();
    let target = dir.join("elsewhere").join("real.jsonl");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    append(&target, &[record("k", 1, Some(1.0))]).unwrap();
    std::os::unix::fs::symlink("elsewhere/real.jsonl", &path).unwrap();
    append(&path, &[record("k", 2, Some(1.0))]).unwrap();
    JsonlFile::new(&path)
        .commit(&[record("k", 3, Some(1.0))])
        .unwrap();
    assert!(kind(&path).0, "the link is still a link");
    assert_eq!(
        std::fs::read_link(&path).unwrap(),
        PathBuf::from("elsewhere/real.jsonl")
    );
    let (records, _) = read(&target).unwrap();
    assert_eq!(records.len(), 3, "the target holds every record");
    // The lock sits beside the target (so writers through any link share it), not the link.
    assert!(target.with_extension("lock").is_file());
    assert!(!path.with_extension("lock").exists());
    // Replacing the whole file goes through the link too.
    write(&path, &[record("k", 4, Some(1.0))]).unwrap();
    assert!(kind(&path).0);
    assert_eq!(read(&target).unwrap().0.len(), 1);
}

/// `/dev/null` means "do not save", and writing it must not replace it (as root, renaming a
/// temporary file over it would).
#[cfg(unix)]
#[test]
fn records_to_dev_null_are_not_saved_and_dev_null_stays() {
    use std::os::unix::fs::MetadataExt;
    let null = std::path::Path::new("/dev/null");
    let before = std::fs::symlink_metadata(null).unwrap();
    assert!(
        kind(null).1,
        "/dev/null is a character device before the test"
    );
    append(null, &[record("k", 1, Some(1.0))]).unwrap();
    JsonlFile::new(null)
        .commit(&[record("k", 2, Some(1.0))])
        .unwrap();
    write(null, &[record("k", 3, Some(1.0))]).unwrap();
    let after = std::fs::symlink_metadata(null).unwrap();
    assert!(kind(null).1, "/dev/null is still a character device");
    assert_eq!((before.ino(), before.rdev()), (after.ino(), after.rdev()));
    assert!(
        std::fs::symlink_metadata("/dev/null.lock").is_err(),
        "no lock file beside it"
    );
    assert!(JsonlFile::new(null).load().unwrap().is_empty());
}

/// A FIFO (or another special file) at the records path is refused with an error that names
/// the path and what it is; the FIFO is left as it was.
#[cfg(unix)]
#[test]
fn records_to_a_fifo_or_device_are_a_clear_error() {
    let path = temp_file("special");
    let dir = path.parent().unwrap().to_path_buf();
    let mut cases = Vec::new();
    let fifo = dir.join("fifo");
    match std::process::Command::new("mkfifo").arg(&fifo).status() {
        Ok(s) if s.success() => cases.push((fifo, "FIFO")),
        other => println!("skipping the FIFO case: mkfifo is unavailable ({other:?})"),
    }
    // A character device of our own, only where we may create one (root): a copy of
    // /dev/zero (1, 5) in the temp folder, so nothing outside the test can be harmed.
    let device = dir.join("zero");
    match std::process::Command::new("mknod")
        .arg(&device)
        .args(["c", "1", "5"])
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => cases.push((device, "character device")),
        other => println!("skipping the character-device case: mknod failed ({other:?})"),
    }
    let link = dir.join("link-to-special");
    if let Some((first, _)) = cases.first() {
        std::os::unix::fs::symlink(first, &link).unwrap();
        let what = cases[0].1;
        cases.push((link.clone(), what));
    }
    for (special, what) in &cases {
        let before = kind(special);
        for result in [
            append(special, &[record("k", 1, Some(1.0))]),
            write(special, &[record("k", 1, Some(1.0))]),
        ] {
            let e = result.unwrap_err();
            assert!(matches!(e, Error::NotAFile { .. }), "{e:?}");
            let text = e.to_string();
            assert!(
                text.contains(&*special.to_string_lossy()) && text.contains(what),
                "the error names the path and what it is: {text}"
            );
        }
        assert_eq!(
            kind(special),
            before,
            "{} is left as it was",
            special.display()
        );
        assert!(!special.with_extension("lock").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The build script's output follows the same rules: through a link to its target, nothing
/// for `/dev/null`, and no lock file beside it.
#[cfg(unix)]
#[test]
fn build_output_goes_through_a_symlink_and_not_to_dev_null() {
    let path = temp_file("build-out");
    let dir = path.parent().unwrap();
    let target = dir.join("real-tuned.jsonl");
    std::fs::write(&target, "stale\n").unwrap();
    let link = dir.join("tuned.jsonl");
    std::os::unix::fs::symlink("real-tuned.jsonl", &link).unwrap();
    // No kernels: nothing is tuned, and the output is rewritten with no records.
    let out = tensor_dsl::build::tune().out_file(&link).run().unwrap();
    assert_eq!(out, link);
    assert!(kind(&link).0, "the link is still a link");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "its target was rewritten"
    );
    assert!(!target.with_extension("lock").exists() && !link.with_extension("lock").exists());
    let null = std::path::Path::new("/dev/null");
    tensor_dsl::build::tune().out_file(null).run().unwrap();
    assert!(kind(null).1, "/dev/null is still a character device");
}

/// Records of a search's confirmation rounds (sharing a `pair`) are judged as the search
/// judged them ([`tuner::paired_best`]): the default slower by upper median over every
/// record (its first, slow measurement among them) but faster in each round is the best;
/// without the round ids the upper medians decide. Old records (no `pair`) read as before.
#[test]
fn index_judges_paired_records_by_their_rounds() {
    let at = |config: &str, seconds: f64, pair: Option<u64>| Record {
        config: config.into(),
        pair,
        ..record("k", 64, Some(seconds))
    };
    let records = [
        at("vector=default", 2.0, None),
        at("vector=lucky", 0.9, None),
        at("vector=default", 1.8, Some(7)),
        at("vector=lucky", 1.9, Some(7)),
        at("vector=default", 1.0, Some(8)),
        at("vector=lucky", 1.05, Some(8)),
        at("vector=default", 1.1, Some(9)),
        at("vector=lucky", 1.15, Some(9)),
    ];
    let mut index = Index::new();
    index.extend(&records);
    let best = index.best(&records[0].key()).unwrap();
    assert_eq!(
        (best.config.as_str(), best.seconds),
        ("vector=default", Some(1.8))
    );
    let unpaired: Vec<Record> = records
        .iter()
        .map(|r| Record {
            pair: None,
            ..r.clone()
        })
        .collect();
    let mut index = Index::new();
    index.extend(&unpaired);
    assert_eq!(
        index.best(&records[0].key()).unwrap().config,
        "vector=lucky"
    );
    // `pair` is written only where there is one, and an old line reads without it.
    let line = serde_json::to_string(&records[0]).unwrap();
    assert!(!line.contains("pair"));
    assert!(serde_json::to_string(&records[2])
        .unwrap()
        .contains("\"pair\":7"));
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.pair, None);
}
