//! JPEG through libjpeg-turbo's TurboJPEG 3 API (`turbojpeg-sys`, built from the source it
//! bundles). One decompressor per thread, reused; a decode may be limited to a region of the
//! image (`tj3SetCroppingRegion`: whole iMCU columns, rows skipped without their IDCT), which
//! is what makes random-resized crops cheap.
//!
//! Why libjpeg-turbo and not a pure-Rust decoder (zune-jpeg): PIL decodes with libjpeg-turbo,
//! so the same library with the same (accurate, "islow") IDCT and fancy upsampling gives pixels
//! equal to PIL's, bit for bit (tests/python/test_images.py); libjpeg-turbo can decode just the
//! region a random crop needs; and it is faster. Measured side by side (`make bench-jpeg`:
//! `cargo bench --bench jpeg` over the image benchmark's 2,000 photos, one thread, whole images
//! to RGB), zune-jpeg 0.5 decoded at 0.81x libjpeg-turbo's rate, with pixels 0.18 levels off
//! PIL's on average.
//! The `turbojpeg` crate's wrapper hides crop decoding and whether a failure was a warning,
//! hence the raw bindings and this small wrapper.

use std::cell::RefCell;
use std::ffi::CStr;

use turbojpeg_sys as tj;

use super::{ImageError, Region};

/// What a JPEG header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JpegInfo {
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// The stored colour space (`tj::TJCS_*`).
    pub(crate) colorspace: u32,
    /// Width in pixels of one iMCU column: crop regions start on a multiple of it.
    pub(crate) mcu_width: u32,
    pub(crate) progressive: bool,
}

impl JpegInfo {
    /// Whether the stored colours are CMYK or YCCK (decoded to CMYK, converted as PIL does).
    pub(crate) fn is_cmyk(&self) -> bool {
        self.colorspace == tj::TJCS_TJCS_CMYK || self.colorspace == tj::TJCS_TJCS_YCCK
    }

    /// Whether the image has one grey channel.
    pub(crate) fn is_gray(&self) -> bool {
        self.colorspace == tj::TJCS_TJCS_GRAY
    }
}

/// Progressive scans decoded at most (libjpeg-turbo's advice against crafted files whose
/// thousands of scans take minutes): real encoders write around ten.
const SCAN_LIMIT: i32 = 500;

struct Handle(tj::tjhandle);

impl Handle {
    fn new() -> Result<Handle, ImageError> {
        // SAFETY: tj3Init has no preconditions; a null handle is checked below.
        let h = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
        if h.is_null() {
            return Err(ImageError::Corrupt("libjpeg-turbo could not start".into()));
        }
        let handle = Handle(h);
        handle.set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        Ok(handle)
    }

    fn set(&self, param: u32, value: i32) -> Result<(), ImageError> {
        // SAFETY: a live handle; tj3Set only stores the value.
        if unsafe { tj::tj3Set(self.0, param as i32, value) } != 0 {
            return Err(self.error());
        }
        Ok(())
    }

    fn get(&self, param: u32) -> i32 {
        // SAFETY: a live handle; tj3Get only reads.
        unsafe { tj::tj3Get(self.0, param as i32) }
    }

    fn message(&self) -> String {
        // SAFETY: a live handle; the string is libjpeg-turbo's, valid until the next call.
        unsafe { CStr::from_ptr(tj::tj3GetErrorStr(self.0)) }
            .to_string_lossy()
            .into_owned()
    }

    fn error(&self) -> ImageError {
        classify(&self.message())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle tj3Init gave, destroyed once.
        unsafe { tj::tj3Destroy(self.0) };
    }
}

/// libjpeg's messages for data that ends too soon, as PIL's "image file is truncated".
fn classify(msg: &str) -> ImageError {
    if msg.contains("Premature end") || msg.contains("premature end") {
        ImageError::Truncated(msg.to_string())
    } else if msg.contains("Unsupported") || msg.contains("not supported") {
        ImageError::Unsupported(msg.to_string())
    } else {
        ImageError::Corrupt(msg.to_string())
    }
}

thread_local! {
    static HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

fn with_handle<T>(f: impl FnOnce(&Handle) -> Result<T, ImageError>) -> Result<T, ImageError> {
    HANDLE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Handle::new()?);
        }
        f(slot.as_ref().expect("set above"))
    })
}

fn mcu_width(subsamp: i32) -> u32 {
    match subsamp {
        tj::TJSAMP_TJSAMP_422 | tj::TJSAMP_TJSAMP_420 => 16,
        tj::TJSAMP_TJSAMP_411 => 32,
        _ => 8,
    }
}

