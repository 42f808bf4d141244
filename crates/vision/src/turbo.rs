//! The JPEG decoder: libjpeg-turbo 3 (the TurboJPEG API, built from the source bundled with
//! `turbojpeg-sys`), wrapped so that the rest of the crate sees only safe calls.
//!
//! It exists for two things no pure Rust decoder offers today: decoding only a region of an
//! image (rows below the region are never entropy-decoded, rows above it and columns outside
//! it skip the inverse DCT, upsampling and colour conversion) and DCT-domain downscaling by
//! 1/2, 1/4 or 1/8. RandomResizedCrop keeps on average about half of an image, so a training
//! loader decodes far fewer pixels than a full decode does. It is also the decoder Pillow and
//! torchvision use, the most fuzzed JPEG code there is.
//!
//! Every decode makes its own TurboJPEG instance (see `with_instance`): an instance carries
//! tables from one image to the next.

use std::ffi::{c_int, c_ulong, CStr};

use turbojpeg_sys as tj;

use crate::{DecodeError, Image};

/// Largest working memory libjpeg may take for one image (progressive images buffer all their
/// coefficients), in megabytes.
const DECODER_MEMORY_MEGABYTES_MAX: c_int = 2048;
/// Most progressive scans accepted in one image (a crafted file can make every scan cost a
/// whole pass over the image).
const PROGRESSIVE_SCANS_MAX: c_int = 500;

/// What the headers say about an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    /// Width of one iMCU column in pixels at full scale, or `None` when the chroma
    /// subsampling is unusual and the image can only be decoded whole.
    pub mcu_width: Option<u32>,
    /// Four components (Adobe CMYK or YCCK): decoded as CMYK and converted here.
    pub cmyk: bool,
    /// Worth decoding scaled down in the DCT domain: chroma subsampled at most 2:1 each way.
    /// 4:1:1 and 4:4:1 scaled lose so much chroma that a resize from them strays several levels
    /// from a full decode's (measured: up to 5 against 2 for 4:2:0 on small boxes).
    pub scalable: bool,
}

/// A rectangle of the (scaled) image to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// One TurboJPEG decompression instance.
struct Instance(tj::tjhandle);

