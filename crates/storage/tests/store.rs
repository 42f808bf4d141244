//! Shard store behaviour through its public API on real directories: roundtrips and ranged
//! reads, copy-on-write rules, detection of every kind of on-disk damage, temp-file cleanup,
//! multi-drive placement and drive locking.

mod common;

use common::*;
use rand::{Rng, RngCore, SeedableRng};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use storage::crypt::KeySource;
use storage::format::FIXED_HEADER_BYTES;
use storage::{ShardStore, StoreConfig};
use wire::{EcScheme, ErrorCode, ShardInfo, ShardKey};

fn open(drives: &[&Path]) -> ShardStore {
    let config = StoreConfig { drives: drives.iter().map(|d| d.to_path_buf()).collect(), reserve_bytes: 0, keys: None };
    ShardStore::open(&config).expect("store opens")
}

/// Checks a ranged get answers exactly the blocks covering the range, verified.
fn check_get(store: &ShardStore, info: &ShardInfo, data: &[u8], offset: u32, len: u32) {
    let (got_info, got_offset, bytes) = store.get(info.key, offset, len).expect("get");
    assert_eq!(&got_info, info);
    let end = if len == 0 { data.len() } else { (offset as usize + len as usize).min(data.len()) };
    let start = offset as usize / B * B;
    let stop = (end.div_ceil(B) * B).min(data.len()).max(start);
    assert_eq!(got_offset as usize, start, "offset {offset} len {len}");
    assert_eq!(bytes.len(), stop - start, "offset {offset} len {len}");
    assert!(bytes[..] == data[start..stop], "wrong bytes for offset {offset} len {len}");
    // The exact range, with the checksums of the rest of its first and last blocks.
    let (got_info, head, tail, bytes) = store.get_range(info.key, offset, len).expect("get_range");
    assert_eq!(&got_info, info);
    assert!(bytes[..] == data[offset as usize..end], "wrong exact bytes for offset {offset} len {len}");
    assert_eq!(head, crc32c::crc32c(&data[start..offset as usize]));
    let last_stop = if end == offset as usize { end } else { (((end - 1) / B + 1) * B).min(data.len()) };
    assert_eq!(tail, crc32c::crc32c(&data[end..last_stop]));
}

#[test]
fn roundtrip_of_odd_sizes_and_ranged_reads_at_block_boundaries() {
    // On the build's own disk, which takes O_DIRECT as a real node's file system (ext4, xfs)
    // does; the buffered path, for file systems that refuse it, is also tested beside the store.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let direct = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(dir.path().join("direct?"))
        .is_ok();
    std::fs::remove_file(dir.path().join("direct?")).ok();
    roundtrip_of_odd_sizes_on(dir.path(), direct);
}

/// Puts shards of odd sizes, reads them back whole and by ranges, and again after a reopen.
fn roundtrip_of_odd_sizes_on(dir: &Path, direct: bool) {
    let store = open(&[dir]);
    assert_eq!(store.direct_writes(), [direct], "{}", dir.display());
    let sizes = [0, 1, 2, 3, 4095, B - 1, B, B + 1, 2 * B, 3 * B - 7, 3 * B + 1, (1 << 20) + 3];
    for (i, &len) in sizes.iter().enumerate() {
        let (info, data) = shard(key(1000 + i as u64, (i % 6) as u8), len);
        store.put(&info, &data).expect("put");
        // Written whole and cut to its length: a padded direct write leaves no zeros behind.
        let on_disk = std::fs::metadata(store.shard_path(info.key).unwrap()).unwrap().len();
        assert_eq!(on_disk as usize, storage::format::encode_header(&info).len() + len, "length {len}");
        check_get(&store, &info, &data, 0, 0);
        let edges = [0, 1, B - 1, B, B + 1, 2 * B - 1, 2 * B, 2 * B + 1, 3 * B - 8, len.saturating_sub(1), len];
        for &off in edges.iter().filter(|&&o| o <= len) {
            for l in [0, 1, 2, B - 1, B, B + 1, 2 * B, u32::MAX as usize] {
                check_get(&store, &info, &data, off as u32, l as u32);
            }
        }
        if len > 0 {
            assert_eq!(code(store.get(info.key, len as u32 + 1, 0)), ErrorCode::Invalid);
        }
    }
    assert_eq!(store.shard_count(), sizes.len());
    assert_eq!(code(store.get(key(1, 0), 0, 0)), ErrorCode::NotFound);

    // Everything survives a reopen (the index is rebuilt from the files).
    drop(store);
    let store = open(&[dir]);
    for (i, &len) in sizes.iter().enumerate() {
        let (info, data) = shard(key(1000 + i as u64, (i % 6) as u8), len);
        check_get(&store, &info, &data, 0, 0);
    }
}

