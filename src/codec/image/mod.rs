//! Encoded images (JPEG, PNG, WebP) to pixels. The format is told by the leading bytes, never
//! by a name. Every decoder checks the declared size against [`Limits::max_pixels`] before it
//! allocates, and decodes into a buffer of exactly the declared size.
//!
//! Colours follow PIL's `Image.open(f).convert(mode)`: a colour JPEG is decoded to RGB by
//! libjpeg-turbo (as PIL does), CMYK/YCCK JPEGs are inverted (PIL assumes Adobe's convention)
//! and converted with PIL's `cmyk2rgb`, RGB to L with PIL's ITU-R 601-2 integer weights, 16-bit
//! PNGs keep their high byte (RGB, alpha) or are clipped to 255 (grey, as PIL's `I;16` to `L`),
//! palettes and `tRNS` expand to RGB(A).

pub mod exif;
pub mod geometry;
mod jpeg;
mod png_webp;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind};
use geometry::{Draw, ImageSpec};

/// How many pixels an image may declare before it is refused: PIL's `MAX_IMAGE_PIXELS`
/// (a 60000x60000 header would otherwise ask for 10 GiB).
pub const DEFAULT_MAX_PIXELS: u64 = 89_478_485;

/// The containers packread decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// JPEG (baseline, progressive; grey, YCbCr, CMYK, YCCK).
    Jpeg,
    /// PNG (1-16 bits, grey, grey + alpha, palette, RGB, RGBA).
    Png,
    /// WebP (lossy, lossless, with alpha).
    Webp,
}

impl ImageFormat {
    /// The format of `data` from its leading bytes, or `None`.
    pub fn sniff(data: &[u8]) -> Option<ImageFormat> {
        if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageFormat::Jpeg)
        } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageFormat::Png)
        } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
            Some(ImageFormat::Webp)
        } else {
            None
        }
    }

    /// Its usual name.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "JPEG",
            ImageFormat::Png => "PNG",
            ImageFormat::Webp => "WebP",
        }
    }
}

/// Why an image did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// The data ends before the image does.
    Truncated(String),
    /// Not JPEG, PNG or WebP, or a feature of one the decoders do not read.
    Unsupported(String),
    /// Damaged data: a bad marker, chunk CRC, Huffman table, ...
    Corrupt(String),
    /// The declared size is larger than the limit.
    TooLarge(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Truncated(m) => write!(f, "truncated image: {m}"),
            ImageError::Unsupported(m) => write!(f, "unsupported image: {m}"),
            ImageError::Corrupt(m) => write!(f, "corrupt image: {m}"),
            ImageError::TooLarge(m) => write!(f, "image too large: {m}"),
        }
    }
}

/// A rectangle of an image, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Left column.
    pub x: u32,
    /// Top row.
    pub y: u32,
    /// Columns.
    pub w: u32,
    /// Rows.
    pub h: u32,
}

impl Region {
    /// The region from column `x0` and row `y0` up to (not including) `x1` and `y1`.
    pub fn spanning(x0: u32, y0: u32, x1: u32, y1: u32) -> Region {
        Region {
            x: x0,
            y: y0,
            w: x1 - x0,
            h: y1 - y0,
        }
    }
}

/// The pixel mode of decoded images, as PIL names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Red, green, blue.
    Rgb,
    /// Grey (luma).
    L,
    /// Red, green, blue, alpha.
    Rgba,
}

impl Mode {
    /// Bytes a pixel.
    pub fn channels(self) -> usize {
        match self {
            Mode::Rgb => 3,
            Mode::L => 1,
            Mode::Rgba => 4,
        }
    }

    /// From PIL's name.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "RGB" => Some(Mode::Rgb),
            "L" => Some(Mode::L),
            "RGBA" => Some(Mode::Rgba),
            _ => None,
        }
    }
}

/// Limits every decode honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest `width * height` an image may declare.
    pub max_pixels: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

