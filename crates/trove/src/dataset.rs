//! `trove dataset`: the tools that make and reshape training datasets on a cluster, reading and
//! writing through the client library, in parallel, with progress bars.
//!
//! - `synth`: an ImageNet-like JPEG dataset (`OUT/class_CCCC/img_IIIIIII.jpg`, sizes and file
//!   sizes like ImageNet's), the same for the same seed;
//! - `pack`: an ImageFolder tree into shards, WebDataset tar (`KEY.jpg` + `KEY.cls` members) or
//!   TFRecord (`tf.train.Example` with `image/encoded`, `image/class/label`, `image/format`),
//!   each with an index file `SHARD.idx` (tar: `member offset size`; TFRecord: `offset size`
//!   per record, as DALI's tfrecord2idx writes it);
//! - `expand`: copies of every file of a directory (the Isilon paper's expand_records: 150 exact
//!   copies of each TFRecord file, to make a dataset larger than every cache);
//! - `resize`: every JPEG of a tree resized by a factor and re-encoded (the paper's large-image
//!   set: 3x height and width at quality 100, ~1.3 MB per image).
//!
//! Every output file is written under a temporary name (`client::tmp_name`) and renamed into
//! place when complete, so an interrupted run never leaves a file that looks finished; a run
//! again over the same output replaces what is there.

use anyhow::{anyhow, bail, Context, Result};
use bytes::{BufMut, BytesMut};
use clap::{Args, Subcommand, ValueEnum};
use client::{Client, FileKind};
use indicatif::ProgressBar;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use vision::SplitMix64;

/// Samples per shard by default (WebDataset and TFRecord sets are usually 100 MB - 1 GB shards).
const SAMPLES_PER_SHARD_DEFAULT: usize = 1000;
/// Most copies `expand` makes of each file.
const COPIES_MAX: u32 = 10_000;
/// Most images `synth` makes.
const IMAGES_MAX: u64 = 100_000_000;
/// Largest resize factor.
const SCALE_MAX: f64 = 16.0;

#[derive(Subcommand)]
pub enum DatasetCmd {
    /// Makes an ImageNet-like JPEG dataset of N images in class folders (reproducible by seed).
    Synth(SynthArgs),
    /// Packs an ImageFolder tree into WebDataset tar or TFRecord shards, with an index each.
    Pack(PackArgs),
    /// Makes copies of every file of a directory (the Isilon paper's expand_records).
    Expand(ExpandArgs),
    /// Resizes every JPEG of a tree by a factor and re-encodes it (e.g. 3x at quality 100).
    Resize(ResizeArgs),
}

#[derive(Args)]
pub struct SynthArgs {
    /// Directory to create the dataset in.
    #[arg(long)]
    out: String,
    /// Images to make.
    #[arg(long, default_value_t = 1000)]
    images: u64,
    /// Class folders the images are spread over.
    #[arg(long, default_value_t = 10)]
    classes: u32,
    /// Seed of the image content and sizes: the same seed makes the same dataset.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// JPEG quality (ImageNet's files are mostly about 90).
    #[arg(long, default_value_t = 90)]
    quality: u8,
    /// Widths are drawn from MIN:MAX pixels; heights from 0.6-1.0 of the width (ImageNet-like).
    #[arg(long, default_value = "300:500")]
    width: String,
    /// Images made at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardFormat {
    Tar,
    Tfrecord,
}

#[derive(Args)]
pub struct PackArgs {
    /// ImageFolder tree: SRC/<class>/<image>.
    #[arg(long)]
    src: String,
    /// Directory for the shards.
    #[arg(long)]
    out: String,
    /// Shard format: WebDataset tar or TFRecord.
    #[arg(long, value_enum, default_value = "tar")]
    format: ShardFormat,
    /// Samples per shard.
    #[arg(long, default_value_t = SAMPLES_PER_SHARD_DEFAULT)]
    samples_per_shard: usize,
    /// Keep the tree's order (class by class) instead of mixing samples across shards.
    #[arg(long)]
    no_shuffle: bool,
    /// Seed of the shuffle: the same seed packs the same shards.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Shards written at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
}

