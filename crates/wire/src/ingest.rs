//! Ingest rules: a directory tree whose JPEG images get derived variants as they land
//! (vScaler's "images resized as they are ingested"). A rule names a source tree, a target
//! tree, the short side the variants are resized to and their JPEG quality; the job engine's
//! ingest job (`jobs::ingest`) writes, for every JPEG below the source, the variant at the same
//! relative path below the target, and writes it again when the source changes.
//!
//! The type and its checks live here, beside the messages that carry it, because the metadata
//! service checks a rule when it is added, and the command line and the job read the same
//! meaning from it.

use crate::types::check_pool_name;
use serde::{Deserialize, Serialize};

/// Most ingest rules a cluster may have (every pass walks each rule's source tree).
pub const INGEST_RULES_MAX: usize = 64;
/// Smallest short side a variant may be resized to, in pixels.
pub const INGEST_SIZE_MIN_PX: u32 = 8;
/// Largest short side a variant may be resized to, in pixels.
pub const INGEST_SIZE_MAX_PX: u32 = 8192;
/// Longest source or target path of a rule.
pub const INGEST_PATH_BYTES_MAX: usize = 4096;

/// One ingest rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestRule {
    /// Unique among ingest rules; the same characters as pool names.
    pub name: String,
    /// The source tree, an absolute path (it need not exist yet).
    pub from: String,
    /// The target tree, an absolute path outside the source (created as needed).
    pub into: String,
    /// The short side of a variant in pixels, the aspect ratio kept (torchvision's
    /// `Resize(size)`); an image whose short side is this or less is copied as it is.
    pub size_px: u32,
    /// JPEG quality of the variants, 1 to 100.
    pub quality: u8,
}

/// `path` with repeated and trailing slashes removed; `None` unless absolute and free of `.`
/// and `..` components.
pub fn normalize_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    if parts.iter().any(|c| *c == "." || *c == "..") {
        return None;
    }
    Some(format!("/{}", parts.join("/")))
}

/// Whether normalized path `inner` is `outer` or below it.
pub fn within(inner: &str, outer: &str) -> bool {
    outer == "/" || inner == outer || inner.strip_prefix(outer).is_some_and(|rest| rest.starts_with('/'))
}

impl IngestRule {
    /// Checks the rule: its name, absolute paths (normalized as stored), neither tree inside
    /// the other (variants of variants would never end), and the size and quality in range.
    pub fn check(&self) -> Result<(), String> {
        check_pool_name(&self.name).map_err(|e| e.replacen("pool name", "ingest rule name", 1))?;
        let name = &self.name;
        for (what, path) in [("source", &self.from), ("target", &self.into)] {
            if path.len() > INGEST_PATH_BYTES_MAX {
                return Err(format!(
                    "ingest rule {name:?}: the {what} path is longer than {INGEST_PATH_BYTES_MAX} bytes"
                ));
            }
            if normalize_path(path).as_deref() != Some(path.as_str()) {
                return Err(format!(
                    "ingest rule {name:?}: the {what} {path:?} must be an absolute path without '.', '..', repeated or trailing slashes"
                ));
            }
        }
        if within(&self.into, &self.from) || within(&self.from, &self.into) {
            return Err(format!(
                "ingest rule {name:?}: the target {:?} and the source {:?} overlap; variants go to a tree beside the source, not inside it",
                self.into, self.from
            ));
        }
        if !(INGEST_SIZE_MIN_PX..=INGEST_SIZE_MAX_PX).contains(&self.size_px) {
            return Err(format!(
                "ingest rule {name:?}: the size must be {INGEST_SIZE_MIN_PX} to {INGEST_SIZE_MAX_PX} pixels, not {}",
                self.size_px
            ));
        }
        if !(1..=100).contains(&self.quality) {
            return Err(format!("ingest rule {name:?}: the JPEG quality must be 1 to 100, not {}", self.quality));
        }
        Ok(())
    }

    /// Where `path` (the source tree or something below it) has its counterpart in the target
    /// tree; `None` for a path outside the source tree.
    pub fn target_of(&self, path: &str) -> Option<String> {
        if !within(path, &self.from) {
            return None;
        }
        let rest = if self.from == "/" { path } else { &path[self.from.len()..] };
        Some(format!("{}{rest}", self.into))
    }

    /// The width and height of the variant of an image `width` x `height`: the short side
    /// brought to `size_px`, the long side in proportion (rounded, at least 1); `None` when the
    /// short side is `size_px` or less (the image is copied as it is).
    pub fn variant_size(&self, width: u32, height: u32) -> Option<(u32, u32)> {
        let short = width.min(height);
        if short <= self.size_px || short == 0 {
            return None;
        }
        let scale = f64::from(self.size_px) / f64::from(short);
        let side = |n: u32| ((f64::from(n) * scale).round() as u32).max(1);
        Some(if width <= height { (self.size_px, side(height)) } else { (side(width), self.size_px) })
    }
}

/// Whether `name` is a file the ingest job derives variants of (a JPEG by its extension).
pub fn is_jpeg_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".jpg") || lower.ends_with(".jpeg")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(from: &str, into: &str) -> IngestRule {
        IngestRule { name: "r224".into(), from: from.into(), into: into.into(), size_px: 224, quality: 90 }
    }

    #[test]
    fn rules_with_overlapping_or_unnormalized_trees_are_refused() {
        assert!(rule("/raw", "/raw-224").check().is_ok());
        for (from, into) in [
            ("/raw", "/raw/224"),
            ("/raw/a", "/raw"),
            ("/", "/x"),
            ("raw", "/x"),
            ("/raw/", "/x"),
            ("/a/../b", "/x"),
            ("/a//b", "/x"),
        ] {
            assert!(rule(from, into).check().is_err(), "{from} -> {into} was accepted");
        }
        let mut r = rule("/raw", "/small");
        r.size_px = 4;
        assert!(r.check().unwrap_err().contains("size"));
        r.size_px = 224;
        r.quality = 0;
        assert!(r.check().unwrap_err().contains("quality"));
        r.quality = 90;
        r.name = "bad name".into();
        assert!(r.check().is_err());
    }

    #[test]
    fn targets_keep_the_path_below_the_source() {
        let r = rule("/raw", "/v/224");
        assert_eq!(r.target_of("/raw/a/b.jpg").as_deref(), Some("/v/224/a/b.jpg"));
        assert_eq!(r.target_of("/rawer/b.jpg"), None);
        assert_eq!(r.target_of("/raw").as_deref(), Some("/v/224"));
        assert_eq!(
            IngestRule { from: "/".into(), ..r.clone() }.target_of("/a/b.jpg").as_deref(),
            Some("/v/224/a/b.jpg")
        );
    }

    #[test]
    fn the_short_side_is_brought_to_the_size_and_small_images_are_kept() {
        let r = rule("/raw", "/v");
        assert_eq!(r.variant_size(500, 375), Some((299, 224)));
        assert_eq!(r.variant_size(375, 500), Some((224, 299)));
        assert_eq!(r.variant_size(224, 1000), None);
        assert_eq!(r.variant_size(100, 80), None);
        assert!(is_jpeg_name("a.JPG") && is_jpeg_name("b.jpeg") && !is_jpeg_name("c.png"));
    }
}
