//! Object listings (ListObjectsV2, ListObjects): a walk of a bucket's directory tree that
//! yields keys in S3's order, byte order of the whole key, page by page.
//!
//! Directories list their entries in byte order of the *name*, which is not key order: the
//! subtree of directory `a` holds keys `a/...`, which sort after a sibling file `a-b` (`-` is
//! below `/`). Each directory level therefore holds a directory back, in a small ordered set,
//! until the names being read pass `name/`; only names that extend the directory's name by a
//! byte below `/` can come in between, so the set stays small.
//!
//! A page starts where the previous one ended without re-reading what came before: every
//! level starts its directory read at the first component of the resume key (or of the
//! prefix), so a continuation costs one directory read per level, whatever the bucket size.
//! With the delimiter `/` (the common case) directories become common prefixes without being
//! entered. Temporary files of uploads in progress, symlinks and special files are not
//! objects and are skipped (the client library hides temporary names from every listing; this
//! walk reads them anyway, to sweep those that a crashed gateway left behind).

use crate::errors::{OrS3, Target};
use crate::names::is_tmp;
use client::{Attr, Client, DirEntry, FileKind, Ino};
use s3s::S3Result;
use std::collections::{BTreeMap, VecDeque};

/// Most keys (and common prefixes) one listing page returns, as in S3.
pub const KEYS_PER_PAGE_MAX: usize = 1000;
/// A temporary upload file unchanged for this long was left by a gateway that crashed; listings
/// that come across it remove it (24 hours: far longer than any upload takes to commit data).
pub const TMP_STALE_SECS: i64 = 24 * 3600;
/// Directory entries fetched per metadata call while listing.
const ENTRIES_PER_READ: u32 = 1024;
/// Most directory entries one listing page may examine before it returns what it has
/// (truncated), so one request never walks an unbounded tree.
const ENTRIES_PER_PAGE_MAX: usize = 200_000;

/// One listing result: an object with its attributes, or a common prefix.
#[derive(Debug)]
pub enum Item {
    Object { key: String, attr: Attr },
    Prefix(String),
}

impl Item {
    /// The key or prefix, which is where the next page resumes.
    pub fn key(&self) -> &str {
        match self {
            Item::Object { key, .. } => key,
            Item::Prefix(p) => p,
        }
    }
}

/// What to list.
#[derive(Debug, Default)]
pub struct Query<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Return only keys (and prefixes) strictly after this one.
    pub after: &'a str,
    pub limit: usize,
}

/// One page of a listing.
#[derive(Debug, Default)]
pub struct Page {
    pub items: Vec<Item>,
    /// More keys follow; resume after the last item.
    pub truncated: bool,
}

/// One directory level of the walk.
struct Level {
    ino: Ino,
    /// The key prefix of everything below this directory ("" or "a/b/").
    key_prefix: String,
    /// Name to continue the directory read after.
    cursor: String,
    more: bool,
    buffer: VecDeque<DirEntry>,
    /// Directories held back until the names read pass `name/`, by key.
    held: BTreeMap<String, DirEntry>,
}

/// The largest string that sorts below every name starting with `first`, as far as a
/// directory read cares: reading after it returns all such names (and possibly a few more,
/// which the walk filters out).
fn read_start(first: &str) -> String {
    let mut s: String = first.to_string();
    // Directory reads take names of at most 255 bytes.
    while s.len() > wire::NAME_BYTES_MAX {
        s.pop();
    }
    s.pop();
    s
}

/// The first path component of `rest` (everything up to the first `/`).
fn first_component(rest: &str) -> &str {
    rest.split('/').next().unwrap_or("")
}