#[derive(Args)]
pub struct ExpandArgs {
    /// Directory whose files are copied (not recursive).
    #[arg(long)]
    src: String,
    /// Directory for the copies.
    #[arg(long)]
    out: String,
    /// Copies of each file: NAME becomes NAME-copy000 ... (before the extension).
    #[arg(long)]
    copies: u32,
    /// Files copied at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
}

#[derive(Args)]
pub struct ResizeArgs {
    /// Tree of JPEG files.
    #[arg(long)]
    src: String,
    /// Where the resized tree goes (same relative paths).
    #[arg(long)]
    out: String,
    /// Factor applied to width and height.
    #[arg(long, default_value_t = 3.0)]
    scale: f64,
    /// JPEG quality of the re-encoded images.
    #[arg(long, default_value_t = 100)]
    quality: u8,
    /// Images resized at once.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
}

pub async fn run(cmd: DatasetCmd, cluster: Option<String>) -> Result<()> {
    let client = crate::cmds::connect(cluster).await?;
    match cmd {
        DatasetCmd::Synth(a) => synth(&client, a).await,
        DatasetCmd::Pack(a) => pack(&client, a).await,
        DatasetCmd::Expand(a) => expand(&client, a).await,
        DatasetCmd::Resize(a) => resize(&client, a).await,
    }
}

fn norm(path: &str) -> String {
    format!("/{}", path.trim_matches('/'))
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn bar(n: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(n);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Writes `data` as file `path` (its directory must exist): under a temporary name first, then
/// renamed into place, so a reader never sees a partial file.
async fn write_atomic(client: &Client, path: &str, data: &[u8]) -> Result<()> {
    client.write_file_atomic(path, data, None).await.map_err(|e| anyhow!("writing {path}: {e}"))
}

/// Runs `work(i)` for i in 0..n on `jobs` tasks, ticking `bar`; stops at the first error.
async fn parallel<F, Fut>(n: usize, jobs: usize, bar: &ProgressBar, work: F) -> Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<u64>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let mut tasks = Vec::new();
    for _ in 0..jobs.clamp(1, 256).min(n.max(1)) {
        let (next, work, bar) = (next.clone(), work.clone(), bar.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                match work(i).await {
                    Ok(ticks) => bar.inc(ticks),
                    Err(e) => {
                        // The other tasks stop at their next item.
                        next.store(n, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
        }));
    }
    let mut first_error = None;
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(anyhow!("worker task failed: {e}"));
            }
        }
    }
    bar.finish_and_clear();
    first_error.map_or(Ok(()), Err)
}

fn parse_range(text: &str) -> Result<(u32, u32)> {
    let (a, b) = text.split_once(':').ok_or_else(|| anyhow!("--width {text:?} is not MIN:MAX"))?;
    let (a, b): (u32, u32) = (a.trim().parse().context("--width MIN")?, b.trim().parse().context("--width MAX")?);
    if a == 0 || a > b || b > 8192 {
        bail!("--width {text:?}: need 1 <= MIN <= MAX <= 8192");
    }
    Ok((a, b))
}

/// Class and size of synthetic image `i`: classes round robin, sizes from the seed.
pub fn synth_plan(seed: u64, i: u64, classes: u32, width: (u32, u32)) -> (u32, u32, u32) {
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x100_0000_01b3) ^ i);
    let w = width.0 + rng.up_to(width.1 - width.0);
    let h = ((f64::from(w) * rng.uniform(0.6, 1.0)).round() as u32).max(1);
    ((i % u64::from(classes)) as u32, w, h)
}