/// Walks the marker segments after SOI up to the frame header (SOF0-SOF15 but DHT, JPG and
/// DAC). libjpeg-turbo's header call succeeds on a stream that ends, or has only tables, before
/// its frame, and the handle then still reports the previous image's size: such data must be
/// refused here, before the handle is asked (ITU T.81 B.1.1: `FF` fill bytes, then the marker;
/// RSTn, TEM and SOI stand alone; every other segment has a two-byte length that counts
/// itself).
fn find_frame(data: &[u8]) -> Result<(), ImageError> {
    let mut pos = 2usize;
    loop {
        if pos >= data.len() {
            return Err(ImageError::Truncated(
                "the data ends before the JPEG frame header".into(),
            ));
        }
        if data[pos] != 0xFF {
            return Err(ImageError::Corrupt(format!(
                "no JPEG marker at byte {pos} before the frame header"
            )));
        }
        while pos < data.len() && data[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = data.get(pos) else {
            continue;
        };
        pos += 1;
        match marker {
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => return Ok(()),
            0xDA | 0xD9 => {
                return Err(ImageError::Corrupt(
                    "a JPEG scan or end before any frame header".into(),
                ))
            }
            0x01 | 0xD0..=0xD8 => {}
            _ => {
                let Some(len) = data.get(pos..pos + 2) else {
                    pos = data.len();
                    continue;
                };
                let len = u16::from_be_bytes([len[0], len[1]]) as usize;
                if len < 2 {
                    return Err(ImageError::Corrupt(format!(
                        "a JPEG segment length of {len} at byte {pos}"
                    )));
                }
                pos += len;
            }
        }
    }
}

fn read_header(h: &Handle, data: &[u8]) -> Result<JpegInfo, ImageError> {
    find_frame(data)?;
    // SAFETY: a live handle and a valid slice; libjpeg-turbo reads at most `data.len()` bytes.
    if unsafe { tj::tj3DecompressHeader(h.0, data.as_ptr(), data.len() as tj::size_t) } != 0 {
        return Err(h.error());
    }
    let width = h.get(tj::TJPARAM_TJPARAM_JPEGWIDTH);
    let height = h.get(tj::TJPARAM_TJPARAM_JPEGHEIGHT);
    if width <= 0 || height <= 0 {
        return Err(ImageError::Corrupt("JPEG header without a size".into()));
    }
    if h.get(tj::TJPARAM_TJPARAM_PRECISION) != 8 {
        return Err(ImageError::Unsupported(
            "JPEG of 12 or 16 bits per sample".into(),
        ));
    }
    Ok(JpegInfo {
        width: width as u32,
        height: height as u32,
        colorspace: h.get(tj::TJPARAM_TJPARAM_COLORSPACE) as u32,
        mcu_width: mcu_width(h.get(tj::TJPARAM_TJPARAM_SUBSAMP)),
        progressive: h.get(tj::TJPARAM_TJPARAM_PROGRESSIVE) != 0,
    })
}

/// The header alone: size, colour space, the iMCU width of crop regions.
pub(crate) fn info(data: &[u8]) -> Result<JpegInfo, ImageError> {
    with_handle(|h| read_header(h, data))
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

    fn format(self) -> i32 {
        match self {
            JpegOut::Rgb => tj::TJPF_TJPF_RGB,
            JpegOut::Gray => tj::TJPF_TJPF_GRAY,
            JpegOut::Cmyk => tj::TJPF_TJPF_CMYK,
        }
    }
}

/// The size of a `width` x `height` image decoded at 1/`denom` scale (libjpeg-turbo's
/// `TJSCALED`: rounded up).
pub(crate) fn scaled(width: u32, height: u32, denom: u32) -> (u32, u32) {
    (width.div_ceil(denom), height.div_ceil(denom))
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
    if !matches!(denom, 2 | 4 | 8) || out.len() != pitch * h as usize {
        return Err(ImageError::Corrupt(
            "internal: a scaled JPEG output of the wrong size".into(),
        ));
    }
    with_handle(|h| {
        read_header(h, data)?;
        let factor = |denom: u32| tj::tjscalingfactor {
            num: 1,
            denom: denom as i32,
        };
        // SAFETY: a live handle; 1/2, 1/4 and 1/8 are factors libjpeg-turbo supports.
        if unsafe { tj::tj3SetScalingFactor(h.0, factor(denom)) } != 0 {
            return Err(h.error());
        }
        let unscale = |h: &Handle| {
            // SAFETY: a live handle; 1/1 is always supported.
            unsafe { tj::tj3SetScalingFactor(h.0, factor(1)) };
        };
        // SAFETY: `out` holds `pitch * scaled height` bytes (checked above), what a decode at
        // this scale writes with this pitch. The handle is left unscaled for the next caller.
        unsafe { decompress(h, data, out, pitch, layout, unscale) }
    })
}

/// Decompresses `data` into `out` (`pitch` bytes a row), then `reset`s the handle's settings
/// for the next caller. A warning libjpeg recovers from keeps the decoded pixels, as PIL does;
/// data that ends early is `Truncated`, as PIL refuses it.
///
/// # Safety
///
/// `out` must hold at least `pitch` bytes for every row a decode with the handle's current
/// scaling and cropping writes (libjpeg-turbo writes that many, unchecked).
unsafe fn decompress(
    h: &Handle,
    data: &[u8],
    out: &mut [u8],
    pitch: usize,
    layout: JpegOut,
    reset: impl FnOnce(&Handle),
) -> Result<(), ImageError> {
    // SAFETY: `out` holds what a decode with the handle's settings writes with this pitch (this
    // function's contract); `data` is a valid slice.
    let status = unsafe {
        tj::tj3Decompress8(
            h.0,
            data.as_ptr(),
            data.len() as tj::size_t,
            out.as_mut_ptr(),
            pitch as i32,
            layout.format(),
        )
    };
    // SAFETY: a live handle.
    let warning = unsafe { tj::tj3GetErrorCode(h.0) } == tj::TJERR_TJERR_WARNING as i32;
    reset(h);
    if status != 0 {
        let err = h.error();
        if warning && !matches!(err, ImageError::Truncated(_)) {
            return Ok(());
        }
        return Err(err);
    }
    Ok(())
}

/// Decodes `region` of the image (whose `x` must be a multiple of `info.mcu_width`, or the
/// whole image when `None`) into `out` as `layout`, `region.w * channels` bytes a row. A
/// warning libjpeg recovers from (extraneous bytes, a bad Huffman code mid-scan) keeps the
/// decoded pixels, as PIL does; data that ends early is `Truncated`, as PIL refuses it.
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
    if out.len() != pitch * r.h as usize {
        return Err(ImageError::Corrupt(
            "internal: JPEG output of the wrong size".into(),
        ));
    }
    with_handle(|h| {
        read_header(h, data)?;
        let crop = tj::tjregion {
            x: r.x as i32,
            y: r.y as i32,
            w: r.w as i32,
            h: r.h as i32,
        };
        let whole = tj::tjregion {
            x: 0,
            y: 0,
            w: 0,
            h: 0,
        };
        let want = if region.is_some() { crop } else { whole };
        // SAFETY: a live handle; the region lies inside the image (checked by the caller,
        // and again by libjpeg-turbo, which refuses one that does not).
        if unsafe { tj::tj3SetCroppingRegion(h.0, want) } != 0 {
            return Err(h.error());
        }
        let uncrop = |h: &Handle| {
            // SAFETY: a live handle; the whole image is always a valid region.
            unsafe { tj::tj3SetCroppingRegion(h.0, whole) };
        };
        // SAFETY: `out` holds `pitch * r.h` bytes (checked above), exactly what a decode of the
        // region in `layout` writes with this pitch. The handle is left whole-image for the
        // next caller.
        unsafe { decompress(h, data, out, pitch, layout, uncrop) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_without_a_frame_header_are_refused() {
        let tables = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x04, 1, 2];
        assert!(matches!(find_frame(&tables), Err(ImageError::Truncated(_))));
        let mut framed = tables.to_vec();
        framed.extend([0xFF, 0xFF, 0xC2, 0x00, 0x02]);
        assert!(find_frame(&framed).is_ok());
        let scan_first = [0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02];
        assert!(matches!(
            find_frame(&scan_first),
            Err(ImageError::Corrupt(_))
        ));
        let bad_len = [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01];
        assert!(matches!(find_frame(&bad_len), Err(ImageError::Corrupt(_))));
        let junk = [0xFF, 0xD8, 0x12];
        assert!(matches!(find_frame(&junk), Err(ImageError::Corrupt(_))));
        assert!(matches!(
            find_frame(&[0xFF, 0xD8, 0xFF]),
            Err(ImageError::Truncated(_))
        ));
    }
}
