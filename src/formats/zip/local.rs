//! Local headers: where a member's data starts, read and checked the first time the member is
//! read.

use std::sync::atomic::Ordering;

use super::{bad, ZipIndex, LOCAL_HEADER_LEN};
use crate::error::{ErrorKind, Result};

const LOCAL_SIGNATURE: u32 = 0x0403_4b50;

impl ZipIndex {
    /// Where member `i`'s data starts, reading and checking its local header the first time.
    ///
    /// The central directory is the authority for the member's method, sizes, CRC-32 and
    /// encryption, as zipfile and unzip take it: the local header's copies of those fields (and
    /// its ZIP64 extra field) are not compared, since writers leave them stale or zero (data
    /// descriptors) and a damaged copy there does not touch the data. What the local header
    /// must get right is its signature and the member's name; its name and extra lengths place
    /// the data, which must then lie before the next member (overlapping members are refused)
    /// and whose CRC-32 is checked against the directory's when it is read.
    pub fn data_start(&self, i: usize) -> Result<u64> {
        let m = &self.members[i];
        let known = m.data_start.load(Ordering::Relaxed);
        if known != 0 {
            return Ok(known - 1);
        }
        let at = || self.member_location(i);
        let fixed_end = m.header_offset + LOCAL_HEADER_LEN as u64;
        if fixed_end > m.end_limit {
            return Err(bad(&at(), "local header overlaps the next member"));
        }
        let mut h = [0u8; LOCAL_HEADER_LEN];
        self.source()
            .read_at(m.header_offset, &mut h)
            .map_err(|e| e.as_damage(ErrorKind::BadZip).at(at()))?;
        // At most the name the directory gives, within the member's room; a wrong one is
        // reported by `check_local` after the signature and lengths.
        let name_len = m.name_raw.len().min((m.end_limit - fixed_end) as usize);
        let mut name = vec![0u8; name_len];
        self.source()
            .read_at(fixed_end, &mut name)
            .map_err(|e| e.as_damage(ErrorKind::BadZip).at(at()))?;
        let data_start = self.check_local(i, &h, &name)?;
        m.data_start.store(data_start + 1, Ordering::Relaxed);
        Ok(data_start)
    }

    /// Checks member `i`'s local header (`h`, its fixed 30 bytes, and `name`, the bytes after
    /// them where its name must be) and says where its data starts.
    fn check_local(&self, i: usize, h: &[u8], name: &[u8]) -> Result<u64> {
        let m = &self.members[i];
        let at = || self.member_location(i);
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        if u32_at(0) != LOCAL_SIGNATURE {
            return Err(bad(
                &at(),
                format!("no local header at offset {}", m.header_offset),
            ));
        }
        let (name_len, extra_len) = (usize::from(u16_at(26)), usize::from(u16_at(28)));
        let fixed_end = m.header_offset + LOCAL_HEADER_LEN as u64;
        let data_start = fixed_end + (name_len + extra_len) as u64;
        if name_len != m.name_raw.len() || data_start > m.end_limit {
            return Err(bad(
                &at(),
                "local header disagrees with the central directory on the name",
            ));
        }
        if *name != *m.name_raw {
            return Err(bad(
                &at(),
                format!("local header names {:?}", String::from_utf8_lossy(name)),
            ));
        }
        if data_start
            .checked_add(m.compressed_size)
            .is_none_or(|end| end > m.end_limit)
        {
            return Err(bad(
                &at(),
                "member data overlaps the next member or the central directory",
            ));
        }
        Ok(data_start)
    }

    /// Reads the local headers of those of `members` not read yet, for a source whose every
    /// read is a round trip (object storage): the headers' ranges merged as the source merges
    /// a batch's reads, and fetched together. With `prefix > 0`, the first `prefix` bytes of
    /// each stored member's data come along and are kept for [`ZipIndex::npy_header`] (the
    /// NPY header of a `.npy` member). Others read each header when its member is first read.
    /// A header that does not check out is left for [`ZipIndex::data_start`] to report.
    pub fn prelocate(&self, members: &[usize], prefix: usize) {
        let Some(c) = self.source().coalesce() else {
            return;
        };
        let mut todo: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| self.members[i].data_start.load(Ordering::Relaxed) == 0)
            .collect();
        todo.sort_unstable_by_key(|&i| self.members[i].header_offset);
        todo.dedup();
        // Each member's range: its fixed header and name, room for a short extra field, and
        // the data prefix wanted; never past the member's room.
        let span = |i: usize| {
            let m = &self.members[i];
            let want =
                LOCAL_HEADER_LEN + m.name_raw.len() + if prefix > 0 { 64 + prefix } else { 0 };
            (
                m.header_offset,
                (want as u64).min(m.end_limit - m.header_offset),
            )
        };
        let mut groups: Vec<(u64, u64, Vec<usize>)> = Vec::new();
        for &i in &todo {
            let (start, len) = span(i);
            match groups.last_mut() {
                Some((s, e, g)) if start <= *e + c.gap && start + len - *s <= c.max_len => {
                    *e = (*e).max(start + len);
                    g.push(i);
                }
                _ => groups.push((start, start + len, vec![i])),
            }
        }
        let ranges: Vec<(u64, usize)> = groups
            .iter()
            .map(|(s, e, _)| (*s, (e - s) as usize))
            .collect();
        for ((start, _, group), got) in groups.iter().zip(self.source().read_ranges(&ranges)) {
            let Ok(bytes) = got else { continue };
            for &i in group {
                let m = &self.members[i];
                let at = (m.header_offset - start) as usize;
                let fixed = LOCAL_HEADER_LEN + m.name_raw.len();
                let Some(head) = bytes.get(at..at + fixed) else {
                    continue;
                };
                let (h, name) = head.split_at(LOCAL_HEADER_LEN);
                let Ok(data_start) = self.check_local(i, h, name) else {
                    continue;
                };
                m.data_start.store(data_start + 1, Ordering::Relaxed);
                if prefix > 0 && m.method == super::STORED {
                    let from = (data_start - start) as usize;
                    let want = prefix.min(m.size as usize);
                    if let Some(p) = bytes.get(from..from + want) {
                        self.keep_prefix(i, bytes.slice(from..from + p.len()));
                    }
                }
            }
        }
    }
}
