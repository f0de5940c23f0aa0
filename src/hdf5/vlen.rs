//! Variable-length data (PyTables `VLArray`, h5py `vlen_dtype` and variable-length strings),
//! read without libhdf5: a dataset's elements are heap IDs (sequence length, address of a
//! global heap collection, object index), decoded like any other chunked or contiguous data;
//! the sequences themselves are objects of those collections. A collection is read whole the
//! first time a batch needs it, to learn where its objects are (kept in a small index); after
//! that, each sequence is read with one `pread` straight into the flat output, in parallel.
//!
//! Global heap collection (HDF5 file format, "Global Heap"): `GCOL`, version 1, 3 reserved
//! bytes, the collection size (a length); then objects, each a u16 index (0: the free space,
//! which ends the list), u16 reference count, 4 reserved bytes, the object size (a length),
//! and the data padded to a multiple of 8 bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use super::meta::Vlen;
use super::{h5err, Hdf5File};
use crate::error::Result;
use crate::plan::resolve_indices;
use crate::pool;
use crate::source::Source;

/// The largest global heap collection read (libhdf5 makes them 4 KiB, or one object's size).
const MAX_COLLECTION: u64 = 1 << 31;

/// A batch of sequences, located: phase one of a ragged read.
pub struct RaggedPlan {
    /// `offsets[k]..offsets[k + 1]`: the elements of sample `k` in the flat output.
    pub offsets: Vec<u64>,
    /// Bytes of one element.
    pub elem_bytes: usize,
    /// Per sample with data: (file offset of its heap object, bytes), in output order.
    reads: Vec<(u64, usize)>,
}

/// Object index -> (offset in the collection, size), per collection address.
type ObjectTable = HashMap<u64, (u64, u64)>;

/// The object tables of the collections read so far. Bounded: past the limit it starts over.
#[derive(Default)]
pub struct HeapIndex {
    tables: Mutex<HashMap<u64, Arc<ObjectTable>>>,
}

/// Collections whose tables are kept (each table is a few hundred bytes).
const MAX_TABLES: usize = 1 << 16;

impl HeapIndex {
    fn get(&self, addr: u64) -> Option<Arc<ObjectTable>> {
        self.tables.try_lock().ok()?.get(&addr).cloned()
    }

    fn insert(&self, addr: u64, table: Arc<ObjectTable>) {
        if let Ok(mut t) = self.tables.try_lock() {
            if t.len() >= MAX_TABLES {
                t.clear();
            }
            t.insert(addr, table);
        }
    }
}

impl RaggedPlan {
    /// Elements in the whole batch.
    pub fn total(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }
}

/// One element of a vlen dataset: sequence length and where it is.
#[derive(Debug, Clone, Copy)]
struct HeapId {
    len: u64,
    addr: u64,
    index: u64,
}

fn le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Every object of a collection's bytes: index -> (start, size), walking its object list.
fn object_table(coll: &[u8], ss: usize) -> std::result::Result<ObjectTable, String> {
    let mut table = ObjectTable::new();
    let mut pos = 8 + ss;
    while pos + 8 + ss <= coll.len() {
        let i = le(&coll[pos..pos + 2]);
        let size = le(&coll[pos + 8..pos + 8 + ss]);
        if i == 0 {
            break; // the free space: no objects after it
        }
        let start = pos + 8 + ss;
        let end = (start as u64)
            .checked_add(size)
            .filter(|&e| e <= coll.len() as u64)
            .ok_or_else(|| {
                format!("global heap object {i} of {size} bytes runs past its collection")
            })? as usize;
        table.insert(i, (start as u64, size));
        pos = start + (end - start).div_ceil(8) * 8;
    }
    Ok(table)
}

impl Hdf5File {
    /// The object table of the collection at `addr`: from the index, or by reading the
    /// collection once.
    fn collection(&self, addr: u64, v: &Vlen) -> Result<Arc<ObjectTable>> {
        if let Some(t) = self.heaps.get(addr) {
            return Ok(t);
        }
        let at = || format!("{} (global heap at byte {addr})", self.location);
        let ss = v.sizeof_size;
        let mut head = vec![0u8; 8 + ss];
        let len = self.source.len();
        if addr.checked_add(head.len() as u64).is_none_or(|e| e > len) {
            return Err(h5err(&at(), format!("lies outside the {len}-byte file")));
        }
        self.source.read_at(0, addr, &mut head)?;
        if &head[..4] != b"GCOL" || head[4] != 1 {
            return Err(h5err(
                &at(),
                "not a global heap collection (bad signature or version)",
            ));
        }
        let size = le(&head[8..]);
        if size < head.len() as u64
            || size > MAX_COLLECTION
            || addr.checked_add(size).is_none_or(|e| e > len)
        {
            return Err(h5err(
                &at(),
                format!("collection of {size} bytes does not fit in the {len}-byte file"),
            ));
        }
        let mut bytes = vec![0u8; size as usize];
        self.source.read_at(0, addr, &mut bytes)?;
        let table = Arc::new(object_table(&bytes, ss).map_err(|m| h5err(&at(), m))?);
        self.heaps.insert(addr, table.clone());
        Ok(table)
    }

