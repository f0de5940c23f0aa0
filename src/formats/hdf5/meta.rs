//! Everything packread asks libhdf5, all at open and under its lock: the datasets of a file,
//! and for each its dtype, shape, layout, filter pipeline, fill value and chunk index.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use hdf5_sys::h5::{haddr_t, hsize_t, H5_index_t, H5_iter_order_t};
use hdf5_sys::h5d::H5D_fill_value_t;
use hdf5_sys::h5d::{
    H5D_fill_time_t, H5D_layout_t, H5D_space_status_t, H5Dchunk_iter, H5Dget_create_plist,
    H5Dget_offset, H5Dget_space, H5Dget_space_status, H5Dget_type,
};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5i::{H5I_type_t, H5Iget_type};
use hdf5_sys::h5l::{H5L_info2_t, H5L_type_t, H5Literate2};
use hdf5_sys::h5o::{H5Oclose, H5Oopen};
use hdf5_sys::h5p::{
    H5Pclose, H5Pfill_value_defined, H5Pget_chunk, H5Pget_external_count, H5Pget_fill_time,
    H5Pget_fill_value, H5Pget_filter2, H5Pget_layout, H5Pget_nfilters, H5P_DEFAULT,
};
use hdf5_sys::h5s::{H5Sclose, H5Sget_simple_extent_dims, H5Sget_simple_extent_ndims};
use hdf5_sys::h5t::H5Tclose;
use hdf5_sys::h5z::H5Zfilter_avail;

use super::attrs::{attributes, AttrValue};
use super::handle::{h5err, Handle};
use super::types::{descr_of, Conventions};
use super::vlen::{vlen_of, Vlen};
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::Result;
use crate::source::Source;

/// One filter of a dataset's pipeline, in the order it was applied when writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The HDF5 filter id (1 deflate, 2 shuffle, 32001 blosc, ...).
    pub id: u32,
    /// The filter's name as libhdf5 reports it, for messages (may be empty).
    pub name: String,
    /// The filter's client data values (`cd_values`), the first 16 at most.
    pub params: Vec<u32>,
    /// Whether this build of libhdf5 can decode it (used when packread cannot).
    pub available: bool,
}

/// Where a chunk's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLoc {
    /// File offset of the chunk's first stored byte (checked to lie inside the file).
    pub addr: u64,
    /// Bytes the chunk takes in the file, as stored (filtered); never 0.
    pub size: u64,
    /// Bit `i` set: filter `i` was skipped for this chunk.
    pub mask: u32,
}

/// How a dataset's bytes are stored.
#[derive(Debug)]
pub(crate) enum Layout {
    /// One block; `None` if it was never written (reads as the fill value).
    Contiguous {
        /// File offset of the block's first byte.
        addr: Option<u64>,
    },
    /// Chunks of `chunk` elements; `chunks` maps a chunk's linear grid position to its bytes
    /// (absent: never written).
    Chunked {
        /// Elements of one chunk along each axis (none of them 0).
        chunk: Vec<usize>,
        /// The written chunks, by linear grid position (grid coordinates in C order, the grid
        /// `ceil(shape / chunk)` chunks along each axis); none overlap another.
        chunks: HashMap<u64, ChunkLoc>,
    },
    /// Compact, external or virtual storage: libhdf5 reads it.
    Other(String),
}

/// What packread knows about one dataset after opening it.
#[derive(Debug)]
pub(crate) struct DatasetMeta {
    /// The dataset's path from the root, with its leading `/`.
    pub name: String,
    /// The numpy dtype of one stored element; `None` when there is none (see
    /// `dtype_problem`).
    pub dtype: Option<DType>,
    /// Why the dtype has no fixed-size numpy equivalent, when it has none.
    pub dtype_problem: Option<String>,
    /// The dataspace's current dimensions; empty for a scalar.
    pub shape: Vec<usize>,
    /// How the bytes are stored.
    pub layout: Layout,
    /// The filter pipeline, in the order it was applied when writing.
    pub filters: Vec<Filter>,
    /// One element of the fill value, in the stored byte order.
    pub fill: Vec<u8>,
    /// For variable-length data: what the sequences hold (`dtype` is then the heap ID).
    pub vlen: Option<Vlen>,
    /// The dataset's attributes (user attributes only, in a PyTables file).
    pub attrs: Vec<(String, AttrValue)>,
}

