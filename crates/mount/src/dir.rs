//! Open directories: a listing fetched from the metadata service page by page as the kernel
//! reads on, so that a 100,000-entry directory starts listing after one round trip and never
//! needs one giant reply.
//!
//! The kernel addresses directory positions by the opaque offsets we hand out with each entry.
//! Offsets here are positions in the listing (0 = ".", 1 = "..", 2.. = entries in name order),
//! which stay valid for the life of the handle, so telldir/seekdir work; the listing is read
//! again from the start when the kernel rewinds to offset 0 (rewinddir must see changes).

use wire::DirEntry;

/// Entries asked for per `ReadDir` call (the metadata service caps it as well).
pub const READDIR_PAGE_ENTRIES: u32 = 1024;

/// The listing of one open directory.
#[derive(Debug, Default)]
pub struct DirListing {
    /// Entries fetched so far, in name order.
    entries: Vec<DirEntry>,
    /// Whether the metadata service said more entries follow the last fetched one.
    more: bool,
    /// Whether the first page has been asked for.
    started: bool,
}

/// What a position in a listing holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Slot<'a> {
    Dot,
    DotDot,
    Entry(&'a DirEntry),
    End,
}

impl DirListing {
    /// Forgets what was fetched, so the next read lists the directory afresh.
    pub fn rewind(&mut self) {
        *self = DirListing::default();
    }

    /// If position `offset` is not fetched yet but may exist, the cursor to fetch the next page
    /// from (entries strictly after this name).
    pub fn next_page_cursor(&self, offset: u64) -> Option<String> {
        let index = offset.checked_sub(2)?;
        if (index as usize) < self.entries.len() {
            return None;
        }
        if !self.started {
            return Some(String::new());
        }
        if !self.more {
            return None;
        }
        self.entries.last().map(|e| e.name.clone())
    }

    /// Adds a fetched page.
    pub fn push_page(&mut self, page: Vec<DirEntry>, more: bool) {
        self.started = true;
        // An empty page that claims more would make the reader loop forever.
        self.more = more && !page.is_empty();
        self.entries.extend(page);
    }

    /// What position `offset` holds, given the pages fetched so far.
    pub fn slot(&self, offset: u64) -> Slot<'_> {
        match offset {
            0 => Slot::Dot,
            1 => Slot::DotDot,
            _ => match self.entries.get((offset - 2) as usize) {
                Some(e) => Slot::Entry(e),
                None => Slot::End,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{Attr, FileKind};

    fn entry(name: &str) -> DirEntry {
        DirEntry { name: name.to_string(), attr: Attr { ino: 7, ..crate::attr::test_attr(FileKind::File) } }
    }

    #[test]
    fn pages_are_fetched_as_the_reader_advances() {
        let mut l = DirListing::default();
        assert_eq!(l.slot(0), Slot::Dot);
        assert_eq!(l.slot(1), Slot::DotDot);
        assert_eq!(l.next_page_cursor(0), None, "dots need no fetch");
        assert_eq!(l.next_page_cursor(2), Some(String::new()));
        l.push_page(vec![entry("a"), entry("b")], true);
        assert_eq!(l.next_page_cursor(3), None);
        assert!(matches!(l.slot(3), Slot::Entry(e) if e.name == "b"));
        assert_eq!(l.next_page_cursor(4), Some("b".to_string()));
        l.push_page(vec![entry("c")], false);
        assert!(matches!(l.slot(4), Slot::Entry(e) if e.name == "c"));
        assert_eq!(l.next_page_cursor(5), None);
        assert_eq!(l.slot(5), Slot::End);
        l.rewind();
        assert_eq!(l.next_page_cursor(2), Some(String::new()));
    }

    #[test]
    fn an_empty_page_ends_the_listing() {
        let mut l = DirListing::default();
        l.push_page(Vec::new(), true);
        assert_eq!(l.next_page_cursor(2), None);
        assert_eq!(l.slot(2), Slot::End);
    }
}
