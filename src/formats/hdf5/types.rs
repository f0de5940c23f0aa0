//! HDF5 datatypes to numpy descriptions, following h5py's conventions: the stored byte order
//! is kept, an enum of int8 {FALSE: 0, TRUE: 1} is `bool`, a compound of two equal floats
//! named `r` and `i` is complex, fixed-length strings are `S`, compound members keep their
//! offsets (padding becomes numpy's `''` void fields).

use std::ffi::CStr;

use hdf5_sys::h5::H5free_memory;
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5t::{
    H5T_class_t, H5T_norm_t, H5T_order_t, H5T_sign_t, H5Tclose, H5Tget_array_dims2,
    H5Tget_array_ndims, H5Tget_class, H5Tget_ebias, H5Tget_fields, H5Tget_member_name,
    H5Tget_member_offset, H5Tget_member_type, H5Tget_member_value, H5Tget_nmembers, H5Tget_norm,
    H5Tget_offset, H5Tget_order, H5Tget_precision, H5Tget_sign, H5Tget_size, H5Tget_super,
    H5Tis_variable_str,
};

use super::handle::Handle;
use crate::dtype::literal::Literal;

/// Deepest nesting of compound and array types followed.
const MAX_DEPTH: usize = 8;

fn owned(id: hid_t, what: &str) -> Result<Handle, String> {
    Handle::checked(id, H5Tclose).ok_or_else(|| format!("cannot read the {what} datatype"))
}

fn order_char(type_id: hid_t, size: usize) -> char {
    if size == 1 {
        return '|';
    }
    // SAFETY: a valid datatype id (caller holds the HDF5 lock).
    match unsafe { H5Tget_order(type_id) } {
        H5T_order_t::H5T_ORDER_BE => '>',
        _ => '<',
    }
}

fn member_name(type_id: hid_t, i: u32) -> Result<String, String> {
    // SAFETY: valid compound/enum id and member index; the string is freed with H5free_memory.
    unsafe {
        let p = H5Tget_member_name(type_id, i);
        if p.is_null() {
            return Err(format!("cannot read the name of member {i}"));
        }
        let name = CStr::from_ptr(p).to_string_lossy().into_owned();
        H5free_memory(p.cast());
        Ok(name)
    }
}

/// Whose reading conventions apply where h5py and PyTables differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conventions {
    H5py,
    /// A file PyTables wrote: its 8-bit bitfields are numpy bools (PyTables' `BoolAtom`).
    PyTables,
}

/// The numpy descr of an HDF5 datatype, or why it has no fixed-size numpy equivalent.
///
/// # Safety
/// `type_id` is a valid datatype id and the caller holds the HDF5 lock.
pub(super) unsafe fn descr_of(type_id: hid_t, conv: Conventions) -> Result<Literal, String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe { descr(type_id, 0, conv) }
}

unsafe fn descr(type_id: hid_t, depth: usize, conv: Conventions) -> Result<Literal, String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        if depth > MAX_DEPTH {
            return Err("datatype nested too deeply".into());
        }
        let size = H5Tget_size(type_id);
        let class = H5Tget_class(type_id);
        let s = |text: String| Ok(Literal::Str(text));
        match class {
            H5T_class_t::H5T_BITFIELD if size == 1 && conv == Conventions::PyTables => {
                s("|b1".into())
            }
            H5T_class_t::H5T_INTEGER | H5T_class_t::H5T_BITFIELD => {
                let signed = class == H5T_class_t::H5T_INTEGER
                    && H5Tget_sign(type_id) != H5T_sign_t::H5T_SGN_NONE;
                if !matches!(size, 1 | 2 | 4 | 8) {
                    return Err(format!("{size}-byte integers have no numpy type"));
                }
                plain_integer(type_id, size)?;
                s(format!(
                    "{}{}{size}",
                    order_char(type_id, size),
                    if signed { 'i' } else { 'u' }
                ))
            }
            H5T_class_t::H5T_FLOAT => {
                if !matches!(size, 2 | 4 | 8) {
                    return Err(format!("{size}-byte floats are not supported"));
                }
                ieee_float(type_id, size)?;
                s(format!("{}f{size}", order_char(type_id, size)))
            }
            H5T_class_t::H5T_STRING => {
                if H5Tis_variable_str(type_id) > 0 {
                    return Err("variable-length strings have no fixed-size numpy type".into());
                }
                s(format!("|S{size}"))
            }
            H5T_class_t::H5T_OPAQUE => s(format!("|V{size}")),
            H5T_class_t::H5T_ENUM => {
                let base = owned(H5Tget_super(type_id), "enum base")?;
                if is_h5py_bool(type_id, base.0)? {
                    return s("|b1".into());
                }
                descr(base.0, depth + 1, conv)
            }
            H5T_class_t::H5T_ARRAY => {
                Err("array datatypes are only supported inside compounds".into())
            }
            H5T_class_t::H5T_COMPOUND => compound(type_id, size, depth, conv),
            H5T_class_t::H5T_VLEN => {
                Err("variable-length data has no fixed-size numpy type".into())
            }
            H5T_class_t::H5T_REFERENCE => Err("references have no fixed-size numpy type".into()),
            other => Err(format!("datatype class {other:?} is not supported")),
        }
    }
}

/// Refuses integers whose value does not fill their bytes (precision below the size, or an
/// offset): numpy would read the padding bits as part of the value.
unsafe fn plain_integer(type_id: hid_t, size: usize) -> Result<(), String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        // SAFETY: a valid integer datatype id (the caller's promise).
        let (precision, offset) = { (H5Tget_precision(type_id), H5Tget_offset(type_id)) };
        if precision != 8 * size || offset != 0 {
            return Err(format!(
                "a {size}-byte integer of {precision} bits at bit offset {offset} has no numpy type \
                 (padding bits would be read as value)"
            ));
        }
        Ok(())
    }
}

