//! Pagination: a checked [`PageRequest`] in, a [`Page`] out whose range is `None` when it is
//! empty, so "16-15 of 15" cannot be produced.

use serde::Serialize;

use super::error::StateError;

/// Largest page size.
pub const MAX_LIMIT: usize = 500;
/// Page size when the caller gives none.
pub const DEFAULT_LIMIT: usize = 15;

/// `limit` items starting at `offset` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    limit: usize,
    offset: usize,
}

impl PageRequest {
    /// `limit` must be 1..=[`MAX_LIMIT`]; any offset is accepted (past the end is an empty
    /// page, not an error).
    pub fn new(limit: usize, offset: usize) -> Result<PageRequest, StateError> {
        if limit == 0 || limit > MAX_LIMIT {
            return Err(StateError::InvalidPage {
                rule: "limit must be between 1 and 500",
            });
        }
        Ok(PageRequest { limit, offset })
    }

    pub fn limit(self) -> usize {
        self.limit
    }

    pub fn offset(self) -> usize {
        self.offset
    }

    /// Cuts `all` (already sorted) into this page.
    pub(crate) fn apply<T>(self, all: Vec<T>) -> Page<T> {
        let total = all.len();
        let items = all.into_iter().skip(self.offset).take(self.limit).collect();
        Page {
            items,
            total,
            offset: self.offset,
            limit: self.limit,
        }
    }
}

impl Default for PageRequest {
    fn default() -> Self {
        PageRequest {
            limit: DEFAULT_LIMIT,
            offset: 0,
        }
    }
}

/// One page of a sorted listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// How many items the whole listing has.
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
}

impl<T> Page<T> {
    /// 1-based inclusive `(first, last)` of the items on this page; `None` when it is empty.
    pub fn range(&self) -> Option<(usize, usize)> {
        (!self.items.is_empty()).then(|| (self.offset + 1, self.offset + self.items.len()))
    }

    /// A one-line summary such as `jobs 1-15 of 40` or `no jobs at offset 40 (40 in total)`.
    pub fn summary(&self, noun: &str) -> String {
        match self.range() {
            Some((first, last)) => format!("{noun} {first}-{last} of {}", self.total),
            None if self.total == 0 => format!("no {noun}"),
            None => format!(
                "no {noun} at offset {} ({} in total)",
                self.offset, self.total
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_at_the_edges() {
        let all: Vec<u32> = (0..15).collect();
        let page = |limit, offset| PageRequest::new(limit, offset).unwrap().apply(all.clone());
        assert_eq!(page(15, 0).range(), Some((1, 15)));
        assert_eq!(page(10, 10).range(), Some((11, 15)));
        assert_eq!(page(10, 14).range(), Some((15, 15)));
        assert_eq!(page(10, 15).range(), None);
        assert_eq!(
            page(10, 15).summary("jobs"),
            "no jobs at offset 15 (15 in total)"
        );
        assert_eq!(page(1, usize::MAX).range(), None);
        let empty = PageRequest::default().apply(Vec::<u32>::new());
        assert_eq!(empty.summary("jobs"), "no jobs");
        assert!(PageRequest::new(0, 0).is_err());
        assert!(PageRequest::new(501, 0).is_err());
    }
}