impl Instance {
    fn new() -> Result<Instance, DecodeError> {
        // SAFETY: tj3Init has no preconditions; it returns null on failure, checked here.
        let handle = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int) };
        if handle.is_null() {
            return Err(DecodeError::Invalid("libjpeg-turbo could not make a decompressor".into()));
        }
        let instance = Instance(handle);
        instance.set(tj::TJPARAM_TJPARAM_MAXMEMORY, DECODER_MEMORY_MEGABYTES_MAX)?;
        instance.set(tj::TJPARAM_TJPARAM_SCANLIMIT, PROGRESSIVE_SCANS_MAX)?;
        let pixels_max = c_int::try_from(crate::IMAGE_PIXELS_MAX).unwrap_or(c_int::MAX);
        instance.set(tj::TJPARAM_TJPARAM_MAXPIXELS, pixels_max)?;
        Ok(instance)
    }

    fn set(&self, param: tj::TJPARAM, value: c_int) -> Result<(), DecodeError> {
        // SAFETY: self.0 is a live instance (freed only in Drop); tj3Set validates both arguments.
        let rc = unsafe { tj::tj3Set(self.0, param as c_int, value) };
        if rc != 0 {
            return Err(self.error());
        }
        Ok(())
    }

    fn get(&self, param: tj::TJPARAM) -> c_int {
        // SAFETY: as in `set`; an unknown parameter reads as -1.
        unsafe { tj::tj3Get(self.0, param as c_int) }
    }

    /// The instance's last error, as libjpeg-turbo words it.
    fn error(&self) -> DecodeError {
        // SAFETY: tj3GetErrorStr returns a pointer to a NUL-terminated string owned by the
        // instance (or a static one), valid until the next call on it; it is copied at once.
        let text = unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) };
        DecodeError::Invalid(text.to_string_lossy().trim().replace('\n', " "))
    }

    fn header(&self, jpeg: &[u8]) -> Result<Header, DecodeError> {
        if jpeg.is_empty() {
            return Err(DecodeError::Invalid("no bytes".into()));
        }
        // SAFETY: the pointer and length describe `jpeg`, which outlives the call; libjpeg-turbo
        // only reads from it.
        let rc = unsafe { tj::tj3DecompressHeader(self.0, jpeg.as_ptr(), jpeg.len() as c_ulong) };
        if rc != 0 {
            return Err(self.error());
        }
        let (width, height) = (self.get(tj::TJPARAM_TJPARAM_JPEGWIDTH), self.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT));
        let (Ok(width), Ok(height)) = (u32::try_from(width), u32::try_from(height)) else {
            return Err(DecodeError::Invalid(format!("image of {width}x{height} pixels")));
        };
        if self.get(tj::TJPARAM_TJPARAM_PRECISION) != 8 || self.get(tj::TJPARAM_TJPARAM_LOSSLESS) != 0 {
            return Err(DecodeError::Invalid("only 8-bit lossy JPEG images are supported".into()));
        }
        // iMCU widths of TJSAMP_444, 422, 420, GRAY, 440, 411, 441 (turbojpeg.h's tjMCUWidth).
        let subsampling = self.get(tj::TJPARAM_TJPARAM_SUBSAMP);
        let mcu_width = match subsampling {
            s @ 0..=6 => Some([8, 16, 16, 8, 8, 32, 8][s as usize]),
            _ => None,
        };
        // TJSAMP_444, 422, 420, GRAY, 440.
        let scalable = (0..=4).contains(&subsampling);
        let colorspace = self.get(tj::TJPARAM_TJPARAM_COLORSPACE);
        let cmyk = colorspace == tj::TJCS_TJCS_CMYK as c_int || colorspace == tj::TJCS_TJCS_YCCK as c_int;
        Ok(Header { width, height, mcu_width, cmyk, scalable })
    }

    /// Decodes `region` of the image scaled by 1/`denom` (1, 2, 4 or 8), or all of it, into RGB.
    /// `header` must be what [`Instance::header`] just returned for `jpeg`.
    fn decode(&self, jpeg: &[u8], header: Header, denom: u32, region: Option<Region>) -> Result<Image, DecodeError> {
        let scaled = |side: u32| side.div_ceil(denom);
        let factor = tj::tjscalingfactor { num: 1, denom: denom as c_int };
        // SAFETY: a live instance; the factor is checked against libjpeg-turbo's list.
        if unsafe { tj::tj3SetScalingFactor(self.0, factor) } != 0 {
            return Err(self.error());
        }
        let (width, height) = match region {
            Some(r) => (r.width, r.height),
            None => (scaled(header.width), scaled(header.height)),
        };
        let crop = match region {
            Some(r) => tj::tjregion { x: r.x as c_int, y: r.y as c_int, w: r.width as c_int, h: r.height as c_int },
            None => tj::tjregion { x: 0, y: 0, w: 0, h: 0 },
        };
        // SAFETY: a live instance whose header was just read; the region is validated by
        // libjpeg-turbo against the scaled image (alignment and bounds).
        if unsafe { tj::tj3SetCroppingRegion(self.0, crop) } != 0 {
            return Err(self.error());
        }
        let (format, pixel_bytes) =
            if header.cmyk { (tj::TJPF_TJPF_CMYK, 4usize) } else { (tj::TJPF_TJPF_RGB, 3usize) };
        let pitch = width as usize * pixel_bytes;
        let mut pixels = vec![0u8; pitch * height as usize];
        let pitch_c = c_int::try_from(pitch).map_err(|_| DecodeError::TooLarge { width, height })?;
        // SAFETY: `pixels` holds exactly `height` rows of `pitch` bytes, which is what
        // tj3Decompress8 writes for this scaling factor and cropping region (the cropped size, or
        // the scaled size when uncropped); `jpeg` is only read.
        let rc = unsafe {
            tj::tj3Decompress8(
                self.0,
                jpeg.as_ptr(),
                jpeg.len() as c_ulong,
                pixels.as_mut_ptr(),
                pitch_c,
                format as c_int,
            )
        };
        if rc != 0 {
            // A warning (corrupt data, a file cut short) is an error here too: the pixels would
            // be partly grey, and a training sample must not silently be wrong.
            return Err(self.error());
        }
        if header.cmyk {
            pixels = cmyk_to_rgb(&pixels);
        }
        Ok(Image { width, height, rgb: pixels })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: self.0 came from tj3Init and is destroyed exactly once, here.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

/// Adobe CMYK as JPEG files store it (inverted: 255 is no ink) to RGB, the way Pillow converts
/// it: each channel is (255 - c)(255 - k) / 255 of the uninverted values.
fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    let mut rgb = Vec::with_capacity(cmyk.len() / 4 * 3);
    for px in cmyk.chunks_exact(4) {
        let k = u32::from(px[3]);
        for &c in &px[..3] {
            rgb.push(((u32::from(c) * k + 127) / 255) as u8);
        }
    }
    rgb
}

/// Runs `f` with a fresh decompressor. A libjpeg instance keeps state from one image to the
/// next (Huffman and quantization tables, which abbreviated streams rely on), so a reused one
/// could decode an image differently after another, or fail after a damaged one ("Bogus Huffman
/// table definition" for a good file, seen in the damaged-files test). A new instance per image
/// makes the result a function of the bytes alone, at no measurable cost (one core: 1,433-1,454
/// transforms/s against 1,440 with a reused instance).
fn with_instance<R, E: From<DecodeError>>(f: impl FnOnce(&Instance) -> Result<R, E>) -> Result<R, E> {
    f(&Instance::new()?)
}

/// The image's headers.
pub(crate) fn header(jpeg: &[u8]) -> Result<Header, DecodeError> {
    with_instance(|i| i.header(jpeg))
}

