//! From an HDF5 dataset's filter pipeline (ids and parameters, as libhdf5 reports them) to the
//! steps that decode one of its chunks. Pure Rust, without libhdf5: the HDF5 reader and the
//! `hdf5_chunk` fuzz target build their pipelines here, so the fuzzer runs exactly the code a
//! damaged file reaches (parameters, chunk shape and bytes).

use super::{BitshuffleInner, Pipeline, Step, Wrapper};

/// HDF5 filter id of deflate (`H5Z_FILTER_DEFLATE`, zlib framing); one parameter, the level.
pub const FILTER_DEFLATE: u32 = 1;
/// HDF5 filter id of the byte shuffle (`H5Z_FILTER_SHUFFLE`); one parameter, the element size.
pub const FILTER_SHUFFLE: u32 = 2;
/// HDF5 filter id of the Fletcher-32 checksum (`H5Z_FILTER_FLETCHER32`), a 4-byte trailer.
pub const FILTER_FLETCHER32: u32 = 3;
/// Registered HDF5 filter id of LZF (h5py's filter).
pub const FILTER_LZF: u32 = 32000;
/// Registered HDF5 filter id of blosc 1.x (PyTables, hdf5plugin): one blosc chunk per chunk.
pub const FILTER_BLOSC: u32 = 32001;
/// Registered HDF5 filter id of LZ4 in HDF5's own block framing.
pub const FILTER_LZ4: u32 = 32004;
/// Registered HDF5 filter id of bitshuffle, with LZ4, zstd or no compression per block.
pub const FILTER_BITSHUFFLE: u32 = 32008;
/// Registered HDF5 filter id of zstd: each chunk is zstd frames.
pub const FILTER_ZSTD: u32 = 32015;
/// Registered HDF5 filter id of blosc2: each chunk is one blosc2 contiguous frame.
pub const FILTER_BLOSC2: u32 = 32026;

/// One filter of a dataset's write pipeline: its id, name (for messages) and parameters.
#[derive(Debug, Clone, Copy)]
pub struct FilterSpec<'a> {
    /// The HDF5 filter id (a `FILTER_*` constant, or one nothing here decodes).
    pub id: u32,
    /// The filter's name as libhdf5 reports it; only used in error messages.
    pub name: &'a str,
    /// The filter's client data values (`cd_values`), as libhdf5 reports them.
    pub params: &'a [u32],
    /// Whether libhdf5 (the build packread links) can decode it.
    pub available: bool,
}

/// The decoding of one dataset's chunks: its filters' steps in write order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkDecoder {
    steps: Vec<Step>,
}

