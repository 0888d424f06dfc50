//! Save, load and list with `FileSessionStore`, each beside its physical baseline measured
//! in the same run on the same bytes.
//!
//! Run: `cargo bench --bench store` (add `-- save` etc. to filter). Set
//! `AGENT_SESSION_BENCH_TRANSCRIPT` to a `make_transcript.py` file to measure those bytes.
//!
//! Baselines:
//! - save: the same bytes written with temp file + write + fsync + rename + directory fsync;
//! - load: read the same file + `serde_json` parse into `serde_json::Value`;
//! - list: `readdir` + `stat` of every file.

#![allow(missing_docs)] // criterion's macros generate undocumented items.

#[path = "support/workload.rs"]
mod workload;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use agent_session::{FileSessionStore, Message, SessionId, SessionSnapshot, SessionStore, Usage};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const SIZES: [usize; 3] = [10, 100, 1_000];

fn snapshot_of(n: usize, id: &str) -> SessionSnapshot {
    let wire = workload::from_env().unwrap_or_else(|| workload::transcript(n));
    let transcript = wire
        .iter()
        .map(|m| Message::from_openai_chat(m).expect("workload messages are valid"))
        .collect();
    SessionSnapshot::builder(SessionId::parse(id).expect("valid id"), "bench-model")
        .transcript(transcript)
        .usage(vec![
            Usage::new("bench-model").with_tokens(1_000, 200);
            n / 4
        ])
        .build()
        .expect("workload transcripts pair every tool call")
}

/// The physical floor of an atomic, durable replace.
fn raw_atomic_write(dir: &Path, bytes: &[u8]) {
    let temp = dir.join(".baseline.tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .expect("create temp");
    file.write_all(bytes).expect("write");
    file.sync_all().expect("fsync");
    drop(file);
    std::fs::rename(&temp, dir.join("baseline.json")).expect("rename");
    File::open(dir)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

fn save(c: &mut Criterion) {
    let mut group = c.benchmark_group("save");
    for n in SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::open(dir.path().join("store")).expect("open store");
        let mut snapshot = Some(snapshot_of(n, "bench"));
        let bytes = snapshot
            .as_ref()
            .map(|s| s.to_json().expect("encode"))
            .unwrap_or_default();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::new("file_store", n), &n, |b, _| {
            b.iter(|| {
                let current = snapshot
                    .take()
                    .expect("snapshot is put back every iteration");
                let revision = store.save(&current).expect("save");
                snapshot = Some(current.with_revision(revision));
            });
        });
        let raw_dir = dir.path().join("raw");
        std::fs::create_dir(&raw_dir).expect("mkdir");
        group.bench_with_input(BenchmarkId::new("baseline_atomic_write", n), &n, |b, _| {
            b.iter(|| raw_atomic_write(&raw_dir, &bytes));
        });
    }
    group.finish();
}

fn load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    for n in SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::open(dir.path()).expect("open store");
        let snapshot = snapshot_of(n, "bench");
        store.save(&snapshot).expect("save");
        let path = store.path_of(snapshot.id());
        let size = std::fs::metadata(&path).expect("stat").len();
        group.throughput(Throughput::Bytes(size));
        group.bench_with_input(BenchmarkId::new("file_store", n), &n, |b, _| {
            b.iter(|| store.load(snapshot.id()).expect("load"));
        });
        group.bench_with_input(
            BenchmarkId::new("baseline_read_parse_value", n),
            &n,
            |b, _| {
                b.iter(|| {
                    let bytes = std::fs::read(&path).expect("read");
                    serde_json::from_slice::<serde_json::Value>(&bytes).expect("parse")
                });
            },
        );
    }
    group.finish();
}

fn list(c: &mut Criterion) {
    let mut group = c.benchmark_group("list");
    let sessions = 1_000;
    for n in [10] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileSessionStore::open(dir.path()).expect("open store");
        let template = snapshot_of(n, "template");
        for i in 0..sessions {
            let id = SessionId::parse(&format!("s{i:05}")).expect("valid id");
            let snapshot = SessionSnapshot::builder(id, "bench-model")
                .transcript(template.transcript().to_vec())
                .build()
                .expect("valid");
            store.save(&snapshot).expect("save");
        }
        group.bench_with_input(
            BenchmarkId::new("file_store_1000_sessions", n),
            &n,
            |b, _| {
                b.iter(|| {
                    let listing = store.list().expect("list");
                    assert_eq!(listing.sessions.len(), sessions);
                });
            },
        );
        group.bench_with_input(BenchmarkId::new("baseline_readdir_stat", n), &n, |b, _| {
            b.iter(|| {
                std::fs::read_dir(dir.path())
                    .expect("readdir")
                    .map(|e| e.expect("entry").metadata().expect("stat").len())
                    .sum::<u64>()
            });
        });
    }
    group.finish();
}

fn config() -> Criterion {
    // Shared, noisy 2-core machines: few samples, short windows; compare ratios within a
    // run, never absolute times across runs.
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = save, load, list
}
criterion_main!(benches);