async fn synth(client: &Client, a: SynthArgs) -> Result<()> {
    if a.images == 0 || a.images > IMAGES_MAX {
        bail!("--images must be 1..={IMAGES_MAX}");
    }
    if a.classes == 0 || u64::from(a.classes) > a.images {
        bail!("--classes must be at least 1 and at most --images");
    }
    if !(1..=100).contains(&a.quality) {
        bail!("--quality must be 1..=100");
    }
    let width = parse_range(&a.width)?;
    let out = norm(&a.out);
    for c in 0..a.classes {
        client.mkdir_p(&join(&out, &format!("class_{c:04}"))).await.map_err(|e| anyhow!("creating {out}: {e}"))?;
    }
    let bar = bar(a.images, "synth");
    let (client, seed, classes, quality) = (client.clone(), a.seed, a.classes, a.quality);
    let out2 = out.clone();
    parallel(a.images as usize, a.jobs, &bar, move |i| {
        let (client, out) = (client.clone(), out2.clone());
        async move {
            let (class, w, h) = synth_plan(seed, i as u64, classes, width);
            let jpeg = tokio::task::spawn_blocking(move || {
                let img = vision::synth_image(seed.wrapping_mul(0x9e37_79b9) ^ (i as u64), w, h);
                vision::encode_jpeg(&img, quality)
            })
            .await
            .map_err(|e| anyhow!("encoder task failed: {e}"))??;
            write_atomic(&client, &join(&out, &format!("class_{class:04}/img_{i:07}.jpg")), &jpeg).await?;
            Ok(1)
        }
    })
    .await?;
    println!("synth: {} images in {} classes under {out}", a.images, a.classes);
    Ok(())
}

/// Every file of an ImageFolder tree: (path, class index, class name), sorted by path.
async fn image_folder(client: &Client, root: &str) -> Result<(Vec<String>, Vec<(String, u32)>)> {
    let attr = client.resolve(root).await.map_err(|e| anyhow!("{root}: {e}"))?;
    if attr.kind != FileKind::Dir {
        bail!("{root} is not a directory");
    }
    let mut classes: Vec<String> = client
        .readdir(attr.ino)
        .await
        .map_err(|e| anyhow!("listing {root}: {e}"))?
        .into_iter()
        .filter(|e| e.attr.kind == FileKind::Dir)
        .map(|e| e.name)
        .collect();
    classes.sort();
    let mut files = Vec::new();
    for (ci, c) in classes.iter().enumerate() {
        let mut stack = vec![join(root, c)];
        while let Some(dir) = stack.pop() {
            let d = client.resolve(&dir).await.map_err(|e| anyhow!("{dir}: {e}"))?;
            for e in client.readdir(d.ino).await.map_err(|e| anyhow!("listing {dir}: {e}"))? {
                let p = join(&dir, &e.name);
                match e.attr.kind {
                    FileKind::Dir => stack.push(p),
                    FileKind::File if !client::is_tmp_name(&e.name) => files.push((p, ci as u32)),
                    _ => {}
                }
            }
        }
    }
    files.sort();
    if files.is_empty() {
        bail!("no files in class directories under {root} (expected ROOT/<class>/<file>)");
    }
    Ok((classes, files))
}

/// A ustar header for a regular file `name` of `size` bytes.
fn tar_header(name: &str, size: u64) -> Result<[u8; 512]> {
    let mut h = [0u8; 512];
    let bytes = name.as_bytes();
    // Names over 100 bytes are split at a slash into prefix (155) and name (100).
    let (prefix, base) = if bytes.len() <= 100 {
        (&b""[..], bytes)
    } else {
        let split = name[..name.len().min(156)]
            .rfind('/')
            .filter(|&i| name.len() - i - 1 <= 100)
            .ok_or_else(|| anyhow!("member name {name:?} is too long for tar"))?;
        (&bytes[..split], &bytes[split + 1..])
    };
    h[..base.len()].copy_from_slice(base);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    if size >= 1 << 33 {
        bail!("member {name:?} of {size} bytes is too large for ustar");
    }
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix);
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    Ok(h)
}

