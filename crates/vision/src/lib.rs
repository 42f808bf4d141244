//! Trove's image pipeline: what a training loader does to every JPEG sample before it becomes a
//! tensor (decode, RandomResizedCrop, horizontal flip, resize, normalization), and what the
//! dataset tools need to make and change images (encode, synthetic images, resize).
//!
//! It exists because "often performance is limited by server host CPUs" in the pipelines users
//! run: decoding and cropping cost more CPU than reading the bytes. Everything here is pure
//! computation on buffers the caller owns (no I/O, no threads, no Python), so the Python
//! package can run it with the GIL released on as many threads as it likes, and `trove
//! dataset` can run it on its worker tasks.
//!
//! Choices, measured on the build machines (500 px wide q90 JPEGs, one core, decode + crop to
//! 224; `bench/runs/2026-11-27-python-loader`):
//! - Decoding is libjpeg-turbo 3 ([`turbo`]), the decoder Pillow itself uses, asked for only
//!   the region of the image the crop keeps and, when the crop is at least twice the output in
//!   both directions, scaled by 1/2, 1/4 or 1/8 in the DCT domain. A pure Rust decoder
//!   (zune-jpeg, used until this was measured) decodes every pixel: 971 images/s against 1,429
//!   with the cropped decode on the same files (Pillow: 620-692). Entropy decoding of the rows down to
//!   the crop's bottom cannot be skipped by any decoder and is most of what remains. The price
//!   is a C build of libjpeg-turbo (cmake and nasm) in every build of the workspace.
//! - Crop and resize are one pass of fast_image_resize's convolution, ported from Pillow-SIMD:
//!   the same bilinear filter (with its support widened when downscaling, i.e. antialiased) that
//!   Pillow and torchvision's PIL path use, so results match Pillow's to within rounding.
//! - Encoding (dataset tools only) is jpeg-encoder, pure Rust, baseline JPEG with 4:2:0
//!   chroma subsampling as cameras and Pillow write it.
//!
//! Random decisions (crop box, flip) come from a seed the caller passes, so a sample's
//! augmentation is reproducible from (seed, epoch, index) whatever thread runs it.

#[allow(unsafe_code)]
mod turbo;

use fast_image_resize as fr;

/// Widest or tallest image the decoder accepts.
pub const SIDE_PIXELS_MAX: u32 = 16_384;
/// Most pixels of a decoded image (a small file can claim a huge size: decompression bombs).
pub const IMAGE_PIXELS_MAX: u64 = 100_000_000;
/// Largest output side of a transform.
pub const OUT_SIDE_PIXELS_MAX: u32 = 8192;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (HWC).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
}

/// Why bytes could not be decoded as a JPEG image.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not a JPEG file, or a damaged one.
    Invalid(String),
    /// Dimensions beyond [`SIDE_PIXELS_MAX`] or [`IMAGE_PIXELS_MAX`].
    TooLarge { width: u32, height: u32 },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Invalid(why) => write!(f, "not a valid JPEG image: {why}"),
            DecodeError::TooLarge { width, height } => write!(
                f,
                "JPEG image of {width}x{height} pixels is larger than the limit ({SIDE_PIXELS_MAX} per side, {IMAGE_PIXELS_MAX} in all)"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a crop, resize or conversion was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransformError {
    /// An argument out of range (crop box outside the image, zero or huge output size, ...).
    Invalid(String),
    /// The output buffer does not have the size the output shape needs.
    OutputSize { expected: usize, got: usize },
}

impl std::fmt::Display for TransformError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransformError::Invalid(why) => f.write_str(why),
            TransformError::OutputSize { expected, got } => {
                write!(f, "output buffer holds {got} elements, the output shape needs {expected}")
            }
        }
    }
}

impl std::error::Error for TransformError {}

/// Why an image could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    Invalid(String),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::Invalid(why) => write!(f, "cannot encode JPEG: {why}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Errors of the whole per-sample pipeline ([`decode_transform_into`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PipelineError {
    Decode(DecodeError),
    Transform(TransformError),
}