#[test]
fn reput_with_same_content_is_ok_and_with_different_content_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(7, 1), 100_000);
    store.put(&info, &data).expect("put");
    store.put(&info, &data).expect("identical re-put is a retry");
    assert_eq!(store.stat()[0].shards, 1);

    let (other, other_data) = shard(key(7, 1), 100_001);
    assert_eq!(code(store.put(&other, &other_data)), ErrorCode::Exists);
    let mut flipped = data.to_vec();
    flipped[5] ^= 1;
    let flipped_info = ShardInfo { block_crcs: storage::format::block_crcs(&flipped), ..info.clone() };
    assert_eq!(code(store.put(&flipped_info, &flipped)), ErrorCode::Exists);
    let other_ec = ShardInfo { ec: EcScheme { k: 8, m: 3 }, ..info.clone() };
    assert_eq!(code(store.put(&other_ec, &data)), ErrorCode::Exists);
    check_get(&store, &info, &data, 0, 0);
}

#[test]
fn damaged_or_inconsistent_uploads_are_refused_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(9, 0), 3 * B);
    let mut damaged = data.to_vec();
    damaged[B + 17] ^= 0x40;
    assert_eq!(code(store.put(&info, &damaged)), ErrorCode::Corrupt);
    let short_table = ShardInfo { block_crcs: info.block_crcs[..2].to_vec(), ..info.clone() };
    assert_eq!(code(store.put(&short_table, &data)), ErrorCode::Invalid);
    let wrong_len = ShardInfo { len: info.len - 1, ..info.clone() };
    assert_eq!(code(store.put(&wrong_len, &data)), ErrorCode::Invalid);
    let bad_index = ShardInfo { key: key(9, 6), ..info.clone() };
    assert_eq!(code(store.put(&bad_index, &data)), ErrorCode::Invalid);
    let bad_ec = ShardInfo { ec: EcScheme { k: 0, m: 2 }, ..info.clone() };
    assert_eq!(code(store.put(&bad_ec, &data)), ErrorCode::Invalid);
    assert_eq!(store.shard_count(), 0);
    assert!(temp_files(dir.path()).is_empty());
    store.put(&info, &data).expect("the intact upload is stored");
}