impl Level {
    /// A level for directory `ino` holding the keys below `key_prefix`, positioned at the
    /// first entry that can matter to `q`.
    async fn start(client: &Client, ino: Ino, key_prefix: String, q: &Query<'_>) -> S3Result<Level> {
        // Start reading at the first component of whichever bound lies inside this directory:
        // the resume key or the prefix. Both only ever raise the start.
        let mut start = String::new();
        for bound in [q.after, q.prefix] {
            if let Some(rest) = bound.strip_prefix(key_prefix.as_str()) {
                let first = read_start(first_component(rest));
                if first > start {
                    start = first;
                }
            }
        }
        // The read skips names below the resume key's component `c`. Among those, only a
        // directory whose name is a proper prefix of `c`, followed in `c` by a byte below
        // '/', has keys after the resume key (`a/` sorts after `a-b`): look those up.
        let mut held = BTreeMap::new();
        if let Some(rest) = q.after.strip_prefix(key_prefix.as_str()) {
            let c = first_component(rest);
            for (i, b) in c.bytes().enumerate().skip(1) {
                if b >= b'/' || !c.is_char_boundary(i) {
                    continue;
                }
                let name = &c[..i];
                match client.lookup(ino, name).await {
                    Ok(attr) if attr.kind == FileKind::Dir => {
                        held.insert(format!("{name}/"), DirEntry { name: name.to_string(), attr });
                    }
                    Ok(_) => {}
                    Err(e) if matches!(e.code, client::ErrorCode::NotFound | client::ErrorCode::Invalid) => {}
                    Err(e) => return Err(crate::errors::s3_error(&e, Target::Object)),
                }
            }
        }
        Ok(Level { ino, key_prefix, cursor: start, more: true, buffer: VecDeque::new(), held })
    }

    /// The next entry of this directory in key order, or None at its end.
    async fn next(&mut self, client: &Client, examined: &mut usize) -> S3Result<Option<DirEntry>> {
        loop {
            if self.buffer.is_empty() && self.more {
                let (page, more) = client
                    .readdir_page_with_tmp(self.ino, &self.cursor, ENTRIES_PER_READ)
                    .await
                    .or_s3(Target::Object)?;
                *examined += page.len();
                if let Some(last) = page.last() {
                    self.cursor = last.name.clone();
                }
                self.more = more && !page.is_empty();
                self.buffer.extend(page);
            }
            let first_held = self.held.keys().next().cloned();
            match self.buffer.front() {
                Some(e) if e.attr.kind == FileKind::Dir => {
                    if let Some(e) = self.buffer.pop_front() {
                        self.held.insert(format!("{}/", e.name), e);
                    }
                }
                Some(e) => {
                    // A held directory whose key sorts before this name goes first.
                    if let Some(h) = first_held.filter(|h| h.as_str() < e.name.as_str()) {
                        return Ok(self.held.remove(&h));
                    }
                    return Ok(self.buffer.pop_front());
                }
                None => {
                    return Ok(first_held.and_then(|h| self.held.remove(&h)));
                }
            }
        }
    }
}

/// Lists one page of the bucket whose directory is `bucket_ino`.
pub async fn list(client: &Client, bucket_ino: Ino, q: &Query<'_>) -> S3Result<Page> {
    let mut page = Page::default();
    if q.limit == 0 {
        return Ok(page);
    }
    let mut stack = vec![Level::start(client, bucket_ino, String::new(), q).await?];
    let mut examined = 0usize;
    let mut last_prefix: Option<String> = None;
    while let Some(level) = stack.last_mut() {
        if examined > ENTRIES_PER_PAGE_MAX && !page.items.is_empty() {
            page.truncated = true;
            return Ok(page);
        }
        let Some(entry) = level.next(client, &mut examined).await? else {
            stack.pop();
            continue;
        };
        if is_tmp(&entry.name) {
            remove_if_stale(client, level.ino, &entry).await;
            continue;
        }
        let is_dir = entry.attr.kind == FileKind::Dir;
        if !is_dir && entry.attr.kind != FileKind::File {
            continue;
        }
        let key = if is_dir {
            format!("{}{}/", level.key_prefix, entry.name)
        } else {
            format!("{}{}", level.key_prefix, entry.name)
        };
        // Keys come in order: once one lies past every key with the prefix, nothing more can
        // match.
        if key.as_str() > q.prefix && !key.starts_with(q.prefix) && !q.prefix.starts_with(key.as_str()) {
            return Ok(page);
        }
        if is_dir {
            let inside_prefix = key.starts_with(q.prefix);
            if !inside_prefix && !q.prefix.starts_with(key.as_str()) {
                continue;
            }
            // Everything below sorts at or before the resume key: skip the subtree.
            if key.as_str() < q.after && !q.after.starts_with(key.as_str()) {
                continue;
            }
            if inside_prefix && key.len() > q.prefix.len() && q.delimiter == Some("/") {
                // The whole subtree rolls up into this common prefix; an empty directory has
                // no keys, so it is not one.
                if key.as_str() > q.after && last_prefix.as_deref() != Some(key.as_str()) {
                    let (children, _) = client.readdir_page(entry.attr.ino, "", 1).await.or_s3(Target::Object)?;
                    if !children.is_empty() {
                        last_prefix = Some(key.clone());
                        page.items.push(Item::Prefix(key));
                    }
                }
            } else if crate::scope::current().permits(&entry.attr, wire::identity::Access::RX) {
                // A directory the user may not list keeps its keys out, as `ls -R` would.
                let next = Level::start(client, entry.attr.ino, key, q).await?;
                stack.push(next);
            }
        } else {
            if !key.starts_with(q.prefix) || key.as_str() <= q.after {
                continue;
            }
            let rolled = q
                .delimiter
                .filter(|d| !d.is_empty())
                .and_then(|d| key[q.prefix.len()..].find(d).map(|i| key[..q.prefix.len() + i + d.len()].to_string()));
            match rolled {
                Some(cp) => {
                    if cp.as_str() <= q.after || last_prefix.as_deref() == Some(cp.as_str()) {
                        continue;
                    }
                    last_prefix = Some(cp.clone());
                    page.items.push(Item::Prefix(cp));
                }
                None => page.items.push(Item::Object { key, attr: entry.attr }),
            }
        }
        if page.items.len() >= q.limit {
            // Truncated only if anything at all follows; finding out costs at most one more
            // step, so look.
            page.truncated = has_more(client, &mut stack, q, &page, &mut examined).await?;
            return Ok(page);
        }
    }
    Ok(page)
}

