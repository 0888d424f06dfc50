//! Helpers for the lifecycle tests (fork, archive, prune, export and import): file stamps
//! that show whether a file was rewritten, the files a session has in a file store, and
//! line-level surgery on export bundles.
//!
//! Included by `tests/lifecycle.rs` with `#[path]`.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use agent_session::SessionId;
use serde_json::Value;

/// What identifies one version of a file: a rewrite (new inode), an edit in place (size,
/// contents, modification time) or a change of mode or links (status-change time) all
/// change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    pub ino: u64,
    pub len: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub mode: u32,
    pub bytes: Vec<u8>,
}

/// The stamp of `path`, which must exist.
pub fn stamp(path: &Path) -> FileStamp {
    let meta = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    FileStamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        mode: meta.permissions().mode() & 0o7777,
        bytes: fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    }
}

/// The length of `path`, or 0 if there is no such file.
pub fn len_or_zero(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => panic!("stat {}: {e}", path.display()),
    }
}

/// The bytes allocated on disk for `path` (its blocks), or 0 if there is no such file.
pub fn allocated_or_zero(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(meta) => meta.blocks() * 512,
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => panic!("stat {}: {e}", path.display()),
    }
}

/// The sizes of session `id`'s snapshot and journal in the store directory `dir`:
/// `(length of <id>.json + length of <id>.journal, blocks allocated to both)`.
pub fn session_disk_bytes(dir: &Path, id: &SessionId) -> (u64, u64) {
    let files = [
        dir.join(format!("{id}.json")),
        dir.join(format!("{id}.journal")),
    ];
    (
        files.iter().map(|f| len_or_zero(f)).sum(),
        files.iter().map(|f| allocated_or_zero(f)).sum(),
    )
}

/// The names in the store directory `dir` that belong to session `id`: `<id>.<anything>`
/// (snapshot, journal, summary, archive marker) and temporary files `.<id>.<anything>`.
pub fn files_of(dir: &Path, id: &str) -> Vec<String> {
    let own = format!("{id}.");
    let temp = format!(".{id}.");
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with(&own) || name.starts_with(&temp))
        .collect();
    names.sort();
    names
}

/// Every name in the store directory `dir`, sorted.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            entry
                .expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// The lines of a bundle, without their newlines (the last line's newline is optional).
pub fn lines(bundle: &[u8]) -> Vec<Vec<u8>> {
    let body = bundle.strip_suffix(b"\n").unwrap_or(bundle);
    body.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect()
}

/// `lines` joined into a bundle, each line ending with a newline.
pub fn join(lines: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out
}

/// `line` (one JSON object) decoded, changed by `edit`, and encoded compactly again.
pub fn edit_json(line: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(line).expect("the line is JSON");
    edit(&mut value);
    serde_json::to_vec(&value).expect("encode")
}

/// `bundle` with line `index` (0 = the header) changed by `edit`.
pub fn with_line(bundle: &[u8], index: usize, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut all = lines(bundle);
    edit(&mut all[index]);
    join(&all)
}

/// `bundle` with line `index` (0 = the header) decoded as JSON and changed by `edit`.
pub fn with_json_line(bundle: &[u8], index: usize, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    with_line(bundle, index, |line| *line = edit_json(line, edit))
}

/// The checksum a bundle header records for a session line (CRC-32, 8 lowercase hex
/// digits), computed here independently of the crate.
pub fn line_crc(line: &[u8]) -> String {
    format!("{:08x}", crc32fast::hash(line))
}

/// `bundle` with its header's checksums recomputed for the lines it now holds: what a
/// deliberate forger (rather than a damaged transfer) would send, so the sessions' own
/// validation is what has to refuse it. A header that does not decode is left as is.
pub fn reseal(bundle: &[u8]) -> Vec<u8> {
    let all = lines(bundle);
    let Ok(mut header) = serde_json::from_slice::<Value>(&all[0]) else {
        return bundle.to_vec();
    };
    let Some(object) = header.as_object_mut() else {
        return bundle.to_vec();
    };
    object.insert(
        "crc32".to_owned(),
        Value::Array(
            all[1..]
                .iter()
                .map(|l| Value::String(line_crc(l)))
                .collect(),
        ),
    );
    let mut resealed = all;
    resealed[0] = serde_json::to_vec(&header).expect("encode");
    let mut out = join(&resealed);
    if !bundle.ends_with(b"\n") {
        out.pop();
    }
    out
}