/// Flips one byte of the stored file at `pos` and checks every read either fails with
/// `Corrupt` (when it covers the damage) or returns exactly the original bytes.
fn check_corruption_at(store: &ShardStore, path: &Path, info: &ShardInfo, data: &[u8], pos: u64, xor: u8) {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut orig = [0u8; 1];
    file.read_exact_at(&mut orig, pos).unwrap();
    file.write_all_at(&[orig[0] ^ xor], pos).unwrap();

    let data_offset = (FIXED_HEADER_BYTES + 4 * info.block_crcs.len()) as u64;
    let bad_block = pos.checked_sub(data_offset).map(|i| i as usize / B);
    let blocks = info.block_crcs.len();
    let mut ranges = vec![(0u32, 0u32)];
    for b in 0..blocks {
        ranges.push(((b * B) as u32, B as u32));
        ranges.push(((b * B + 1) as u32, 1));
    }
    if blocks > 1 {
        ranges.push(((B - 1) as u32, 2));
    }
    for (off, len) in ranges {
        let first = off as usize / B;
        let end = if len == 0 { data.len() } else { (off as usize + len as usize).min(data.len()) };
        let last = end.div_ceil(B).max(first + 1);
        let touches = match bad_block {
            None => true,
            Some(b) => (first..last).contains(&b),
        };
        // Damage to the header or table of a file already open is found when it is opened
        // again (see `a_file_kept_open_serves_intact_blocks_and_refuses_damaged_ones`).
        store.close_open_files();
        match store.get(info.key, off, len) {
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Corrupt, "pos {pos}: {e}");
                assert!(touches, "pos {pos}: read {off}+{len} misses the damage yet failed: {e}");
                assert!(e.message.contains(&path.display().to_string()), "error does not name the file: {e}");
            }
            Ok((got_info, got_off, bytes)) => {
                assert!(!touches, "pos {pos}: damaged read {off}+{len} was served");
                assert_eq!(&got_info, info, "pos {pos}");
                let start = got_off as usize;
                assert!(bytes[..] == data[start..start + bytes.len()], "pos {pos}: wrong bytes served");
            }
        }
        store.close_open_files();
        match store.get_range(info.key, off, len) {
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Corrupt, "pos {pos}: {e}");
                assert!(touches, "pos {pos}: exact read {off}+{len} misses the damage yet failed: {e}");
            }
            Ok((got_info, _, _, bytes)) => {
                assert!(!touches, "pos {pos}: damaged exact read {off}+{len} was served");
                assert_eq!(&got_info, info, "pos {pos}");
                assert!(bytes[..] == data[off as usize..end], "pos {pos}: wrong exact bytes served");
            }
        }
    }
    file.write_all_at(&orig, pos).unwrap();
}

#[test]
fn every_single_byte_corruption_is_detected_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);

    // Small shard: every byte of the file, header, table and data.
    let (info, data) = shard(key(11, 2), 1000);
    store.put(&info, &data).unwrap();
    let path = store.shard_path(info.key).unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len();
    for pos in 0..file_len {
        check_corruption_at(&store, &path, &info, &data, pos, rng.gen_range(1..=255));
    }

    // Three blocks: every byte of header and table, sampled data positions (each block's
    // first and last bytes plus random ones).
    let (info, data) = shard(key(12, 0), 3 * B - 100);
    store.put(&info, &data).unwrap();
    let path = store.shard_path(info.key).unwrap();
    let data_offset = (FIXED_HEADER_BYTES + 12) as u64;
    let mut positions: Vec<u64> = (0..data_offset).collect();
    for b in 0..3u64 {
        let start = data_offset + b * B as u64;
        let end = (start + B as u64).min(data_offset + data.len() as u64);
        positions.extend([start, start + 1, end - 2, end - 1]);
    }
    positions.extend((0..300).map(|_| data_offset + rng.gen_range(0..data.len() as u64)));
    for pos in positions {
        check_corruption_at(&store, &path, &info, &data, pos, rng.gen_range(1..=255));
    }
    // Undamaged again after all the restores.
    check_get(&store, &info, &data, 0, 0);
}

