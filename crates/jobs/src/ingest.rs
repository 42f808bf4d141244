//! The ingest job: derives the variants the ingest rules ask for (`wire::ingest`) of JPEG
//! images that landed or changed in their source trees (vScaler's "images resized as they are
//! ingested"). A pass walks each rule's source tree, one listing per directory, and compares
//! it with the listing of the matching target directory: a variant is up to date when it
//! exists and carries its source's modification time, which the job sets on every variant it
//! writes (before renaming it into place, so a variant is whole or absent). Anything else is
//! derived: decoded, resized so its short side is the rule's size (an image already that small
//! is copied as it is), encoded at the rule's quality, and written.
//!
//! So the job keeps no state of its own: a pass after a failover, a crash or a change of rules
//! finds the same work. A source modified in the last [`SETTLE`] is left for the next pass
//! (it may still be being written); one that cannot be decoded is counted and named in the
//! job's record, and tried again at the next pass only if it changes (its failure is kept per
//! modification time for the life of the runner).
//!
//! Passes run every `ingest_interval_ms` of the metadata configuration while rules exist, or
//! at once by `trove job start ingest`; a pass that wrote or failed something is a run in the
//! job's record (`trove job status`). Removing a rule leaves its variants; deleting a source
//! leaves its variant.

use crate::tier::Records;
use client::Client;
use meta::store::now_ms;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use wire::ingest::is_jpeg_name;
use wire::{Attr, ErrorCode, FileKind, IngestRule, JobInfo, JobState, Timestamp, WireError};

/// A source modified less than this ago is left for the next pass: it may still be written.
pub const SETTLE: Duration = Duration::from_secs(2);
/// Most time between two progress reports of a pass that is writing variants.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Largest source image the job reads, in bytes (a bigger file is counted as failed).
pub const SOURCE_BYTES_MAX: u64 = 256 << 20;

/// What a pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Source images looked at.
    pub seen: u64,
    /// Variants written.
    pub written: u64,
    pub bytes_written: u64,
    /// Sources left for the next pass (modified within [`SETTLE`]).
    pub unsettled: u64,
    /// Sources that could not be derived.
    pub failed: u64,
    /// The first failure, named by path.
    pub first_failure: Option<String>,
}

impl Report {
    /// One line for the job's record.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{} images looked at, {} variants written ({} bytes), {} left for the next pass",
            self.seen, self.written, self.bytes_written, self.unsettled
        );
        if self.failed > 0 {
            text.push_str(&format!(
                ", {} could not be derived (first: {})",
                self.failed,
                self.first_failure.as_deref().unwrap_or("?")
            ));
        }
        text
    }
}

/// Why a pass stopped before the end.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    Cancelled,
    /// The record moved on to another run.
    Superseded,
}

/// Sources known not to derive, by inode and modification time: not tried again until they
/// change.
pub type Failures = HashSet<(wire::Ino, i64, u32)>;

fn failure_key(attr: &Attr) -> (wire::Ino, i64, u32) {
    (attr.ino, attr.mtime.secs, attr.mtime.nanos)
}

/// One pass over every rule, recorded as run `info.run` when it writes or fails something (or
/// when an operator asked for it: `info` is then that run's record).
pub struct Pass {
    client: Client,
    records: Arc<dyn Records>,
    info: JobInfo,
    asked: bool,
    report: Report,
    started: Instant,
    last_report: Option<Instant>,
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// The variant of JPEG `data`: resized for `rule`, or `data` itself when the image is small
/// enough already. CPU work: call it off the async threads.
pub fn derive(rule: &IngestRule, data: &[u8]) -> Result<Vec<u8>, String> {
    let (width, height) = vision::jpeg_size(data).map_err(|e| e.to_string())?;
    if !vision::jpeg_is_whole(data) {
        return Err("the image is cut short (no end-of-image marker after its last scan)".into());
    }
    let Some((w, h)) = rule.variant_size(width, height) else {
        // Decoding it anyway refuses a damaged file rather than copying it.
        vision::decode_rgb(data).map_err(|e| e.to_string())?;
        return Ok(data.to_vec());
    };
    // Decoded scaled down in the DCT domain when the variant is half the source or less.
    let image = vision::decode_rgb_for(data, w, h).map_err(|e| e.to_string())?;
    let small = vision::resize(&image, w, h).map_err(|e| e.to_string())?;
    vision::encode_jpeg(&small, rule.quality).map_err(|e| e.to_string())
}

impl Pass {
    /// A pass recorded as run `info.run` (the operator's run when `asked`; otherwise the next
    /// run, recorded only if the pass does something).
    pub fn new(client: Client, records: Arc<dyn Records>, info: JobInfo, asked: bool) -> Pass {
        Pass { client, records, info, asked, report: Report::default(), started: Instant::now(), last_report: None }
    }