/// What [`decode_planned`] decoded: the pixels, the scale they are at (1/`denom`), where they
/// start in the scaled image, and what the plan returned besides.
pub(crate) struct Decoded<T> {
    pub image: Image,
    pub denom: u32,
    pub origin: (u32, u32),
    pub planned: T,
}

/// Reads the headers, then lets `plan` choose a scale denominator, a region of the scaled image
/// (`None`: all of it) and anything else the caller wants back, and decodes that. The plan's
/// own error is returned as it is.
pub(crate) fn decode_planned<T, E, P>(jpeg: &[u8], plan: P) -> Result<Decoded<T>, E>
where
    P: FnOnce(Header) -> Result<(u32, Option<Region>, T), E>,
    E: From<DecodeError>,
{
    with_instance(|i| {
        let header = i.header(jpeg)?;
        let (denom, region, planned) = plan(header)?;
        let image = i.decode(jpeg, header, denom, region)?;
        let origin = region.map_or((0, 0), |r| (r.x, r.y));
        Ok(Decoded { image, denom, origin, planned })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmyk_conversion_matches_pillows_formula() {
        // Inverted CMYK: 255 is no ink. No ink at all is white; full black ink is black.
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255]), vec![255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 0]), vec![0, 0, 0]);
        assert_eq!(cmyk_to_rgb(&[0, 255, 128, 255]), vec![0, 255, 128]);
        assert_eq!(cmyk_to_rgb(&[200, 100, 50, 128]), vec![100, 50, 25]);
    }

    #[test]
    fn a_region_must_start_on_an_mcu_column_and_lie_inside_the_image() {
        let jpeg = crate::encode_jpeg(&crate::synth_image(1, 100, 60), 90).expect("encode");
        let h = header(&jpeg).expect("header");
        assert_eq!((h.width, h.height, h.mcu_width, h.cmyk, h.scalable), (100, 60, Some(16), false, true));
        let ok = decode_planned::<_, DecodeError, _>(&jpeg, |_| {
            Ok((1, Some(Region { x: 16, y: 3, width: 20, height: 7 }), ()))
        })
        .expect("aligned");
        assert_eq!((ok.image.width, ok.image.height, ok.image.rgb.len(), ok.origin), (20, 7, 20 * 7 * 3, (16, 3)));
        let misaligned = decode_planned::<_, DecodeError, _>(&jpeg, |_| {
            Ok((1, Some(Region { x: 5, y: 0, width: 10, height: 10 }), ()))
        });
        assert!(matches!(misaligned, Err(DecodeError::Invalid(why)) if why.contains("divisible")), "misaligned region");
        let outside = decode_planned::<_, DecodeError, _>(&jpeg, |_| {
            Ok((2, Some(Region { x: 0, y: 0, width: 51, height: 10 }), ()))
        });
        assert!(
            matches!(outside, Err(DecodeError::Invalid(why)) if why.contains("exceeds")),
            "region past the scaled width"
        );
        // Half scale: 50x30.
        let half = decode_planned::<_, DecodeError, _>(&jpeg, |_| Ok((2, None, ()))).expect("half");
        assert_eq!((half.image.width, half.image.height, half.image.rgb.len(), half.denom), (50, 30, 50 * 30 * 3, 2));
    }

    /// A region's pixels are the full decode's, except where chroma upsampling at the region's
    /// edge lacks a neighbour: its first and last two rows and columns.
    #[test]
    fn a_region_holds_the_full_decodes_pixels_inside_its_edges() {
        let (w, h) = (300u32, 200u32);
        let jpeg = crate::encode_jpeg(&crate::synth_image(2, w, h), 90).expect("encode");
        let full = decode_planned::<_, DecodeError, _>(&jpeg, |_| Ok((1, None, ()))).expect("full").image.rgb;
        for r in [
            Region { x: 32, y: 17, width: 101, height: 90 },
            Region { x: 0, y: 0, width: 300, height: 7 },
            Region { x: 272, y: 150, width: 28, height: 50 },
        ] {
            let part = decode_planned::<_, DecodeError, _>(&jpeg, |_| Ok((1, Some(r), ()))).expect("region").image.rgb;
            assert_eq!(part.len(), (r.width * r.height * 3) as usize);
            let mut differing = 0;
            for y in 0..r.height {
                for x in 0..r.width {
                    let ours = &part[((y * r.width + x) * 3) as usize..][..3];
                    let theirs = &full[(((r.y + y) * w + r.x + x) * 3) as usize..][..3];
                    let inside =
                        (2..r.height.saturating_sub(2)).contains(&y) && (2..r.width.saturating_sub(2)).contains(&x);
                    if ours != theirs {
                        assert!(!inside, "{r:?}: pixel ({x}, {y}) inside the edges differs: {ours:?} vs {theirs:?}");
                        differing += 1;
                    }
                }
            }
            assert!(differing <= 4 * (r.width + r.height) as usize, "{r:?}: {differing} edge pixels differ");
        }
    }
}
