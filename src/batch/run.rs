//! Running plans: the extents of one index's plan, or of several indexes' plans merged into
//! one (a batch over shards), executed together on the pool; then each plan's after-steps
//! ([`After`]), and a check that no file read changed meanwhile.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::exec::{self, ScatterFrom};
use super::parts::{self, PartFiles};
use super::{After, Index, Plan, Rows, Tag};
use crate::error::{Error, ErrorKind, Result};
use crate::source::Files;

/// One index's plan for its rows of a batch, and where those rows land (`None`: in place).
pub(crate) struct Planned<'a> {
    pub index: &'a dyn Index,
    pub rows: &'a Rows,
    pub at: Option<&'a [usize]>,
    pub plan: Plan,
}

impl Planned<'_> {
    /// The files this plan's extents read: its own, or its index's.
    fn files(&self) -> &dyn Files {
        match &self.plan.files {
            Some(f) => &**f,
            None => self.index.files(),
        }
    }
}

/// Runs the plans of a batch (one, or one per part) as one ([`execute`]), then checks that no
/// file read changed meanwhile ([`Files::verify`]).
pub(crate) fn run_plans(
    mut planned: Vec<Planned<'_>>,
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    let result = execute(&mut planned, arrays, outs);
    let sources: Vec<&dyn Files> = planned.iter().map(Planned::files).collect();
    verified(&sources, result)
}

/// Sources checked one after another at most; more (a batch over many shards) are checked in
/// parallel on the pool, as their reads were (each check is a `stat` of a file).
const VERIFIED_IN_SERIES: usize = 8;

/// `result`, unless a file the batch read changed under it: then that error, which is the
/// cause of any other (bytes of another file read against this one's metadata).
pub(crate) fn verified(sources: &[&dyn Files], result: Result<()>) -> Result<()> {
    if sources.len() <= VERIFIED_IN_SERIES {
        sources.iter().try_for_each(|s| s.verify())?;
    } else {
        crate::batch::pool::try_map(sources, |_, s| s.verify())?;
    }
    result
}

/// An [`After::Keep`] of part `part`, moved to the merged plan.
struct Kept {
    part: usize,
    extent: usize,
    len: usize,
    out: usize,
    pieces: Vec<exec::Piece>,
    key: Tag,
}