    /// Runs the pass over `rules` and records its end; returns what it did.
    pub async fn run(mut self, rules: Vec<IngestRule>, failures: &mut Failures) -> Report {
        let mut outcome = Ok(());
        for rule in &rules {
            outcome = self.rule(rule, failures).await;
            if outcome.is_err() {
                break;
            }
        }
        let (state, message) = match outcome {
            Ok(()) => (JobState::Done, self.report.summary()),
            Err(Stop::Cancelled) => (JobState::Cancelled, format!("cancelled: {}", self.report.summary())),
            Err(Stop::Superseded) => return self.report,
        };
        if self.asked || self.report.written > 0 || self.report.failed > 0 {
            let info = JobInfo { state, finished_ms: now_ms(), message, ..self.record() };
            if let Err(e) = self.records.report(info).await {
                tracing::warn!("job ingest: cannot record the end of run {}: {e}", self.info.run);
            }
        }
        if self.report.written > 0 || self.report.failed > 0 {
            tracing::info!("job ingest: run {}: {}", self.info.run, self.report.summary());
        }
        self.report
    }

    fn record(&self) -> JobInfo {
        let mut info = self.info.clone();
        info.state = JobState::Running;
        if info.started_ms == 0 {
            info.started_ms = now_ms();
        }
        if info.trigger.is_empty() {
            info.trigger = "new files".into();
        }
        info.progress.items_seen = self.report.seen;
        info.progress.files_moved = self.report.written;
        info.progress.bytes_moved = self.report.bytes_written;
        info.progress.problems_found = self.report.failed;
        info.progress.busy_ms = self.started.elapsed().as_millis() as u64;
        info.message = self.report.first_failure.clone().map(|f| format!("first failure: {f}")).unwrap_or_default();
        info
    }

    /// Reports progress (at most every [`REPORT_INTERVAL`], once the pass has something to
    /// say) and follows the record: waits while it is paused, stops when it is cancelled or
    /// another run took its place.
    async fn checkpoint(&mut self) -> Result<(), Stop> {
        if !self.asked && self.report.written == 0 && self.report.failed == 0 {
            return Ok(());
        }
        if self.last_report.is_some_and(|t| t.elapsed() < REPORT_INTERVAL) {
            return Ok(());
        }
        loop {
            self.last_report = Some(Instant::now());
            let record = match self.records.report(self.record()).await {
                Ok(record) => record,
                Err(e) => {
                    tracing::debug!("job ingest: cannot report progress: {e}");
                    return Ok(());
                }
            };
            if record.run != self.info.run {
                return Err(Stop::Superseded);
            }
            self.info.started_ms = record.started_ms;
            self.info.trigger = record.trigger.clone();
            match record.state {
                JobState::Cancelled => return Err(Stop::Cancelled),
                JobState::Paused => tokio::time::sleep(REPORT_INTERVAL).await,
                _ => return Ok(()),
            }
        }
    }

    fn failed(&mut self, path: &str, why: &str) {
        self.report.failed += 1;
        if self.report.first_failure.is_none() {
            tracing::warn!("job ingest: cannot derive {path}: {why}");
            self.report.first_failure = Some(format!("{path}: {why}"));
        }
    }