    /// Phase one of a ragged read of dataset `w`: the heap IDs of samples `idx` (decoded like
    /// any chunk), the collections they point into, and where each sequence lands.
    pub fn plan_ragged(&self, idx: &[i64], w: usize) -> Result<RaggedPlan> {
        let ds = &self.datasets[w];
        let at = format!("{}:{}", self.location, ds.name());
        let v = ds
            .meta
            .vlen
            .as_ref()
            .ok_or_else(|| h5err(&at, "is not variable-length data"))?;
        let rows = resolve_indices(idx, self.samples, &self.location)?;
        let mut ids = vec![0u8; rows.len() * ds.sample_bytes];
        self.read_batch(idx, &[w], &mut [&mut ids])?;
        let sa = v.sizeof_addr;
        let elem_bytes = v.base.itemsize() * v.elem_shape.iter().product::<usize>();
        let heap_ids: Vec<HeapId> = ids
            .chunks_exact(v.id_bytes)
            .map(|b| HeapId {
                len: le(&b[..4]),
                addr: le(&b[4..4 + sa]),
                index: le(&b[4 + sa..8 + sa]),
            })
            .collect();
        // Every collection once, read in parallel.
        let mut where_: BTreeMap<u64, usize> = BTreeMap::new();
        for h in heap_ids.iter().filter(|h| h.len > 0) {
            let n = where_.len();
            where_.entry(h.addr).or_insert(n);
        }
        let mut addrs = vec![0u64; where_.len()];
        for (&a, &i) in &where_ {
            addrs[i] = a;
        }
        let tables: Vec<Arc<ObjectTable>> = pool::install_with(self.threads, || {
            addrs
                .par_iter()
                .map(|&a| self.collection(a, v))
                .collect::<Result<Vec<_>>>()
        })
        .map_err(|e| {
            let loc = e.location().replacen(&self.location, &at, 1);
            e.at(loc)
        })?;
        let mut reads = Vec::with_capacity(heap_ids.len());
        let mut offsets = Vec::with_capacity(heap_ids.len() + 1);
        offsets.push(0u64);
        let mut total = 0u64;
        for (k, h) in heap_ids.iter().enumerate() {
            if h.len > 0 {
                let bad = |m: String| {
                    h5err(
                        &format!("{at} (sample {}, global heap at byte {})", rows[k], h.addr),
                        m,
                    )
                };
                let &(start, size) = tables[where_[&h.addr]]
                    .get(&h.index)
                    .ok_or_else(|| bad(format!("the collection has no object {}", h.index)))?;
                if h.len.checked_mul(elem_bytes as u64) != Some(size) {
                    return Err(bad(format!(
                        "sequence of {} elements of {elem_bytes} bytes, but its heap object holds {size} bytes",
                        h.len
                    )));
                }
                let size = usize::try_from(size).map_err(|_| bad("batch too large".into()))?;
                reads.push((h.addr + start, size));
            }
            total = total
                .checked_add(h.len)
                .ok_or_else(|| h5err(&at, "batch too large"))?;
            offsets.push(total);
        }
        Ok(RaggedPlan {
            offsets,
            elem_bytes,
            reads,
        })
    }

    /// Phase two: reads the planned sequences into `out` (`plan.total()` elements), one
    /// `pread` each, in parallel.
    pub fn fill_ragged(&self, plan: &RaggedPlan, out: &mut [u8]) -> Result<()> {
        crate::plan::check_out_len(out.len(), plan.total() as usize, plan.elem_bytes)?;
        // The sequences lie one after another in `out`: cut it into their disjoint slices.
        let mut parts: Vec<(u64, &mut [u8])> = Vec::with_capacity(plan.reads.len());
        let mut rest = out;
        for &(offset, len) in &plan.reads {
            let (head, tail) = rest.split_at_mut(len);
            parts.push((offset, head));
            rest = tail;
        }
        pool::install_with(self.threads, || {
            parts
                .par_iter_mut()
                .try_for_each(|(offset, dst)| self.source.read_at(0, *offset, dst))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collection(objects: &[(u16, &[u8])]) -> Vec<u8> {
        let mut c = b"GCOL\x01\0\0\0".to_vec();
        c.extend(0u64.to_le_bytes());
        for (i, data) in objects {
            c.extend(i.to_le_bytes());
            c.extend(1u16.to_le_bytes());
            c.extend([0u8; 4]);
            c.extend((data.len() as u64).to_le_bytes());
            c.extend(*data);
            c.resize(c.len().div_ceil(8) * 8, 0);
        }
        c.extend([0u8; 16]); // free space
        let n = c.len() as u64;
        c[8..16].copy_from_slice(&n.to_le_bytes());
        c
    }

    #[test]
    fn objects_are_found_and_bounded() {
        let c = collection(&[(1, b"abc"), (2, b"0123456789"), (7, b"")]);
        let t = object_table(&c, 8).unwrap();
        assert_eq!(t[&1], (32, 3));
        let (s, n) = t[&2];
        assert_eq!(&c[s as usize..(s + n) as usize], b"0123456789");
        assert_eq!(t[&7].1, 0);
        assert!(!t.contains_key(&3));
        let mut bad = c.clone();
        bad[24..32].copy_from_slice(&u64::MAX.to_le_bytes()); // object 1's size
        assert!(object_table(&bad, 8).is_err());
    }
}