/// Runs the plans of a batch's parts as one: each part's extents and after-steps moved to its
/// rows' places (a plan in place is left as planned), its files renumbered when there are
/// several plans, everything executed together, then each part's index keeps and fills its
/// own.
fn execute(planned: &mut [Planned<'_>], arrays: &[usize], outs: &mut [&mut [u8]]) -> Result<()> {
    let Some(first) = planned.first() else {
        return Ok(());
    };
    let faults = first.index.faults();
    let row_bytes: Vec<usize> = arrays
        .iter()
        .map(|&a| first.index.arrays()[a].sample_bytes())
        .collect();
    let merged = planned.len() > 1 || first.at.is_some();
    // The plans' extents, labels and after-steps, taken out; their files stay, borrowed by
    // the run.
    let taken: Vec<(Vec<super::Extent>, Vec<Tag>, Vec<After>)> = planned
        .iter_mut()
        .map(|p| {
            (
                std::mem::take(&mut p.plan.extents),
                std::mem::take(&mut p.plan.tags),
                std::mem::take(&mut p.plan.after),
            )
        })
        .collect();
    let planned: &[Planned<'_>] = planned;
    let mut extents = Vec::new();
    let mut owners: Vec<(usize, Tag)> = Vec::new();
    let mut kept: Vec<Kept> = Vec::new();
    let mut copies: Vec<(usize, Arc<[u8]>, Vec<exec::Piece>)> = Vec::new();
    let mut fills: Vec<(usize, usize, Tag)> = Vec::new();
    let mut files = PartFiles::default();
    for (p, (planned_extents, tags, after)) in taken.into_iter().enumerate() {
        let part = &planned[p];
        let base = extents.len();
        let into_buffer: HashSet<usize> = after
            .iter()
            .filter_map(|a| match a {
                After::Keep { extent, .. } => Some(*extent),
                _ => None,
            })
            .collect();
        for (i, e) in planned_extents.into_iter().enumerate() {
            extents.push(if merged {
                let file = files.number(p, e.file, part.files())?;
                let placed = part.at.is_some() && !into_buffer.contains(&i);
                parts::place_extent(e, file, &row_bytes, part.at.unwrap_or(&[]), placed)?
            } else {
                e
            });
        }
        owners.extend(tags.into_iter().map(|t| (p, t)));
        let place = |out: usize, pieces: Vec<exec::Piece>| -> Result<Vec<exec::Piece>> {
            match part.at {
                None => Ok(pieces),
                Some(at) => parts::place_pieces(pieces, row_bytes[out], at),
            }
        };
        for a in after {
            match a {
                After::Copy { out, bytes, pieces } => {
                    copies.push((out, bytes, place(out, pieces)?));
                }
                After::Keep {
                    extent,
                    len,
                    out,
                    pieces,
                    key,
                } => kept.push(Kept {
                    part: p,
                    extent: base + extent,
                    len,
                    out,
                    pieces: place(out, pieces)?,
                    key,
                }),
                After::Fill { out, tag } => fills.push((p, out, tag)),
            }
        }
    }
    // Keep buffers are allocated as the index keeps them (one allocation, no copy after).
    let mut buffers: Vec<Arc<[u8]>> = kept
        .iter()
        .map(|k| std::iter::repeat_n(0u8, k.len).collect())
        .collect();
    for (n, k) in kept.iter().enumerate() {
        extents
            .get_mut(k.extent)
            .ok_or_else(|| internal("a kept buffer for an extent that does not exist"))?
            .out = u32::try_from(outs.len() + n).map_err(|_| internal("too many outputs"))?;
    }
    {
        let mut all: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut **o).collect();
        for b in &mut buffers {
            all.push(Arc::get_mut(b).ok_or_else(|| internal("a kept buffer is shared"))?);
        }
        let source: &dyn Files = if merged { &files } else { planned[0].files() };
        exec::execute(source, &extents, &mut all, faults).map_err(|f| {
            let (p, tag) = owners[f.extent];
            planned[p].index.locate(tag, f.error)
        })?;
    }
    // Bytes decoded before and the kept buffers' pieces, output by output.
    let mut by_out: BTreeMap<usize, Vec<ScatterFrom<'_>>> = BTreeMap::new();
    for (out, bytes, pieces) in &copies {
        by_out.entry(*out).or_default().push((bytes, pieces));
    }
    for (k, b) in kept.iter().zip(&buffers) {
        by_out.entry(k.out).or_default().push((b, &k.pieces));
    }
    for (out, from) in by_out {
        exec::scatter(&from, outs[out])?;
    }
    for (k, b) in kept.into_iter().zip(buffers) {
        planned[k.part].index.keep(k.key, b);
    }
    for (p, out, tag) in fills {
        let part = &planned[p];
        match part.at {
            None => part.index.fill(part.rows, tag, outs[out])?,
            Some(at) => fill_placed(part.index, part.rows, at, tag, row_bytes[out], outs[out])?,
        }
    }
    Ok(())
}

fn internal(msg: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        "",
        format!("internal planning error: {msg}"),
    )
}

/// A part's fill: its rows gathered from their places in the batch, filled by its index
/// (which may read what the executor wrote, as stand-ins for images that did not decode), and
/// put back.
fn fill_placed(
    index: &dyn Index,
    rows: &Rows,
    at: &[usize],
    tag: Tag,
    row_bytes: usize,
    out: &mut [u8],
) -> Result<()> {
    let mut mine = vec![0u8; rows.len() * row_bytes];
    for (j, &r) in at.iter().enumerate() {
        mine[j * row_bytes..(j + 1) * row_bytes]
            .copy_from_slice(&out[r * row_bytes..(r + 1) * row_bytes]);
    }
    index.fill(rows, tag, &mut mine)?;
    for (j, &r) in at.iter().enumerate() {
        out[r * row_bytes..(r + 1) * row_bytes]
            .copy_from_slice(&mine[j * row_bytes..(j + 1) * row_bytes]);
    }
    Ok(())
}