impl std::fmt::Display for PipelineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipelineError::Decode(e) => e.fmt(f),
            PipelineError::Transform(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PipelineError {}

impl From<DecodeError> for PipelineError {
    fn from(e: DecodeError) -> Self {
        PipelineError::Decode(e)
    }
}

impl From<TransformError> for PipelineError {
    fn from(e: TransformError) -> Self {
        PipelineError::Transform(e)
    }
}

/// Width and height of a JPEG image from its headers, without decoding it.
pub fn jpeg_size(jpeg: &[u8]) -> Result<(u32, u32), DecodeError> {
    let header = turbo::header(jpeg)?;
    Ok((header.width, header.height))
}

/// Whether a JPEG file is whole: an end-of-image marker (FF D9) follows its last start-of-scan
/// marker (FF DA). Neither pair can occur inside entropy-coded data (an FF there is followed by
/// 00), and an embedded thumbnail ends before the main image's scans, so a file cut short is
/// told apart from a whole one even when its thumbnail is whole. The decoder refuses a cut
/// image too, but only after the work of decoding it; this looks at the bytes only.
pub fn jpeg_is_whole(jpeg: &[u8]) -> bool {
    let Some(last_scan) = jpeg.windows(2).rposition(|w| w == [0xFF, 0xDA]) else {
        return false;
    };
    jpeg[last_scan..].windows(2).any(|w| w == [0xFF, 0xD9])
}

/// Refuses sizes a decode must not attempt (zero, or beyond the limits: decompression bombs).
fn check_size(width: u32, height: u32) -> Result<(), DecodeError> {
    if width == 0 || height == 0 {
        return Err(DecodeError::Invalid(format!("image of {width}x{height} pixels")));
    }
    if width > SIDE_PIXELS_MAX || height > SIDE_PIXELS_MAX || u64::from(width) * u64::from(height) > IMAGE_PIXELS_MAX {
        return Err(DecodeError::TooLarge { width, height });
    }
    Ok(())
}

/// Decodes a JPEG file (baseline or progressive; grayscale, YCbCr or CMYK) into RGB.
pub fn decode_rgb(jpeg: &[u8]) -> Result<Image, DecodeError> {
    Ok(turbo::decode_planned(jpeg, |h| check_size(h.width, h.height).map(|()| (1, None, ())))?.image)
}

/// Decodes a JPEG file for a resize to `width` x `height`: scaled down in the DCT domain by the
/// largest of 1/2, 1/4 and 1/8 that keeps the image at least that size both ways (whole when
/// none does), as Pillow's `draft` does before `thumbnail`. A 4000x3000 photo made into a
/// 512-pixel variant is decoded at 1000x750, a sixteenth of the pixels.
pub fn decode_rgb_for(jpeg: &[u8], width: u32, height: u32) -> Result<Image, DecodeError> {
    let decoded = turbo::decode_planned(jpeg, |h| {
        check_size(h.width, h.height)?;
        let denom = if h.scalable { downscale_denominator(h.width, h.height, width, height) } else { 1 };
        Ok::<_, DecodeError>((denom, None, ()))
    })?;
    Ok(decoded.image)
}

/// The largest DCT-domain scale denominator (1, 2, 4 or 8) that keeps `width` x `height` at
/// least `out_width` x `out_height`.
fn downscale_denominator(width: u32, height: u32, out_width: u32, out_height: u32) -> u32 {
    let mut denom = 1u32;
    while denom < 8 && width / (denom * 2) >= out_width && height / (denom * 2) >= out_height {
        denom *= 2;
    }
    denom
}

/// A rectangle of an image, in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CropBox {
    pub left: u32,
    pub top: u32,
    pub width: u32,
    pub height: u32,
}

impl CropBox {
    /// The whole image.
    pub fn full(width: u32, height: u32) -> CropBox {
        CropBox { left: 0, top: 0, width, height }
    }

    fn check(&self, width: u32, height: u32) -> Result<(), TransformError> {
        let fits = self.width > 0
            && self.height > 0
            && u64::from(self.left) + u64::from(self.width) <= u64::from(width)
            && u64::from(self.top) + u64::from(self.height) <= u64::from(height);
        if fits {
            Ok(())
        } else {
            Err(TransformError::Invalid(format!("crop box {self:?} is not inside the {width}x{height} image")))
        }
    }
}

/// A small, fast, seedable generator (splitmix64): augmentation needs reproducibility from a
/// seed, not cryptographic quality.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high).
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.next_f64()
    }

    /// Uniform integer in [0, n] (inclusive, like Python's `randint(0, n)`).
    pub fn up_to(&mut self, n: u32) -> u32 {
        (self.next_u64() % (u64::from(n) + 1)) as u32
    }
}

/// The crop box torchvision's `RandomResizedCrop.get_params` would choose: up to 10 tries of an
/// area fraction in `scale` and a log-uniform aspect ratio in `ratio` that fit the image, else
/// the largest centred box within the ratio bounds.
pub fn random_resized_crop_box(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut SplitMix64,
) -> CropBox {
    let area = f64::from(width) * f64::from(height);
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(log_lo, log_hi).exp();
        let w = (target_area * aspect).sqrt().round();
        let h = (target_area / aspect).sqrt().round();
        if w > 0.0 && w <= f64::from(width) && h > 0.0 && h <= f64::from(height) {
            let (w, h) = (w as u32, h as u32);
            let top = rng.up_to(height - h);
            let left = rng.up_to(width - w);
            return CropBox { left, top, width: w, height: h };
        }
    }
    let in_ratio = f64::from(width) / f64::from(height);
    let (w, h) = if in_ratio < ratio.0.min(ratio.1) {
        (width, ((f64::from(width) / ratio.0.min(ratio.1)).round() as u32).clamp(1, height))
    } else if in_ratio > ratio.0.max(ratio.1) {
        (((f64::from(height) * ratio.0.max(ratio.1)).round() as u32).clamp(1, width), height)
    } else {
        (width, height)
    };
    CropBox { left: (width - w) / 2, top: (height - h) / 2, width: w, height: h }
}

/// Which part of the decoded image a transform keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crop {
    /// The whole image (a plain resize).
    Full,
    /// A given box (e.g. one chosen by another library, to compare results).
    Box(CropBox),
    /// torchvision's RandomResizedCrop box ([`random_resized_crop_box`]) drawn from the seed.
    Random { scale: (f64, f64), ratio: (f64, f64) },
    /// The centred box with `fraction` of each side (validation: resize 256, center-crop 224
    /// is a fraction of 0.875).
    Center { fraction: f64 },
}