/// What an image's header says, before any pixel is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Container.
    pub format: ImageFormat,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// A CMYK or YCCK JPEG.
    pub cmyk: bool,
    /// A JPEG of one grey channel.
    pub gray: bool,
    /// A progressive JPEG.
    pub progressive: bool,
    /// Crop regions of a decode start on a multiple of this many columns (JPEG's iMCU
    /// width; 1 where any column will do).
    pub crop_align: u32,
    /// Whether the decoder can scale the image down as it decodes (JPEG's IDCT scaling:
    /// every JPEG but a lossless one).
    pub scalable: bool,
}

/// Pixels of one decoded image (or region of one), rows of `width * mode.channels()` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// Pixel mode.
    pub mode: Mode,
    /// The pixels.
    pub pixels: Vec<u8>,
}

fn check_size(w: u32, h: u32, limits: &Limits) -> Result<(), ImageError> {
    if w == 0 || h == 0 {
        return Err(ImageError::Corrupt(format!("a size of {w}x{h} pixels")));
    }
    let px = w as u64 * h as u64;
    if px > limits.max_pixels {
        return Err(ImageError::TooLarge(format!(
            "{w}x{h} = {px} pixels is over the limit of {} (max_pixels)",
            limits.max_pixels
        )));
    }
    Ok(())
}

/// The header of `data`: format, size, and what crop decoding needs. Sizes over the limit
/// are refused here.
pub fn info(data: &[u8], limits: &Limits) -> Result<ImageInfo, ImageError> {
    let format = ImageFormat::sniff(data).ok_or_else(|| {
        if data.is_empty() {
            ImageError::Truncated("no bytes".into())
        } else {
            ImageError::Unsupported("not a JPEG, PNG or WebP image (by its first bytes)".into())
        }
    })?;
    let info = match format {
        ImageFormat::Jpeg => {
            let j = jpeg::info(data)?;
            ImageInfo {
                format,
                width: j.width,
                height: j.height,
                cmyk: j.is_cmyk(),
                gray: j.is_gray(),
                progressive: j.progressive,
                // A lossless JPEG is decoded whole and cut (any column will do).
                crop_align: if j.lossless { 1 } else { j.mcu_width },
                scalable: !j.lossless,
            }
        }
        ImageFormat::Png | ImageFormat::Webp => {
            let (width, height) = if format == ImageFormat::Png {
                png_webp::png_size(data)?
            } else {
                png_webp::webp_size(data)?
            };
            ImageInfo {
                format,
                width,
                height,
                cmyk: false,
                gray: false,
                progressive: false,
                crop_align: 1,
                scalable: false,
            }
        }
    };
    check_size(info.width, info.height, limits)?;
    Ok(info)
}

/// Decodes `data` (or only `region` of it, whose `x` is a multiple of `info.crop_align`) to
/// `mode`. `info` is what [`info`] said of these bytes.
pub fn decode(
    data: &[u8],
    info: &ImageInfo,
    region: Option<Region>,
    mode: Mode,
) -> Result<Picture, ImageError> {
    let r = region.unwrap_or(Region {
        x: 0,
        y: 0,
        w: info.width,
        h: info.height,
    });
    if r.w == 0
        || r.h == 0
        || r.x as u64 + r.w as u64 > info.width as u64
        || r.y as u64 + r.h as u64 > info.height as u64
        || r.x % info.crop_align.max(1) != 0
    {
        return Err(ImageError::Corrupt(format!(
            "internal: region {r:?} outside a {}x{} image",
            info.width, info.height
        )));
    }
    let px = r.w as usize * r.h as usize;
    match info.format {
        ImageFormat::Jpeg => {
            let j = jpeg_info(info);
            if j.lossless && region.is_some() {
                // libjpeg crops only DCT-coded images: decoded whole, then cut.
                return Ok(crop(&decode(data, info, None, mode)?, r));
            }
            let (layout, from) = jpeg_layout(&j);
            let mut raw = vec![0u8; px * layout.channels()];
            jpeg::decode(data, &j, region, layout, &mut raw)?;
            Ok(Picture {
                width: r.w,
                height: r.h,
                mode,
                pixels: convert(raw, from, mode),
            })
        }
        ImageFormat::Png | ImageFormat::Webp => decode_other(data, info, region, mode),
    }
}