/// Refuses floats that are not IEEE 754 binary16/32/64 (another exponent bias or field
/// layout, such as a 2-byte bfloat16-like float): reading their bytes as numpy's float of the
/// same size would give wrong values.
unsafe fn ieee_float(type_id: hid_t, size: usize) -> Result<(), String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let (mut spos, mut epos, mut esize, mut mpos, mut msize) = (0, 0, 0, 0, 0);
        // SAFETY: a valid float datatype id (the caller's promise); five out-pointers to locals.
        let (status, ebias, precision, offset, norm) = {
            (
                H5Tget_fields(
                    type_id, &mut spos, &mut epos, &mut esize, &mut mpos, &mut msize,
                ),
                H5Tget_ebias(type_id),
                H5Tget_precision(type_id),
                H5Tget_offset(type_id),
                H5Tget_norm(type_id),
            )
        };
        if status < 0 {
            return Err("cannot read the float's bit layout".into());
        }
        // (sign position, exponent position and size, mantissa size, bias) of IEEE 754.
        let ieee: (usize, usize, usize, usize, usize) = match size {
            2 => (15, 10, 5, 10, 15),
            4 => (31, 23, 8, 23, 127),
            _ => (63, 52, 11, 52, 1023),
        };
        let got = (spos, epos, esize, msize, ebias);
        if got != ieee
            || mpos != 0
            || precision != 8 * size
            || offset != 0
            || norm != H5T_norm_t::H5T_NORM_IMPLIED
        {
            return Err(format!(
                "a {size}-byte float that is not IEEE 754 (sign bit {spos}, exponent {esize} bits \
                 at {epos} with bias {ebias}, mantissa {msize} bits at {mpos}) has no numpy type \
                 packread reads; its bytes would be misread"
            ));
        }
        Ok(())
    }
}

/// h5py stores numpy bools as an int8 enum {FALSE: 0, TRUE: 1}.
unsafe fn is_h5py_bool(type_id: hid_t, base: hid_t) -> Result<bool, String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        if H5Tget_nmembers(type_id) != 2 || H5Tget_size(base) != 1 {
            return Ok(false);
        }
        let mut values = [0i8; 2];
        for (i, v) in values.iter_mut().enumerate() {
            if H5Tget_member_value(type_id, i as u32, (v as *mut i8).cast()) < 0 {
                return Err("cannot read an enum value".into());
            }
        }
        let names = [member_name(type_id, 0)?, member_name(type_id, 1)?];
        Ok(names == ["FALSE", "TRUE"] && values == [0, 1])
    }
}

unsafe fn compound(
    type_id: hid_t,
    size: usize,
    depth: usize,
    conv: Conventions,
) -> Result<Literal, String> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let n = H5Tget_nmembers(type_id);
        if n < 0 {
            return Err("cannot read compound members".into());
        }
        let mut fields = Vec::with_capacity(n as usize);
        for i in 0..n as u32 {
            let name = member_name(type_id, i)?;
            let offset = H5Tget_member_offset(type_id, i);
            let member = owned(H5Tget_member_type(type_id, i), "member")?;
            let msize = H5Tget_size(member.0);
            let field = if H5Tget_class(member.0) == H5T_class_t::H5T_ARRAY {
                let base = owned(H5Tget_super(member.0), "array base")?;
                let ndims = H5Tget_array_ndims(member.0);
                if !(1..=32).contains(&ndims) {
                    return Err(format!("member {name:?} has an invalid array rank"));
                }
                let mut dims = vec![0u64; ndims as usize];
                H5Tget_array_dims2(member.0, dims.as_mut_ptr());
                let dims = dims
                    .into_iter()
                    .map(|d| Literal::Int(i128::from(d)))
                    .collect();
                Literal::Tuple(vec![
                    Literal::Str(name.clone()),
                    descr(base.0, depth + 1, conv)?,
                    Literal::Tuple(dims),
                ])
            } else {
                Literal::Tuple(vec![
                    Literal::Str(name.clone()),
                    descr(member.0, depth + 1, conv)?,
                ])
            };
            fields.push((offset, msize, name, field));
        }
        // h5py reads a compound of two equal floats named r and i as numpy complex.
        if let [(0, a, ra, Literal::Tuple(fa)), (off, b, ib, Literal::Tuple(fb))] = &fields[..] {
            if ra == "r"
                && ib == "i"
                && a == b
                && *off == *a
                && size == 2 * a
                && fa.len() == 2
                && fa[1] == fb[1]
            {
                if let Literal::Str(f) = &fa[1] {
                    if let Some(order) = f.strip_suffix(&format!("f{a}")) {
                        return Ok(Literal::Str(format!("{order}c{}", 2 * a)));
                    }
                }
            }
        }
        // numpy's descr lists fields in layout order with explicit padding.
        let mut descr = Vec::with_capacity(fields.len() * 2);
        let mut at = 0usize;
        for (offset, msize, name, field) in fields {
            if offset < at {
                return Err(format!(
                    "compound member {name:?} overlaps another or is out of offset order"
                ));
            }
            if offset > at {
                descr.push(Literal::Tuple(vec![
                    Literal::Str(String::new()),
                    Literal::Str(format!("|V{}", offset - at)),
                ]));
            }
            descr.push(field);
            at = offset + msize;
        }
        if at > size {
            return Err("compound members run past its size".into());
        }
        if at < size {
            descr.push(Literal::Tuple(vec![
                Literal::Str(String::new()),
                Literal::Str(format!("|V{}", size - at)),
            ]));
        }
        Ok(Literal::List(descr))
    }
}
