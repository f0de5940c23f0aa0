//! A dataset's attributes, read at open under libhdf5's lock: fixed-size values as raw bytes
//! with their numpy dtype, variable-length strings as text. PyTables' own bookkeeping
//! attributes are left out of PyTables files, as its user-attribute view (`_f_list("user")`)
//! does. Values packread cannot express (references, variable-length sequences, ...) are left
//! out too; nothing is ever unpickled (PyTables pickles Python objects: they stay bytes).

use std::ffi::{c_char, CStr};

use hdf5_sys::h5::{H5_index_t, H5_iter_order_t};
use hdf5_sys::h5a::{H5Aclose, H5Aget_name, H5Aget_space, H5Aget_type, H5Aopen_by_idx, H5Aread};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5o::{H5O_info2_t, H5Oget_info3, H5O_INFO_NUM_ATTRS};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{
    H5S_class_t, H5Sclose, H5Sget_simple_extent_dims, H5Sget_simple_extent_ndims,
    H5Sget_simple_extent_type,
};
use hdf5_sys::h5t::{
    H5T_class_t, H5T_cset_t, H5Tclose, H5Tcopy, H5Tget_class, H5Tget_cset, H5Tget_size,
    H5Tis_variable_str, H5Treclaim, H5Tset_cset, H5Tset_size, H5T_C_S1, H5T_VARIABLE,
};

use super::handle::Handle;
use super::types::{descr_of, Conventions};
use crate::dtype::DType;

/// PyTables' system attributes (`tables.attributeset.SYS_ATTRS`) and prefixes.
const PYTABLES_SYS_ATTRS: &[&str] = &[
    "CLASS",
    "VERSION",
    "TITLE",
    "NROWS",
    "EXTDIM",
    "ENCODING",
    "PYTABLES_FORMAT_VERSION",
    "FLAVOR",
    "FILTERS",
    "AUTO_INDEX",
    "DIRTY",
    "NODE_TYPE",
    "NODE_TYPE_VERSION",
    "PSEUDOATOM",
];
const PYTABLES_SYS_PREFIXES: &[&str] = &["FIELD_"];

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// Fixed-size values in the stored byte order. `text`: a fixed-length string PyTables
    /// reads as `str` (UTF-8 character set in a PyTables file).
    Array {
        /// The element type: the stored byte order, or native in a PyTables file (as PyTables
        /// reads attributes).
        dtype: DType,
        /// The dataspace's dimensions; empty for a scalar.
        shape: Vec<usize>,
        /// The elements in C order, `prod(shape)` times the dtype's itemsize.
        bytes: Vec<u8>,
        /// Whether the dataspace is scalar: one value, given as such rather than as a 0-d array.
        scalar: bool,
        /// Whether the bytes are UTF-8 text to decode to `str` (see the variant).
        text: bool,
    },
    /// Variable-length strings.
    Strings {
        /// The strings in C order (invalid UTF-8 replaced; a null pointer read as `""`).
        values: Vec<String>,
        /// The dataspace's dimensions; empty for a scalar.
        shape: Vec<usize>,
        /// Whether the dataspace is scalar: `values` then holds the one string.
        scalar: bool,
    },
    /// A null dataspace (h5py's `Empty`).
    Empty,
}