/// Decodes a whole JPEG straight into `out` (`height * width * channels` bytes of `mode`)
/// where its pixels need no conversion (a grey JPEG as `L`, a colour one as `RGB`): `Ok(false)`
/// for any other image, which [`decode`] then decodes through a picture of its own.
pub fn decode_into(
    data: &[u8],
    info: &ImageInfo,
    mode: Mode,
    out: &mut [u8],
) -> Result<bool, ImageError> {
    if info.format != ImageFormat::Jpeg {
        return Ok(false);
    }
    let j = jpeg_info(info);
    let (layout, from) = jpeg_layout(&j);
    let native = matches!(
        (from, mode),
        (Stored::L, Mode::L) | (Stored::Rgb, Mode::Rgb)
    );
    let len = info.width as usize * info.height as usize * layout.channels();
    if !native || out.len() != len {
        return Ok(false);
    }
    jpeg::decode(data, &j, None, layout, out)?;
    Ok(true)
}

/// Decodes a whole JPEG at 1/`denom` scale (2, 4 or 8; see `jpeg::decode_scaled`): a
/// picture of `ceil(width / denom)` x `ceil(height / denom)` pixels.
pub fn decode_scaled(
    data: &[u8],
    info: &ImageInfo,
    denom: u32,
    mode: Mode,
) -> Result<Picture, ImageError> {
    if info.format != ImageFormat::Jpeg {
        return Err(ImageError::Corrupt(
            "internal: only JPEGs decode scaled".into(),
        ));
    }
    let j = jpeg_info(info);
    let (layout, from) = jpeg_layout(&j);
    let (w, h) = jpeg::scaled(j.width, j.height, denom);
    let mut raw = vec![0u8; w as usize * h as usize * layout.channels()];
    jpeg::decode_scaled(data, &j, denom, layout, &mut raw)?;
    Ok(Picture {
        width: w,
        height: h,
        mode,
        pixels: convert(raw, from, mode),
    })
}

/// The JPEG header `info` was read from (the decoder checks the size again: a header that
/// differs from the one the output was sized by is an error, never a write past it).
fn jpeg_info(info: &ImageInfo) -> jpeg::JpegInfo {
    jpeg::JpegInfo {
        width: info.width,
        height: info.height,
        colors: if info.cmyk {
            jpeg::Colors::Cmyk
        } else if info.gray {
            jpeg::Colors::Gray
        } else {
            jpeg::Colors::Color
        },
        mcu_width: info.crop_align,
        progressive: info.progressive,
        lossless: !info.scalable,
    }
}

/// What libjpeg-turbo decodes a JPEG to, and how those pixels are laid out for [`convert`].
fn jpeg_layout(j: &jpeg::JpegInfo) -> (jpeg::JpegOut, Stored) {
    if j.is_cmyk() {
        (jpeg::JpegOut::Cmyk, Stored::CmykInverted)
    } else if j.is_gray() {
        (jpeg::JpegOut::Gray, Stored::L)
    } else {
        (jpeg::JpegOut::Rgb, Stored::Rgb)
    }
}

/// A PNG or WebP decoded whole, then cut to `region`.
fn decode_other(
    data: &[u8],
    info: &ImageInfo,
    region: Option<Region>,
    mode: Mode,
) -> Result<Picture, ImageError> {
    let timer = crate::stats::start();
    let (raw, from, stage) = if info.format == ImageFormat::Png {
        let (raw, from) = png_webp::decode_png(data, info)?;
        (raw, from, crate::stats::Stage::Png)
    } else {
        let (raw, from) = png_webp::decode_webp(data, info)?;
        (raw, from, crate::stats::Stage::Webp)
    };
    timer.stop(stage, raw.len());
    let pic = Picture {
        width: info.width,
        height: info.height,
        mode,
        pixels: convert(raw, from, mode),
    };
    Ok(match region {
        Some(r) => crop(&pic, r),
        None => pic,
    })
}

/// Samples whose image did not decode, with why: `(sample index, message)`.
pub type SkipLog = Arc<Mutex<Vec<(u64, String)>>>;