#[test]
fn truncated_or_extended_files_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    for (chunk, len) in [(20u64, 0usize), (21, 500), (22, 2 * B + 3)] {
        let (info, data) = shard(key(chunk, 0), len);
        store.put(&info, &data).unwrap();
        let path = store.shard_path(info.key).unwrap();
        let full = std::fs::read(&path).unwrap();
        let mut cuts: Vec<usize> = if full.len() < 2000 { (0..full.len()).collect() } else { Vec::new() };
        cuts.extend([0, 1, 35, 36, 37, 47, 48, 49, 48 + B, full.len() - 1].iter().filter(|&&c| c < full.len()));
        for cut in cuts {
            std::fs::write(&path, &full[..cut]).unwrap();
            store.close_open_files();
            let e = store.get(info.key, 0, 0).expect_err("truncated file served");
            assert_eq!(e.code, ErrorCode::Corrupt, "cut at {cut}: {e}");
        }
        let mut longer = full.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        store.close_open_files();
        assert_eq!(code(store.get(info.key, 0, 0)), ErrorCode::Corrupt);
        std::fs::write(&path, &full).unwrap();
        check_get(&store, &info, &data, 0, 0);
    }
}

#[test]
fn damaged_shard_is_repaired_by_an_identical_reput() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(30, 4), B + 10);
    store.put(&info, &data).unwrap();
    let path = store.shard_path(info.key).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"X", 60).unwrap();
    assert_eq!(code(store.get(info.key, 0, 0)), ErrorCode::Corrupt);
    store.put(&info, &data).expect("re-put replaces the damaged file");
    check_get(&store, &info, &data, 0, 0);
    assert_eq!(store.stat()[0].shards, 1);
    // A mangled header is replaced the same way.
    std::fs::write(&path, b"garbage").unwrap();
    store.put(&info, &data).unwrap();
    check_get(&store, &info, &data, 0, 0);
}

#[test]
fn misplaced_file_is_corrupt_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (a, a_data) = shard(key(40, 0), 100);
    let (b, b_data) = shard(key(41, 0), 100);
    store.put(&a, &a_data).unwrap();
    store.put(&b, &b_data).unwrap();
    std::fs::copy(store.shard_path(a.key).unwrap(), store.shard_path(b.key).unwrap()).unwrap();
    assert_eq!(code(store.get(b.key, 0, 0)), ErrorCode::Corrupt);
}

#[test]
fn leftover_temp_files_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(50, 0), 5000);
    store.put(&info, &data).unwrap();
    let shard_dir = store.shard_path(info.key).unwrap().parent().unwrap().to_path_buf();
    drop(store);
    let tmp1 = shard_dir.join(format!("{}0000000000000033.0.1234", storage::store::TMP_PREFIX));
    let tmp2 = dir.path().join("shards/00").join(format!("{}whatever", storage::store::TMP_PREFIX));
    std::fs::write(&tmp1, b"half a shard").unwrap();
    std::fs::write(&tmp2, b"").unwrap();
    assert_eq!(temp_files(dir.path()).len(), 2);
    let store = open(&[dir.path()]);
    assert!(temp_files(dir.path()).is_empty());
    assert_eq!(store.shard_count(), 1);
    assert_eq!(store.stat()[0].shards, 1);
    check_get(&store, &info, &data, 0, 0);
}

#[test]
fn delete_is_idempotent_and_list_is_ordered_and_paged() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let mut keys = Vec::new();
    for chunk in [5u64, 1, 900, 77, u64::MAX, 0] {
        for index in [2u8, 0, 5] {
            let (info, data) = shard(key(chunk, index), 10);
            store.put(&info, &data).unwrap();
            keys.push(info.key);
        }
    }
    keys.sort();
    assert_eq!(store.list(None, 1000), keys);
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.list(after, 4);
        assert!(page.len() <= 4);
        let Some(&last) = page.last() else { break };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, keys);
    assert_eq!(store.list(Some(key(u64::MAX, 5)), 10), Vec::<ShardKey>::new());
    assert_eq!(store.list(None, 0), Vec::<ShardKey>::new());

    let gone = [keys[0], keys[5], key(123_456, 0)];
    assert_eq!(store.delete(&gone).unwrap(), 2);
    assert_eq!(store.delete(&gone).unwrap(), 0);
    assert_eq!(code(store.get(keys[0], 0, 0)), ErrorCode::NotFound);
    assert_eq!(store.stat()[0].shards, keys.len() as u64 - 2);
    assert!(store.shard_path(keys[5]).is_none());
    drop(store);
    let store = open(&[dir.path()]);
    assert_eq!(store.shard_count(), keys.len() - 2);
}