extern "C" {
    // libhdf5's chunk search (as its reads use it); not bound by hdf5-metno-sys.
    fn H5Dget_chunk_storage_size(
        dset_id: hid_t,
        offset: *const hsize_t,
        chunk_bytes: *mut hsize_t,
    ) -> hdf5_sys::h5::herr_t;
    fn H5Dget_chunk_index_type(
        dset_id: hid_t,
        index: *mut hdf5_sys::h5d::H5D_chunk_index_t,
    ) -> hdf5_sys::h5::herr_t;
}

fn id(
    raw: hid_t,
    close: unsafe extern "C" fn(hid_t) -> i32,
    location: &str,
    what: &str,
) -> Result<Handle> {
    Handle::checked(raw, close)
        .ok_or_else(|| h5err(location, format!("cannot read the dataset's {what}")))
}

/// Every dataset reachable from the root through hard links, each once (by its first path
/// in name order, as h5py's `visititems` gives it), with the reason one cannot be read: a name
/// that is not UTF-8 (packread's names are `str`), or an object libhdf5 cannot open (a damaged
/// object header). A damaged object is reported, not a reason to refuse the file: h5py and
/// PyTables read the file's other datasets. Groups are walked one link at a time (as h5py
/// opens objects), not with `H5Ovisit`/`H5Lvisit`, which give up on the whole file at the
/// first object they cannot open.
///
/// # Safety
/// `file` is an open file id and the caller holds the HDF5 lock.
pub(super) unsafe fn dataset_names(
    file: hid_t,
    location: &str,
) -> Result<Vec<(String, Option<String>)>> {
    /// The hard links of one group: (name, the object's token).
    extern "C" fn collect(
        _group: hid_t,
        name: *const c_char,
        info: *const H5L_info2_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: libhdf5 passes a valid name and link info; `data` is the Vec below.
        unsafe {
            if (*info).type_ == H5L_type_t::H5L_TYPE_HARD {
                // SAFETY: a hard link's union holds its object's token, 16 plain bytes.
                let token: [u8; 16] = std::mem::transmute((*info).u);
                let links = &mut *data.cast::<Vec<(Vec<u8>, [u8; 16])>>();
                links.push((CStr::from_ptr(name).to_bytes().to_vec(), token));
            }
        }
        0
    }
    /// Adds the datasets under `group` (whose path is `path`) to `found`.
    unsafe fn walk(
        group: hid_t,
        path: &str,
        found: &mut Vec<(String, Option<String>)>,
        seen: &mut std::collections::HashSet<[u8; 16]>,
        depth: usize,
    ) -> bool {
        // SAFETY: the caller's contract: `group` is open, the lock held.
        unsafe {
            let mut links: Vec<(Vec<u8>, [u8; 16])> = Vec::new();
            let mut idx: hsize_t = 0;
            if H5Literate2(
                group,
                H5_index_t::H5_INDEX_NAME,
                H5_iter_order_t::H5_ITER_INC,
                &mut idx,
                Some(collect),
                (&mut links as *mut Vec<(Vec<u8>, [u8; 16])>).cast(),
            ) < 0
            {
                return false;
            }
            for (name, token) in links {
                if !seen.insert(token) {
                    continue; // reached before, by another path
                }
                let child = format!("{path}/{}", String::from_utf8_lossy(&name));
                let Ok(cname) = std::ffi::CString::new(name.clone()) else {
                    continue;
                };
                let id = H5Oopen(group, cname.as_ptr(), H5P_DEFAULT);
                if id < 0 {
                    let why = "its object header cannot be read (damaged)".to_string();
                    found.push((child, Some(why)));
                    continue;
                }
                match H5Iget_type(id) {
                    H5I_type_t::H5I_DATASET => {
                        let why = std::str::from_utf8(&name)
                            .is_err()
                            .then(|| "its name is not UTF-8, so no str can name it".to_string());
                        found.push((child, why));
                    }
                    H5I_type_t::H5I_GROUP
                        if depth < MAX_GROUP_DEPTH && !walk(id, &child, found, seen, depth + 1) =>
                    {
                        let why = "its group cannot be read (damaged)".to_string();
                        found.push((child, Some(why)));
                    }
                    _ => {}
                }
                H5Oclose(id);
            }
            true
        }
    }
    /// Groups nested deeper than this are not walked (a loop of links could go on forever).
    const MAX_GROUP_DEPTH: usize = 256;
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // SAFETY: the caller's contract.
    if !unsafe { walk(file, "", &mut found, &mut seen, 0) } {
        return Err(h5err(location, "cannot walk the file's groups"));
    }
    Ok(found)
}