/// The decode of one sample as a pipeline step: the batch's spec and the key its random crop
/// and flip are drawn from.
#[derive(Debug)]
pub struct ImageStep {
    /// What every sample of the batch becomes.
    pub spec: Arc<ImageSpec>,
    /// The reader's seed.
    pub seed: u64,
    /// The epoch the batch is read in.
    pub epoch: u64,
    /// The sample.
    pub index: u64,
    /// `Some`: a failure is recorded there and the sample's output left for the caller to
    /// fill (`on_error="skip"`); `None`: it fails the batch.
    pub skipped: Option<SkipLog>,
    /// The frames of one clip share this: every frame must be of one size (a clip's crop is
    /// one box for all its frames). `None` for an image of its own.
    pub frames: Option<Arc<FrameSize>>,
}

/// The size every frame of one clip must have: set by the first frame decoded, or fixed from
/// the start (frames read at their own size, which the first frame of the reader set).
#[derive(Debug, Default)]
pub struct FrameSize(AtomicU64);

impl FrameSize {
    /// A clip's frames' size: `fixed` (`(width, height)`), or the first frame's.
    pub fn new(fixed: Option<(u32, u32)>) -> FrameSize {
        FrameSize(AtomicU64::new(fixed.map_or(0, |(w, h)| pack(w, h))))
    }

    /// `Err` with why when a frame of `width` x `height` is not of the clip's size.
    fn check(&self, width: u32, height: u32) -> Result<(), String> {
        let mine = pack(width, height);
        match self
            .0
            .compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(theirs) if theirs == mine => Ok(()),
            Err(theirs) => Err(format!(
                "a frame of {width}x{height} pixels in a clip of {}x{} frames: every frame of a \
                 video must have one size",
                theirs >> 32,
                theirs & 0xFFFF_FFFF
            )),
        }
    }
}

fn pack(width: u32, height: u32) -> u64 {
    (u64::from(width) << 32) | u64::from(height)
}

impl PartialEq for ImageStep {
    fn eq(&self, other: &ImageStep) -> bool {
        Arc::ptr_eq(&self.spec, &other.spec)
            && (self.seed, self.epoch, self.index) == (other.seed, other.epoch, other.index)
    }
}

impl Eq for ImageStep {}

impl ImageStep {
    pub(crate) fn apply(&self, input: &[u8], out: &mut [u8]) -> Result<(), Error> {
        // Geometry is the step's time less the decode inside it (counted as its codec).
        let timer = crate::stats::start();
        let done = self.transform(input, out);
        timer.stop_exclusive(crate::stats::Stage::Geometry, out.len());
        done
    }

    fn transform(&self, input: &[u8], out: &mut [u8]) -> Result<(), Error> {
        let mut draw = Draw::new(self.seed, self.epoch, self.index);
        let done = match &self.frames {
            Some(size) => info(input, &self.spec.limits)
                .map_err(|e| (ErrorKind::Decode, e.to_string()))
                .and_then(|head| {
                    size.check(head.width, head.height)
                        .map_err(|why| (ErrorKind::Inconsistent, why))
                }),
            None => Ok(()),
        }
        .and_then(|()| {
            geometry::transform(input, &self.spec, &mut draw, out)
                .map_err(|e| (ErrorKind::Decode, e.to_string()))
        });
        match done {
            Ok(()) => Ok(()),
            Err((kind, why)) => match &self.skipped {
                Some(log) => {
                    log.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((self.index, why));
                    Ok(())
                }
                None => Err(Error::new(kind, "", why)),
            },
        }
    }
}

/// Copies `r` out of `pic`.
pub fn crop(pic: &Picture, r: Region) -> Picture {
    let c = pic.mode.channels();
    let row = pic.width as usize * c;
    let mut pixels = Vec::with_capacity(r.w as usize * r.h as usize * c);
    for y in r.y..r.y + r.h {
        let start = y as usize * row + r.x as usize * c;
        pixels.extend_from_slice(&pic.pixels[start..start + r.w as usize * c]);
    }
    Picture {
        width: r.w,
        height: r.h,
        mode: pic.mode,
        pixels,
    }
}