#[test]
fn shards_spread_over_drives_and_adding_a_drive_loses_nothing() {
    let d0 = tempfile::tempdir().unwrap();
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let store = open(&[d0.path()]);
    let mut shards = Vec::new();
    for chunk in 0..60u64 {
        let (info, data) = shard(key(chunk, 0), 300);
        store.put(&info, &data).unwrap();
        shards.push((info, data));
    }
    drop(store);
    let store = open(&[d0.path(), d1.path(), d2.path()]);
    for (info, data) in &shards {
        check_get(&store, info, data, 0, 0);
    }
    for chunk in 100..160u64 {
        let (info, data) = shard(key(chunk, 1), 300);
        store.put(&info, &data).unwrap();
        shards.push((info, data));
    }
    let stat = store.stat();
    assert_eq!(stat.len(), 3);
    assert_eq!(stat.iter().map(|d| d.shards).sum::<u64>(), 120);
    assert!(stat[0].shards >= 60, "{stat:?}");
    assert!(stat[1].shards > 5 && stat[2].shards > 5, "new shards not spread: {stat:?}");
    for d in &stat {
        assert!(d.error.is_empty() && d.bytes_total > 0 && d.bytes_free > 0, "{d:?}");
    }
    // Identical re-puts find the shard on whichever drive holds it.
    for (info, data) in &shards {
        store.put(info, data).unwrap();
    }
    assert_eq!(store.stat().iter().map(|d| d.shards).sum::<u64>(), 120);
    drop(store);
    let store = open(&[d0.path(), d1.path(), d2.path()]);
    for (info, data) in &shards {
        check_get(&store, info, data, 0, 0);
    }
}

#[test]
fn a_drive_is_used_by_one_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let config = StoreConfig { drives: vec![dir.path().to_path_buf()], reserve_bytes: 0, keys: None };
    let err = ShardStore::open(&config).err().expect("second open refused");
    assert!(err.to_string().contains(&dir.path().display().to_string()), "{err}");
    assert!(err.to_string().contains("in use"), "{err}");
    drop(store);
    ShardStore::open(&config).expect("reopens after the first store closed");
}

#[test]
fn a_drive_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"").unwrap();
    let bad = file.join("drive");
    let config = StoreConfig { drives: vec![dir.path().join("ok"), bad.clone()], reserve_bytes: 0, keys: None };
    let err = ShardStore::open(&config).err().expect("open fails");
    assert_eq!(err.drive, bad);
    assert!(err.to_string().contains(&bad.display().to_string()), "{err}");
}

#[test]
fn random_bytes_as_shard_files_are_never_served_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    // Real files give the store valid paths to overwrite with junk.
    let mut victims = Vec::new();
    for chunk in 0..8u64 {
        let (info, data) = shard(key(60 + chunk, 0), rng.gen_range(0..3 * B));
        store.put(&info, &data).unwrap();
        let path = store.shard_path(info.key).unwrap();
        let file = std::fs::read(&path).unwrap();
        victims.push((info, data, path, file));
    }
    for round in 0..400 {
        let (info, data, path, file) = &victims[round % victims.len()];
        let junk = match round % 4 {
            0 => {
                let mut b = vec![0u8; rng.gen_range(0..300)];
                rng.fill_bytes(&mut b);
                b
            }
            1 => {
                // A valid header with a random tail.
                let mut b = file[..file.len().min(60)].to_vec();
                let mut tail = vec![0u8; rng.gen_range(0..2 * B)];
                rng.fill_bytes(&mut tail);
                b.extend(tail);
                b
            }
            _ => {
                let mut b = file.clone();
                for _ in 0..rng.gen_range(1..5) {
                    let at = rng.gen_range(0..b.len());
                    b[at] = rng.gen();
                }
                b
            }
        };
        std::fs::write(path, &junk).unwrap();
        let served_ok = junk == *file;
        for (off, len) in [(0u32, 0u32), (1, 1), (B as u32, 10)] {
            match store.get(info.key, off, len) {
                Ok((got, start, bytes)) => {
                    assert_eq!(&got, info);
                    assert!(bytes[..] == data[start as usize..start as usize + bytes.len()], "junk served");
                }
                Err(e) => {
                    assert!(matches!(e.code, ErrorCode::Corrupt | ErrorCode::Invalid), "{e}");
                    assert!(!served_ok || e.code == ErrorCode::Invalid, "intact file refused: {e}");
                }
            }
        }
    }
}