/// What a file says about all its datasets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileFacts {
    pub conv: Conventions,
    /// Bytes of a file address and of a length (the superblock's "sizes").
    pub sizeof_addr: usize,
    pub sizeof_size: usize,
    /// libhdf5's number of the open file: a dataset of another number is in another file
    /// (reached through an external link), whose addresses are not this file's.
    pub fileno: std::ffi::c_ulong,
}

/// Reads the file-wide facts: PyTables marks the files it writes with a root attribute; the
/// creation properties give the size of addresses and lengths.
///
/// # Safety
/// `file` is an open file id and the caller holds the HDF5 lock.
pub(super) unsafe fn file_facts(file: hid_t, location: &str) -> Result<FileFacts> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let name = c"PYTABLES_FORMAT_VERSION";
        let conv = if hdf5_sys::h5a::H5Aexists_by_name(
            file,
            c"/".as_ptr(),
            name.as_ptr(),
            H5P_DEFAULT,
        ) > 0
        {
            Conventions::PyTables
        } else {
            Conventions::H5py
        };
        let fcpl = id(
            hdf5_sys::h5f::H5Fget_create_plist(file),
            H5Pclose,
            location,
            "file creation properties",
        )?;
        let (mut sa, mut ss) = (0usize, 0usize);
        if hdf5_sys::h5p::H5Pget_sizes(fcpl.0, &mut sa, &mut ss) < 0
            || !(2..=8).contains(&sa)
            || !(2..=8).contains(&ss)
        {
            return Err(h5err(
                location,
                "cannot read the file's address and length sizes",
            ));
        }
        let mut fileno = 0;
        if hdf5_sys::h5f::H5Fget_fileno(file, &mut fileno) < 0 {
            return Err(h5err(location, "cannot read the file's number"));
        }
        Ok(FileFacts {
            conv,
            sizeof_addr: sa,
            sizeof_size: ss,
            fileno,
        })
    }
}

