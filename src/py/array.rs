//! numpy plumbing: dtypes from core descriptions, and validated output buffers.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use numpy::npyffi::NPY_ARRAY_WRITEABLE;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::errors::invalid_argument;
use crate::dtype::literal::Literal;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind};

/// Most distinct dtypes remembered; a flood of distinct descrs only costs a rebuild.
const DTYPE_CACHE_MAX: usize = 256;

static DTYPES: LazyLock<Mutex<HashMap<String, Py<PyArrayDescr>>>> = LazyLock::new(Mutex::default);
static DESCR_TO_DTYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn literals_to_py<'py>(py: Python<'py>, items: &[Literal]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    items.iter().map(|x| literal_to_py(py, x)).collect()
}

fn literal_to_py<'py>(py: Python<'py>, lit: &Literal) -> PyResult<Bound<'py, PyAny>> {
    Ok(match lit {
        Literal::Str(s) => s.into_pyobject(py)?.into_any(),
        Literal::Int(i) => i.into_pyobject(py)?.into_any(),
        Literal::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Literal::None => py.None().into_bound(py),
        Literal::Tuple(items) => PyTuple::new(py, literals_to_py(py, items)?)?.into_any(),
        Literal::List(items) => PyList::new(py, literals_to_py(py, items)?)?.into_any(),
        Literal::Dict(items) => {
            let d = PyDict::new(py);
            for (k, v) in items {
                d.set_item(literal_to_py(py, k)?, literal_to_py(py, v)?)?;
            }
            d.into_any()
        }
    })
}

/// The `numpy.dtype` for a core dtype, exactly as `numpy.load` builds it
/// (`numpy.lib.format.descr_to_dtype`, which also drops structured padding fields).
pub(super) fn numpy_dtype<'py>(
    py: Python<'py>,
    dtype: &DType,
) -> PyResult<Bound<'py, PyArrayDescr>> {
    let key = dtype.descr().to_string();
    if let Some(d) = DTYPES.lock().expect("dtype cache").get(&key) {
        return Ok(d.bind(py).clone());
    }
    let convert = DESCR_TO_DTYPE.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("numpy.lib.format")?
            .getattr("descr_to_dtype")?
            .unbind())
    })?;
    let descr = literal_to_py(py, dtype.descr())?;
    let np_dtype = convert
        .bind(py)
        .call1((descr,))?
        .cast_into::<PyArrayDescr>()?;
    if np_dtype.itemsize() != dtype.itemsize() {
        return Err(invalid_argument(
            py,
            format!(
                "dtype {key} has itemsize {} in numpy but {} by its description",
                np_dtype.itemsize(),
                dtype.itemsize()
            ),
        ));
    }
    let mut cache = DTYPES.lock().expect("dtype cache");
    if cache.len() >= DTYPE_CACHE_MAX {
        cache.clear();
    }
    cache.insert(key, np_dtype.clone().unbind());
    Ok(np_dtype)
}

/// A writable byte range of an array, handed to code running without the GIL. Made only by
/// [`output`] and [`fresh_bytes`] from a live array; whoever holds it keeps that array alive.
#[derive(Clone, Copy)]
pub(super) struct RawOut {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a RawOut is an address and a length; the bytes are only reached through
// `Outputs::into_slices`, whose caller promises the array is alive while they are used.
unsafe impl Send for RawOut {}

impl RawOut {
    /// The first byte.
    pub(super) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes spanned.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// Output arrays proven not to share memory: the only way to reach their bytes. They are
/// written concurrently, so two outputs over the same bytes would be a data race.
pub(super) struct Outputs(Vec<RawOut>);

impl Outputs {
    /// Checks that no two outputs overlap (a view passed twice, repeated keys).
    pub(super) fn disjoint(raws: Vec<RawOut>) -> Result<Outputs, Error> {
        let mut ranges: Vec<(usize, usize)> = raws
            .iter()
            .filter(|r| r.len > 0)
            .map(|r| (r.ptr as usize, r.len))
            .collect();
        ranges.sort_unstable();
        if ranges.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "out= arrays must not share memory",
            ));
        }
        Ok(Outputs(raws))
    }

    /// One output (nothing to overlap with).
    pub(super) fn one(raw: RawOut) -> Outputs {
        Outputs(vec![raw])
    }

    /// The outputs' bytes, one slice each, in the order given.
    ///
    /// # Safety
    /// Every array these came from must stay alive, and not be resized or read by anyone,
    /// while the slices are used.
    pub(super) unsafe fn into_slices<'a>(self) -> Vec<&'a mut [u8]> {
        self.0
            .into_iter()
            .map(|r| {
                if r.len == 0 {
                    return <&mut [u8]>::default();
                }
                // SAFETY: `r` spans `len` bytes of a live array (the caller's promise), and
                // `disjoint` proved the outputs apart, so no two slices alias.
                unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) }
            })
            .collect()
    }

    /// The only output's bytes (see [`Outputs::into_slices`]).
    ///
    /// # Safety
    /// As [`Outputs::into_slices`].
    pub(super) unsafe fn into_slice<'a>(self) -> &'a mut [u8] {
        // SAFETY: the caller's promise, passed on.
        let mut slices = unsafe { self.into_slices() };
        assert_eq!(slices.len(), 1, "into_slice of one output");
        slices.pop().expect("one slice")
    }
}