/// What to do with one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    pub crop: Crop,
    pub out_width: u32,
    pub out_height: u32,
    /// Probability of a horizontal flip (0: never, 1: always), drawn from the seed.
    pub flip_probability: f64,
    pub seed: u64,
}

impl Transform {
    /// Bytes of the HWC RGB output.
    pub fn out_bytes(&self) -> usize {
        self.out_width as usize * self.out_height as usize * 3
    }

    fn check(&self) -> Result<(), TransformError> {
        let sides_ok =
            (1..=OUT_SIDE_PIXELS_MAX).contains(&self.out_width) && (1..=OUT_SIDE_PIXELS_MAX).contains(&self.out_height);
        if !sides_ok {
            return Err(TransformError::Invalid(format!(
                "output size {}x{} is outside 1..={OUT_SIDE_PIXELS_MAX} per side",
                self.out_width, self.out_height
            )));
        }
        if !(0.0..=1.0).contains(&self.flip_probability) {
            return Err(TransformError::Invalid(format!(
                "flip probability {} is not within 0..=1",
                self.flip_probability
            )));
        }
        match self.crop {
            Crop::Random { scale, ratio } => {
                let ok = scale.0 > 0.0 && scale.0 <= scale.1 && scale.1 <= 1.0 && ratio.0 > 0.0 && ratio.0 <= ratio.1;
                if !ok {
                    return Err(TransformError::Invalid(format!(
                        "random crop needs 0 < scale min <= max <= 1 and 0 < ratio min <= max, got scale {scale:?} ratio {ratio:?}"
                    )));
                }
            }
            Crop::Center { fraction } if !(fraction > 0.0 && fraction <= 1.0) => {
                return Err(TransformError::Invalid(format!("center crop fraction {fraction} is not within (0, 1]")));
            }
            _ => {}
        }
        Ok(())
    }

    /// The crop box and flip this transform applies to an image of the given size.
    pub fn plan(&self, width: u32, height: u32) -> Result<(CropBox, bool), TransformError> {
        self.check()?;
        let mut rng = SplitMix64::new(self.seed);
        let crop = match self.crop {
            Crop::Full => CropBox::full(width, height),
            Crop::Box(b) => b,
            Crop::Random { scale, ratio } => random_resized_crop_box(width, height, scale, ratio, &mut rng),
            Crop::Center { fraction } => {
                let w = ((f64::from(width) * fraction).round() as u32).clamp(1, width);
                let h = ((f64::from(height) * fraction).round() as u32).clamp(1, height);
                CropBox { left: (width - w) / 2, top: (height - h) / 2, width: w, height: h }
            }
        };
        crop.check(width, height)?;
        let flip = self.flip_probability > 0.0 && rng.next_f64() < self.flip_probability;
        Ok((crop, flip))
    }
}

/// Crops `crop` out of `image` and resizes it to `out_width` x `out_height` with Pillow's
/// bilinear convolution (antialiased when downscaling), into `out` (HWC RGB).
pub fn resize_crop_into(
    image: &Image,
    crop: CropBox,
    out_width: u32,
    out_height: u32,
    out: &mut [u8],
) -> Result<(), TransformError> {
    crop.check(image.width, image.height)?;
    let area = (f64::from(crop.left), f64::from(crop.top), f64::from(crop.width), f64::from(crop.height));
    resize_box_into(image, area, out_width, out_height, out)
}

/// [`resize_crop_into`] for a box with fractional edges (left, top, width, height), which the
/// caller has checked lies within the image.
fn resize_box_into(
    image: &Image,
    area: (f64, f64, f64, f64),
    out_width: u32,
    out_height: u32,
    out: &mut [u8],
) -> Result<(), TransformError> {
    let expected = out_width as usize * out_height as usize * 3;
    if out.len() != expected {
        return Err(TransformError::OutputSize { expected, got: out.len() });
    }
    let src = fr::images::ImageRef::new(image.width, image.height, &image.rgb, fr::PixelType::U8x3)
        .map_err(|e| TransformError::Invalid(format!("source image: {e}")))?;
    let mut dst = fr::images::Image::from_slice_u8(out_width, out_height, out, fr::PixelType::U8x3)
        .map_err(|e| TransformError::Invalid(format!("output buffer: {e}")))?;
    let (left, top, width, height) = area;
    let options = fr::ResizeOptions::new()
        .resize_alg(fr::ResizeAlg::Convolution(fr::FilterType::Bilinear))
        .crop(left, top, width, height);
    fr::Resizer::new().resize(&src, &mut dst, &options).map_err(|e| TransformError::Invalid(format!("resize: {e}")))
}

/// Mirrors an HWC RGB image left to right in place.
pub fn flip_horizontal(rgb: &mut [u8], width: u32) {
    let row_bytes = width as usize * 3;
    if row_bytes == 0 {
        return;
    }
    for row in rgb.chunks_exact_mut(row_bytes) {
        let (mut l, mut r) = (0usize, width as usize - 1);
        while l < r {
            for c in 0..3 {
                row.swap(l * 3 + c, r * 3 + c);
            }
            l += 1;
            r -= 1;
        }
    }
}