    /// One rule: its source tree, directory by directory.
    async fn rule(&mut self, rule: &IngestRule, failures: &mut Failures) -> Result<(), Stop> {
        let root = match self.client.resolve(&rule.from).await {
            Ok(attr) if attr.kind == FileKind::Dir => attr,
            // Nothing landed yet (or the source is not a directory): nothing to derive.
            Ok(_) => return Ok(()),
            Err(e) if e.code == ErrorCode::NotFound => return Ok(()),
            Err(e) => {
                self.failed(&rule.from, &e.to_string());
                return Ok(());
            }
        };
        let mut stack = vec![(rule.from.clone(), root.ino)];
        while let Some((dir, ino)) = stack.pop() {
            let entries = match self.client.readdir(ino).await {
                Ok(entries) => entries,
                Err(e) if e.code == ErrorCode::NotFound => continue,
                Err(e) => {
                    self.failed(&dir, &e.to_string());
                    continue;
                }
            };
            let Some(target_dir) = rule.target_of(&dir) else {
                continue;
            };
            let mut targets: Option<HashMap<String, Attr>> = None;
            for entry in entries {
                let path = join(&dir, &entry.name);
                match entry.attr.kind {
                    FileKind::Dir => stack.push((path, entry.attr.ino)),
                    FileKind::File if is_jpeg_name(&entry.name) => {
                        self.report.seen += 1;
                        if targets.is_none() {
                            targets = Some(self.listing(&target_dir).await);
                        }
                        let current = targets
                            .as_ref()
                            .and_then(|t| t.get(&entry.name))
                            .is_some_and(|t| t.kind == FileKind::File && t.mtime == entry.attr.mtime);
                        if current || failures.contains(&failure_key(&entry.attr)) {
                            continue;
                        }
                        let age = Timestamp::now().secs.saturating_sub(entry.attr.mtime.secs);
                        if age < SETTLE.as_secs() as i64 + 1 {
                            self.report.unsettled += 1;
                            continue;
                        }
                        self.one(rule, &path, &join(&target_dir, &entry.name), &entry.attr, failures).await;
                        self.checkpoint().await?;
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The entries of target directory `dir` by name (none when it does not exist yet).
    async fn listing(&self, dir: &str) -> HashMap<String, Attr> {
        let Ok(attr) = self.client.resolve(dir).await else {
            return HashMap::new();
        };
        match self.client.readdir(attr.ino).await {
            Ok(entries) => entries.into_iter().map(|e| (e.name, e.attr)).collect(),
            Err(_) => HashMap::new(),
        }
    }

    /// Derives the variant of source `path` (attributes `src`) into `target`.
    async fn one(&mut self, rule: &IngestRule, path: &str, target: &str, src: &Attr, failures: &mut Failures) {
        if src.size > SOURCE_BYTES_MAX {
            failures.insert(failure_key(src));
            self.failed(path, &format!("{} bytes, more than the {SOURCE_BYTES_MAX} the job reads", src.size));
            return;
        }
        let data = match self.client.open(src.ino).await {
            Ok(mut h) => h.read_at(0, src.size as usize).await,
            Err(e) => Err(e),
        };
        let data = match data {
            Ok(data) => data,
            Err(e) => return self.failed(path, &e.to_string()),
        };
        let owned = rule.clone();
        let variant = tokio::task::spawn_blocking(move || derive(&owned, &data)).await;
        let variant = match variant {
            Ok(Ok(v)) => v,
            Ok(Err(why)) => {
                failures.insert(failure_key(src));
                return self.failed(path, &why);
            }
            Err(e) => return self.failed(path, &format!("the resize task failed: {e}")),
        };
        if let Some((parent, _)) = target.rsplit_once('/') {
            if !parent.is_empty() {
                if let Err(e) = self.client.mkdir_p(parent).await {
                    return self.failed(path, &format!("creating {parent}: {e}"));
                }
            }
        }
        match self.client.write_file_atomic(target, &variant, Some(src.mtime)).await {
            Ok(()) => {
                self.report.written += 1;
                self.report.bytes_written += variant.len() as u64;
            }
            Err(e) => self.failed(path, &format!("writing {target}: {e}")),
        }
    }
}

/// The rules as the metadata service holds them.
pub fn rules_of(reply: Result<wire::MetaReply, WireError>) -> Result<Vec<IngestRule>, WireError> {
    match reply? {
        wire::MetaReply::IngestRules(rules) => Ok(rules),
        other => Err(client::unexpected(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(size_px: u32) -> IngestRule {
        IngestRule { name: "r".into(), from: "/raw".into(), into: "/small".into(), size_px, quality: 90 }
    }

    #[test]
    fn variants_have_the_rules_short_side_and_small_images_are_copied() {
        let jpeg = vision::encode_jpeg(&vision::synth_image(7, 500, 375), 90).expect("encode");
        let small = derive(&rule(224), &jpeg).expect("derive");
        assert_eq!(vision::jpeg_size(&small).expect("size"), (299, 224));
        let same = derive(&rule(400), &jpeg).expect("derive");
        assert_eq!(same, jpeg, "an image already small enough is copied as it is");
        assert!(derive(&rule(224), b"not a jpeg").is_err());
        let cut = &jpeg[..jpeg.len() / 3];
        assert!(derive(&rule(400), cut).is_err(), "a damaged image is refused, not copied");
    }
}