/// Reads a dataset's metadata. `file_len` bounds every address.
///
/// # Safety
/// `ds` is an open dataset id and the caller holds the HDF5 lock.
pub(super) unsafe fn dataset_meta(
    ds: hid_t,
    name: &str,
    location: &str,
    file_len: u64,
    facts: FileFacts,
    source: &dyn Source,
) -> Result<DatasetMeta> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let at = format!("{location}:{name}");
        let space = id(H5Dget_space(ds), H5Sclose, &at, "dataspace")?;
        let ndims = H5Sget_simple_extent_ndims(space.0);
        if ndims < 0 {
            return Err(h5err(&at, "cannot read the dataset's rank"));
        }
        let mut dims = vec![0 as hsize_t; ndims as usize];
        H5Sget_simple_extent_dims(space.0, dims.as_mut_ptr(), std::ptr::null_mut());
        let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();

        let ftype = id(H5Dget_type(ds), H5Tclose, &at, "datatype")?;
        let vlen = vlen_of(ftype.0, facts, ds);
        let (dtype, dtype_problem, itemsize) = match &vlen {
            // Variable-length data: the dataset's own elements are the heap IDs.
            Some(Ok(v)) => (
                DType::from_descr(Literal::Str(format!("|V{}", v.id_bytes))).ok(),
                None,
                v.id_bytes,
            ),
            Some(Err(problem)) => (None, Some(problem.clone()), 0),
            None => {
                let (dtype, problem) = match descr_of(ftype.0, facts.conv) {
                    Ok(descr) => match DType::from_descr(descr) {
                        Ok(d) => (Some(d), None),
                        Err(e) => (None, Some(format!("{e:?}"))),
                    },
                    Err(problem) => (None, Some(problem)),
                };
                (dtype, problem, hdf5_sys::h5t::H5Tget_size(ftype.0))
            }
        };
        let vlen = vlen.and_then(|v| v.ok());

        let dcpl = id(
            H5Dget_create_plist(ds),
            H5Pclose,
            &at,
            "creation properties",
        )?;
        let filters = filters(dcpl.0, &at)?;
        let fill = if vlen.is_some() {
            // A never-written element is an empty sequence (length 0).
            vec![0u8; itemsize]
        } else {
            fill_value(dcpl.0, ftype.0, itemsize, &at)?
        };
        let own_file = id(
            hdf5_sys::h5i::H5Iget_file_id(ds),
            hdf5_sys::h5f::H5Fclose,
            &at,
            "the dataset's file",
        )?;
        let mut fileno = 0;
        if hdf5_sys::h5f::H5Fget_fileno(own_file.0, &mut fileno) < 0 {
            return Err(h5err(&at, "cannot read the dataset's file number"));
        }
        let layout = match H5Pget_layout(dcpl.0) {
            // Its chunks are at addresses of another file, which batches do not read.
            _ if fileno != facts.fileno => Layout::Other("a dataset in another file".into()),
            _ if H5Pget_external_count(dcpl.0) > 0 => Layout::Other("external storage".into()),
            H5D_layout_t::H5D_CONTIGUOUS => {
                let mut status = H5D_space_status_t::H5D_SPACE_STATUS_ERROR;
                let allocated = H5Dget_space_status(ds, &mut status) >= 0
                    && status != H5D_space_status_t::H5D_SPACE_STATUS_NOT_ALLOCATED;
                // With a user block, libhdf5 adds its size even to the "undefined" address, so
                // allocation is asked about, not inferred from the address.
                let addr = H5Dget_offset(ds);
                if !allocated || addr == haddr_t::MAX {
                    Layout::Contiguous { addr: None }
                } else {
                    let bytes = shape
                        .iter()
                        .try_fold(itemsize as u64, |a, &d| a.checked_mul(d as u64));
                    if bytes
                        .and_then(|b| b.checked_add(addr))
                        .is_none_or(|end| end > file_len)
                    {
                        return Err(h5err(
                            &at,
                            format!(
                                "data at offset {addr} runs past the end of the {file_len}-byte file"
                            ),
                        ));
                    }
                    Layout::Contiguous { addr: Some(addr) }
                }
            }
            H5D_layout_t::H5D_CHUNKED => {
                chunked(ds, dcpl.0, &shape, itemsize, &at, file_len, source)?
            }
            H5D_layout_t::H5D_COMPACT => Layout::Other("compact layout".into()),
            other => Layout::Other(format!("{other:?} layout")),
        };
        Ok(DatasetMeta {
            name: name.to_string(),
            dtype,
            dtype_problem,
            shape,
            layout,
            filters,
            fill,
            vlen,
            attrs: attributes(ds, facts.conv),
        })
    }
}

unsafe fn filters(dcpl: hid_t, at: &str) -> Result<Vec<Filter>> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let n = H5Pget_nfilters(dcpl);
        if n < 0 {
            return Err(h5err(at, "cannot read the filter pipeline"));
        }
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n as c_uint {
            let mut flags: c_uint = 0;
            let mut nparams: usize = 16;
            let mut params = [0 as c_uint; 16];
            let mut name = [0 as c_char; 64];
            let mut config: c_uint = 0;
            let fid = H5Pget_filter2(
                dcpl,
                i,
                &mut flags,
                &mut nparams,
                params.as_mut_ptr(),
                name.len(),
                name.as_mut_ptr(),
                &mut config,
            );
            if fid < 0 {
                return Err(h5err(at, format!("cannot read filter {i}")));
            }
            let fid = fid as u32;
            out.push(Filter {
                id: fid,
                name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                params: params[..nparams.min(16)].to_vec(),
                available: H5Zfilter_avail(fid as c_int) > 0,
            });
        }
        Ok(out)
    }
}