/// Decodes `jpeg`, applies `transform`, and writes the HWC RGB result into `out`; returns the
/// crop box and whether it flipped (so a caller can reproduce or check the augmentation).
///
/// Only the part of the image under the crop box is decoded (widened left to an iMCU column,
/// as libjpeg-turbo requires), and when the box is at least twice the output size in both
/// directions it is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain; the resize then works
/// on the box's fractional position in that smaller image.
pub fn decode_transform_into(
    jpeg: &[u8],
    transform: &Transform,
    out: &mut [u8],
) -> Result<(CropBox, bool), PipelineError> {
    if out.len() != transform.out_bytes() {
        return Err(TransformError::OutputSize { expected: transform.out_bytes(), got: out.len() }.into());
    }
    let decoded = turbo::decode_planned(jpeg, |header| {
        check_size(header.width, header.height)?;
        // Arguments are checked before the expensive decode.
        let (crop, flip) = transform.plan(header.width, header.height)?;
        let (denom, region) = decode_plan(header, crop, transform.out_width, transform.out_height);
        Ok::<_, PipelineError>((denom, region, (crop, flip)))
    })?;
    let (crop, flip) = decoded.planned;
    let (image, scale, (x0, y0)) = (decoded.image, f64::from(decoded.denom), decoded.origin);
    let left = f64::from(crop.left) / scale - f64::from(x0);
    let top = f64::from(crop.top) / scale - f64::from(y0);
    // The box in the decoded pixels, kept inside them (the scaled image is rounded up, so a box
    // reaching the image's edge can overhang it by less than a pixel).
    let crop_width = (f64::from(crop.width) / scale).min(f64::from(image.width) - left);
    let crop_height = (f64::from(crop.height) / scale).min(f64::from(image.height) - top);
    resize_box_into(&image, (left, top, crop_width, crop_height), transform.out_width, transform.out_height, out)?;
    if flip {
        flip_horizontal(out, transform.out_width);
    }
    Ok((crop, flip))
}

/// The scale denominator and region to decode for `crop` of an image, to be resized to
/// `out_width` x `out_height`.
fn decode_plan(header: turbo::Header, crop: CropBox, out_width: u32, out_height: u32) -> (u32, Option<turbo::Region>) {
    let Some(mcu_width) = header.mcu_width else {
        // Unusual chroma subsampling: libjpeg-turbo can only decode the whole image.
        return (1, None);
    };
    let denom = if header.scalable { downscale_denominator(crop.width, crop.height, out_width, out_height) } else { 1 };
    if crop == CropBox::full(header.width, header.height) {
        return (denom, None);
    }
    let (scaled_width, scaled_height) = (header.width.div_ceil(denom), header.height.div_ceil(denom));
    // libjpeg-turbo's scaled iMCU width: TJSCALED(mcu_width, 1/denom), at least 1.
    let column = mcu_width.div_ceil(denom).max(1);
    let x0 = crop.left / denom / column * column;
    let y0 = crop.top / denom;
    let x1 = (crop.left + crop.width).div_ceil(denom).min(scaled_width);
    let y1 = (crop.top + crop.height).div_ceil(denom).min(scaled_height);
    (denom, Some(turbo::Region { x: x0, y: y0, width: x1 - x0, height: y1 - y0 }))
}

/// Converts an HWC uint8 RGB image to CHW float32, `(x / 255 - mean[c]) / std[c]` (torchvision's
/// `ToTensor` followed by `Normalize`).
pub fn normalize_chw_into(
    rgb: &[u8],
    width: u32,
    height: u32,
    mean: [f32; 3],
    std: [f32; 3],
    out: &mut [f32],
) -> Result<(), TransformError> {
    let pixels = width as usize * height as usize;
    if rgb.len() != pixels * 3 {
        return Err(TransformError::OutputSize { expected: pixels * 3, got: rgb.len() });
    }
    if out.len() != pixels * 3 {
        return Err(TransformError::OutputSize { expected: pixels * 3, got: out.len() });
    }
    if std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
        return Err(TransformError::Invalid(format!("normalization std {std:?} has a zero or non-finite value")));
    }
    for c in 0..3 {
        let scale = 1.0 / (255.0 * std[c]);
        let shift = mean[c] / std[c];
        let plane = &mut out[c * pixels..(c + 1) * pixels];
        for (o, px) in plane.iter_mut().zip(rgb.chunks_exact(3)) {
            *o = f32::from(px[c]) * scale - shift;
        }
    }
    Ok(())
}

