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
//!
//! Where that cannot go (compact or external storage, a filter packread does not decode),
//! libhdf5 reads the sequences itself, under its lock, one sample at a time, and its memory is
//! reclaimed with `H5Treclaim` after each.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex};

use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_seloper_t, H5Sclose, H5Screate_simple, H5Sselect_hyperslab};
use hdf5_sys::h5t::{
    hvl_t, H5T_class_t, H5Tclose, H5Tcopy, H5Tget_class, H5Tget_cset, H5Tget_size, H5Tget_super,
    H5Treclaim, H5Tset_cset, H5Tset_size, H5Tvlen_create, H5T_C_S1, H5T_VARIABLE,
};

use super::handle::{Close, Handle};
use super::meta::FileFacts;
use super::types::descr_of;
use super::{h5err, with_library, Hdf5Dataset, Hdf5File};
use crate::batch::pool;
use crate::batch::RaggedBatch;
use crate::batch::Rows;
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::Result;
use crate::source::Files;

/// What the elements of a variable-length dataset hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Vlen {
    /// The element type of each sequence, with the shape of one element (PyTables atoms may
    /// have one).
    pub base: DType,
    /// The shape of one element (empty unless a PyTables atom has one): `prod(elem_shape)`
    /// values of `base`.
    pub elem_shape: Vec<usize>,
    /// How a sequence reads in Python.
    pub kind: VlenKind,
    /// HDF5 variable-length strings are C strings: a sequence ends at its first NUL, as libhdf5
    /// (so h5py) reads it. Byte sequences stored as uint8 (PyTables' `VLStringAtom`, h5py's
    /// `vlen_dtype(uint8)`) are kept whole.
    pub nul_terminated: bool,
    /// Bytes of one stored element: sequence length (u32), heap collection address, index.
    pub id_bytes: usize,
    /// Bytes of a file address in this file (the superblock's), as in a heap ID.
    pub sizeof_addr: usize,
    /// Bytes of a length in this file (the superblock's), as in a heap collection's sizes.
    pub sizeof_size: usize,
}

/// How a sequence reads in Python.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VlenKind {
    /// An array of the base type.
    Array,
    /// A variable-length string (h5py's `string_dtype()`, PyTables' `VLStringAtom`): bytes.
    Bytes,
    /// PyTables' `VLUnicodeAtom` (UCS-4 code points): str.
    Unicode,
}

/// The variable-length description of `ftype`: `None` if it is not variable-length,
/// `Some(Err)` if it is but cannot be read.
pub(super) unsafe fn vlen_of(
    ftype: hid_t,
    facts: FileFacts,
    ds: hid_t,
) -> Option<std::result::Result<Vlen, String>> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        use hdf5_sys::h5t::{
            H5T_class_t, H5Tget_array_dims2, H5Tget_array_ndims, H5Tget_class, H5Tget_super,
            H5Tis_variable_str,
        };
        let class = H5Tget_class(ftype);
        let string = class == H5T_class_t::H5T_STRING && H5Tis_variable_str(ftype) > 0;
        if class != H5T_class_t::H5T_VLEN && !string {
            return None;
        }
        let id_bytes = 4 + facts.sizeof_addr + 4;
        let make = |base: &str, elem_shape: Vec<usize>, kind| {
            DType::from_descr(Literal::Str(base.into()))
                .map(|base| Vlen {
                    base,
                    elem_shape,
                    kind,
                    nul_terminated: string,
                    id_bytes,
                    sizeof_addr: facts.sizeof_addr,
                    sizeof_size: facts.sizeof_size,
                })
                .map_err(|e| format!("{e:?}"))
        };
        if string {
            return Some(make("|u1", vec![], VlenKind::Bytes));
        }
        let base = H5Tget_super(ftype);
        if base < 0 {
            return Some(Err("cannot read the variable-length base type".into()));
        }
        let base = Handle(base, H5Tclose);
        // An array base type (a PyTables atom with a shape): each element is that array.
        let (elem, elem_shape) = if H5Tget_class(base.0) == H5T_class_t::H5T_ARRAY {
            let n = H5Tget_array_ndims(base.0);
            if !(1..=32).contains(&n) {
                return Some(Err("variable-length base array has an invalid rank".into()));
            }
            let mut dims = vec![0u64; n as usize];
            H5Tget_array_dims2(base.0, dims.as_mut_ptr());
            let inner = H5Tget_super(base.0);
            if inner < 0 {
                return Some(Err("cannot read the variable-length base type".into()));
            }
            (
                Handle(inner, H5Tclose),
                dims.iter().map(|&d| d as usize).collect(),
            )
        } else {
            (Handle(hdf5_sys::h5t::H5Tcopy(base.0), H5Tclose), vec![])
        };
        if H5Tget_class(elem.0) == H5T_class_t::H5T_VLEN || H5Tis_variable_str(elem.0) > 0 {
            return Some(Err("nested variable-length data is not supported".into()));
        }
        let descr = match descr_of(elem.0, facts.conv) {
            Ok(Literal::Str(s)) => s,
            Ok(_) => {
                return Some(Err(
                    "variable-length sequences of records are not supported".into(),
                ))
            }
            Err(e) => return Some(Err(format!("variable-length base type: {e}"))),
        };
        let pseudo = pytables_pseudo_atom(ds);
        let kind = match pseudo.as_deref() {
            Some("vlstring") => VlenKind::Bytes,
            Some("vlunicode") => VlenKind::Unicode,
            Some("object") => {
                return Some(Err(
                    "PyTables ObjectAtom rows are pickles; packread never unpickles".into(),
                ))
            }
            _ => VlenKind::Array,
        };
        Some(make(&descr, elem_shape, kind))
    }
}

