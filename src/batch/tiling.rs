//! From the indices a caller asks for to the rows a format reads, and from a chunked array's
//! geometry to the pieces each chunk contributes to a sample. Public for the fuzz targets and
//! property tests (fuzz/, tests/plan.rs); formats use it through their indexers.

use crate::error::{Error, ErrorKind, Result};

/// Resolves Python-style indices (negative counts from the end) against `len` samples, keeping
/// order and duplicates; an index out of range is an error naming `location` (the reader's
/// file, see [`location_of`]).
pub fn resolve_indices(idx: &[i64], len: usize, location: &str) -> Result<Vec<usize>> {
    let n = i64::try_from(len).unwrap_or(i64::MAX);
    idx.iter()
        .map(|&i| {
            let j = if i < 0 { i.checked_add(n) } else { Some(i) };
            match j {
                Some(j) if (0..n).contains(&j) => Ok(j as usize),
                _ => Err(Error::new(
                    ErrorKind::Index,
                    location,
                    format!("index {i} is out of range for {len} samples"),
                )),
            }
        })
        .collect()
}

/// How a reader of many files is named in messages: its first file, and how many more.
pub fn location_of(paths: &[std::path::PathBuf]) -> String {
    match paths {
        [] => String::new(),
        [one] => one.display().to_string(),
        [first, rest @ ..] => format!("{} (and {} more files)", first.display(), rest.len()),
    }
}

/// Checks that an output buffer holds exactly `rows` samples of `row_bytes` each.
pub fn check_out_len(got: usize, rows: usize, row_bytes: usize) -> Result<()> {
    let want = rows.checked_mul(row_bytes);
    if want != Some(got) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "",
            format!(
                "output buffer is {got} bytes, {rows} samples of {row_bytes} bytes need {want:?}"
            ),
        ));
    }
    Ok(())
}

/// A run of `len` decoded bytes from `src` copied to output offset `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Offset in the decoded bytes (a chunk's, or an extent's) where the run starts.
    pub src: usize,
    /// Offset in the output buffer the run is copied to.
    pub dst: usize,
    /// Length of the run, in bytes.
    pub len: usize,
}

/// How a chunked array's chunks map onto its samples (the first axis), computed once per
/// array: for every chunk position across a row-slab (the chunks sharing a range of rows), the
/// runs that copy one chunk row into a sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tiling {
    /// Rows per chunk along the first axis.
    c0: usize,
    /// Bytes of one sample.
    sample_bytes: usize,
    tiles: Vec<Tile>,
}

/// One chunk a batch needs: its linear position on the chunk grid, which samples use it
/// (position in the batch, row within the chunk), and the pieces it contributes to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRead {
    /// The chunk's index on the chunk grid, in C order.
    pub linear: u64,
    /// `(k, r)` for every sample that needs the chunk: `k` its position in the batch, `r` its
    /// row within the chunk.
    pub uses: Vec<(usize, usize)>,
    /// The runs copying the chunk's rows into those samples (sample `k` at output offset
    /// `k * sample_bytes`).
    pub pieces: Vec<Piece>,
}

impl Tiling {
    /// The tiling of an array of `shape` stored in chunks of `chunk` elements of `itemsize`
    /// bytes; a rank mismatch or a zero dimension is an error (a malformed file).
    pub fn new(shape: &[usize], chunk: &[usize], itemsize: usize) -> Result<Tiling, String> {
        if shape.is_empty() || chunk.len() != shape.len() {
            return Err(format!(
                "chunk shape {chunk:?} does not fit the dataset shape {shape:?}"
            ));
        }
        if chunk.contains(&0) {
            return Err(format!("chunk shape {chunk:?} has a zero dimension"));
        }
        let grid: Vec<usize> = shape
            .iter()
            .zip(chunk)
            .map(|(&d, &c)| d.div_ceil(c))
            .collect();
        Ok(Tiling {
            c0: chunk[0],
            sample_bytes: shape[1..].iter().product::<usize>() * itemsize,
            tiles: sample_tiles(shape, chunk, &grid, itemsize),
        })
    }

    /// Whether every chunk is exactly one sample (so a chunk decodes straight into its slot).
    pub fn is_exact(&self) -> bool {
        self.c0 == 1 && self.tiles.len() == 1 && self.tiles[0].covers_sample
    }

