//! The generated datasets are in the real formats: TFRecord files written by `bench` are read
//! back by the independent `tfrecord` PyPI package (and their masked CRCs recomputed by a
//! separate pure-Python CRC-32C), and npz files load with numpy (whose zipfile checks every
//! member's CRC-32). scripts/deps.sh installs the Python packages; a test fails, naming the
//! module, when one cannot be imported.

use bench::train::{Dataset, FileGen, Format};
use std::path::Path;
use std::process::Command;

/// Fails the test, naming the cause, unless `modules` import in python3.
fn require_python(modules: &str) {
    let out = Command::new("python3").args(["-c", &format!("import {modules}")]).output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "python3 cannot import {modules} (scripts/deps.sh installs them): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is not available (scripts/deps.sh installs it): {e}"),
    }
}

fn write_dataset_file(ds: &Dataset, path: &Path) {
    let mut bytes = Vec::new();
    let mut gen = FileGen::new(ds, 0);
    while let Some(piece) = gen.next_piece().expect("generate") {
        bytes.extend_from_slice(&piece);
    }
    std::fs::write(path, bytes).expect("write");
}

fn run_python(script: &str, arg: &Path) -> String {
    let out = Command::new("python3").args(["-c", script]).arg(arg).output().expect("python3 runs");
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const TFRECORD_CHECK: &str = r#"
import struct, sys
from tfrecord.reader import tfrecord_loader

# An independent CRC-32C (Castagnoli, reflected 0x82F63B78) and TensorFlow's mask.
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

path = sys.argv[1]
raw = open(path, 'rb').read()
pos = 0
framed = 0
while pos < len(raw):
    length_bytes = raw[pos:pos + 8]
    (length,) = struct.unpack('<Q', length_bytes)
    (len_crc,) = struct.unpack('<I', raw[pos + 8:pos + 12])
    assert masked(length_bytes) == len_crc, 'length crc at %d' % pos
    data = raw[pos + 12:pos + 12 + length]
    (data_crc,) = struct.unpack('<I', raw[pos + 12 + length:pos + 16 + length])
    # The pure-Python CRC is slow: check the data CRC of the first records only.
    if framed < 3:
        assert masked(data) == data_crc, 'data crc at %d' % pos
    pos += 16 + length
    framed += 1
assert pos == len(raw)

n = 0
sizes = []
for rec in tfrecord_loader(path, None, {'image': 'byte', 'size': 'int'}):
    assert len(rec['image']) == int(rec['size'][0]), (len(rec['image']), rec['size'])
    sizes.append(len(rec['image']))
    n += 1
print(n, framed, sum(sizes))
"#;

#[test]
fn tfrecord_files_read_back_with_the_tfrecord_package() {
    require_python("tfrecord, numpy");
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("shard.tfrecord");
    let ds = Dataset {
        workload: "resnet50".into(),
        format: Format::Tfrecord,
        files: 1,
        samples_per_file: 40,
        record_bytes: 20_000,
        record_stdev_bytes: 3_000,
        seed: 9,
        total_bytes: 800_000,
        names: Vec::new(),
    };
    write_dataset_file(&ds, &path);
    let out = run_python(TFRECORD_CHECK, &path);
    let fields: Vec<u64> = out.split_whitespace().map(|v| v.parse().expect("number")).collect();
    assert_eq!(fields[0], 40, "records decoded by tfrecord: {out}");
    assert_eq!(fields[1], 40, "records framed: {out}");
    // Our own parser agrees on the payload total.
    let bytes = std::fs::read(&path).expect("read");
    let mut p = bench::tfrecord::Parser::default();
    let total: usize =
        p.feed(&bytes).expect("parse").iter().map(|r| bench::tfrecord::parse_example(r).expect("example").0).sum();
    assert_eq!(fields[2], total as u64);
}

const NPZ_CHECK: &str = r#"
import sys, zlib
import numpy as np
z = np.load(sys.argv[1])
x, y = z['x'], z['y']
assert x.dtype == np.uint8 and y.dtype == np.uint8
print(x.shape[0], x.shape[1], x.shape[2], y.shape[0], zlib.crc32(x.tobytes()))
"#;

#[test]
fn npz_files_load_with_numpy() {
    require_python("numpy");
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("sample.npz");
    let ds = Dataset {
        workload: "unet3d".into(),
        format: Format::Npz,
        files: 1,
        samples_per_file: 1,
        record_bytes: 1_000_000,
        record_stdev_bytes: 0,
        seed: 4,
        total_bytes: 1_000_000,
        names: Vec::new(),
    };
    write_dataset_file(&ds, &path);
    let out = run_python(NPZ_CHECK, &path);
    let f: Vec<u64> = out.split_whitespace().map(|v| v.parse().expect("number")).collect();
    assert_eq!((f[0], f[1], f[2], f[3]), (1000, 1000, 1, 1), "{out}");
    // The array numpy sees is exactly what the generator filled in.
    let mut x = vec![0u8; 1_000_000];
    bench::train::fill_random(4, &mut x);
    assert_eq!(f[4], u64::from(bench::npz::crc32(&x)));
}