/// `(rows,) + sample`: the shape of a batch.
pub(super) fn batch_shape(rows: usize, sample: &[usize]) -> Vec<usize> {
    let mut shape = Vec::with_capacity(sample.len() + 1);
    shape.push(rows);
    shape.extend_from_slice(sample);
    shape
}

/// Checks that `out` is a numpy array of exactly `shape` and `dtype`, C-contiguous and
/// writeable, and returns its bytes. Anything else is a `ValueError`, raised before any I/O.
pub(super) fn output<'py>(
    out: &Bound<'py, PyAny>,
    shape: &[usize],
    dtype: &Bound<'py, PyArrayDescr>,
) -> PyResult<RawOut> {
    let py = out.py();
    let arr = out.cast::<PyUntypedArray>().map_err(|_| {
        invalid_argument(
            py,
            format!(
                "out= must be a numpy.ndarray, not {}",
                out.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
        )
    })?;
    if arr.shape() != shape {
        return Err(invalid_argument(
            py,
            format!("out= has shape {:?}, expected {:?}", arr.shape(), shape),
        ));
    }
    let got = arr.dtype();
    if !got.is_equiv_to(dtype) {
        return Err(invalid_argument(
            py,
            format!("out= has dtype {}, expected {}", got, dtype),
        ));
    }
    if !arr.is_c_contiguous() {
        return Err(invalid_argument(py, "out= must be C-contiguous"));
    }
    let raw = arr.as_array_ptr();
    // SAFETY: `raw` points at the live array object `arr` borrows.
    let (flags, data) = unsafe { ((*raw).fields.flags, (*raw).fields.data) };
    if flags & NPY_ARRAY_WRITEABLE == 0 {
        return Err(invalid_argument(py, "out= is read-only"));
    }
    let len = shape.iter().product::<usize>() * got.itemsize();
    Ok(RawOut {
        ptr: data.cast::<u8>(),
        len,
    })
}

/// `numpy.ndarray(shape, dtype, order=order)`: uninitialised like `numpy.empty`, but keeps a
/// zero-size dtype (`S0`, `U0`) as it is, where `numpy.empty` makes it `S1`/`U1` (numpy.load
/// returns `S0` arrays, and every byte of an `S1` array would be left unwritten).
pub(super) fn empty<'py>(
    py: Python<'py>,
    shape: &[usize],
    dtype: &Bound<'py, PyArrayDescr>,
    fortran: bool,
) -> PyResult<Bound<'py, PyAny>> {
    static NDARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = NDARRAY.get_or_try_init(py, || -> PyResult<_> {
        Ok(py.import("numpy")?.getattr("ndarray")?.unbind())
    })?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", dtype)?;
    kwargs.set_item("order", if fortran { "F" } else { "C" })?;
    f.bind(py).call((PyTuple::new(py, shape)?,), Some(&kwargs))
}

/// The writable bytes of an array this module just allocated (contiguous in C or F order).
pub(super) fn fresh_bytes(arr: &Bound<'_, PyAny>) -> PyResult<RawOut> {
    let arr = arr.cast::<PyUntypedArray>()?;
    let len = arr.shape().iter().product::<usize>() * arr.dtype().itemsize();
    // SAFETY: a freshly allocated, contiguous, writeable array.
    let data = unsafe { (*arr.as_array_ptr()).fields.data };
    Ok(RawOut {
        ptr: data.cast::<u8>(),
        len,
    })
}