    /// The chunks that rows `rows` (in batch order; duplicates allowed) need, in grid order,
    /// with the pieces that fill sample `k` of the batch at output offset `k * sample_bytes`.
    pub fn reads(&self, rows: &[usize]) -> Vec<ChunkRead> {
        if self.tiles.is_empty() {
            return Vec::new();
        }
        let mut slabs: std::collections::BTreeMap<usize, Vec<(usize, usize)>> =
            std::collections::BTreeMap::new();
        for (k, &i) in rows.iter().enumerate() {
            slabs.entry(i / self.c0).or_default().push((k, i % self.c0));
        }
        let per_slab = self.tiles.len();
        let mut reads = Vec::with_capacity(slabs.len() * per_slab);
        for (g, uses) in slabs {
            for (t, tile) in self.tiles.iter().enumerate() {
                let mut pieces = Vec::with_capacity(uses.len() * tile.runs.len());
                for &(k, r) in &uses {
                    tile.pieces(r, k * self.sample_bytes, &mut pieces);
                }
                reads.push(ChunkRead {
                    linear: (g * per_slab + t) as u64,
                    uses: uses.clone(),
                    pieces,
                });
            }
        }
        reads
    }
}

/// The part of one sample that one chunk of a row-slab covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tile {
    /// Runs (offset in the chunk's row, offset in the sample, length), in bytes.
    pub runs: Vec<(usize, usize, usize)>,
    /// Bytes of one chunk row (all dimensions but the first).
    pub row_bytes: usize,
    /// Whether this tile is the whole sample in one run.
    pub covers_sample: bool,
}

impl Tile {
    /// Appends the pieces moving chunk row `r` to the sample starting at output `base`.
    pub fn pieces(&self, r: usize, base: usize, out: &mut Vec<Piece>) {
        for &(src, dst, len) in &self.runs {
            out.push(Piece {
                src: r * self.row_bytes + src,
                dst: base + dst,
                len,
            });
        }
    }
}

/// For every chunk position of a row-slab (grid order over dimensions 1..), the runs that
/// copy one chunk row into a sample, merged where both sides are contiguous.
pub fn sample_tiles(
    shape: &[usize],
    chunk: &[usize],
    grid: &[usize],
    itemsize: usize,
) -> Vec<Tile> {
    let inner = &shape[1..];
    let cin = &chunk[1..];
    let gin = &grid[1..];
    let row_bytes = cin.iter().product::<usize>() * itemsize;
    let sample_bytes = inner.iter().product::<usize>() * itemsize;
    let ntiles: usize = gin.iter().product();
    let mut tiles = Vec::with_capacity(ntiles);
    let nd = inner.len();
    for t in 0..ntiles {
        // Grid coordinates of this tile (C order over dimensions 1..).
        let mut coord = vec![0usize; nd];
        let mut rest = t;
        for d in (0..nd).rev() {
            coord[d] = rest % gin[d];
            rest /= gin[d];
        }
        let start: Vec<usize> = (0..nd).map(|d| coord[d] * cin[d]).collect();
        let extent: Vec<usize> = (0..nd).map(|d| cin[d].min(inner[d] - start[d])).collect();
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        if nd == 0 {
            runs.push((0, 0, itemsize));
        } else {
            let run = extent[nd - 1] * itemsize;
            let outer: usize = extent[..nd - 1].iter().product();
            let mut idx = vec![0usize; nd.saturating_sub(1)];
            for _ in 0..outer {
                let (mut src, mut dst) = (0usize, 0usize);
                for d in 0..nd {
                    let local = if d + 1 < nd { idx[d] } else { 0 };
                    src = src * cin[d] + local;
                    dst = dst * inner[d] + start[d] + local;
                }
                let (src, dst) = (src * itemsize, dst * itemsize);
                match runs.last_mut() {
                    Some(last) if last.0 + last.2 == src && last.1 + last.2 == dst => last.2 += run,
                    _ => runs.push((src, dst, run)),
                }
                for d in (0..nd.saturating_sub(1)).rev() {
                    idx[d] += 1;
                    if idx[d] < extent[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        let covers_sample =
            runs.len() == 1 && runs[0] == (0, 0, sample_bytes) && row_bytes == sample_bytes;
        tiles.push(Tile {
            runs,
            row_bytes,
            covers_sample,
        });
    }
    tiles
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negatives_duplicates_and_bounds() {
        assert_eq!(
            resolve_indices(&[0, -1, 2, 2], 3, "f").unwrap(),
            vec![0, 2, 2, 2]
        );
        assert_eq!(resolve_indices(&[-3], 3, "f").unwrap(), vec![0]);
        for bad in [3, -4, i64::MIN, i64::MAX] {
            let e = resolve_indices(&[bad], 3, "f.npy").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Index);
            assert!(e.message().contains(&bad.to_string()));
            assert_eq!(e.location(), "f.npy");
        }
        assert!(resolve_indices(&[], 0, "f").unwrap().is_empty());
    }
}
