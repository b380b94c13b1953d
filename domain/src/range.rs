//! Byte ranges over resource content and their `Content-Range` (`bytes a-b/total`).

use serde::Serialize;

use crate::{Error, ErrorCode};

/// A requested range: `offset` bytes skipped, then at most `limit` bytes (all the rest if none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ByteRange {
    offset: u64,
    limit: Option<u64>,
}

impl ByteRange {
    /// The largest `limit` the spec's ReadResourceRequest schema allows (10 MiB).
    pub const MAX_LIMIT: u64 = 10_485_760;

    /// The whole content.
    pub const WHOLE: ByteRange = ByteRange {
        offset: 0,
        limit: None,
    };

    /// A range from the request's `offset` and `limit`.
    ///
    /// # Errors
    /// E001 when `offset` is negative or `limit` is outside `1..=10485760`.
    pub fn new(offset: i64, limit: Option<i64>) -> Result<Self, Error> {
        let offset = u64::try_from(offset)
            .map_err(|_| Error::invalid(format!("offset must be 0 or more, got {offset}")))?;
        let limit = match limit {
            None => None,
            Some(l) if (1..=Self::MAX_LIMIT as i64).contains(&l) => Some(l as u64),
            Some(l) => {
                return Err(Error::invalid(format!(
                    "limit must be between 1 and {}, got {l}",
                    Self::MAX_LIMIT
                )));
            }
        };
        Ok(Self { offset, limit })
    }

    /// Bytes skipped.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The most bytes returned, if bounded.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// True when the range asks for the whole content.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.limit.is_none()
    }

    /// Where this range falls in content of `total` bytes.
    ///
    /// An offset at or past the end is not satisfiable, except offset 0 on empty content, which
    /// yields the empty slice (`bytes */0`).
    ///
    /// # Errors
    /// E007 when the offset is at or past the end of non-empty content.
    pub fn resolve(&self, total: u64) -> Result<Slice, Error> {
        if total == 0 && self.offset == 0 {
            return Ok(Slice {
                start: 0,
                end: 0,
                total: 0,
            });
        }
        if self.offset >= total {
            return Err(Error::new(
                ErrorCode::E007,
                format!(
                    "offset {} is beyond the end of the content ({total} bytes)",
                    self.offset
                ),
            ));
        }
        let available = total - self.offset;
        let len = self.limit.map_or(available, |l| l.min(available));
        Ok(Slice {
            start: self.offset,
            end: self.offset + len,
            total,
        })
    }
}

/// A satisfiable range over content of a known size: bytes `start..end` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    start: u64,
    end: u64,
    total: u64,
}

impl Slice {
    /// The first byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The whole content's size.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Number of bytes in the slice.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True for the empty slice of empty content.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// True when the slice covers all of the content.
    pub fn is_whole(&self) -> bool {
        self.start == 0 && self.end == self.total
    }

    /// The same slice ending at `end` instead, when `start < end < self.end()`; else unchanged.
    pub fn ending_at(&self, end: u64) -> Slice {
        if self.start < end && end < self.end {
            Slice { end, ..*self }
        } else {
            *self
        }
    }

    /// The bytes this slice selects from `content`, which must be `total` bytes long.
    pub fn apply<'a>(&self, content: &'a [u8]) -> &'a [u8] {
        debug_assert_eq!(content.len() as u64, self.total);
        // Both bounds are <= total == content.len(), which is a usize.
        &content[self.start as usize..self.end as usize]
    }

    /// The `Content-Range` value: `bytes start-last/total`, or `bytes */0` for empty content.
    pub fn content_range(&self) -> ContentRange {
        ContentRange(if self.is_empty() {
            format!("bytes */{}", self.total)
        } else {
            format!("bytes {}-{}/{}", self.start, self.end - 1, self.total)
        })
    }
}

/// A `Content-Range` header value as RFC 9110 writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ContentRange(String);

impl ContentRange {
    /// The header value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn bounds_of_the_request_schema() {
        assert!(ByteRange::new(-1, None).is_err());
        assert!(ByteRange::new(0, Some(0)).is_err());
        assert!(ByteRange::new(0, Some(10_485_761)).is_err());
        assert!(ByteRange::new(0, Some(10_485_760)).is_ok());
        assert_eq!(
            ByteRange::new(0, Some(-5)).unwrap_err().code(),
            ErrorCode::E001
        );
    }

    #[test]
    fn content_range_is_inclusive() {
        let s = ByteRange::new(2, Some(3)).unwrap().resolve(10).unwrap();
        assert_eq!(s.content_range().as_str(), "bytes 2-4/10");
        let s = ByteRange::new(8, Some(100)).unwrap().resolve(10).unwrap();
        assert_eq!(s.content_range().as_str(), "bytes 8-9/10");
        let s = ByteRange::WHOLE.resolve(0).unwrap();
        assert_eq!(s.content_range().as_str(), "bytes */0");
    }

    #[test]
    fn offsets_at_or_past_the_end_are_e007() {
        assert_eq!(
            ByteRange::new(10, None)
                .unwrap()
                .resolve(10)
                .unwrap_err()
                .code(),
            ErrorCode::E007
        );
        assert_eq!(
            ByteRange::new(1, None)
                .unwrap()
                .resolve(0)
                .unwrap_err()
                .code(),
            ErrorCode::E007
        );
    }

    proptest! {
        // traces: REQ-071-033, REQ-071-034, REQ-071-035 — slicing returns exactly the bytes asked for.
        #[test]
        fn slicing_returns_exactly_the_requested_bytes(
            content in proptest::collection::vec(any::<u8>(), 0..300),
            offset in 0i64..400,
            limit in proptest::option::of(1i64..400),
        ) {
            let range = ByteRange::new(offset, limit).unwrap();
            match range.resolve(content.len() as u64) {
                Ok(slice) => {
                    let got = slice.apply(&content);
                    let start = offset as usize;
                    let want: Vec<u8> = content.iter().skip(start).take(limit.map_or(usize::MAX, |l| l as usize)).copied().collect();
                    prop_assert_eq!(got, want.as_slice());
                    if !content.is_empty() {
                        let expected = format!("bytes {}-{}/{}", start, start + got.len() - 1, content.len());
                        let got_range = slice.content_range();
                        prop_assert_eq!(got_range.as_str(), expected.as_str());
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e.code(), ErrorCode::E007);
                    prop_assert!(offset as usize >= content.len() && !(content.is_empty() && offset == 0));
                }
            }
        }

        #[test]
        fn construction_never_panics(offset in any::<i64>(), limit in proptest::option::of(any::<i64>()), total in any::<u64>()) {
            if let Ok(range) = ByteRange::new(offset, limit)
                && let Ok(slice) = range.resolve(total)
            {
                prop_assert!(slice.end() <= total && slice.start() <= slice.end());
            }
        }
    }
}