/// One shard's bytes and its index text from `(key, image, label)` samples.
pub fn build_shard(format: ShardFormat, samples: &[(String, Vec<u8>, u32)]) -> Result<(Vec<u8>, String)> {
    let mut out = BytesMut::new();
    let mut index = String::new();
    match format {
        ShardFormat::Tar => {
            for (key, image, label) in samples {
                for (ext, body) in [("jpg", image.as_slice()), ("cls", label.to_string().as_bytes())] {
                    let name = format!("{key}.{ext}");
                    out.put_slice(&tar_header(&name, body.len() as u64)?);
                    index.push_str(&format!("{name} {} {}\n", out.len(), body.len()));
                    out.put_slice(body);
                    out.put_bytes(0, (512 - body.len() % 512) % 512);
                }
            }
            out.put_bytes(0, 1024);
        }
        ShardFormat::Tfrecord => {
            for (_, image, label) in samples {
                let ex = bench::tfrecord::image_example(image, i64::from(*label));
                index.push_str(&format!("{} {}\n", out.len(), ex.len() + 16));
                bench::tfrecord::frame_into(&mut out, &ex);
            }
        }
    }
    Ok((out.to_vec(), index))
}

async fn pack(client: &Client, a: PackArgs) -> Result<()> {
    if a.samples_per_shard == 0 {
        bail!("--samples-per-shard must be at least 1");
    }
    let src = norm(&a.src);
    let out = norm(&a.out);
    let (classes, mut files) = image_folder(client, &src).await?;
    if !a.no_shuffle {
        // Fisher-Yates with the seed: shards mix classes, the same for the same seed.
        let mut rng = SplitMix64::new(a.seed);
        for i in (1..files.len()).rev() {
            let j = rng.up_to(i as u32) as usize;
            files.swap(i, j);
        }
    }
    client.mkdir_p(&out).await.map_err(|e| anyhow!("creating {out}: {e}"))?;
    let shards: Vec<Vec<(String, u32)>> = files.chunks(a.samples_per_shard).map(|c| c.to_vec()).collect();
    let n = shards.len();
    let ext = match a.format {
        ShardFormat::Tar => "tar",
        ShardFormat::Tfrecord => "tfrecord",
    };
    let bar = bar(files.len() as u64, "pack");
    let shards = Arc::new(shards);
    let (client2, out2, src2, format) = (client.clone(), out.clone(), src.clone(), a.format);
    parallel(n, a.jobs, &bar, move |s| {
        let (client, out, src, shards) = (client2.clone(), out2.clone(), src2.clone(), shards.clone());
        async move {
            let mut samples = Vec::with_capacity(shards[s].len());
            for (path, label) in &shards[s] {
                let data = client.read_file(path).await.map_err(|e| anyhow!("reading {path}: {e}"))?;
                // The key is the path below SRC without its extension (no dots: WebDataset
                // splits the key from the extension at the first dot of the base name).
                let rel = path.strip_prefix(&src).unwrap_or(path).trim_start_matches('/');
                let key = match rel.rfind('/') {
                    Some(slash) => format!("{}{}", &rel[..=slash], rel[slash + 1..].split('.').next().unwrap_or("")),
                    None => rel.split('.').next().unwrap_or("").to_string(),
                };
                samples.push((key, data.to_vec(), *label));
            }
            let (bytes, index) = tokio::task::spawn_blocking(move || build_shard(format, &samples))
                .await
                .map_err(|e| anyhow!("shard task failed: {e}"))??;
            let name = format!("shard-{s:06}.{ext}");
            write_atomic(&client, &join(&out, &name), &bytes).await?;
            write_atomic(&client, &join(&out, &format!("{name}.idx")), index.as_bytes()).await?;
            Ok(shards[s].len() as u64)
        }
    })
    .await?;
    let classes_txt: String = classes.iter().map(|c| format!("{c}\n")).collect();
    write_atomic(client, &join(&out, "classes.txt"), classes_txt.as_bytes()).await?;
    println!("pack: {} samples of {} classes into {n} {ext} shards under {out}", files.len(), classes.len());
    Ok(())
}

