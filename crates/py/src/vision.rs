//! The image pipeline's Python entry points (`trove._native.vision_*`, wrapped by
//! `trove.vision`): the `vision` crate's decode, crop, resize, flip and normalization, writing
//! into arrays the caller allocated (NumPy `uint8` HWC or `float32` CHW), always with the GIL
//! released, and for a batch on several threads at once.

use crate::remote::WritableBuffer;
use crate::value_error;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use vision::{Crop, CropBox, Transform};

/// Most threads one batch call uses.
const BATCH_THREADS_MAX: usize = 64;

fn pipeline_error(e: impl std::fmt::Display) -> PyErr {
    value_error(e.to_string())
}

/// Builds a transform from the keyword form the Python wrapper passes: `crop` is "full",
/// "random", "center" or "box".
#[allow(clippy::too_many_arguments)]
fn transform(
    crop: &str,
    out_width: u32,
    out_height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    fraction: f64,
    crop_box: Option<(u32, u32, u32, u32)>,
    flip_probability: f64,
    seed: u64,
) -> PyResult<Transform> {
    let crop = match (crop, crop_box) {
        ("full", _) => Crop::Full,
        ("random", _) => Crop::Random { scale, ratio },
        ("center", _) => Crop::Center { fraction },
        ("box", Some((left, top, width, height))) => Crop::Box(CropBox { left, top, width, height }),
        ("box", None) => return Err(value_error("crop \"box\" needs box=(left, top, width, height)")),
        (other, _) => return Err(value_error(format!("crop {other:?} is not one of full, random, center, box"))),
    };
    Ok(Transform { crop, out_width, out_height, flip_probability, seed })
}

fn plan_tuple<'py>(py: Python<'py>, plan: (CropBox, bool)) -> PyResult<Bound<'py, PyTuple>> {
    let (b, flip) = plan;
    (b.left, b.top, b.width, b.height, flip).into_pyobject(py)
}

/// (width, height) of a JPEG image from its headers.
#[pyfunction]
fn vision_jpeg_size(py: Python<'_>, data: &[u8]) -> PyResult<(u32, u32)> {
    py.detach(|| vision::jpeg_size(data)).map_err(pipeline_error)
}

/// Decodes a JPEG image; returns (width, height, RGB bytes in HWC order).
#[pyfunction]
fn vision_decode<'py>(py: Python<'py>, data: &[u8]) -> PyResult<(u32, u32, Bound<'py, PyBytes>)> {
    let img = py.detach(|| vision::decode_rgb(data)).map_err(pipeline_error)?;
    Ok((img.width, img.height, PyBytes::new(py, &img.rgb)))
}

/// Decodes `data`, crops, resizes to out_width x out_height, maybe flips, into `out` (uint8,
/// out_height*out_width*3 elements). Returns (left, top, width, height, flipped).
#[pyfunction]
#[pyo3(signature = (data, out, out_width, out_height, crop, scale, ratio, fraction, crop_box, flip_probability, seed))]
#[allow(clippy::too_many_arguments)]
fn vision_transform_into<'py>(
    py: Python<'py>,
    data: &[u8],
    out: &Bound<'_, PyAny>,
    out_width: u32,
    out_height: u32,
    crop: &str,
    scale: (f64, f64),
    ratio: (f64, f64),
    fraction: f64,
    crop_box: Option<(u32, u32, u32, u32)>,
    flip_probability: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyTuple>> {
    let t = transform(crop, out_width, out_height, scale, ratio, fraction, crop_box, flip_probability, seed)?;
    let mut out = WritableBuffer::<u8>::get(out, "out")?;
    let dst = out.slice();
    let plan = py.detach(|| vision::decode_transform_into(data, &t, dst)).map_err(pipeline_error)?;
    plan_tuple(py, plan)
}