#[test]
fn reads_that_must_not_wait_answer_only_from_open_files_and_agree_with_blocking_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(60, 1), 3 * B + 11);
    store.put(&info, &data).unwrap();
    // Never read: its file is not open, and opening may wait for the drive.
    assert!(store.get_now(info.key, 0, 0).is_none());
    assert!(store.get_range_now(info.key, 5, 100).is_none());
    check_get(&store, &info, &data, 0, 0);
    for (off, len) in [(0u32, 0u32), (7, 4096), (B as u32 - 3, 10), (2 * B as u32, 0)] {
        if let Some(now) = store.get_now(info.key, off, len) {
            assert_eq!(now.expect("get_now"), store.get(info.key, off, len).expect("get"));
        }
        if let Some(now) = store.get_range_now(info.key, off, len) {
            assert_eq!(now.expect("get_range_now"), store.get_range(info.key, off, len).expect("get_range"));
        }
    }
    // A file kept open is not served after the shard is deleted, nor after it is written anew.
    store.delete(&[info.key]).unwrap();
    assert_eq!(code(store.get(info.key, 0, 0)), ErrorCode::NotFound);
    assert!(matches!(store.get_now(info.key, 0, 0), None | Some(Err(_))));
    let (info2, data2) = shard(key(60, 1), 2 * B);
    store.put(&info2, &data2).unwrap();
    check_get(&store, &info2, &data2, 0, 0);
}

#[test]
fn a_file_kept_open_serves_intact_blocks_and_refuses_damaged_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&[dir.path()]);
    let (info, data) = shard(key(70, 0), 3 * B);
    store.put(&info, &data).unwrap();
    let path = store.shard_path(info.key).unwrap();
    check_get(&store, &info, &data, 0, 0);
    // The header and table were verified when the file was opened; damage to them now (which
    // a shard file never sees from the store: it is never written in place) is found when the
    // file is opened again, and never makes a read return wrong bytes meanwhile.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"\xff", 30).unwrap();
    check_get(&store, &info, &data, B as u32, 10);
    check_get(&store, &info, &data, 0, 10);
    // Damaged data is refused while the file is open...
    let data_offset = (FIXED_HEADER_BYTES + 4 * 3) as u64;
    file.write_all_at(b"\x00\x01", data_offset + 2 * B as u64 + 5).unwrap();
    assert_eq!(code(store.get_range(info.key, 2 * B as u32, 10)), ErrorCode::Corrupt);
    // ...and the file is closed: the next read opens it again and finds the header damage.
    assert_eq!(code(store.get(info.key, 0, 10)), ErrorCode::Corrupt, "the header damage is found at the next open");
}