/// Encodes an RGB image as a baseline JPEG (4:2:0) at `quality` (1..=100).
pub fn encode_jpeg(image: &Image, quality: u8) -> Result<Vec<u8>, EncodeError> {
    if !(1..=100).contains(&quality) {
        return Err(EncodeError::Invalid(format!("quality {quality} is not within 1..=100")));
    }
    let (w, h) = match (u16::try_from(image.width), u16::try_from(image.height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => {
            return Err(EncodeError::Invalid(format!(
                "{}x{} pixels is not a size JPEG can hold",
                image.width, image.height
            )))
        }
    };
    if image.rgb.len() != image.width as usize * image.height as usize * 3 {
        return Err(EncodeError::Invalid(format!("{} bytes do not make a {}x{} RGB image", image.rgb.len(), w, h)));
    }
    let mut out = Vec::with_capacity(image.rgb.len() / 4);
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, quality);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder.encode(&image.rgb, w, h, jpeg_encoder::ColorType::Rgb).map_err(|e| EncodeError::Invalid(e.to_string()))?;
    Ok(out)
}

/// Resizes a whole image to `width` x `height` (bilinear, antialiased).
pub fn resize(image: &Image, width: u32, height: u32) -> Result<Image, TransformError> {
    if !(1..=u32::from(u16::MAX)).contains(&width) || !(1..=u32::from(u16::MAX)).contains(&height) {
        return Err(TransformError::Invalid(format!("size {width}x{height} is out of range")));
    }
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    resize_crop_into(image, CropBox::full(image.width, image.height), width, height, &mut rgb)?;
    Ok(Image { width, height, rgb })
}