/// NAME with `-copyKKK` before its extension (`a.tfrecord` -> `a-copy007.tfrecord`; an index
/// `a.tfrecord.idx` -> `a-copy007.tfrecord.idx`, so it stays beside its shard).
pub fn copy_name(name: &str, k: u32) -> String {
    let (stem, ext) = match name.find('.') {
        Some(0) | None => (name, ""),
        Some(i) => (&name[..i], &name[i..]),
    };
    format!("{stem}-copy{k:03}{ext}")
}

async fn expand(client: &Client, a: ExpandArgs) -> Result<()> {
    if a.copies == 0 || a.copies > COPIES_MAX {
        bail!("--copies must be 1..={COPIES_MAX}");
    }
    let src = norm(&a.src);
    let out = norm(&a.out);
    let dir = client.resolve(&src).await.map_err(|e| anyhow!("{src}: {e}"))?;
    if dir.kind != FileKind::Dir {
        bail!("{src} is not a directory");
    }
    let files: Vec<String> = client
        .readdir(dir.ino)
        .await
        .map_err(|e| anyhow!("listing {src}: {e}"))?
        .into_iter()
        .filter(|e| e.attr.kind == FileKind::File && !client::is_tmp_name(&e.name))
        .map(|e| e.name)
        .collect();
    if files.is_empty() {
        bail!("no files in {src}");
    }
    client.mkdir_p(&out).await.map_err(|e| anyhow!("creating {out}: {e}"))?;
    let jobs: Vec<(String, u32)> = files.iter().flat_map(|f| (0..a.copies).map(move |k| (f.clone(), k))).collect();
    let bar = bar(jobs.len() as u64, "expand");
    let jobs = Arc::new(jobs);
    let n = jobs.len();
    let (client2, src2, out2) = (client.clone(), src.clone(), out.clone());
    parallel(n, a.jobs, &bar, move |i| {
        let (client, src, out, jobs) = (client2.clone(), src2.clone(), out2.clone(), jobs.clone());
        async move {
            let (name, k) = &jobs[i];
            let data = client.read_file(&join(&src, name)).await.map_err(|e| anyhow!("reading {src}/{name}: {e}"))?;
            write_atomic(&client, &join(&out, &copy_name(name, *k)), &data).await?;
            Ok(1)
        }
    })
    .await?;
    println!("expand: {} files x {} copies into {out}", files.len(), a.copies);
    Ok(())
}

