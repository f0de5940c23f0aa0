//! JPEG through libjpeg-turbo, built from the source the `turbojpeg-sys` crate bundles (cmake;
//! nasm for its SIMD kernels), and called through libjpeg's own API by a small C file
//! (`jpeg_shim.c`), as PIL calls it. A decode may be limited to a region of the image
//! (`jpeg_crop_scanline`: whole iMCU columns, rows skipped without their IDCT), which is what
//! makes random-resized crops cheap.
//!
//! Why libjpeg-turbo and not a pure-Rust decoder (zune-jpeg): PIL decodes with libjpeg-turbo,
//! so the same library with the same (accurate, "islow") IDCT and fancy upsampling gives pixels
//! equal to PIL's, bit for bit (tests/python/test_images.py); libjpeg-turbo can decode just the
//! region a random crop needs; and it is faster. Measured side by side (`make bench-jpeg`:
//! `cargo bench --bench jpeg` over the image benchmark's 2,000 photos, one thread, whole images
//! to RGB), zune-jpeg 0.5 decoded at 0.81x libjpeg-turbo's rate, with pixels 0.18 levels off
//! PIL's on average.
//!
//! Why libjpeg's API and not TurboJPEG's (the `jpeg_shim.c` header says it in full): every call
//! here gets a fresh decompressor, so no table, marker state or error survives from one image
//! to the next; a fatal error is told from a warning per call; data ending before the last row
//! is truncation, as PIL makes it; and crops follow any sampling factors.

use std::ffi::{c_char, CStr};

// The static library `turbojpeg-sys` builds holds libjpeg's functions, which the shim calls.
use turbojpeg_sys as _;

use super::{ImageError, Region};

/// Progressive scans decoded at most (libjpeg-turbo's advice against crafted files whose
/// thousands of scans take minutes): real encoders write around ten.
const SCAN_LIMIT: i32 = 500;

/// What a call of the shim gave (`pr_status.kind`).
const PR_OK: i32 = 0;
const PR_TRUNCATED: i32 = 1;
const PR_CORRUPT: i32 = 2;
const PR_UNSUPPORTED: i32 = 3;
const PR_TOO_LARGE: i32 = 4;

/// The shim's `pr_status`: how a call ended.
#[repr(C)]
struct Status {
    kind: i32,
    warnings: i32,
    message: [c_char; 200],
}

/// The shim's `pr_header`.
#[repr(C)]
#[derive(Default)]
struct Header {
    width: u32,
    height: u32,
    colors: i32,
    progressive: i32,
    precision: i32,
    lossless: i32,
    crop_align: u32,
}

extern "C" {
    fn pr_jpeg_header(data: *const u8, len: usize, header: *mut Header, status: *mut Status)
        -> i32;

    #[allow(clippy::too_many_arguments)] // the C function's, one per parameter of the decode
    fn pr_jpeg_decode(
        data: *const u8,
        len: usize,
        width: u32,
        height: u32,
        x: u32,
        y: u32,
        w: u32,
        h: u32,
        denom: u32,
        out_space: i32,
        scan_limit: i32,
        out: *mut u8,
        out_len: usize,
        pitch: usize,
        status: *mut Status,
    ) -> i32;
}

impl Status {
    fn new() -> Status {
        Status {
            kind: PR_OK,
            warnings: 0,
            message: [0; 200],
        }
    }

    fn message(&self) -> String {
        // SAFETY: the shim always leaves a NUL-terminated string in `message` (zeroed here,
        // written by snprintf or libjpeg's format_message, both bounded by its length).
        unsafe { CStr::from_ptr(self.message.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// `Ok` unless the call failed (warnings libjpeg recovered from keep the pixels, as PIL
    /// keeps them).
    fn result(&self) -> Result<(), ImageError> {
        let m = self.message();
        match self.kind {
            PR_OK => Ok(()),
            PR_TRUNCATED => Err(ImageError::Truncated(m)),
            PR_CORRUPT => Err(ImageError::Corrupt(m)),
            PR_UNSUPPORTED => Err(ImageError::Unsupported(m)),
            PR_TOO_LARGE => Err(ImageError::TooLarge(m)),
            _ => Err(ImageError::Corrupt(format!("internal: {m}"))),
        }
    }
}

/// The stored colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Colors {
    /// One grey channel.
    Gray,
    /// YCbCr or RGB (decoded to RGB).
    Color,
    /// CMYK or YCCK (decoded to CMYK, converted as PIL does).
    Cmyk,
}

/// What a JPEG header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegInfo {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) colors: Colors,
    /// Width in pixels of one iMCU column: crop regions start on a multiple of it.
    pub(crate) mcu_width: u32,
    pub(crate) progressive: bool,
    /// A lossless JPEG (SOF3): decoded whole, never cropped or scaled by the decoder.
    pub(crate) lossless: bool,
}

impl JpegInfo {
    /// Whether the stored colours are CMYK or YCCK (decoded to CMYK, converted as PIL does).
    pub(crate) fn is_cmyk(&self) -> bool {
        self.colors == Colors::Cmyk
    }

