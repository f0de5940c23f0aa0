//! Batches read from several indexes at once: the shards of a [`Shards`](super::shards::Shards)
//! index. Each part's own index plans its rows as if they were a batch of their own; the plans
//! are then merged into one, every write moved to the place its rows hold in the batch, and
//! run by the one executor, so shards are read in parallel with each other.

use std::collections::HashMap;

use super::exec::{Dest, Extent, Piece};
use super::Rows;
use crate::error::{Error, ErrorKind, Result};
use crate::source::{Coalesce, Files};

/// Rows of one index read as part of a batch: a shard's rows, and where each lands.
pub(super) struct Part {
    /// Which part of the whole the rows are read from (a shard's number).
    pub part: usize,
    /// Its rows, in the order they appear in the batch.
    pub rows: Rows,
    /// For each of `rows`, its position in the batch.
    pub at: Vec<usize>,
}

fn internal(msg: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::Internal,
        "",
        format!("internal planning error: {}", msg.into()),
    )
}

/// Appends the pieces that move a write of `len` bytes at `dst` of a part's output (its rows
/// one after another, `row_bytes` each) to where those rows sit in the batch: row `j` of the
/// part is row `at[j]` of the batch. `src` is where the write's bytes start in the decoded
/// bytes. Runs that stay contiguous in both are merged into one piece.
pub(crate) fn place(
    src: usize,
    dst: usize,
    len: usize,
    row_bytes: usize,
    at: &[usize],
    out: &mut Vec<Piece>,
) -> Result<()> {
    if len == 0 || row_bytes == 0 {
        return Ok(());
    }
    let end = dst
        .checked_add(len)
        .ok_or_else(|| internal("a write past the address space"))?;
    let (mut d, mut s) = (dst, src);
    while d < end {
        let (j, within) = (d / row_bytes, d % row_bytes);
        let take = (row_bytes - within).min(end - d);
        let row = *at
            .get(j)
            .ok_or_else(|| internal(format!("a write to row {j} of {} rows", at.len())))?;
        let to = row * row_bytes + within;
        match out.last_mut() {
            Some(p) if p.src + p.len == s && p.dst + p.len == to => p.len += take,
            _ => out.push(Piece {
                src: s,
                dst: to,
                len: take,
            }),
        }
        d += take;
        s += take;
    }
    Ok(())
}

/// `dest` (of an extent decoding `decoded_len` bytes) moved by [`place`].
pub(crate) fn place_dest(
    dest: Dest,
    decoded_len: usize,
    row_bytes: usize,
    at: &[usize],
) -> Result<Dest> {
    let mut pieces = Vec::new();
    match dest {
        Dest::At(dst) => {
            place(0, dst, decoded_len, row_bytes, at, &mut pieces)?;
            if let [one] = pieces[..] {
                if one.src == 0 && one.len == decoded_len {
                    return Ok(Dest::At(one.dst));
                }
            }
            if pieces.is_empty() {
                return Ok(Dest::At(0));
            }
        }
        Dest::Scatter(from) => {
            for p in from {
                place(p.src, p.dst, p.len, row_bytes, at, &mut pieces)?;
            }
        }
    }
    Ok(Dest::Scatter(pieces))
}

/// `pieces` (of an output of a part's rows) moved by [`place`].
pub(crate) fn place_pieces(
    pieces: Vec<Piece>,
    row_bytes: usize,
    at: &[usize],
) -> Result<Vec<Piece>> {
    let mut out = Vec::with_capacity(pieces.len());
    for p in pieces {
        place(p.src, p.dst, p.len, row_bytes, at, &mut out)?;
    }
    Ok(out)
}

/// The files of every part of a batch, numbered anew in the order the merged plan first
/// reads them: file `n` is file `files[n].1` of `files[n].0`.
#[derive(Default)]
pub(crate) struct PartFiles<'a> {
    files: Vec<(&'a dyn Files, u32)>,
    numbers: HashMap<(usize, u32), u32>,
    coalesce: Option<Coalesce>,
}

impl<'a> PartFiles<'a> {
    /// The merged plan's number for `file` of part `part`, whose plan reads `source`.
    pub(crate) fn number(&mut self, part: usize, file: u32, source: &'a dyn Files) -> Result<u32> {
        if let Some(&n) = self.numbers.get(&(part, file)) {
            return Ok(n);
        }
        if self.files.is_empty() {
            self.coalesce = source.coalesce();
        }
        let n =
            u32::try_from(self.files.len()).map_err(|_| internal("too many files in one batch"))?;
        self.files.push((source, file));
        self.numbers.insert((part, file), n);
        Ok(n)
    }
}

impl Files for PartFiles<'_> {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        match self.files.get(file as usize) {
            Some((source, f)) => source.read_at(*f, offset, buf),
            None => Err(internal(format!("file {file} of a merged plan"))),
        }
    }

    fn name(&self, file: u32) -> String {
        match self.files.get(file as usize) {
            Some((source, f)) => source.name(*f),
            None => format!("<file {file}>"),
        }
    }

    fn coalesce(&self) -> Option<Coalesce> {
        self.coalesce
    }
}

/// Moves `extent` of a part to the batch: its file renumbered and, when `placed`, its writes
/// moved to its rows' places (an extent decoding into a kept buffer is not: that buffer's
/// pieces are moved instead).
pub(crate) fn place_extent(
    mut extent: Extent,
    file: u32,
    row_bytes: &[usize],
    at: &[usize],
    placed: bool,
) -> Result<Extent> {
    extent.file = file;
    if placed {
        let rb = *row_bytes
            .get(extent.out as usize)
            .ok_or_else(|| internal(format!("output {} does not exist", extent.out)))?;
        extent.dest = place_dest(
            std::mem::replace(&mut extent.dest, Dest::At(0)),
            extent.decoded_len,
            rb,
            at,
        )?;
    }
    Ok(extent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_rows_splits_where_their_places_part() {
        // Rows 0,1,2 of a part (4 bytes each) sit at batch rows 5, 6 and 1.
        let mut out = Vec::new();
        place(0, 0, 12, 4, &[5, 6, 1], &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                Piece {
                    src: 0,
                    dst: 20,
                    len: 8
                },
                Piece {
                    src: 8,
                    dst: 4,
                    len: 4
                }
            ]
        );
    }

    #[test]
    fn a_write_inside_one_row_keeps_its_offset() {
        let mut out = Vec::new();
        place(3, 6, 2, 4, &[0, 9], &mut out).unwrap();
        assert_eq!(
            out,
            vec![Piece {
                src: 3,
                dst: 38,
                len: 2
            }]
        );
    }

    #[test]
    fn a_contiguous_place_stays_one_write() {
        let d = place_dest(Dest::At(4), 8, 4, &[0, 3, 4]).unwrap();
        assert_eq!(d, Dest::At(12));
        let d = place_dest(Dest::At(0), 8, 4, &[2, 0]).unwrap();
        assert_eq!(
            d,
            Dest::Scatter(vec![
                Piece {
                    src: 0,
                    dst: 8,
                    len: 4
                },
                Piece {
                    src: 4,
                    dst: 0,
                    len: 4
                }
            ])
        );
    }

    #[test]
    fn a_write_past_the_part_is_an_internal_error() {
        let mut out = Vec::new();
        let e = place(0, 4, 8, 4, &[0, 1], &mut out).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
    }
}