unsafe fn fill_value(dcpl: hid_t, ftype: hid_t, itemsize: usize, at: &str) -> Result<Vec<u8>> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let mut status = H5D_fill_value_t::H5D_FILL_VALUE_DEFAULT;
        let mut fill = vec![0u8; itemsize];
        // Never-written data with fill time "never" reads as zeros through h5py.
        let mut time = H5D_fill_time_t::H5D_FILL_TIME_IFSET;
        if H5Pget_fill_time(dcpl, &mut time) >= 0 && time == H5D_fill_time_t::H5D_FILL_TIME_NEVER {
            return Ok(fill);
        }
        if H5Pfill_value_defined(dcpl, &mut status) >= 0
            && status == H5D_fill_value_t::H5D_FILL_VALUE_USER_DEFINED
            && H5Pget_fill_value(dcpl, ftype, fill.as_mut_ptr().cast()) < 0
        {
            return Err(h5err(at, "cannot read the fill value"));
        }
        Ok(fill)
    }
}

/// A chunk table as bytes: per chunk its linear position, address, size (u64 each) and
/// filter mask (u32), little-endian.
fn encode_chunks(chunks: &HashMap<u64, ChunkLoc>) -> Vec<u8> {
    let mut out = Vec::with_capacity(chunks.len() * 28);
    for (linear, c) in chunks {
        out.extend_from_slice(&linear.to_le_bytes());
        out.extend_from_slice(&c.addr.to_le_bytes());
        out.extend_from_slice(&c.size.to_le_bytes());
        out.extend_from_slice(&c.mask.to_le_bytes());
    }
    out
}

/// [`encode_chunks`] undone; `None` if the bytes are not a whole table.
fn decode_chunks(bytes: &[u8]) -> Option<HashMap<u64, ChunkLoc>> {
    if bytes.len() % 28 != 0 {
        return None;
    }
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
    let mut chunks = HashMap::with_capacity(bytes.len() / 28);
    for rec in bytes.chunks_exact(28) {
        let loc = ChunkLoc {
            addr: u64_at(rec, 8),
            size: u64_at(rec, 16),
            mask: u32::from_le_bytes(rec[24..28].try_into().expect("4")),
        };
        if chunks.insert(u64_at(rec, 0), loc).is_some() {
            return None;
        }
    }
    Some(chunks)
}

struct ChunkVisit {
    chunk: Vec<u64>,
    grid: Vec<u64>,
    chunks: HashMap<u64, ChunkLoc>,
    problem: Option<String>,
}