    /// Whether the image has one grey channel.
    pub(crate) fn is_gray(&self) -> bool {
        self.colors == Colors::Gray
    }
}

/// The header alone: size, colour space, the iMCU width of crop regions.
pub(crate) fn info(data: &[u8]) -> Result<JpegInfo, ImageError> {
    let mut header = Header::default();
    let mut status = Status::new();
    // SAFETY: `data` is a valid slice read at most `data.len()` bytes far; `header` and
    // `status` are valid for writes and outlive the call.
    unsafe { pr_jpeg_header(data.as_ptr(), data.len(), &mut header, &mut status) };
    status.result()?;
    if header.width == 0 || header.height == 0 {
        return Err(ImageError::Corrupt("JPEG header without a size".into()));
    }
    if header.precision != 8 {
        return Err(ImageError::Unsupported(
            "JPEG of 12 or 16 bits per sample".into(),
        ));
    }
    Ok(JpegInfo {
        width: header.width,
        height: header.height,
        colors: match header.colors {
            0 => Colors::Gray,
            2 => Colors::Cmyk,
            _ => Colors::Color,
        },
        mcu_width: header.crop_align.max(1),
        progressive: header.progressive != 0,
        lossless: header.lossless != 0,
    })
}

/// The pixel layout a decode writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JpegOut {
    Rgb,
    Gray,
    Cmyk,
}

impl JpegOut {
    pub(crate) fn channels(self) -> usize {
        match self {
            JpegOut::Rgb => 3,
            JpegOut::Gray => 1,
            JpegOut::Cmyk => 4,
        }
    }

    /// The shim's `PR_OUT_*`.
    fn code(self) -> i32 {
        match self {
            JpegOut::Rgb => 0,
            JpegOut::Gray => 1,
            JpegOut::Cmyk => 2,
        }
    }
}

/// The size of a `width` x `height` image decoded at 1/`denom` scale (libjpeg's: rounded up).
pub(crate) fn scaled(width: u32, height: u32, denom: u32) -> (u32, u32) {
    (width.div_ceil(denom), height.div_ceil(denom))
}

/// One decode by the shim into `out`, `pitch` bytes a row: the whole image at 1/`denom`
/// scale, or `region` at full scale.
fn run(
    data: &[u8],
    info: &JpegInfo,
    region: Option<Region>,
    denom: u32,
    layout: JpegOut,
    out: &mut [u8],
    pitch: usize,
) -> Result<(), ImageError> {
    let timer = crate::stats::start();
    let done = decompress(data, info, region, denom, layout, out, pitch);
    timer.stop(crate::stats::Stage::Jpeg, out.len());
    done
}

/// [`run`], untimed.
fn decompress(
    data: &[u8],
    info: &JpegInfo,
    region: Option<Region>,
    denom: u32,
    layout: JpegOut,
    out: &mut [u8],
    pitch: usize,
) -> Result<(), ImageError> {
    let r = region.unwrap_or(Region {
        x: 0,
        y: 0,
        w: 0,
        h: 0,
    });
    let mut status = Status::new();
    // SAFETY: `data` is a valid slice; `out` is valid for `out.len()` bytes of writes, and the
    // shim writes only rows of at most `pitch` bytes inside `out.len()` (it checks the decoded
    // width and row count against both before writing); `status` outlives the call.
    unsafe {
        pr_jpeg_decode(
            data.as_ptr(),
            data.len(),
            info.width,
            info.height,
            r.x,
            r.y,
            r.w,
            r.h,
            denom,
            layout.code(),
            SCAN_LIMIT,
            out.as_mut_ptr(),
            out.len(),
            pitch,
            &mut status,
        )
    };
    status.result()
}

/// Decodes the whole image at 1/`denom` scale (2, 4 or 8), the IDCT itself scaled (less work
/// than a full decode by about the square of `denom`), into `out` as `layout`: `scaled(..)`
/// pixels.
pub(crate) fn decode_scaled(
    data: &[u8],
    info: &JpegInfo,
    denom: u32,
    layout: JpegOut,
    out: &mut [u8],
) -> Result<(), ImageError> {
    let (w, h) = scaled(info.width, info.height, denom);
    let pitch = w as usize * layout.channels();
    if !matches!(denom, 2 | 4 | 8) || info.lossless || out.len() != pitch * h as usize {
        return Err(ImageError::Corrupt(
            "internal: a scaled JPEG output of the wrong size".into(),
        ));
    }
    run(data, info, None, denom, layout, out, pitch)
}

/// Decodes `region` of the image (whose `x` must be a multiple of `info.mcu_width`, or the
/// whole image when `None`) into `out` as `layout`, `region.w * channels` bytes a row. A
/// warning libjpeg recovers from (extraneous bytes, a bad Huffman code mid-scan) keeps the
/// decoded pixels, as PIL does; data that ends before the last row is `Truncated`, as PIL
/// refuses it.
pub(crate) fn decode(
    data: &[u8],
    info: &JpegInfo,
    region: Option<Region>,
    layout: JpegOut,
    out: &mut [u8],
) -> Result<(), ImageError> {
    let r = region.unwrap_or(Region {
        x: 0,
        y: 0,
        w: info.width,
        h: info.height,
    });
    let pitch = r.w as usize * layout.channels();
    if out.len() != pitch * r.h as usize || (info.lossless && region.is_some()) {
        return Err(ImageError::Corrupt(
            "internal: JPEG output of the wrong size".into(),
        ));
    }
    run(data, info, Some(r), 1, layout, out, pitch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_without_a_frame_header_are_refused() {
        // Tables only, then the end of the data: truncated, never a size from elsewhere.
        let tables = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x04, 1, 2];
        assert!(matches!(info(&tables), Err(ImageError::Truncated(_))));
        let scan_first = [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02];
        assert!(matches!(info(&scan_first), Err(ImageError::Corrupt(_))));
        let junk = [0xFF, 0xD8, 0x12];
        assert!(info(&junk).is_err());
        assert!(matches!(
            info(&[0xFF, 0xD8, 0xFF]),
            Err(ImageError::Truncated(_))
        ));
        assert!(matches!(info(&[]), Err(ImageError::Truncated(_))));
        assert!(matches!(info(b"GIF89a"), Err(ImageError::Corrupt(_))));
    }
}