/// The batch form: `datas[i]` goes to `out[i]` (uint8, len(datas)*out_height*out_width*3
/// elements) with seed `seeds[i]`, on up to `threads` threads. Returns the plans.
#[pyfunction]
#[pyo3(signature = (datas, out, out_width, out_height, crop, scale, ratio, fraction, flip_probability, seeds, threads))]
#[allow(clippy::too_many_arguments)]
fn vision_transform_batch_into<'py>(
    py: Python<'py>,
    datas: Vec<Bound<'py, PyBytes>>,
    out: &Bound<'_, PyAny>,
    out_width: u32,
    out_height: u32,
    crop: &str,
    scale: (f64, f64),
    ratio: (f64, f64),
    fraction: f64,
    flip_probability: f64,
    seeds: Vec<u64>,
    threads: usize,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    if seeds.len() != datas.len() {
        return Err(value_error(format!("{} seeds for {} images", seeds.len(), datas.len())));
    }
    let t = transform(crop, out_width, out_height, scale, ratio, fraction, None, flip_probability, 0)?;
    let per = t.out_bytes();
    let mut out = WritableBuffer::<u8>::get(out, "out")?;
    if out.len() != per * datas.len() {
        return Err(value_error(format!(
            "out holds {} bytes, {} images of {}x{}x3 need {}",
            out.len(),
            datas.len(),
            out_height,
            out_width,
            per * datas.len()
        )));
    }
    let inputs: Vec<&[u8]> = datas.iter().map(|b| b.as_bytes()).collect();
    let dst = out.slice();
    let threads = threads.clamp(1, BATCH_THREADS_MAX).min(inputs.len().max(1));
    let plans = py.detach(|| {
        let jobs: Vec<(usize, &mut [u8])> = dst.chunks_mut(per.max(1)).enumerate().collect();
        let per_thread = jobs.len().div_ceil(threads);
        let mut groups: Vec<Vec<(usize, &mut [u8])>> = Vec::new();
        let mut jobs = jobs.into_iter().peekable();
        while jobs.peek().is_some() {
            groups.push(jobs.by_ref().take(per_thread.max(1)).collect());
        }
        std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| {
                    let (inputs, seeds) = (&inputs, &seeds);
                    s.spawn(move || {
                        group
                            .into_iter()
                            .map(|(i, slot)| {
                                let ti = Transform { seed: seeds[i], ..t };
                                vision::decode_transform_into(inputs[i], &ti, slot)
                                    .map_err(|e| format!("image {i}: {e}"))
                            })
                            .collect::<Result<Vec<_>, String>>()
                    })
                })
                .collect();
            let mut all = Vec::new();
            for h in handles {
                all.extend(h.join().map_err(|_| "a decoding thread panicked".to_string())??);
            }
            Ok::<_, String>(all)
        })
    });
    let plans = plans.map_err(value_error)?;
    plans.into_iter().map(|p| plan_tuple(py, p)).collect()
}

/// HWC uint8 `src` (height*width*3) to CHW float32 `out`, `(x/255 - mean) / std`.
#[pyfunction]
fn vision_normalize_into(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    width: u32,
    height: u32,
    mean: [f32; 3],
    std: [f32; 3],
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let mut src = WritableBuffer::<u8>::get(src, "src")?;
    let mut out = WritableBuffer::<f32>::get(out, "out")?;
    let (s, o) = (src.slice(), out.slice());
    py.detach(|| vision::normalize_chw_into(s, width, height, mean, std, o)).map_err(pipeline_error)
}

/// Encodes HWC RGB bytes as JPEG at `quality`.
#[pyfunction]
fn vision_encode_jpeg<'py>(
    py: Python<'py>,
    rgb: &[u8],
    width: u32,
    height: u32,
    quality: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let img = vision::Image { width, height, rgb: rgb.to_vec() };
    let jpeg = py.detach(|| vision::encode_jpeg(&img, quality)).map_err(pipeline_error)?;
    Ok(PyBytes::new(py, &jpeg))
}

/// torchvision's RandomResizedCrop box for an image of width x height, from `seed`:
/// (left, top, width, height).
#[pyfunction]
fn vision_random_resized_crop_box(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    seed: u64,
) -> (u32, u32, u32, u32) {
    let b = vision::random_resized_crop_box(width, height, scale, ratio, &mut vision::SplitMix64::new(seed));
    (b.left, b.top, b.width, b.height)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(vision_jpeg_size, m)?)?;
    m.add_function(wrap_pyfunction!(vision_decode, m)?)?;
    m.add_function(wrap_pyfunction!(vision_transform_into, m)?)?;
    m.add_function(wrap_pyfunction!(vision_transform_batch_into, m)?)?;
    m.add_function(wrap_pyfunction!(vision_normalize_into, m)?)?;
    m.add_function(wrap_pyfunction!(vision_encode_jpeg, m)?)?;
    m.add_function(wrap_pyfunction!(vision_random_resized_crop_box, m)?)?;
    Ok(())
}