impl ChunkDecoder {
    /// The decoder for chunks of `chunk_shape` elements of `itemsize` bytes written through
    /// `filters`, or `None` if a filter (or a chain of two compressors, whose intermediate size
    /// only libhdf5 knows) needs libhdf5. Parameters are checked here: a malformed pipeline is
    /// an error, not a guess. `vlen`: the dataset holds variable-length data.
    pub fn new(
        filters: &[FilterSpec<'_>],
        chunk_shape: &[usize],
        itemsize: usize,
        vlen: bool,
    ) -> Result<Option<ChunkDecoder>, String> {
        let chunk_bytes = chunk_shape
            .iter()
            .try_fold(itemsize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("chunk shape {chunk_shape:?} overflows"))?;
        let mut steps = Vec::with_capacity(filters.len());
        let mut compressors = 0;
        for f in filters {
            let bad = |what: &str| {
                format!(
                    "filter {} ({}): {what} (parameters {:?})",
                    f.id, f.name, f.params
                )
            };
            let p = f.params;
            steps.push(match f.id {
                FILTER_DEFLATE => {
                    if p.len() != 1 || p[0] > 9 {
                        return Err(bad("expected one parameter, the level 0-9"));
                    }
                    compressors += 1;
                    Step::Inflate(Wrapper::Zlib)
                }
                // No parameter: libhdf5 could not set the element size (variable-length data,
                // where PyTables adds it anyway); the optional filter was then skipped for every
                // chunk (its mask bit set), and a chunk claiming otherwise fails to decode.
                FILTER_SHUFFLE if p.is_empty() && vlen => Step::Unshuffle { itemsize: 0 },
                FILTER_SHUFFLE => {
                    if p.len() != 1 || p[0] == 0 {
                        return Err(bad("expected one parameter, the element size"));
                    }
                    Step::Unshuffle {
                        itemsize: p[0] as usize,
                    }
                }
                FILTER_FLETCHER32 => {
                    if !p.is_empty() {
                        return Err(bad("expected no parameters"));
                    }
                    Step::Fletcher32
                }
                FILTER_LZF => {
                    if p.len() > 3 || (p.len() == 3 && p[2] != 0 && p[2] as usize != chunk_bytes) {
                        return Err(bad("expected at most (version, lzf version, chunk bytes)"));
                    }
                    compressors += 1;
                    Step::Lzf
                }
                // (filter version, blosc version, typesize, chunk bytes, level, shuffle, codec):
                // the chunk's own header says everything decoding needs, checked against the
                // chunk's size.
                FILTER_BLOSC => {
                    if p.len() > 7 {
                        return Err(bad("expected at most 7 parameters"));
                    }
                    compressors += 1;
                    Step::Blosc
                }
                // (filter version, block size, typesize, chunk bytes, level, shuffle, codec,
                // rank, chunk dimensions): the frame says how it was written; a b2nd array in it
                // must have the chunk's shape.
                FILTER_BLOSC2 => {
                    if p.len() > 16 {
                        return Err(bad("expected at most 16 parameters"));
                    }
                    compressors += 1;
                    Step::Blosc2 {
                        shape: chunk_shape.into(),
                    }
                }
                FILTER_ZSTD => {
                    if p.len() > 1 {
                        return Err(bad("expected at most one parameter, the level"));
                    }
                    compressors += 1;
                    Step::Zstd
                }
                FILTER_LZ4 => {
                    if p.len() > 1 {
                        return Err(bad("expected at most one parameter, the block size"));
                    }
                    compressors += 1;
                    Step::Lz4
                }
                // (major, minor, element size, block size, compressor, zstd level)
                FILTER_BITSHUFFLE => {
                    if !(3..=6).contains(&p.len()) || p[2] == 0 {
                        return Err(bad(
                            "expected 3 to 6 parameters, the third the element size",
                        ));
                    }
                    let block = p.get(3).copied().unwrap_or(0) as usize;
                    if block % 8 != 0 {
                        return Err(bad("block size is not a multiple of 8"));
                    }
                    let inner = match p.get(4).copied().unwrap_or(0) {
                        0 => BitshuffleInner::None,
                        2 => BitshuffleInner::Lz4,
                        3 => BitshuffleInner::Zstd,
                        other => return Err(bad(&format!("unknown compressor {other}"))),
                    };
                    if inner != BitshuffleInner::None {
                        compressors += 1;
                    }
                    Step::Bitshuffle {
                        itemsize: p[2] as usize,
                        block,
                        inner,
                    }
                }
                // Neither here nor in libhdf5: chunks that skip it (their filter mask says so, as
                // blosc leaves chunks it cannot shrink) still read; others cannot.
                _ if !f.available => Step::Missing { id: f.id },
                _ => return Ok(None),
            });
        }
        Ok((compressors <= 1).then_some(ChunkDecoder { steps }))
    }

    /// Positions (in the write pipeline) of the filters nothing here can decode.
    pub fn missing(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.steps.iter().enumerate().filter_map(|(i, s)| match s {
            Step::Missing { id } => Some((i, *id)),
            _ => None,
        })
    }

    /// The pipeline for a chunk whose filter mask is `mask`: the filters in reverse, skipping
    /// those the mask says were not applied (PyTables stores chunks blosc cannot shrink so).
    pub fn pipeline(&self, mask: u32) -> Pipeline {
        let steps = self
            .steps
            .iter()
            .enumerate()
            .rev()
            .filter(|&(i, s)| {
                let skipped = i < 32 && mask & (1 << i) != 0;
                // Shuffling 1-byte elements changes nothing.
                !skipped && *s != Step::Unshuffle { itemsize: 1 }
            })
            .map(|(_, s)| s.clone())
            .collect();
        Pipeline::new(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Faults;
    use crate::error::ErrorKind;

    fn spec(id: u32, params: &[u32], available: bool) -> FilterSpec<'_> {
        FilterSpec {
            id,
            name: "",
            params,
            available,
        }
    }

    /// A filter nothing decodes stays in the pipeline: chunks whose mask skips it decode, others
    /// are an `UnsupportedError` naming it. One libhdf5 decodes sends the dataset to libhdf5.
    #[test]
    fn filters_nothing_decodes_fail_only_the_chunks_that_need_them() {
        let filters = [spec(32999, &[], false), spec(FILTER_SHUFFLE, &[2], true)];
        let d = ChunkDecoder::new(&filters, &[4], 2, false)
            .unwrap()
            .unwrap();
        assert_eq!(d.missing().collect::<Vec<_>>(), vec![(0, 32999)]);
        let stored = [1u8, 3, 5, 7, 2, 4, 6, 8];
        let mut out = [0u8; 8];
        let faults = Faults::both(ErrorKind::Hdf5);
        d.pipeline(1)
            .decode(&stored, &mut out, &mut Default::default(), faults)
            .unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        let e = d
            .pipeline(0)
            .decode(&stored, &mut out, &mut Default::default(), faults)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("32999"), "{e}");
        assert_eq!(
            ChunkDecoder::new(&[spec(5, &[], true)], &[4], 2, false),
            Ok(None)
        );
    }
}