/// PyTables' `PSEUDOATOM` attribute of a VLArray (`vlstring`, `vlunicode`, `object`).
unsafe fn pytables_pseudo_atom(ds: hid_t) -> Option<String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        use hdf5_sys::h5a::{H5Aclose, H5Aexists, H5Aget_type, H5Aopen, H5Aread};
        use hdf5_sys::h5t::{H5Tget_size, H5Tis_variable_str};
        let name = c"PSEUDOATOM";
        if H5Aexists(ds, name.as_ptr()) <= 0 {
            return None;
        }
        let attr = H5Aopen(ds, name.as_ptr(), H5P_DEFAULT);
        if attr < 0 {
            return None;
        }
        let attr = Handle(attr, H5Aclose);
        let atype = Handle(H5Aget_type(attr.0), H5Tclose);
        if atype.0 < 0 || H5Tis_variable_str(atype.0) > 0 {
            return None;
        }
        let size = H5Tget_size(atype.0);
        if size == 0 || size > 64 {
            return None;
        }
        let mut buf = vec![0u8; size];
        if H5Aread(attr.0, atype.0, buf.as_mut_ptr().cast()) < 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(size);
        Some(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

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
pub(super) struct HeapIndex {
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

/// Ends every sequence of 1-byte elements at its first NUL (C strings), moving the rest
/// down in place.
fn cut_at_nul(batch: &mut RaggedBatch) {
    let mut kept = 0usize;
    let mut offsets = Vec::with_capacity(batch.offsets.len());
    offsets.push(0u64);
    let bounds = std::mem::take(&mut batch.offsets);
    let bytes = batch.bytes_mut();
    for w in bounds.windows(2) {
        let (a, b) = (w[0] as usize, w[1] as usize);
        let len = bytes[a..b].iter().position(|&c| c == 0).unwrap_or(b - a);
        bytes.copy_within(a..a + len, kept);
        kept += len;
        offsets.push(kept as u64);
    }
    batch.nbytes = kept;
    batch.offsets = offsets;
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

fn owned(id: hid_t, close: Close, at: &str, what: &str) -> Result<Handle> {
    Handle::checked(id, close).ok_or_else(|| h5err(at, format!("libhdf5 could not make {what}")))
}

impl Hdf5File {
    /// Samples `idx` of the variable-length dataset `w`: natively (heap IDs decoded like any
    /// chunk, sequences read in parallel) where the dataset's storage allows, else by libhdf5.
    pub(super) fn read_sequences(&self, rows: &Rows, w: usize) -> Result<RaggedBatch> {
        if self.datasets[w].reads_through_library() {
            return self.read_ragged_with_library(rows, w);
        }
        let plan = self.plan_ragged(rows, w)?;
        let nbytes = usize::try_from(plan.total())
            .ok()
            .and_then(|n| n.checked_mul(plan.elem_bytes))
            .ok_or_else(|| h5err(&self.location, "batch too large"))?;
        let mut batch = RaggedBatch::zeroed(nbytes, plan.offsets.clone(), plan.elem_bytes);
        self.fill_ragged(&plan, batch.bytes_mut())?;
        if self.vlen_dataset(w)?.2.nul_terminated {
            cut_at_nul(&mut batch);
        }
        Ok(batch)
    }

    /// Dataset `w`, its name for messages, and what its sequences hold; an error if it is not
    /// variable-length data.
    fn vlen_dataset(&self, w: usize) -> Result<(&Hdf5Dataset, String, &Vlen)> {
        let ds = &self.datasets[w];
        let at = format!("{}:{}", self.location, ds.name());
        match ds.meta.vlen.as_ref() {
            Some(v) => Ok((ds, at, v)),
            None => Err(h5err(&at, "is not variable-length data")),
        }
    }

    /// libhdf5 reads each sequence (a variable-length string as its bytes), in the stored byte
    /// order, under its lock; its memory for each is reclaimed at once.
    fn read_ragged_with_library(&self, rows: &Rows, w: usize) -> Result<RaggedBatch> {
        let (ds, at, v) = self.vlen_dataset(w)?;
        let rows = rows.as_slice();
        let elem_bytes = v.base.itemsize() * v.elem_shape.iter().product::<usize>();
        let (bytes, offsets) = with_library(&at, || -> Result<(Vec<u8>, Vec<u64>)> {
            let h5ds = self
                .h5
                .file
                .dataset(ds.name())
                .map_err(|e| h5err(&at, format!("cannot open dataset: {e}")))?;
            // SAFETY: valid ids, HDF5 lock held; every buffer handed to H5Dread holds one
            // element of the memory type (a `hvl_t` or a `char *`), reclaimed after each read.
            unsafe {
                let ftype = owned(H5Dget_type(h5ds.id()), H5Tclose, &at, "the file type")?;
                let string = H5Tget_class(ftype.0) == H5T_class_t::H5T_STRING;
                let mtype = if string {
                    let t = owned(H5Tcopy(*H5T_C_S1), H5Tclose, &at, "a string type")?;
                    if H5Tset_size(t.0, H5T_VARIABLE) < 0
                        || H5Tset_cset(t.0, H5Tget_cset(ftype.0)) < 0
                    {
                        return Err(h5err(&at, "libhdf5 could not make a string type"));
                    }
                    t
                } else {
                    let base = owned(H5Tget_super(ftype.0), H5Tclose, &at, "the base type")?;
                    if H5Tget_size(base.0) != elem_bytes {
                        return Err(h5err(
                            &at,
                            format!(
                                "sequence elements of {} bytes, expected {elem_bytes}",
                                H5Tget_size(base.0)
                            ),
                        ));
                    }
                    owned(H5Tvlen_create(base.0), H5Tclose, &at, "a sequence type")?
                };
                let fspace = owned(H5Dget_space(h5ds.id()), H5Sclose, &at, "the dataspace")?;
                let one = [1u64];
                let mspace = owned(
                    H5Screate_simple(1, one.as_ptr(), std::ptr::null()),
                    H5Sclose,
                    &at,
                    "a dataspace",
                )?;
                let mut bytes = Vec::new();
                let mut offsets = Vec::with_capacity(rows.len() + 1);
                offsets.push(0u64);
                for &i in rows {
                    let start = [i as u64];
                    if H5Sselect_hyperslab(
                        fspace.0,
                        H5S_seloper_t::H5S_SELECT_SET,
                        start.as_ptr(),
                        std::ptr::null(),
                        one.as_ptr(),
                        std::ptr::null(),
                    ) < 0
                    {
                        return Err(h5err(&at, format!("cannot select sample {i}")));
                    }
                    let mut seq = hvl_t::default();
                    let mut text: *mut c_char = std::ptr::null_mut();
                    let buf: *mut c_void = if string {
                        (&mut text as *mut *mut c_char).cast()
                    } else {
                        (&mut seq as *mut hvl_t).cast()
                    };
                    if H5Dread(h5ds.id(), mtype.0, mspace.0, fspace.0, H5P_DEFAULT, buf) < 0 {
                        let why = hdf5_metno::Error::query()
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        return Err(h5err(
                            &at,
                            format!("libhdf5 could not read sample {i}: {why}"),
                        ));
                    }
                    let n = if string {
                        let s = if text.is_null() {
                            &[][..]
                        } else {
                            CStr::from_ptr(text).to_bytes()
                        };
                        bytes.extend_from_slice(s);
                        Some(s.len())
                    } else {
                        let len = seq.len.checked_mul(elem_bytes);
                        if let Some(len) = len.filter(|&l| l > 0 && !seq.p.is_null()) {
                            bytes.extend_from_slice(std::slice::from_raw_parts(
                                seq.p.cast::<u8>(),
                                len,
                            ));
                        }
                        len.map(|_| seq.len)
                    };
                    if H5Treclaim(mtype.0, mspace.0, H5P_DEFAULT, buf) < 0 {
                        return Err(h5err(&at, "libhdf5 could not free a sequence it read"));
                    }
                    let n = n.ok_or_else(|| {
                        h5err(&at, format!("sample {i}: sequence length overflows"))
                    })?;
                    let last = *offsets.last().expect("starts with 0");
                    offsets.push(last + n as u64);
                }
                Ok((bytes, offsets))
            }
        })?;
        let mut batch = RaggedBatch::zeroed(bytes.len(), offsets, elem_bytes.max(1));
        batch.bytes_mut().copy_from_slice(&bytes);
        Ok(batch)
    }

    /// The object table of the collection at `addr`: from the index, or by reading the
    /// collection once.
    fn collection(&self, addr: u64, v: &Vlen) -> Result<Arc<ObjectTable>> {
        if let Some(t) = self.heaps.get(addr) {
            return Ok(t);
        }
        let at = || format!("{} (global heap at byte {addr})", self.location);
        let ss = v.sizeof_size;
        let mut head = vec![0u8; 8 + ss];
        let len = self.source.source().len();
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
    pub fn plan_ragged(&self, rows: &Rows, w: usize) -> Result<RaggedPlan> {
        let (ds, at, v) = self.vlen_dataset(w)?;
        if ds.reads_through_library() {
            return Err(h5err(
                &at,
                "variable-length data that libhdf5 reads has no heap IDs to plan",
            ));
        }
        let mut ids = vec![0u8; rows.len() * ds.sample_bytes];
        crate::batch::read_batch(self, rows, &[w], &mut [&mut ids])?;
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
        let tables: Vec<Arc<ObjectTable>> =
            pool::try_map_with(self.threads, &addrs, |_, &a| self.collection(a, v)).map_err(
                |e| {
                    let loc = e.location().replacen(&self.location, &at, 1);
                    e.at(loc)
                },
            )?;
        let mut reads = Vec::with_capacity(heap_ids.len());
        let mut offsets = Vec::with_capacity(heap_ids.len() + 1);
        offsets.push(0u64);
        let mut total = 0u64;
        for (k, h) in heap_ids.iter().enumerate() {
            if h.len > 0 {
                let bad = |m: String| {
                    h5err(
                        &format!(
                            "{at} (sample {}, global heap at byte {})",
                            rows.as_slice()[k],
                            h.addr
                        ),
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
        crate::batch::tiling::check_out_len(out.len(), plan.total() as usize, plan.elem_bytes)?;
        // The sequences lie one after another in `out`: cut it into their disjoint slices.
        let mut parts: Vec<(u64, &mut [u8])> = Vec::with_capacity(plan.reads.len());
        let mut rest = out;
        for &(offset, len) in &plan.reads {
            let (head, tail) = rest.split_at_mut(len);
            parts.push((offset, head));
            rest = tail;
        }
        pool::try_for_each_with(self.threads, &mut parts, |(offset, dst)| {
            self.source.read_at(0, *offset, dst)
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
    fn c_strings_end_at_their_first_nul() {
        let text = b"ab\x01\0b\x01xyz\0\0q";
        let mut batch = RaggedBatch::zeroed(text.len(), vec![0, 6, 6, 9, 12], 1);
        batch.bytes_mut().copy_from_slice(text);
        cut_at_nul(&mut batch);
        assert_eq!(batch.offsets, vec![0, 3, 3, 6, 6]);
        assert_eq!(batch.bytes(), b"ab\x01xyz");
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
