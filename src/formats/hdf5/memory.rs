//! HDF5 files held in memory (PyTables' `driver="H5FD_CORE"` use): libhdf5 opens the bytes as
//! a file image through its core driver, reading them in place, and batches read the same
//! bytes with plain copies instead of `pread`.
//!
//! libhdf5 copies a file image unless it is given callbacks that hand it the caller's buffer;
//! the ones below do (what its high-level `H5LTopen_file_image` does with `DONT_COPY`): every
//! "allocation" of the image is the caller's buffer, copies onto itself are skipped, frees are
//! no-ops. The file is opened read-only, so libhdf5 never writes to the buffer.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use hdf5_sys::h5f::{H5Fopen, H5F_ACC_RDONLY};
use hdf5_sys::h5fd::{H5FD_file_image_callbacks_t, H5FD_file_image_op_t};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::{
    H5Pclose, H5Pcreate, H5Pset_fapl_core, H5Pset_file_image, H5Pset_file_image_callbacks,
};

use crate::batch::source::Source;
use crate::error::{Error, ErrorKind, Result};

/// A whole file's bytes, shared by libhdf5 (as its image) and the batch reads.
pub(crate) struct MemoryFile {
    /// What messages call the file (it has no path).
    pub name: String,
    /// The whole file, from its first byte (offsets are file offsets).
    pub bytes: Arc<[u8]>,
}

impl MemoryFile {
    /// The file's size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

impl Source for MemoryFile {
    fn read_at(&self, _file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let src = usize::try_from(offset)
            .ok()
            .and_then(|start| self.bytes.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Hdf5,
                    &self.name,
                    format!(
                        "read of {} bytes at offset {offset} runs past the end of the {}-byte file",
                        buf.len(),
                        self.bytes.len()
                    ),
                )
            })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn name(&self, _file: u32) -> String {
        self.name.clone()
    }
}

/// The buffer the callbacks hand out. Boxed by the caller, so its address is stable for as
/// long as libhdf5 may use it (the file's lifetime).
pub(super) struct Image {
    ptr: *const u8,
    len: usize,
    /// Keeps the bytes alive while libhdf5 has them open.
    _bytes: Arc<[u8]>,
}

// SAFETY: `ptr` points into `_bytes`, read-only bytes owned through an `Arc`: moving the
// owner to another thread moves nothing they point at.
unsafe impl Send for Image {}
// SAFETY: as for `Send`: the bytes are never written, so shared access from threads is a read.
unsafe impl Sync for Image {}

extern "C" fn image_malloc(
    size: usize,
    _op: H5FD_file_image_op_t,
    udata: *mut c_void,
) -> *mut c_void {
    // SAFETY: `udata` is the `Image` given to `H5Pset_file_image_callbacks`.
    let image = unsafe { &*udata.cast::<Image>() };
    if size == image.len {
        image.ptr.cast_mut().cast()
    } else {
        std::ptr::null_mut() // anything else would be a write or a resize: refused
    }
}

extern "C" fn image_memcpy(
    dest: *mut c_void,
    src: *const c_void,
    size: usize,
    _op: H5FD_file_image_op_t,
    _udata: *mut c_void,
) -> *mut c_void {
    if dest.cast_const() != src {
        // Never the case with the buffer handed out above; copy as asked if it were.
        // SAFETY: libhdf5 passes buffers of at least `size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dest.cast::<u8>(), size) };
    }
    dest
}

extern "C" fn image_realloc(
    _ptr: *mut c_void,
    _size: usize,
    _op: H5FD_file_image_op_t,
    _udata: *mut c_void,
) -> *mut c_void {
    std::ptr::null_mut()
}

extern "C" fn image_free(_ptr: *mut c_void, _op: H5FD_file_image_op_t, _udata: *mut c_void) -> i32 {
    0
}

extern "C" fn udata_copy(udata: *mut c_void) -> *mut c_void {
    udata
}

extern "C" fn udata_free(_udata: *mut c_void) -> i32 {
    0
}

/// Opens `bytes` read-only as an HDF5 file image without copying it.
///
/// # Safety
/// The caller holds the HDF5 lock, and keeps the returned `Image` alive (at the same address)
/// until the returned file id is closed.
pub(super) unsafe fn open_image(name: &str, bytes: Arc<[u8]>) -> Result<(hid_t, Box<Image>)> {
    // SAFETY: the caller's contract (see `# Safety`): valid libhdf5 ids, its lock held.
    unsafe {
        let fail = |what: &str| {
            Error::new(
                ErrorKind::Hdf5,
                name,
                format!("cannot open as HDF5: {what}"),
            )
        };
        if bytes.is_empty() {
            return Err(fail("no bytes"));
        }
        let image = Box::new(Image {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            _bytes: bytes,
        });
        let fapl = H5Pcreate(*hdf5_sys::h5p::H5P_CLS_FILE_ACCESS);
        if fapl < 0 {
            return Err(fail("cannot create file access properties"));
        }
        let udata = (&*image as *const Image).cast_mut().cast::<c_void>();
        let mut callbacks = H5FD_file_image_callbacks_t {
            image_malloc: Some(image_malloc),
            image_memcpy: Some(image_memcpy),
            image_realloc: Some(image_realloc),
            image_free: Some(image_free),
            udata_copy: Some(udata_copy),
            udata_free: Some(udata_free),
            udata,
        };
        // libhdf5 tells open files apart by this name: one of its own per image, so the same file
        // can be open from disk and from memory at once.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cname = CString::new(format!("packread-memory-image-{}-{n}", std::process::id()))
            .expect("no NUL");
        let ok = H5Pset_fapl_core(fapl, 1 << 16, 0) >= 0
            && H5Pset_file_image_callbacks(fapl, &mut callbacks) >= 0
            && H5Pset_file_image(fapl, image.ptr.cast_mut().cast(), image.len) >= 0;
        let file = if ok {
            H5Fopen(cname.as_ptr(), H5F_ACC_RDONLY, fapl)
        } else {
            -1
        };
        H5Pclose(fapl);
        if file < 0 {
            let why = hdf5_metno::Error::query()
                .map(|e| e.to_string())
                .unwrap_or_else(|_| "not an HDF5 file".into());
            return Err(fail(&why));
        }
        Ok((file, image))
    }
}