/// A synthetic photograph-like image, the same for the same seed and size: smooth colour
/// gradients, a few shapes with soft edges, and fine grain. The mix is chosen so that at
/// quality 90 a 500x375 image encodes to about the size of an ImageNet JPEG (~110 KB): pure
/// noise would be several times larger, pure gradients a few KB.
pub fn synth_image(seed: u64, width: u32, height: u32) -> Image {
    let mut rng = SplitMix64::new(seed ^ 0x5eed_1a6e);
    let (w, h) = (width.max(1), height.max(1));
    // Background: per channel, a sum of three low-frequency waves.
    let mut waves = [[0.0f32; 5]; 9];
    for wave in &mut waves {
        *wave = [
            rng.uniform(0.002, 0.03) as f32,
            rng.uniform(0.002, 0.03) as f32,
            rng.uniform(0.0, std::f64::consts::TAU) as f32,
            rng.uniform(20.0, 60.0) as f32,
            rng.uniform(60.0, 190.0) as f32 / 3.0,
        ];
    }
    // Shapes: ellipses with their own colour and texture frequency.
    let shapes: Vec<[f32; 8]> = (0..6)
        .map(|_| {
            [
                rng.uniform(0.0, f64::from(w)) as f32,
                rng.uniform(0.0, f64::from(h)) as f32,
                rng.uniform(0.05, 0.35) as f32 * w as f32,
                rng.uniform(0.05, 0.35) as f32 * h as f32,
                rng.uniform(0.0, 255.0) as f32,
                rng.uniform(0.0, 255.0) as f32,
                rng.uniform(0.0, 255.0) as f32,
                rng.uniform(0.05, 0.5) as f32,
            ]
        })
        .collect();
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    let mut grain = SplitMix64::new(seed.wrapping_mul(31) ^ 0x9a1e);
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32, y as f32);
            let mut px = [0.0f32; 3];
            for (c, p) in px.iter_mut().enumerate() {
                for wave in &waves[c * 3..c * 3 + 3] {
                    *p += wave[4] + wave[3] * (fx * wave[0] + fy * wave[1] + wave[2]).sin();
                }
            }
            for s in &shapes {
                let dx = (fx - s[0]) / s[2];
                let dy = (fy - s[1]) / s[3];
                let d = dx * dx + dy * dy;
                if d < 1.0 {
                    let edge = ((1.0 - d) * 8.0).min(1.0);
                    let texture = 18.0 * (fx * s[7]).sin() * (fy * s[7] * 0.7).cos();
                    for c in 0..3 {
                        px[c] = px[c] * (1.0 - edge) + (s[4 + c] + texture) * edge;
                    }
                }
            }
            let r = grain.next_u64();
            let i = (y as usize * w as usize + x as usize) * 3;
            for c in 0..3 {
                let noise = ((r >> (c * 8)) & 0xff) as f32 / 255.0 * 28.0 - 14.0;
                rgb[i + c] = (px[c] + noise).clamp(0.0, 255.0) as u8;
            }
        }
    }
    Image { width: w, height: h, rgb }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jpeg_cut_anywhere_in_its_scan_is_not_whole() {
        let jpeg = encode_jpeg(&synth_image(3, 64, 48), 90).expect("encode");
        assert!(jpeg_is_whole(&jpeg));
        let scan = jpeg.windows(2).rposition(|w| w == [0xFF, 0xDA]).expect("a scan");
        for cut in [scan + 1, scan + 20, jpeg.len() - 1] {
            assert!(!jpeg_is_whole(&jpeg[..cut]), "cut at {cut} of {}", jpeg.len());
        }
        assert!(!jpeg_is_whole(b"not a jpeg"));
    }

    #[test]
    fn encode_decode_round_trip_is_close() {
        // Smooth content: per-pixel grain does not survive 4:2:0 chroma subsampling.
        let rgb = (0..90u32)
            .flat_map(|y| (0..120u32).flat_map(move |x| [(x * 2) as u8, (y * 2) as u8, ((x + y) / 2) as u8]))
            .collect();
        let img = Image { width: 120, height: 90, rgb };
        let jpeg = encode_jpeg(&img, 95).expect("encode");
        assert_eq!(jpeg_size(&jpeg).expect("size"), (120, 90));
        let back = decode_rgb(&jpeg).expect("decode");
        assert_eq!((back.width, back.height), (120, 90));
        let mad: f64 =
            img.rgb.iter().zip(&back.rgb).map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs() as f64).sum::<f64>()
                / img.rgb.len() as f64;
        assert!(mad < 2.0, "mean absolute difference {mad}");
    }

    #[test]
    fn synthetic_images_are_reproducible_and_realistically_sized() {
        let a = synth_image(1, 500, 375);
        assert_eq!(a, synth_image(1, 500, 375));
        assert_ne!(a.rgb, synth_image(2, 500, 375).rgb);
        let kb = encode_jpeg(&a, 90).expect("encode").len() / 1000;
        assert!((50..=250).contains(&kb), "500x375 q90 is {kb} KB");
    }

    #[test]
    fn garbage_and_bombs_are_refused() {
        assert!(matches!(decode_rgb(b"not a jpeg"), Err(DecodeError::Invalid(_))));
        assert!(matches!(decode_rgb(&[]), Err(DecodeError::Invalid(_))));
        let jpeg = encode_jpeg(&synth_image(3, 64, 48), 80).expect("encode");
        // A truncated file fails or decodes; it never panics.
        for cut in [2, 20, 200, jpeg.len() / 2] {
            let _ = decode_rgb(&jpeg[..cut]);
        }
        // Claim a huge frame: patch the SOF0 height and width.
        let mut bomb = jpeg.clone();
        let sof = bomb.windows(2).position(|w| w == [0xff, 0xc0]).expect("SOF0");
        bomb[sof + 5..sof + 9].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        assert!(decode_rgb(&bomb).is_err());
    }

    #[test]
    fn random_crop_boxes_follow_torchvision_bounds() {
        let mut rng = SplitMix64::new(5);
        for _ in 0..2000 {
            let b = random_resized_crop_box(500, 375, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), &mut rng);
            b.check(500, 375).expect("inside");
        }
        // Impossible bounds fall back to the centred box within the ratio.
        let b = random_resized_crop_box(1000, 10, (0.9, 1.0), (1.0, 1.0), &mut rng);
        assert_eq!(b, CropBox { left: 495, top: 0, width: 10, height: 10 });
    }

    #[test]
    fn transform_checks_arguments_and_is_reproducible() {
        let jpeg = encode_jpeg(&synth_image(4, 200, 150), 90).expect("encode");
        let t = Transform {
            crop: Crop::Random { scale: (0.08, 1.0), ratio: (0.75, 4.0 / 3.0) },
            out_width: 64,
            out_height: 64,
            flip_probability: 0.5,
            seed: 11,
        };
        let mut a = vec![0u8; t.out_bytes()];
        let mut b = vec![0u8; t.out_bytes()];
        let pa = decode_transform_into(&jpeg, &t, &mut a).expect("transform");
        let pb = decode_transform_into(&jpeg, &t, &mut b).expect("transform");
        assert_eq!((pa, &a), (pb, &b));
        let mut small = vec![0u8; 10];
        assert!(matches!(
            decode_transform_into(&jpeg, &t, &mut small),
            Err(PipelineError::Transform(TransformError::OutputSize { .. }))
        ));
        let outside = Transform { crop: Crop::Box(CropBox { left: 190, top: 0, width: 20, height: 10 }), ..t };
        assert!(decode_transform_into(&jpeg, &outside, &mut a).is_err());
        let zero = Transform { out_width: 0, ..t };
        assert!(decode_transform_into(&jpeg, &zero, &mut a).is_err());
    }

    #[test]
    fn flip_mirrors_rows() {
        let mut px = vec![1, 2, 3, 4, 5, 6, 7, 8, 9];
        flip_horizontal(&mut px, 3);
        assert_eq!(px, vec![7, 8, 9, 4, 5, 6, 1, 2, 3]);
    }

    #[test]
    fn normalization_matches_the_formula() {
        let rgb = [255u8, 0, 51, 0, 255, 102];
        let mut out = [0f32; 6];
        normalize_chw_into(&rgb, 2, 1, [0.5, 0.5, 0.0], [0.5, 0.25, 1.0], &mut out).expect("normalize");
        let expect = [1.0, -1.0, -2.0, 2.0, 0.2, 0.4];
        for (o, e) in out.iter().zip(expect) {
            assert!((o - e).abs() < 1e-5, "{out:?}");
        }
    }

    fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).map(|(x, y)| f64::from(x.abs_diff(*y))).sum::<f64>() / a.len() as f64
    }

    /// torchvision's RandomResizedCrop to `width` x `height`, no flip.
    fn random_crop(width: u32, height: u32, seed: u64) -> Transform {
        Transform {
            crop: Crop::Random { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) },
            out_width: width,
            out_height: height,
            flip_probability: 0.0,
            seed,
        }
    }

    /// The reference for a transform, in torchvision's order: cut the box out of the fully
    /// decoded image, then resize it.
    fn cut_then_resize(full: &Image, crop: CropBox, width: u32, height: u32) -> Vec<u8> {
        let rows = (crop.top..crop.top + crop.height).map(|y| {
            let start = (y as usize * full.width as usize + crop.left as usize) * 3;
            &full.rgb[start..start + crop.width as usize * 3]
        });
        let cut = Image { width: crop.width, height: crop.height, rgb: rows.flatten().copied().collect() };
        resize(&cut, width, height).expect("reference").rgb
    }

    /// The region and scaled decodes give what a full decode then crop and resize gives:
    /// exactly at full scale, within rounding of the DCT-domain downscale otherwise.
    #[test]
    fn partial_and_scaled_decodes_match_the_full_decode() {
        for (seed, (w, h)) in [(1u64, (500u32, 375u32)), (2, (333, 500)), (3, (1200, 900)), (4, (64, 48))] {
            let jpeg = encode_jpeg(&synth_image(seed, w, h), 90).expect("encode");
            let full = decode_rgb(&jpeg).expect("decode");
            let mut saw_scaled = false;
            for i in 0..40u64 {
                let t = random_crop(224, 224, seed * 1000 + i);
                let mut ours = vec![0u8; t.out_bytes()];
                let (crop, _) = decode_transform_into(&jpeg, &t, &mut ours).expect("transform");
                let reference = cut_then_resize(&full, crop, 224, 224);
                let diff = mean_abs_diff(&ours, &reference);
                let scaled = crop.width >= 448 && crop.height >= 448;
                saw_scaled |= scaled;
                // Unscaled, only the region's edge rows and columns can differ (chroma upsampling
                // there lacks the neighbours a full decode has), by a level or two: a mean of
                // 0.01 or less, more when a small box is blown up to 224 (its edge band with it).
                // A box off by one pixel would differ by several levels everywhere.
                let magnification = (224.0 / f64::from(crop.width.min(crop.height))).max(1.0);
                let bound = if scaled { 2.0 } else { 0.1 * magnification };
                assert!(diff <= bound, "{w}x{h} crop {crop:?}: mean abs diff {diff} (scaled: {scaled})");
            }
            assert_eq!(saw_scaled, seed == 3, "{w}x{h}: only the large image has crops worth scaling");
        }
    }

    #[test]
    fn grayscale_and_progressive_images_decode() {
        // A 1-component baseline JPEG (written by our encoder from a grey image) and a
        // progressive one are both common in ImageNet.
        let grey = Image { width: 40, height: 30, rgb: (0..40 * 30).flat_map(|i| [(i % 251) as u8; 3]).collect() };
        let encoder_grey = {
            let mut out = Vec::new();
            let luma: Vec<u8> = grey.rgb.chunks_exact(3).map(|p| p[0]).collect();
            jpeg_encoder::Encoder::new(&mut out, 90)
                .encode(&luma, 40, 30, jpeg_encoder::ColorType::Luma)
                .expect("encode");
            out
        };
        let decoded = decode_rgb(&encoder_grey).expect("grey decodes");
        assert_eq!((decoded.width, decoded.height), (40, 30));
        assert!(decoded.rgb.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]), "grey stays grey");
        let mut progressive = Vec::new();
        let mut encoder = jpeg_encoder::Encoder::new(&mut progressive, 90);
        encoder.set_progressive(true);
        let src = synth_image(9, 120, 80);
        encoder.encode(&src.rgb, 120, 80, jpeg_encoder::ColorType::Rgb).expect("encode");
        let decoded = decode_rgb(&progressive).expect("progressive decodes");
        assert!(mean_abs_diff(&decoded.rgb, &src.rgb) < 6.0);
    }

    #[test]
    fn a_file_cut_short_is_an_error_not_a_grey_image() {
        let jpeg = encode_jpeg(&synth_image(5, 200, 150), 90).expect("encode");
        let cut = &jpeg[..jpeg.len() * 2 / 3];
        let err = decode_rgb(cut).expect_err("a truncated file is refused");
        assert!(err.to_string().contains("JPEG"), "{err}");
        let t = Transform { crop: Crop::Full, out_width: 32, out_height: 32, flip_probability: 0.0, seed: 0 };
        assert!(decode_transform_into(cut, &t, &mut vec![0u8; t.out_bytes()]).is_err());
    }

    #[test]
    fn a_decode_for_a_smaller_size_is_scaled_and_resizes_like_the_full_one() {
        let jpeg = encode_jpeg(&synth_image(11, 1200, 900), 90).expect("encode");
        let quarter = decode_rgb_for(&jpeg, 280, 210).expect("scaled");
        assert_eq!((quarter.width, quarter.height), (300, 225), "1/4 keeps 280x210");
        assert_eq!((quarter.rgb.len()), 300 * 225 * 3);
        let reference = resize(&decode_rgb(&jpeg).expect("full"), 280, 210).expect("resize");
        let ours = resize(&quarter, 280, 210).expect("resize");
        let diff = mean_abs_diff(&ours.rgb, &reference.rgb);
        assert!(diff < 2.0, "mean abs diff {diff}");
        // No scale keeps a size larger than half the image: decoded whole.
        let whole = decode_rgb_for(&jpeg, 601, 100).expect("whole");
        assert_eq!((whole.width, whole.height), (1200, 900));
        // Odd sizes round up, as libjpeg-turbo's scaled output does.
        let odd = encode_jpeg(&synth_image(12, 333, 251), 90).expect("encode");
        let eighth = decode_rgb_for(&odd, 40, 30).expect("scaled");
        assert_eq!((eighth.width, eighth.height), (42, 32), "1/8 of 333x251, rounded up");
    }

    fn encode_sampled(image: &Image, sampling: jpeg_encoder::SamplingFactor) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = jpeg_encoder::Encoder::new(&mut out, 90);
        encoder.set_sampling_factor(sampling);
        encoder
            .encode(&image.rgb, image.width as u16, image.height as u16, jpeg_encoder::ColorType::Rgb)
            .expect("encode");
        out
    }

    /// Every chroma subsampling libjpeg-turbo names has its own iMCU width (8, 16 or 32
    /// pixels): random crops of each decode without a misaligned region and match the full
    /// decode.
    #[test]
    fn crops_decode_under_every_chroma_subsampling() {
        use jpeg_encoder::SamplingFactor as S;
        let src = synth_image(21, 203, 157);
        for sampling in [S::R_4_4_4, S::R_4_2_2, S::R_4_2_0, S::R_4_4_0, S::R_4_1_1, S::R_4_4_1, S::R_4_1_0] {
            let jpeg = encode_sampled(&src, sampling);
            let full = decode_rgb(&jpeg).expect("decode");
            for i in 0..25u64 {
                let t = random_crop(64, 48, i);
                let mut ours = vec![0u8; t.out_bytes()];
                let (crop, _) = decode_transform_into(&jpeg, &t, &mut ours)
                    .unwrap_or_else(|e| panic!("{sampling:?} crop {i}: {e}"));
                let reference = cut_then_resize(&full, crop, 64, 48);
                let diff = mean_abs_diff(&ours, &reference);
                // Chroma upsampling at the region's edge differs most for the widest iMCUs; a box
                // twice the output is decoded at half scale (4:1:1 and 4:4:1 never are), and a
                // small box at half scale blown back up differs by up to a couple of levels.
                let scaled = crop.width >= 128 && crop.height >= 96 && !matches!(sampling, S::R_4_1_1 | S::R_4_4_1);
                let bound = if scaled { 2.5 } else { 0.3 * (64.0 / f64::from(crop.width.min(crop.height))).max(1.0) };
                assert!(diff <= bound, "{sampling:?} crop {crop:?}: mean abs diff {diff}");
            }
        }
    }

    /// Damaged files (bytes flipped anywhere, cut anywhere, sizes changed) and whole ones under
    /// random transforms: an error or an output of the asked size, never a panic or a
    /// wrong-sized buffer. libjpeg-turbo is C, so this is the cheap, every-run check of the
    /// wrapper's sizes and regions around it.
    #[test]
    fn damaged_files_under_random_transforms_never_panic() {
        use jpeg_encoder::SamplingFactor as S;
        let mut rng = SplitMix64::new(99);
        let sources: Vec<Vec<u8>> = [S::R_4_2_0, S::R_4_4_4, S::R_4_1_1]
            .into_iter()
            .map(|s| encode_sampled(&synth_image(31, 97, 75), s))
            .chain([encode_jpeg(&synth_image(32, 120, 90), 80).expect("encode")])
            .collect();
        let (mut decoded, mut refused) = (0, 0);
        for round in 0..600u64 {
            let mut data = sources[(round % sources.len() as u64) as usize].clone();
            match rng.up_to(4) {
                // Undamaged: the transform itself is what varies.
                3.. => {}
                0 => {
                    for _ in 0..1 + rng.up_to(4) {
                        let at = rng.up_to(data.len() as u32 - 1) as usize;
                        data[at] = rng.next_u64() as u8;
                    }
                }
                1 => data.truncate(rng.up_to(data.len() as u32) as usize),
                2 => {
                    // The frame header's sizes: a small file claiming a different size.
                    if let Some(sof) = data.windows(2).position(|w| w == [0xff, 0xc0]) {
                        let at = sof + 5 + rng.up_to(3) as usize;
                        data[at] = rng.next_u64() as u8;
                    }
                }
            }
            let side = 1 + rng.up_to(300);
            let t = Transform {
                crop: if rng.up_to(2) == 0 {
                    Crop::Random { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) }
                } else {
                    Crop::Center { fraction: 0.875 }
                },
                out_width: side,
                out_height: 1 + rng.up_to(300),
                flip_probability: 0.5,
                seed: round,
            };
            let mut out = vec![0u8; t.out_bytes()];
            match decode_transform_into(&data, &t, &mut out) {
                Ok(_) => decoded += 1,
                Err(_) => refused += 1,
            }
            if let Ok(img) = decode_rgb(&data) {
                assert_eq!(img.rgb.len(), img.width as usize * img.height as usize * 3);
            }
            if let Ok(img) = decode_rgb_for(&data, side, side) {
                assert_eq!(img.rgb.len(), img.width as usize * img.height as usize * 3);
            }
        }
        assert!(decoded > 50 && refused > 50, "both outcomes exercised: {decoded} decoded, {refused} refused");
    }
}