/// The attributes of object `obj`, in name order.
///
/// # Safety
/// `obj` is an open object id and the caller holds the HDF5 lock.
pub(super) unsafe fn attributes(obj: hid_t, conv: Conventions) -> Vec<(String, AttrValue)> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let mut info: H5O_info2_t = std::mem::zeroed();
        if H5Oget_info3(obj, &mut info, H5O_INFO_NUM_ATTRS) < 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for i in 0..info.num_attrs {
            let attr = Handle(
                H5Aopen_by_idx(
                    obj,
                    c".".as_ptr(),
                    H5_index_t::H5_INDEX_NAME,
                    H5_iter_order_t::H5_ITER_INC,
                    i,
                    H5P_DEFAULT,
                    H5P_DEFAULT,
                ),
                H5Aclose,
            );
            if attr.0 < 0 {
                continue;
            }
            let mut name = [0 as c_char; 256];
            if H5Aget_name(attr.0, name.len(), name.as_mut_ptr()) < 0 {
                continue;
            }
            let name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            if conv == Conventions::PyTables
                && (PYTABLES_SYS_ATTRS.contains(&name.as_str())
                    || PYTABLES_SYS_PREFIXES.iter().any(|p| name.starts_with(p)))
            {
                continue;
            }
            if let Some(v) = value(attr.0, conv) {
                out.push((name, v));
            }
        }
        out
    }
}

unsafe fn value(attr: hid_t, conv: Conventions) -> Option<AttrValue> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let space = Handle(H5Aget_space(attr), H5Sclose);
        let ftype = Handle(H5Aget_type(attr), H5Tclose);
        if space.0 < 0 || ftype.0 < 0 {
            return None;
        }
        let class = H5Sget_simple_extent_type(space.0);
        if class == H5S_class_t::H5S_NULL {
            return Some(AttrValue::Empty);
        }
        let ndims = H5Sget_simple_extent_ndims(space.0);
        if !(0..=32).contains(&ndims) {
            return None;
        }
        let mut dims = vec![0u64; ndims as usize];
        H5Sget_simple_extent_dims(space.0, dims.as_mut_ptr(), std::ptr::null_mut());
        let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let scalar = class == H5S_class_t::H5S_SCALAR;
        let count: usize = shape.iter().product();
        if count > 1 << 24 {
            return None;
        }
        if H5Tget_class(ftype.0) == H5T_class_t::H5T_STRING && H5Tis_variable_str(ftype.0) > 0 {
            let mtype = Handle(H5Tcopy(*H5T_C_S1), H5Tclose);
            H5Tset_size(mtype.0, H5T_VARIABLE);
            H5Tset_cset(mtype.0, H5Tget_cset(ftype.0));
            let mut ptrs: Vec<*mut c_char> = vec![std::ptr::null_mut(); count.max(1)];
            if H5Aread(attr, mtype.0, ptrs.as_mut_ptr().cast()) < 0 {
                return None;
            }
            let values = ptrs
                .iter()
                .take(count.max(1))
                .map(|&p| {
                    if p.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(p).to_string_lossy().into_owned()
                    }
                })
                .collect();
            H5Treclaim(mtype.0, space.0, H5P_DEFAULT, ptrs.as_mut_ptr().cast());
            return Some(AttrValue::Strings {
                values,
                shape,
                scalar,
            });
        }
        // PyTables gives attributes in native byte order, h5py as stored.
        let mtype = if conv == Conventions::PyTables {
            Handle(
                hdf5_sys::h5t::H5Tget_native_type(
                    ftype.0,
                    hdf5_sys::h5t::H5T_direction_t::H5T_DIR_DEFAULT,
                ),
                H5Tclose,
            )
        } else {
            Handle(H5Tcopy(ftype.0), H5Tclose)
        };
        if mtype.0 < 0 {
            return None;
        }
        let dtype = DType::from_descr(descr_of(mtype.0, conv).ok()?).ok()?;
        let size = H5Tget_size(mtype.0);
        if size != dtype.itemsize() {
            return None;
        }
        let mut bytes = vec![0u8; count.max(1) * size];
        if H5Aread(attr, mtype.0, bytes.as_mut_ptr().cast()) < 0 {
            return None;
        }
        bytes.truncate(count * size);
        let text = conv == Conventions::PyTables
            && H5Tget_class(ftype.0) == H5T_class_t::H5T_STRING
            && H5Tget_cset(ftype.0) == H5T_cset_t::H5T_CSET_UTF8;
        Some(AttrValue::Array {
            dtype,
            shape,
            bytes,
            scalar,
            text,
        })
    }
}