unsafe fn chunked(
    ds: hid_t,
    dcpl: hid_t,
    shape: &[usize],
    itemsize: usize,
    at: &str,
    file_len: u64,
    source: &dyn Source,
) -> Result<Layout> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let rank = shape.len();
        let mut chunk = vec![0 as hsize_t; rank.max(1)];
        let got = H5Pget_chunk(dcpl, rank as c_int, chunk.as_mut_ptr());
        if got != rank as c_int {
            return Err(h5err(
                at,
                format!("chunk rank {got} does not match the dataset rank {rank}"),
            ));
        }
        if chunk.iter().take(rank).any(|&c| c == 0) {
            return Err(h5err(
                at,
                format!("chunk shape {chunk:?} has a zero dimension"),
            ));
        }
        let grid: Vec<u64> = shape
            .iter()
            .zip(&chunk)
            .map(|(&d, &c)| (d as u64).div_ceil(c))
            .collect();
        let chunk_bytes = chunk
            .iter()
            .take(rank)
            .try_fold(itemsize as u64, |a, &c| a.checked_mul(c));
        if chunk_bytes.is_none_or(|b| b > (1 << 40)) {
            return Err(h5err(at, format!("chunk shape {chunk:?} is too large")));
        }
        extern "C" fn visit(
            offset: *const hsize_t,
            mask: c_uint,
            addr: haddr_t,
            size: hsize_t,
            data: *mut c_void,
        ) -> c_int {
            // SAFETY: `data` is the ChunkVisit below; `offset` has one entry per dimension.
            unsafe {
                let v = &mut *data.cast::<ChunkVisit>();
                let coords = std::slice::from_raw_parts(offset, v.chunk.len());
                let mut linear = 0u64;
                for ((&o, &c), &g) in coords.iter().zip(&v.chunk).zip(&v.grid) {
                    if o % c != 0 || o / c >= g {
                        v.problem = Some(format!("chunk at {coords:?} is not on the chunk grid"));
                        return -1;
                    }
                    linear = linear * g + o / c;
                }
                if v.chunks
                    .insert(linear, ChunkLoc { addr, size, mask })
                    .is_some()
                {
                    // h5py would read one of the two; which is the file's data is unknowable.
                    v.problem = Some(format!(
                        "the chunk index holds the chunk at {coords:?} twice"
                    ));
                    return -1;
                }
            }
            0
        }
        let mut v = ChunkVisit {
            chunk: chunk[..rank].to_vec(),
            grid: grid.clone(),
            chunks: HashMap::new(),
            problem: None,
        };
        // A file opened before (an object of the same URL, size and validators): its chunk
        // table as it was found then, checked again below like one just read.
        let blob_name = format!("chunks:{at}");
        let cached = source.parsed(&blob_name).and_then(|b| decode_chunks(&b));
        let from_cache = cached.is_some();
        if let Some(chunks) = cached {
            v.chunks = chunks;
        } else if rank > 0 && shape.iter().all(|&d| d > 0) {
            let status = H5Dchunk_iter(
                ds,
                H5P_DEFAULT,
                Some(visit),
                (&mut v as *mut ChunkVisit).cast(),
            );
            if status < 0 {
                return Err(h5err(
                    at,
                    v.problem
                        .unwrap_or_else(|| "cannot read the chunk index".into()),
                ));
            }
        }
        // libhdf5's own reads (so h5py's) find a chunk by searching the index for its
        // coordinates, not by iterating over it: a record the search cannot reach (a damaged
        // B-tree key) is, to them, a chunk never written, which reads as the fill value. Only
        // chunks the search finds are kept, so that such a chunk reads the same here; one the
        // search finds with another size is a second record for the same coordinates.
        let filtered = H5Pget_nfilters(dcpl) > 0;
        let mut problem = None;
        // Fixed and extensible array indexes find a chunk by its position, as their iteration
        // does: nothing to compare there.
        const V1_BTREE: hdf5_sys::h5d::H5D_chunk_index_t = 0;
        const V2_BTREE: hdf5_sys::h5d::H5D_chunk_index_t = 5;
        let mut index = V1_BTREE;
        let searched =
            H5Dget_chunk_index_type(ds, &mut index) < 0 || matches!(index, V1_BTREE | V2_BTREE);
        v.chunks.retain(|&linear, loc| {
            if !searched || from_cache {
                return true;
            }
            let mut coords = vec![0 as hsize_t; rank];
            let mut rest = linear;
            for d in (0..rank).rev() {
                coords[d] = rest % grid[d] * chunk[d];
                rest /= grid[d];
            }
            let mut size: hsize_t = 0;
            if H5Dget_chunk_storage_size(ds, coords.as_ptr(), &mut size) < 0 {
                return false;
            }
            if filtered && size != loc.size && problem.is_none() {
                problem = Some(format!(
                    "the chunk index lists the chunk at {coords:?} with {} bytes, but finds one of {size}",
                    loc.size
                ));
            }
            true
        });
        if let Some(p) = problem {
            return Err(h5err(at, p));
        }
        // Every chunk inside the file, none overlapping another.
        let mut spans: Vec<(u64, u64)> = v.chunks.values().map(|c| (c.addr, c.size)).collect();
        spans.sort_unstable();
        for &(addr, size) in &spans {
            if size == 0 || addr.checked_add(size).is_none_or(|end| end > file_len) {
                return Err(h5err(
                    at,
                    format!(
                        "chunk at offset {addr} of {size} bytes lies outside the {file_len}-byte file"
                    ),
                ));
            }
        }
        if let Some(w) = spans.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err(h5err(
                at,
                format!("chunks at offsets {} and {} overlap", w[0].0, w[1].0),
            ));
        }
        if !from_cache {
            source.keep_parsed(&blob_name, encode_chunks(&v.chunks));
        }
        Ok(Layout::Chunked {
            chunk: chunk[..rank].iter().map(|&c| c as usize).collect(),
            chunks: v.chunks,
        })
    }
}