async fn resize(client: &Client, a: ResizeArgs) -> Result<()> {
    if !(a.scale > 0.0 && a.scale <= SCALE_MAX) {
        bail!("--scale must be in (0, {SCALE_MAX}]");
    }
    if !(1..=100).contains(&a.quality) {
        bail!("--quality must be 1..=100");
    }
    let src = norm(&a.src);
    let out = norm(&a.out);
    // Every JPEG below SRC, with its path relative to SRC.
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = if rel.is_empty() { src.clone() } else { join(&src, &rel) };
        let d = client.resolve(&dir).await.map_err(|e| anyhow!("{dir}: {e}"))?;
        if d.kind != FileKind::Dir {
            bail!("{dir} is not a directory");
        }
        client
            .mkdir_p(&if rel.is_empty() { out.clone() } else { join(&out, &rel) })
            .await
            .map_err(|e| anyhow!("creating {out}/{rel}: {e}"))?;
        for e in client.readdir(d.ino).await.map_err(|e| anyhow!("listing {dir}: {e}"))? {
            let r = if rel.is_empty() { e.name.clone() } else { join(&rel, &e.name) };
            let lower = e.name.to_ascii_lowercase();
            match e.attr.kind {
                FileKind::Dir => stack.push(r),
                FileKind::File if lower.ends_with(".jpg") || lower.ends_with(".jpeg") => files.push(r),
                _ => {}
            }
        }
    }
    if files.is_empty() {
        bail!("no .jpg or .jpeg files under {src}");
    }
    files.sort();
    let bar = bar(files.len() as u64, "resize");
    let files = Arc::new(files);
    let n = files.len();
    let (client2, src2, out2, scale, quality) = (client.clone(), src.clone(), out.clone(), a.scale, a.quality);
    parallel(n, a.jobs, &bar, move |i| {
        let (client, src, out, files) = (client2.clone(), src2.clone(), out2.clone(), files.clone());
        async move {
            let rel = &files[i];
            let data = client.read_file(&join(&src, rel)).await.map_err(|e| anyhow!("reading {src}/{rel}: {e}"))?;
            let what = format!("{src}/{rel}");
            let jpeg = tokio::task::spawn_blocking(move || {
                let img = vision::decode_rgb(&data).map_err(|e| anyhow!("{what}: {e}"))?;
                let w = ((f64::from(img.width) * scale).round() as u32).max(1);
                let h = ((f64::from(img.height) * scale).round() as u32).max(1);
                let big = vision::resize(&img, w, h).map_err(|e| anyhow!("{what}: {e}"))?;
                vision::encode_jpeg(&big, quality).map_err(|e| anyhow!("{what}: {e}"))
            })
            .await
            .map_err(|e| anyhow!("resize task failed: {e}"))??;
            write_atomic(&client, &join(&out, rel), &jpeg).await?;
            Ok(1)
        }
    })
    .await?;
    println!("resize: {n} images x{} at quality {} into {out}", a.scale, a.quality);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_headers_have_valid_checksums_and_long_names_split() {
        let h = tar_header("class_0001/img_0000001.jpg", 1234).expect("header");
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).expect("ascii"), 8).expect("octal");
        let mut copy = h;
        copy[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, copy.iter().map(|b| u32::from(*b)).sum::<u32>());
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let h = tar_header(&long, 1).expect("split name");
        assert_eq!(&h[..90], "f".repeat(90).as_bytes());
        assert!(tar_header(&"x".repeat(300), 1).is_err());
    }

    #[test]
    fn tfrecord_shards_frame_every_record_and_index_it() {
        let samples = vec![("a".to_string(), vec![1u8; 10], 3), ("b".to_string(), vec![2u8; 20], 4)];
        let (bytes, index) = build_shard(ShardFormat::Tfrecord, &samples).expect("shard");
        let mut parser = bench::tfrecord::Parser::default();
        let records = parser.feed(&bytes).expect("valid framing");
        assert_eq!(records.len(), 2);
        let lines: Vec<(usize, usize)> = index
            .lines()
            .map(|l| {
                let (o, n) = l.split_once(' ').expect("two fields");
                (o.parse().expect("offset"), n.parse().expect("size"))
            })
            .collect();
        assert_eq!(lines[0].0, 0);
        assert_eq!(lines[1].0, lines[0].1);
        assert_eq!(lines[1].0 + lines[1].1, bytes.len());
    }

    #[test]
    fn copies_keep_extensions_and_synth_plans_are_reproducible() {
        assert_eq!(copy_name("shard-000001.tfrecord", 7), "shard-000001-copy007.tfrecord");
        assert_eq!(copy_name("shard-000001.tfrecord.idx", 7), "shard-000001-copy007.tfrecord.idx");
        assert_eq!(copy_name("README", 0), "README-copy000");
        assert_eq!(synth_plan(1, 5, 3, (300, 500)), synth_plan(1, 5, 3, (300, 500)));
        let (class, w, h) = synth_plan(1, 5, 3, (300, 500));
        assert_eq!(class, 2);
        assert!((300..=500).contains(&w) && h <= w && h * 10 >= w * 6 - 10);
    }
}