/// The channel layout a decoder produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    L,
    La,
    Rgb,
    Rgba,
    /// CMYK as Adobe writes it (inverted); PIL reads it as `CMYK;I`.
    CmykInverted,
}

impl Stored {
    fn channels(self) -> usize {
        match self {
            Stored::L => 1,
            Stored::La => 2,
            Stored::Rgb => 3,
            Stored::Rgba | Stored::CmykInverted => 4,
        }
    }
}

/// PIL's `L24` luma: ITU-R 601-2 weights in 16-bit fixed point, rounded.
fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// PIL's `MULDIV255`: `a * b / 255`, rounded.
fn muldiv255(a: u32, b: u32) -> u32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// PIL's `cmyk2rgb` of one (already un-inverted) CMYK pixel.
fn cmyk_to_rgb(c: u8, m: u8, y: u8, k: u8) -> [u8; 3] {
    let nk = 255 - k as u32;
    let ch = |v: u8| (nk - muldiv255(v as u32, nk).min(nk)) as u8;
    [ch(c), ch(m), ch(y)]
}

/// Pixels in `from`'s layout to `mode`, as PIL's `convert` does.
pub(crate) fn convert(raw: Vec<u8>, from: Stored, mode: Mode) -> Vec<u8> {
    let n = raw.len() / from.channels();
    match (from, mode) {
        (Stored::L, Mode::L) | (Stored::Rgb, Mode::Rgb) | (Stored::Rgba, Mode::Rgba) => raw,
        _ => {
            let mut out = Vec::with_capacity(n * mode.channels());
            for p in raw.chunks_exact(from.channels()) {
                let (rgb, a) = match from {
                    Stored::L => ([p[0]; 3], 255),
                    Stored::La => ([p[0]; 3], p[1]),
                    Stored::Rgb => ([p[0], p[1], p[2]], 255),
                    Stored::Rgba => ([p[0], p[1], p[2]], p[3]),
                    Stored::CmykInverted => (
                        cmyk_to_rgb(255 - p[0], 255 - p[1], 255 - p[2], 255 - p[3]),
                        255,
                    ),
                };
                match mode {
                    Mode::L => out.push(match from {
                        Stored::L | Stored::La => p[0],
                        _ => luma(rgb[0], rgb[1], rgb[2]),
                    }),
                    Mode::Rgb => out.extend_from_slice(&rgb),
                    Mode::Rgba => {
                        out.extend_from_slice(&rgb);
                        out.push(a);
                    }
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_their_first_bytes() {
        assert_eq!(
            ImageFormat::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some(ImageFormat::Jpeg)
        );
        assert_eq!(
            ImageFormat::sniff(b"\x89PNG\r\n\x1a\nxxxx"),
            Some(ImageFormat::Png)
        );
        assert_eq!(
            ImageFormat::sniff(b"RIFF\0\0\0\0WEBPVP8 "),
            Some(ImageFormat::Webp)
        );
        assert_eq!(ImageFormat::sniff(b"GIF89a"), None);
        assert!(matches!(
            info(b"", &Limits::default()),
            Err(ImageError::Truncated(_))
        ));
        assert!(matches!(
            info(b"GIF89a....", &Limits::default()),
            Err(ImageError::Unsupported(_))
        ));
    }

    #[test]
    fn conversions_follow_pil() {
        // PIL: Image.new("RGB", (1, 1), (10, 200, 30)).convert("L").getpixel((0, 0)) == 124
        assert_eq!(convert(vec![10, 200, 30], Stored::Rgb, Mode::L), vec![124]);
        assert_eq!(
            convert(vec![7, 9], Stored::La, Mode::Rgba),
            vec![7, 7, 7, 9]
        );
        // PIL: Image.new("CMYK", (1, 1), (10, 20, 30, 40)).convert("RGB") == (207, 198, 190)
        assert_eq!(
            convert(vec![245, 235, 225, 215], Stored::CmykInverted, Mode::Rgb),
            vec![207, 198, 190]
        );
    }
}
