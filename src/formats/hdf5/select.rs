//! Which datasets a reader serves and how each is read: the selection's checks, the common
//! sample count, and per dataset the read path (pread + decode with the filters packread runs,
//! libhdf5's own read, or nothing) with its tiling, computed once at open.

use std::collections::HashMap;

use super::handle::h5err;
use super::meta::{DatasetMeta, Layout};
use super::Hdf5Dataset;
use crate::batch::tiling::Tiling;
use crate::codec::{ChunkDecoder, FilterSpec};
use crate::error::{Error, ErrorKind, Result};

/// Which datasets a reader serves.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every dataset whose first dimension is the file's common sample count.
    All,
    /// These, by path.
    Names(Vec<String>),
}

impl Selection {
    /// An explicit list names at least one dataset, each once.
    pub(super) fn check(&self) -> Result<()> {
        let Selection::Names(names) = self else {
            return Ok(());
        };
        if names.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "datasets= is an empty list: name at least one dataset (None reads them all)",
            ));
        }
        let mut seen: Vec<String> = names.iter().map(|n| normalize(n)).collect();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                format!("datasets= names {:?} more than once", w[0]),
            ));
        }
        Ok(())
    }
}

/// How a dataset's samples are read.
#[derive(Debug)]
pub(super) enum ReadPath {
    /// One block at this file offset.
    Contiguous(u64),
    /// Never written: every sample is the fill value.
    Fill,
    /// Chunks decoded by packread.
    Chunked { decoder: ChunkDecoder },
    /// libhdf5 reads it; the reason is kept for `info`.
    Library(String),
    /// Nobody can: the error to raise when it is read.
    Unreadable(String),
}

pub(super) fn normalize(name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{name}")
    }
}

/// The datasets a selection keeps, the sample count, and what was left out (with why).
pub(super) type Selected = (Vec<Hdf5Dataset>, usize, Vec<(String, String)>);

/// Keeps the datasets a selection asks for, checks they share the sample count, and decides
/// how each is read.
pub(super) fn select(
    metas: Vec<DatasetMeta>,
    selection: &Selection,
    location: &str,
) -> Result<Selected> {
    let mut skipped = Vec::new();
    let explicit = matches!(selection, Selection::Names(_));
    let mut usable = Vec::new();
    for m in metas {
        let at = format!("{location}:{}", m.name);
        let problem = if m.shape.is_empty() {
            Some("is a scalar (no first axis to index)".to_string())
        } else if m.vlen.is_some() && m.shape.len() != 1 {
            Some("variable-length data of rank > 1 is not supported".to_string())
        } else {
            m.dtype_problem.clone()
        };
        match problem {
            Some(why) if explicit => return Err(Error::new(ErrorKind::Unsupported, at, why)),
            Some(why) => skipped.push((m.name.clone(), why)),
            None => usable.push(m),
        }
    }
    let samples = if explicit {
        let first = usable.first().map_or(0, |m| m.shape[0]);
        if let Some(m) = usable.iter().find(|m| m.shape[0] != first) {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                format!("{location}:{}", m.name),
                format!(
                    "has {} samples, but {} has {first}",
                    m.shape[0], usable[0].name
                ),
            ));
        }
        first
    } else {
        // The most common first dimension (the larger on a tie).
        let mut counts: HashMap<usize, usize> = HashMap::new();
        for m in &usable {
            *counts.entry(m.shape[0]).or_default() += 1;
        }
        let best = counts
            .into_iter()
            .max_by_key(|&(n, c)| (c, n))
            .map_or(0, |(n, _)| n);
        usable.retain(|m| {
            let keep = m.shape[0] == best;
            if !keep {
                skipped.push((
                    m.name.clone(),
                    format!("has {} samples, not {best}", m.shape[0]),
                ));
            }
            keep
        });
        best
    };
    let mut datasets = Vec::with_capacity(usable.len());
    for m in usable {
        let ds = dataset(m, location)?;
        match (&ds.path, explicit) {
            // Asked for everything: leave out what nobody can decode, and say why.
            (ReadPath::Unreadable(why), false) => skipped.push((ds.meta.name.clone(), why.clone())),
            _ => datasets.push(ds),
        }
    }
    Ok((datasets, samples, skipped))
}

fn dataset(meta: DatasetMeta, location: &str) -> Result<Hdf5Dataset> {
    let at = format!("{location}:{}", meta.name);
    let dtype = meta.dtype.clone().expect("selected datasets have a dtype");
    let itemsize = dtype.itemsize();
    let sample_bytes = meta.shape[1..].iter().product::<usize>() * itemsize;
    let mut chunk_bytes = 0;
    let tiling = match &meta.layout {
        Layout::Chunked { chunk, .. } => {
            Tiling::new(&meta.shape, chunk, itemsize).map_err(|m| h5err(&at, m))?
        }
        _ => Tiling::default(),
    };
    let path = match &meta.layout {
        Layout::Contiguous { addr: Some(a) } => ReadPath::Contiguous(*a),
        Layout::Contiguous { addr: None } => ReadPath::Fill,
        Layout::Other(why) => ReadPath::Library(why.clone()),
        Layout::Chunked { chunk, .. } => {
            chunk_bytes = chunk.iter().product::<usize>() * itemsize;
            match native_filters(&meta, chunk, itemsize, &at)? {
                // A filter nothing decodes, that some written chunk needs: unreadable.
                Some(decoder) if decoder.missing().any(|(i, _)| needed(&meta.layout, i)) => {
                    let (_, id) = decoder.missing().find(|&(i, _)| needed(&meta.layout, i)).expect("found");
                    let name = meta.filters.iter().find(|f| f.id == id).map_or("", |f| f.name.as_str());
                    ReadPath::Unreadable(format!(
                        "filter {id} ({}) is not available: packread cannot decode this pipeline and its libhdf5 lacks the filter",
                        if name.is_empty() { "unknown" } else { name }
                    ))
                }
                Some(decoder) => ReadPath::Chunked { decoder },
                None => match meta.filters.iter().find(|f| !f.available) {
                    Some(f) => ReadPath::Unreadable(format!(
                        "filter {} ({}) is not available: packread cannot decode this pipeline and its libhdf5 lacks the filter",
                        f.id,
                        if f.name.is_empty() { "unknown" } else { &f.name }
                    )),
                    None => ReadPath::Library("a filter packread does not decode".into()),
                },
            }
        }
    };
    Ok(Hdf5Dataset {
        meta,
        dtype,
        path,
        sample_bytes,
        chunk_bytes,
        tiling,
    })
}

/// Whether some written chunk applied filter `i` of the pipeline (its mask does not skip it).
fn needed(layout: &Layout, i: usize) -> bool {
    match layout {
        Layout::Chunked { chunks, .. } => {
            chunks.values().any(|c| i >= 32 || c.mask & (1 << i) == 0)
        }
        _ => true,
    }
}

/// The decoder packread runs itself, or `None` if a filter needs libhdf5 (see
/// [`ChunkDecoder::new`]).
fn native_filters(
    meta: &DatasetMeta,
    chunk: &[usize],
    itemsize: usize,
    at: &str,
) -> Result<Option<ChunkDecoder>> {
    let specs: Vec<FilterSpec<'_>> = meta
        .filters
        .iter()
        .map(|f| FilterSpec {
            id: f.id,
            name: &f.name,
            params: &f.params,
            available: f.available,
        })
        .collect();
    ChunkDecoder::new(&specs, chunk, itemsize, meta.vlen.is_some()).map_err(|m| h5err(at, m))
}