/// A store with a key file: the same answers as a plaintext one (the model: the same ranged
/// reads as the roundtrip test), every file on the drive sealed and free of the data, damage to
/// a sealed block found, a re-put of the same shard accepted, and without the key the shards
/// are unavailable, not corrupt.
#[test]
fn a_store_with_a_key_file_seals_every_shard_and_answers_as_a_plaintext_one() {
    let dir = tempfile::tempdir().unwrap();
    let kek = dir.path().join("kek");
    storage::crypt::Kek::generate_file(&kek).expect("key file");
    let drive = dir.path().join("d");
    let sealed = |key_file: Option<&Path>| {
        ShardStore::open(&StoreConfig {
            drives: vec![drive.clone()],
            reserve_bytes: 0,
            keys: key_file.map(|k| KeySource::File(k.to_path_buf())),
        })
        .expect("store opens")
    };
    let store = sealed(Some(&kek));
    let mut stored = Vec::new();
    for (i, len) in [0usize, 1, B - 1, B, B + 1, 3 * B + 5].into_iter().enumerate() {
        let (info, data) = shard(key(5000 + i as u64, 0), len);
        store.put(&info, &data).expect("put");
        for off in [0, 1, B - 1, B, B + 1, len.saturating_sub(1), len].into_iter().filter(|&o| o <= len) {
            for l in [0, 1, B, 2 * B + 3] {
                check_get(&store, &info, &data, off as u32, l as u32);
            }
        }
        store.put(&info, &data).expect("the same shard again is accepted");
        let path = store.shard_path(info.key).expect("stored");
        let file = std::fs::read(&path).expect("read");
        assert_eq!(&file[4..6], &2u16.to_le_bytes(), "not sealed");
        if len >= 64 {
            assert!(!file.windows(64).any(|w| w == &data[..64]), "the data shows in the file");
        }
        stored.push((info, data, path));
    }
    // A flipped byte in a sealed block is found and reported as damage.
    let (info, data, path) = &stored[5];
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let at = std::fs::metadata(path).unwrap().len() - 100;
    f.write_all_at(&[0x5a], at).unwrap();
    store.close_open_files();
    let e = store.get(info.key, 2 * B as u32, 0).expect_err("damage found");
    assert_eq!(e.code, ErrorCode::Corrupt, "{e}");
    assert!(e.message.contains("fails authentication"), "{e}");
    check_get(&store, info, data, 0, B as u32);
    drop(store);

    // Without the key file: unavailable, not damaged.
    let plain = sealed(None);
    let e = plain.get(stored[1].0.key, 0, 0).expect_err("no key");
    assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
    assert!(e.message.contains("does not hold"), "{e}");
    drop(plain);
    // Another key file: the drive's keyring does not open, and the store says so.
    let other = dir.path().join("other");
    storage::crypt::Kek::generate_file(&other).expect("key file");
    let e = ShardStore::open(&StoreConfig {
        drives: vec![drive.clone()],
        reserve_bytes: 0,
        keys: Some(KeySource::File(other)),
    })
    .map(|_| ())
    .expect_err("another key refused");
    assert!(e.to_string().contains("does not open the keyring"), "{e}");
}

/// The KMS plug-in of these tests (`tests/kms/test-kms.sh`, run by `sh`) with the master key in
/// `master`: the node learns the data keys through it and never the master key.
fn kms(master: &Path) -> KeySource {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kms/test-kms.sh");
    KeySource::Kms(vec!["sh".into(), script.into(), master.display().to_string()])
}

fn hex_key(path: &Path) {
    let bytes: [u8; 32] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(path, format!("{hex}\n")).expect("write a key");
}

