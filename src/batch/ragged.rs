//! Batches of samples that differ in size ([`RaggedBatch`]): variable-length HDF5 data,
//! images at their own sizes. Their sizes are known only from the bytes, so a read allocates
//! the batch: the samples' elements one after another, and where each starts.

use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};

/// What the samples of a ragged array are, for the binding to present them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaggedKind {
    /// Sequences of numbers (of `shape`'s trailing element shape).
    Values,
    /// Byte strings.
    Bytes,
    /// Text, UTF-32 code points (numpy's `U` elements).
    Text,
    /// Images at their own sizes, each of the shape its entry in [`RaggedBatch::shapes`] gives.
    Images,
    /// UTF-8 text, as bytes (a keyed sample's `.txt`: Python decodes it).
    Utf8,
    /// JSON documents, as bytes (a keyed sample's `.json`: Python parses them).
    Json,
    /// Arrays of one element type, each of the shape its entry in [`RaggedBatch::shapes`]
    /// gives (any number of dimensions: a keyed sample's `.npy`).
    Arrays,
}

impl std::fmt::Display for RaggedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RaggedKind::Values => "sequences",
            RaggedKind::Bytes => "byte strings",
            RaggedKind::Text => "strings",
            RaggedKind::Images => "images",
            RaggedKind::Utf8 => "UTF-8 texts",
            RaggedKind::Json => "JSON documents",
            RaggedKind::Arrays => "arrays",
        })
    }
}

/// What a ragged array's samples hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ragged {
    /// What they are.
    pub kind: RaggedKind,
    /// The element type.
    pub dtype: DType,
    /// One sample's shape, `None` where samples differ (a sequence's length, an image's
    /// height and width).
    pub shape: Vec<Option<usize>>,
}

/// A batch of samples that differ in size, read: their elements one after another.
#[derive(Debug)]
pub struct RaggedBatch {
    /// The elements' bytes, in storage aligned for any numeric element (8 bytes).
    pub storage: Vec<u64>,
    /// Bytes of `storage` in use.
    pub nbytes: usize,
    /// `offsets[k]..offsets[k + 1]`: the elements of sample `k`; one entry more than
    /// samples, the first 0.
    pub offsets: Vec<u64>,
    /// Bytes of one element.
    pub elem_bytes: usize,
    /// Each sample's shape, where samples have several dimensions that differ (images);
    /// empty otherwise.
    pub shapes: Vec<Vec<usize>>,
}

impl RaggedBatch {
    /// A zeroed batch of `nbytes` bytes with these offsets.
    pub fn zeroed(nbytes: usize, offsets: Vec<u64>, elem_bytes: usize) -> RaggedBatch {
        RaggedBatch {
            storage: vec![0u64; nbytes.div_ceil(8)],
            nbytes,
            offsets,
            elem_bytes,
            shapes: Vec::new(),
        }
    }

    /// Samples.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements' bytes, to be filled in (8-byte aligned).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.nbytes.min(self.storage.len() * 8);
        // SAFETY: the storage holds at least `n` initialised bytes (u64s), and a u8 view of
        // u64s has no alignment or validity requirement.
        unsafe { std::slice::from_raw_parts_mut(self.storage.as_mut_ptr().cast(), n) }
    }

    /// The elements of every sample, one after another (8-byte aligned).
    pub fn bytes(&self) -> &[u8] {
        let n = self.nbytes.min(self.storage.len() * 8);
        // SAFETY: as in `bytes_mut`.
        unsafe { std::slice::from_raw_parts(self.storage.as_ptr().cast(), n) }
    }

    /// The bytes of sample `k`.
    pub fn sample(&self, k: usize) -> &[u8] {
        let (a, b) = (self.offsets[k] as usize, self.offsets[k + 1] as usize);
        &self.bytes()[a * self.elem_bytes..b * self.elem_bytes]
    }

    /// Batches of parts of a batch put together: part `p` holds the samples that sit at
    /// `at[p]` in the whole (every place filled once), `len` samples in all.
    pub fn assemble(parts: &[(RaggedBatch, &[usize])], len: usize) -> Result<RaggedBatch> {
        let internal = |m: &str| Error::new(ErrorKind::Internal, "", m.to_string());
        let elem_bytes = parts.first().map_or(1, |(b, _)| b.elem_bytes);
        let shaped = parts.first().is_some_and(|(b, _)| !b.shapes.is_empty());
        let mut from: Vec<Option<(usize, usize)>> = vec![None; len];
        for (p, (batch, at)) in parts.iter().enumerate() {
            if batch.elem_bytes != elem_bytes || batch.len() != at.len() {
                return Err(internal("ragged parts that do not agree"));
            }
            for (j, &k) in at.iter().enumerate() {
                *from
                    .get_mut(k)
                    .ok_or_else(|| internal("a ragged part past the batch"))? = Some((p, j));
            }
        }
        let mut offsets = Vec::with_capacity(len + 1);
        offsets.push(0u64);
        let mut total = 0u64;
        for f in &from {
            let (p, j) = f.ok_or_else(|| internal("a ragged batch with a sample missing"))?;
            let o = &parts[p].0.offsets;
            total += o[j + 1] - o[j];
            offsets.push(total);
        }
        let nbytes = usize::try_from(total)
            .ok()
            .and_then(|t| t.checked_mul(elem_bytes))
            .ok_or_else(|| internal("a ragged batch past the address space"))?;
        let mut out = RaggedBatch::zeroed(nbytes, offsets, elem_bytes);
        let mut shapes = Vec::new();
        let mut at = 0usize;
        for f in from.iter().flatten() {
            let (p, j) = *f;
            let bytes = parts[p].0.sample(j);
            out.bytes_mut()[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
            if shaped {
                shapes.push(parts[p].0.shapes.get(j).cloned().unwrap_or_default());
            }
        }
        out.shapes = shapes;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(samples: &[&[u8]]) -> RaggedBatch {
        let mut offsets = vec![0u64];
        for s in samples {
            offsets.push(offsets.last().unwrap() + s.len() as u64);
        }
        let mut b = RaggedBatch::zeroed(samples.iter().map(|s| s.len()).sum(), offsets, 1);
        let joined: Vec<u8> = samples.concat();
        b.bytes_mut().copy_from_slice(&joined);
        b
    }

    #[test]
    fn parts_go_back_to_their_places() {
        let a = batch(&[b"ab", b""]);
        let b = batch(&[b"xyz"]);
        let whole = RaggedBatch::assemble(&[(a, &[2, 0][..]), (b, &[1][..])], 3).unwrap();
        assert_eq!(whole.offsets, vec![0, 0, 3, 5]);
        assert_eq!(whole.bytes(), b"xyzab");
        assert_eq!(whole.sample(2), b"ab");
    }

    #[test]
    fn a_place_left_empty_is_an_internal_error() {
        let a = batch(&[b"ab"]);
        let e = RaggedBatch::assemble(&[(a, &[0][..])], 2).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Internal);
    }
}