/// Removes a temporary file that no upload has touched for [`TMP_STALE_SECS`]: what a gateway
/// that crashed mid-PUT left behind. Listings find them, so they are swept where they lie.
async fn remove_if_stale(client: &Client, dir: Ino, entry: &DirEntry) {
    let now = wire::Timestamp::now().secs;
    if entry.attr.kind != FileKind::File || now.saturating_sub(entry.attr.mtime.secs) < TMP_STALE_SECS {
        return;
    }
    match client.unlink(dir, &entry.name).await {
        Ok(()) => tracing::info!(
            "removed stale temporary file {} (inode {}) left by an interrupted upload",
            entry.name,
            entry.attr.ino
        ),
        Err(e) => tracing::debug!("could not remove stale temporary file {}: {e}", entry.name),
    }
}

/// Whether the walk would yield anything after the page's last item.
async fn has_more(
    client: &Client,
    stack: &mut Vec<Level>,
    q: &Query<'_>,
    page: &Page,
    examined: &mut usize,
) -> S3Result<bool> {
    let Some(last) = page.items.last() else { return Ok(false) };
    let after = last.key().to_string();
    let probe = Query { prefix: q.prefix, delimiter: q.delimiter, after: &after, limit: 1 };
    // Continue the same walk for one more item, without descending needlessly.
    while let Some(level) = stack.last_mut() {
        if *examined > ENTRIES_PER_PAGE_MAX {
            return Ok(true);
        }
        let Some(entry) = level.next(client, examined).await? else {
            stack.pop();
            continue;
        };
        if is_tmp(&entry.name) {
            continue;
        }
        let is_dir = entry.attr.kind == FileKind::Dir;
        if !is_dir && entry.attr.kind != FileKind::File {
            continue;
        }
        let key = format!("{}{}{}", level.key_prefix, entry.name, if is_dir { "/" } else { "" });
        if key.as_str() > probe.prefix && !key.starts_with(probe.prefix) && !probe.prefix.starts_with(key.as_str()) {
            return Ok(false);
        }
        if is_dir {
            if !key.starts_with(probe.prefix) && !probe.prefix.starts_with(key.as_str()) {
                continue;
            }
            if key.as_str() <= probe.after && !probe.after.starts_with(key.as_str()) {
                continue;
            }
            // Somewhere below may be a key; entering the directory tells.
            let next = Level::start(client, entry.attr.ino, key, &probe).await?;
            stack.push(next);
            continue;
        }
        if !key.starts_with(probe.prefix) || key.as_str() <= probe.after {
            continue;
        }
        if let Some(d) = probe.delimiter.filter(|d| !d.is_empty()) {
            if let Some(i) = key[probe.prefix.len()..].find(d) {
                let cp = &key[..probe.prefix.len() + i + d.len()];
                if cp <= probe.after {
                    continue;
                }
            }
        }
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_start_is_below_the_component() {
        assert_eq!(read_start("photos"), "photo");
        assert_eq!(read_start(""), "");
        assert_eq!(read_start("a"), "");
        assert!(read_start(&"x".repeat(300)).len() < 255);
        assert_eq!(first_component("a/b/c"), "a");
        assert_eq!(first_component("abc"), "abc");
    }
}
