//! NumPy `.npz` files (a zip archive of `.npy` arrays, stored without compression, as
//! `numpy.savez` writes them), for the UNet3D workload whose samples MLPerf Storage keeps in npz.
//! A minimal zip writer is enough here: stored entries, one central directory, no zip64 (a
//! sample is far below 4 GiB; larger is refused).
//!
//! ```text
//! npz  = [local header + name + npy bytes]*  central directory  end record
//! npy  = b"\x93NUMPY" 1 0  u16 LE header length  "{'descr': '|u1', 'fortran_order': False, 'shape': (..), }"
//!        padded with spaces and '\n' to a multiple of 64 bytes, then the raw array
//! ```

use anyhow::{bail, Result};

/// Largest archive this writer produces: the classic zip format's 32-bit sizes and offsets.
pub const NPZ_BYTES_MAX: u64 = u32::MAX as u64;

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const END_SIG: u32 = 0x0605_4b50;
/// 1980-01-01, the earliest date a zip entry can carry.
const DOS_DATE: u16 = 0x21;

/// CRC-32 (IEEE, reflected 0xedb88320) as zip requires; table built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The zip CRC-32 of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// An `.npy` file holding a uint8 array of `shape` with contents `data`.
pub fn npy_u8(shape: &[usize], data: &[u8]) -> Result<Vec<u8>> {
    let count: usize = shape.iter().product();
    if count != data.len() {
        bail!("shape {shape:?} holds {count} bytes, data has {}", data.len());
    }
    let dims = match shape {
        [one] => format!("({one},)"),
        many => format!("({})", many.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut header = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': {dims}, }}");
    // Magic (6) + version (2) + length (2) + header, padded so the data starts 64-aligned.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    Ok(out)
}

/// A zip archive of stored (uncompressed) members, as `numpy.savez` writes.
pub fn zip_stored(members: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let total: u64 = members.iter().map(|(n, d)| 30 + 46 + 2 * n.len() as u64 + d.len() as u64).sum::<u64>() + 22;
    if total > NPZ_BYTES_MAX {
        bail!("an npz of {total} bytes needs zip64, which this writer does not produce (limit {NPZ_BYTES_MAX})");
    }
    let mut out = Vec::with_capacity(total as usize);
    let mut central = Vec::new();
    for (name, data) in members {
        let crc = crc32(data);
        let offset = out.len() as u32;
        let size = data.len() as u32;
        out.extend_from_slice(&LOCAL_SIG.to_le_bytes());
        for v in [20u16, 0, 0, 0, DOS_DATE] {
            out.extend_from_slice(&v.to_le_bytes()); // version, flags, method (stored), time, date
        }
        for v in [crc, size, size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);

        central.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
        for v in [20u16, 20, 0, 0, 0, DOS_DATE] {
            central.extend_from_slice(&v.to_le_bytes()); // made by, needed, flags, method, time, date
        }
        for v in [crc, size, size] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [name.len() as u16, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes()); // name, extra, comment, disk, internal attrs
        }
        central.extend_from_slice(&0u32.to_le_bytes()); // external attrs
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_offset = out.len() as u32;
    let cd_size = central.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&END_SIG.to_le_bytes());
    for v in [0u16, 0, members.len() as u16, members.len() as u16] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    Ok(out)
}

/// An npz like DLIO's generator writes: `x` a uint8 array of shape (d, d, 1) with
/// d = floor(sqrt(sample_bytes)), filled from `fill`, and `y` one uint8 label.
pub fn sample_npz(sample_bytes: usize, fill: impl FnOnce(&mut [u8])) -> Result<Vec<u8>> {
    let d = (sample_bytes as f64).sqrt() as usize;
    let mut x = vec![0u8; d * d];
    fill(&mut x);
    let x = npy_u8(&[d, d, 1], &x)?;
    let y = npy_u8(&[1], &[0])?;
    zip_stored(&[("x.npy", &x), ("y.npy", &y)])
}

/// Walks an npz's local headers: the (name, size) of each member, checking signatures and that
/// every member lies within the archive. This is what the loader "parses" per sample.
pub fn members(data: &[u8]) -> Result<Vec<(String, usize)>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let u16_at = |p: usize| -> Result<u16> {
        data.get(p..p + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| anyhow::anyhow!("npz truncated at {p}"))
    };
    let u32_at = |p: usize| -> Result<u32> {
        data.get(p..p + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| anyhow::anyhow!("npz truncated at {p}"))
    };
    loop {
        match u32_at(pos)? {
            LOCAL_SIG => {
                let size = u32_at(pos + 18)? as usize;
                let name_len = u16_at(pos + 26)? as usize;
                let extra_len = u16_at(pos + 28)? as usize;
                let name_start = pos + 30;
                let name =
                    data.get(name_start..name_start + name_len).ok_or_else(|| anyhow::anyhow!("npz name truncated"))?;
                let start = name_start + name_len + extra_len;
                if start + size > data.len() {
                    bail!("npz member at {pos} runs past the end");
                }
                out.push((String::from_utf8_lossy(name).into_owned(), size));
                pos = start + size;
            }
            CENTRAL_SIG | END_SIG => return Ok(out),
            other => bail!("npz: unexpected signature {other:#x} at byte {pos}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn npy_header_is_aligned_and_well_formed() {
        let npy = npy_u8(&[2, 3, 1], &[1, 2, 3, 4, 5, 6]).expect("npy");
        assert_eq!(&npy[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([npy[8], npy[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&npy[10..10 + hlen]).expect("ascii");
        assert!(header.contains("'shape': (2, 3, 1)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(&npy[10 + hlen..], &[1, 2, 3, 4, 5, 6]);
        assert!(npy_u8(&[2], &[1]).is_err());
    }

    #[test]
    fn members_walk_what_the_writer_wrote() {
        let npz = sample_npz(1000, |x| x.fill(7)).expect("npz");
        let m = members(&npz).expect("walk");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].0, "x.npy");
        assert_eq!(m[1].0, "y.npy");
        assert!(members(&npz[..40]).is_err());
    }
}