/// A store whose key-encryption key an external KMS keeps: shards sealed and read back, the
/// keyring (version 2) holding only what the plug-in wrapped, the store reopened through the
/// plug-in; another master key, a plug-in that fails, and one that answers with another key
/// are refused with their causes; a key file's configuration meeting a KMS keyring says so;
/// and re-keying moves the keyring between the plug-in and a key file without touching a
/// shard.
#[test]
fn a_store_with_a_kms_plugin_seals_shards_and_opens_only_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let (master, other_master) = (dir.path().join("master"), dir.path().join("other-master"));
    hex_key(&master);
    hex_key(&other_master);
    let drive = dir.path().join("d");
    let open = |keys: KeySource| {
        ShardStore::open(&StoreConfig { drives: vec![drive.clone()], reserve_bytes: 0, keys: Some(keys) })
    };
    let store = open(kms(&master)).expect("store opens through the plug-in");
    let (info, data) = shard(key(7000, 0), 3 * B + 5);
    store.put(&info, &data).expect("put");
    check_get(&store, &info, &data, 0, (3 * B + 5) as u32);
    let path = store.shard_path(info.key).expect("stored");
    let file = std::fs::read(&path).expect("read");
    assert_eq!(&file[4..6], &2u16.to_le_bytes(), "sealed");
    drop(store);
    let ring = std::fs::read(drive.join(storage::crypt::KEYRING_FILE)).expect("keyring");
    assert_eq!(&ring[4..6], &2u16.to_le_bytes(), "a KMS keyring is version 2");
    let text = String::from_utf8_lossy(&ring);
    assert!(text.contains("tkms1:1:"), "the plug-in's wrapped key is kept as it printed it");

    // Reopened through the plug-in, every byte reads back.
    let store = open(kms(&master)).expect("reopens");
    check_get(&store, &info, &data, 0, (3 * B + 5) as u32);
    drop(store);

    // Another master key: the plug-in fails, and the store names it and what it said.
    let e = open(kms(&other_master)).map(|_| ()).expect_err("another master key");
    let e = e.to_string();
    assert!(e.contains("KMS plug-in sh failed") && e.contains("unwrap 1") && e.contains("bad decrypt"), "{e}");
    // A plug-in that answers with another key is caught by the check value.
    let liar = dir.path().join("liar.sh");
    std::fs::write(&liar, format!("read -r line\necho {}\n", "ab".repeat(32))).expect("write");
    let e = open(KeySource::Kms(vec!["sh".into(), liar.display().to_string()])).map(|_| ()).expect_err("a lying KMS");
    assert!(e.to_string().contains("to another key than it wrapped"), "{e}");
    // A plug-in that cannot run.
    let e = open(KeySource::Kms(vec![dir.path().join("missing").display().to_string()]))
        .map(|_| ())
        .expect_err("no plug-in");
    assert!(e.to_string().contains("cannot run it"), "{e}");
    // A key file's configuration on a KMS keyring.
    let kek = dir.path().join("kek");
    storage::crypt::Kek::generate_file(&kek).expect("key file");
    let e = open(KeySource::File(kek.clone())).map(|_| ()).expect_err("wrong kind");
    assert!(e.to_string().contains("wrapped by a KMS plug-in, and this node is configured with a key file"), "{e}");

    // Re-keying to the key file and back to the KMS: no shard changes, every byte reads.
    let shard_before = std::fs::read(&path).expect("read");
    let via_kms = storage::crypt::Kek::from_source(&kms(&master)).expect("kek");
    let mut ring = storage::crypt::Keyring::open(&drive, &via_kms).expect("opens");
    let file_kek = storage::crypt::Kek::from_file(&kek).expect("kek");
    ring.rekey(&file_kek, false).expect("to the key file");
    let store = open(KeySource::File(kek.clone())).expect("opens with the key file");
    check_get(&store, &info, &data, 0, (3 * B + 5) as u32);
    drop(store);
    let mut ring = storage::crypt::Keyring::open(&drive, &file_kek).expect("opens");
    let new_kms = storage::crypt::Kek::from_source(&kms(&other_master)).expect("kek");
    ring.rekey(&new_kms, true).expect("to the KMS with a new data key");
    let store = open(kms(&other_master)).expect("opens through the plug-in's new master key");
    check_get(&store, &info, &data, 0, (3 * B + 5) as u32);
    assert_eq!(std::fs::read(&path).expect("read"), shard_before, "no shard was rewritten");
    assert!(open(kms(&master)).is_err(), "the old master key opens nothing");
}
