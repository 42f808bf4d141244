//! Fuzz target for the image pipeline (`vision`): user JPEG files, damaged or hostile, through
//! the size probe, the full decode and the loader's decode-crop-resize path with region and
//! DCT-scaled decodes. Nothing may panic or read out of bounds (libjpeg-turbo's C code runs
//! here too); whatever decodes has the size the probe said.
//!
//! The first four input bytes pick the output size and the crop's random seed; the rest is the
//! file. Small outputs keep each run fast.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vision::{decode_rgb, decode_rgb_for, decode_transform_into, jpeg_size, Crop, Transform};

fuzz_target!(|data: &[u8]| {
    let Some((&[w, h, seed, flags], jpeg)) = data.split_first_chunk::<4>() else { return };
    let (out_w, out_h) = (u32::from(w % 64) + 1, u32::from(h % 64) + 1);
    let Ok((width, height)) = jpeg_size(jpeg) else { return };
    if let Ok(image) = decode_rgb(jpeg) {
        assert_eq!((image.width, image.height), (width, height), "the decode has the probed size");
    }
    if let Ok(image) = decode_rgb_for(jpeg, out_w, out_h) {
        assert!(image.width <= width && image.height <= height);
    }
    let crop = match flags % 3 {
        0 => Crop::Full,
        1 => Crop::Center { fraction: 0.875 },
        _ => Crop::Random { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) },
    };
    let transform =
        Transform { crop, out_width: out_w, out_height: out_h, flip_probability: 0.5, seed: u64::from(seed) };
    let mut out = vec![0u8; transform.out_bytes()];
    if let Ok((cropped, _)) = decode_transform_into(jpeg, &transform, &mut out) {
        assert!(cropped.left + cropped.width <= width && cropped.top + cropped.height <= height, "{cropped:?}");
    }
});
