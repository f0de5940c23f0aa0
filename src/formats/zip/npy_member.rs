//! `.npy` members: their headers, read once (a stored member's kept with its CRC-32 so that its
//! array is read in place), and the extents reading their arrays.

use std::sync::Arc;

use super::{MemberData, Payload, ZipIndex, STORED, ZIP_FAULTS};
use crate::batch::{Dest, Extent};
use crate::codec::{crc32_after, inflate_prefix, NpyExpect, Pipeline, Step};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::npy::{self, NpyHeader};

/// A stored `.npy` member's header, parsed once: its array data can then be read straight into
/// a batch, the member's CRC-32 still checked (continued from the header's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyLayout {
    /// The member's NPY header; its `data_offset` counts from the member's first data byte.
    pub header: NpyHeader,
    /// CRC-32 of the member's bytes before the array data.
    pub header_crc: u32,
}

impl MemberData {
    /// The extent reading this `.npy` member's array (checked against `expect`) into output
    /// `out` at `dst`. Straight from the file into the output when the member is stored, its
    /// header known (`layout`, see [`ZipIndex::npy_layout`]) and its data needs no reordering:
    /// no staging copy; else the whole member through the NPY stream step.
    pub fn npy_extent(
        &self,
        layout: Option<&NpyLayout>,
        expect: &Arc<NpyExpect>,
        verify_crc: bool,
        out: u32,
        dst: usize,
        file: u32,
    ) -> Result<Extent> {
        if let Some(l) = layout.filter(|_| self.is_stored()) {
            let h = &l.header;
            expect.check(h)?;
            let in_place = (expect.keep_layout || !h.needs_transpose())
                && (h.data_offset + h.data_len) as u64 == self.size;
            if in_place {
                let steps = if verify_crc {
                    vec![Step::Crc32After {
                        prefix: l.header_crc,
                        want: self.crc32,
                    }]
                } else {
                    Vec::new()
                };
                return Ok(Extent {
                    file,
                    offset: self.data_start + h.data_offset as u64,
                    stored_len: h.data_len,
                    pipeline: Pipeline::new(steps),
                    decoded_len: h.data_len,
                    out,
                    dest: Dest::At(dst),
                });
            }
        }
        Ok(self.extent(file, &Payload::Npy(expect.clone()), verify_crc, out, dst))
    }
}

impl ZipIndex {
    /// The header of stored `.npy` member `i` with its CRC-32 (see [`NpyLayout`]), read once;
    /// `None` for a deflated member or one that is not NPY.
    pub fn npy_layout(&self, i: usize) -> Result<Option<Arc<NpyLayout>>> {
        let m = &self.members[i];
        if m.method != STORED {
            return Ok(None);
        }
        if let Some(l) = m.npy_layout.load_full() {
            return Ok(Some(l));
        }
        self.npy_header(i)?;
        Ok(m.npy_layout.load_full())
    }

    /// The NPY header at the start of member `i`, or `None` if the member is not NPY. A
    /// stored member's header is kept (see [`ZipIndex::npy_layout`]).
    pub fn npy_header(&self, i: usize) -> Result<Option<NpyHeader>> {
        if let Some(l) = self.members[i].npy_layout.load_full() {
            return Ok(Some(l.header.clone()));
        }
        self.check_readable(i)?;
        let m = &self.members[i];
        let at = self.member_location(i);
        let start = self.data_start(i)?;
        // Most headers are 128 bytes: probe a little, and read more only if the header says so.
        let mut want = 512.min(m.size as usize);
        loop {
            let prefix = self.member_prefix(i, start, want)?;
            if !prefix.starts_with(npy::MAGIC) {
                return Ok(None);
            }
            if prefix.len() < 12 {
                return Err(Error::new(
                    ErrorKind::NpyFormat,
                    at,
                    "NPY header runs past the end of the member",
                ));
            }
            let end = npy::header_end(&prefix, m.size as usize, &at, &self.limits.npy)?;
            if end <= prefix.len() {
                let header = npy::parse_header(&prefix, m.size as usize, &at, &self.limits.npy)?;
                if m.method == STORED {
                    m.npy_layout.store(Some(Arc::new(NpyLayout {
                        header_crc: crc32_after(0, &prefix[..header.data_offset]),
                        header: header.clone(),
                    })));
                }
                return Ok(Some(header));
            }
            // The member (or its deflate stream, which may end before the member's declared
            // size) holds no more than `prefix`: a header longer than that runs past its end.
            if want >= m.size as usize || prefix.len() < want {
                return Err(Error::new(
                    ErrorKind::NpyFormat,
                    at,
                    "NPY header runs past the end of the member",
                ));
            }
            want = end;
        }
    }

    /// The first `want` decoded bytes of member `i` (whose data starts at `start`).
    fn member_prefix(&self, i: usize, start: u64, want: usize) -> Result<Vec<u8>> {
        let m = &self.members[i];
        let at = || self.member_location(i);
        if m.method == STORED {
            if let Some(kept) = self.take_prefix(i, want) {
                return Ok(kept);
            }
            let mut buf = vec![0u8; want];
            self.source()
                .read_at(start, &mut buf)
                .map_err(|e| e.as_damage(ErrorKind::BadZip).at(at()))?;
            return Ok(buf);
        }
        // Even incompressible data costs a deflate stream at most ~1.13x its size (fixed
        // Huffman codes); never read past the member.
        let take = (want as u64 + want as u64 / 4 + 4096).min(m.compressed_size) as usize;
        let mut z = vec![0u8; take];
        self.source()
            .read_at(start, &mut z)
            .map_err(|e| e.as_damage(ErrorKind::BadZip).at(at()))?;
        inflate_prefix(&z, want).map_err(|e| ZIP_FAULTS.error(e).at(at()))
    }
}
