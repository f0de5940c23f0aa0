//! From encoded bytes to one fixed-shape sample of a batch: decode (only the region a crop
//! needs, where the decoder can), resize, flip, lay out and normalise, written straight into
//! the sample's place in the output.
//!
//! The geometry is torchvision's, on PIL images:
//! - eval (`Crop::Center`): `Resize(resize)` (shorter side to `resize`, the longer
//!   `int(resize * long / short)`) then `CenterCrop((h, w))` (offsets
//!   `int(round((size - crop) / 2))`). Both are done as one resampling of the source box the
//!   crop covers: the same filter taps, at the same positions, as resizing the whole image and
//!   cropping it.
//! - train (`Crop::Random`): `RandomResizedCrop((h, w), scale, ratio)`, with torchvision's
//!   sampling rule (ten tries of area and log-uniform aspect ratio, `int(round(..))` sizes,
//!   else the whole image clamped to the ratio range, centred), then `RandomHorizontalFlip`
//!   (probability 1/2). The numbers come from a SplitMix64 stream keyed by `(seed, epoch,
//!   sample)`, so an epoch repeats its crops exactly (torchvision draws from torch's global
//!   generator instead, so the crops themselves are not torchvision's).
//! - The filter is PIL's antialiased bilinear (`fast_image_resize`'s convolution with the
//!   bilinear filter, whose support grows with the scale factor as PIL's does), on
//!   premultiplied alpha for RGBA as PIL resizes it; results are within 1-2 levels of PIL's.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::exif;
use super::{decode, decode_scaled, info, ImageError, ImageFormat, Limits, Mode, Picture, Region};

/// With `draft`, an eval decode of a JPEG is scaled down in the IDCT (1/2, 1/4, 1/8) only
/// while the source box keeps at least this many pixels per output pixel along each side:
/// PIL's `reducing_gap=2.0` rule (what `Image.thumbnail` does by default), so the antialiased
/// resample that follows still averages over two or more decoded pixels. Measured on photo
/// mosaics of 1000x700 to 4000x3000 against torchvision's full-decode `Resize` +
/// `CenterCrop`: max |diff| 7, mean |diff| under 0.6 (without draft: max 1, mean 0.15), for a
/// decode 1.3-1.7x as fast. Off by default, as torchvision has no such step.
pub const DCT_MIN_RATIO: f64 = 2.0;

/// The largest DCT scaling denominator [`DCT_MIN_RATIO`] allows for a `bw` x `bh` source box
/// resampled to `size` `(h, w)`; 1 for none.
pub fn dct_denominator(bw: f64, bh: f64, size: (u32, u32)) -> u32 {
    [8u32, 4, 2]
        .into_iter()
        .find(|&d| {
            bw / d as f64 >= DCT_MIN_RATIO * size.1 as f64
                && bh / d as f64 >= DCT_MIN_RATIO * size.0 as f64
        })
        .unwrap_or(1)
}

/// Rows decoded above and below a crop region, so that chroma upsampling at the region's
/// edges sees the same neighbours as in a whole-image decode.
const MARGIN_ROWS: u32 = 16;

/// How a sample's crop is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crop {
    /// Shorter side to `resize`, then a centre crop (torchvision `Resize` + `CenterCrop`).
    Center {
        /// The shorter side's length before the crop.
        resize: u32,
    },
    /// torchvision `RandomResizedCrop`: a random area fraction in `scale` and aspect ratio
    /// in `ratio`.
    Random {
        /// Fraction of the image area, low and high.
        scale: (f64, f64),
        /// Width / height, low and high.
        ratio: (f64, f64),
    },
    /// The whole image at its own size (`size` is the image's upright height and width:
    /// Python's `size=None`, one spec per sample).
    Full,
}

/// Where channels go in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Height, width, channels.
    Nhwc,
    /// Channels, height, width.
    Nchw,
}

/// The element type of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// The pixels as they are.
    U8,
    /// `(pixel / 255 - mean) / std` as float32.
    F32,
    /// The same as float16.
    F16,
}

impl Element {
    /// Bytes an element.
    pub fn size(self) -> usize {
        match self {
            Element::U8 => 1,
            Element::F32 => 4,
            Element::F16 => 2,
        }
    }
}

/// What every sample of a batch becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageSpec {
    /// Output height and width.
    pub size: (u32, u32),
    /// The crop rule.
    pub crop: Crop,
    /// Random horizontal flips (train).
    pub flip: bool,
    /// Output layout.
    pub layout: Layout,
    /// Output pixel mode.
    pub mode: Mode,
    /// Output element type; `mean` and `std` (one per channel) apply to the float types.
    pub element: Element,
    /// Per-channel means of the normalisation (on the 0-1 scale).
    pub mean: Vec<f32>,
    /// Per-channel standard deviations.
    pub std: Vec<f32>,
    /// Turn images upright as their EXIF orientation says.
    pub exif_transpose: bool,
    /// Eval crops of large JPEGs decode at a reduced DCT scale first ([`DCT_MIN_RATIO`]).
    pub draft: bool,
    /// Decode limits.
    pub limits: Limits,
}

impl ImageSpec {
    /// Bytes of one output sample.
    pub fn sample_bytes(&self) -> usize {
        self.size.0 as usize * self.size.1 as usize * self.mode.channels() * self.element.size()
    }
}

/// A SplitMix64 stream keyed by `(seed, epoch, sample)`: the crops of a sample in an epoch.
#[derive(Debug, Clone)]
pub struct Draw(u64);

impl Draw {
    /// The stream of sample `index` in `epoch`.
    pub fn new(seed: u64, epoch: u64, index: u64) -> Draw {
        let mut d = Draw(seed ^ 0x9E37_79B9_7F4A_7C15);
        d.0 = d.next() ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03);
        d.0 = d.next() ^ index.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7);
        Draw(d.next())
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in `0..=n`.
    pub fn upto(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * (n as u64 + 1)) >> 32) as u32
    }
}

/// Python's `round` (half to even), as torchvision's `int(round(x))` uses it.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// torchvision's `RandomResizedCrop.get_params` on a `width` x `height` image: `(x, y, w, h)`.
pub fn random_resized_crop(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    draw: &mut Draw,
) -> Region {
    let area = width as f64 * height as f64;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * draw.uniform(scale.0, scale.1);
        let aspect = draw.uniform(lr0, lr1).exp();
        let w = round_half_even((target * aspect).sqrt());
        let h = round_half_even((target / aspect).sqrt());
        if w > 0.0 && h > 0.0 && w <= width as f64 && h <= height as f64 {
            let (w, h) = (w as u32, h as u32);
            let y = draw.upto(height - h);
            let x = draw.upto(width - w);
            return Region { x, y, w, h };
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (w, h) = if in_ratio < ratio.0.min(ratio.1) {
        (
            width,
            round_half_even(width as f64 / ratio.0.min(ratio.1)) as u32,
        )
    } else if in_ratio > ratio.0.max(ratio.1) {
        (
            round_half_even(height as f64 * ratio.0.max(ratio.1)) as u32,
            height,
        )
    } else {
        (width, height)
    };
    let (w, h) = (w.clamp(1, width), h.clamp(1, height));
    Region {
        x: (width - w) / 2,
        y: (height - h) / 2,
        w,
        h,
    }
}

/// The source box (left, top, width, height, in source pixels) that `Resize(resize)` +
/// `CenterCrop(size)` maps onto the output, for a `width` x `height` image.
pub fn center_box(width: u32, height: u32, resize: u32, size: (u32, u32)) -> (f64, f64, f64, f64) {
    let (short, long) = if width <= height {
        (width, height)
    } else {
        (height, width)
    };
    let new_long = (resize as u64 * long as u64 / short as u64) as u32;
    let (rw, rh) = if width <= height {
        (resize, new_long)
    } else {
        (new_long, resize)
    };
    let (ch, cw) = size;
    let top = round_half_even((rh as f64 - ch as f64) / 2.0);
    let left = round_half_even((rw as f64 - cw as f64) / 2.0);
    // Each product before its division: `ch * (height / rh)` lands a hair past `height` where
    // the crop spans the whole resized side (225x228 -> 224: 228.00000000000003), and the
    // resizer refuses a box outside the image. Clamped too, for any rounding left.
    let (w, h) = (width as f64, height as f64);
    let (x, y) = (left * w / rw as f64, top * h / rh as f64);
    let bw = (cw as f64 * w / rw as f64).min(w - x);
    let bh = (ch as f64 * h / rh as f64).min(h - y);
    (x, y, bw, bh)
}

fn pixel_type(mode: Mode) -> PixelType {
    match mode {
        Mode::L => PixelType::U8,
        Mode::Rgb => PixelType::U8x3,
        Mode::Rgba => PixelType::U8x4,
    }
}

fn resize_err(e: impl std::fmt::Display) -> ImageError {
    ImageError::Corrupt(format!("internal: resize failed: {e}"))
}

thread_local! {
    static RESIZER: std::cell::RefCell<Resizer> = std::cell::RefCell::new(Resizer::new());
}

/// Resamples `src` (or the box `(left, top, w, h)` of it) to `size` `(h, w)`.
fn resample(
    src: &Picture,
    bbox: Option<(f64, f64, f64, f64)>,
    size: (u32, u32),
) -> Result<Vec<u8>, ImageError> {
    let mut out = vec![0u8; size.0 as usize * size.1 as usize * src.mode.channels()];
    resample_into(src, bbox, size, &mut out)?;
    Ok(out)
}

/// [`resample`] into `out` (`size` pixels of `src`'s mode, rows packed).
fn resample_into(
    src: &Picture,
    bbox: Option<(f64, f64, f64, f64)>,
    size: (u32, u32),
    out: &mut [u8],
) -> Result<(), ImageError> {
    let view = ImageRef::new(src.width, src.height, &src.pixels, pixel_type(src.mode))
        .map_err(resize_err)?;
    {
        let mut dst =
            Image::from_slice_u8(size.1, size.0, out, pixel_type(src.mode)).map_err(resize_err)?;
        let mut opts =
            ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
        if let Some((l, t, w, h)) = bbox {
            opts = opts.crop(l, t, w, h);
        }
        RESIZER.with(|r| {
            r.borrow_mut()
                .resize(&view, &mut dst, &opts)
                .map_err(resize_err)
        })?;
    }
    Ok(())
}

/// The crop `transform` takes of `data` for `spec` with `draw`, in the (upright) image's
/// pixels, and whether it flips it: what torchvision's `resized_crop` (and `hflip`) would be
/// given to produce the same sample.
pub fn crop_of(
    data: &[u8],
    spec: &ImageSpec,
    draw: &mut Draw,
) -> Result<(Region, bool), ImageError> {
    let head = info(data, &spec.limits)?;
    let (mut w, mut h) = (head.width, head.height);
    if spec.exif_transpose && matches!(exif::orientation(data, head.format), 5..=8) {
        std::mem::swap(&mut w, &mut h);
    }
    Ok(match spec.crop {
        Crop::Center { resize } => {
            let (l, t, cw, ch) = center_box(w, h, resize, spec.size);
            let r = Region {
                x: l.round() as u32,
                y: t.round() as u32,
                w: cw.round() as u32,
                h: ch.round() as u32,
            };
            (r, false)
        }
        Crop::Random { scale, ratio } => {
            let r = random_resized_crop(w, h, scale, ratio, draw);
            (r, spec.flip && draw.unit() < 0.5)
        }
        Crop::Full => (Region { x: 0, y: 0, w, h }, spec.flip && draw.unit() < 0.5),
    })
}

/// The upright `(height, width)` of `data` (turned as its EXIF orientation says when
/// `exif_transpose`): the size `Crop::Full` gives it.
pub fn upright_size(
    data: &[u8],
    limits: &Limits,
    exif_transpose: bool,
) -> Result<(u32, u32), ImageError> {
    let head = info(data, limits)?;
    let turned = exif_transpose && matches!(exif::orientation(data, head.format), 5..=8);
    Ok(if turned {
        (head.width, head.height)
    } else {
        (head.height, head.width)
    })
}

/// Decodes `data` into one sample of `spec` at `out` (`spec.sample_bytes()` bytes), drawing
/// random crops and flips from `draw`.
pub fn transform(
    data: &[u8],
    spec: &ImageSpec,
    draw: &mut Draw,
    out: &mut [u8],
) -> Result<(), ImageError> {
    if out.len() != spec.sample_bytes() {
        return Err(ImageError::Corrupt(
            "internal: output of the wrong size".into(),
        ));
    }
    let head = info(data, &spec.limits)?;
    let orientation = if spec.exif_transpose {
        exif::orientation(data, head.format)
    } else {
        1
    };
    if orientation != 1 {
        // Turned upright first: the crop is drawn on the upright image.
        let upright = exif::transpose(&decode(data, &head, None, spec.mode)?, orientation);
        let (pixels, flip) = geometry_of(&upright, spec, draw)?;
        write_sample(&pixels, spec, flip, out);
        return Ok(());
    }
    let (w, h) = (head.width, head.height);
    match spec.crop {
        Crop::Full => {
            let straight = spec.element == Element::U8
                && (spec.layout == Layout::Nhwc || spec.mode.channels() == 1)
                && (head.height, head.width) == spec.size;
            if straight && super::decode_into(data, &head, spec.mode, out)? {
                // A whole frame decoded in place (clips of frames kept at their size): no
                // picture of its own, no copy.
                if spec.flip && draw.unit() < 0.5 {
                    mirror_rows(out, w as usize, spec.mode.channels());
                }
                return Ok(());
            }
            let pic = decode(data, &head, None, spec.mode)?;
            let (pixels, flip) = full(pic, spec, draw)?;
            write_sample(&pixels, spec, flip, out);
            Ok(())
        }
        Crop::Center { resize } => {
            let bbox = center_box(w, h, resize, spec.size);
            let denom = match head.format {
                ImageFormat::Jpeg if spec.draft && head.scalable => {
                    dct_denominator(bbox.2, bbox.3, spec.size)
                }
                _ => 1,
            };
            if denom > 1 {
                // Decoded small in the IDCT, then the same box, in the smaller pixels.
                let pic = decode_scaled(data, &head, denom, spec.mode)?;
                let (sx, sy) = (pic.width as f64 / w as f64, pic.height as f64 / h as f64);
                let (l, t, bw, bh) = bbox;
                return emit(
                    &pic,
                    Some((l * sx, t * sy, bw * sx, bh * sy)),
                    false,
                    spec,
                    out,
                );
            }
            // Only the box is decoded, with every pixel the filter reaches around it (its
            // support: one output pixel's width in source pixels, plus one) and the chroma
            // margin of crop decoding (see below): the same taps as on the whole image.
            let (l, t, bw, bh) = bbox;
            let reach_x = (bw / spec.size.1 as f64).max(1.0).ceil() as u32 + 1;
            let reach_y = (bh / spec.size.0 as f64).max(1.0).ceil() as u32 + 1;
            let align = head.crop_align.max(1);
            let x0 = (l.floor() as u32).saturating_sub(reach_x + align) / align * align;
            let x1 = ((l + bw).ceil() as u32 + reach_x + align).min(w);
            let y0 = (t.floor() as u32).saturating_sub(reach_y + MARGIN_ROWS);
            let y1 = ((t + bh).ceil() as u32 + reach_y + MARGIN_ROWS).min(h);
            let wide = Region::spanning(x0, y0, x1, y1);
            let part = decode(data, &head, Some(wide), spec.mode)?;
            let shifted = (l - x0 as f64, t - y0 as f64, bw, bh);
            emit(&part, Some(shifted), false, spec, out)
        }
        Crop::Random { scale, ratio } => {
            let r = random_resized_crop(w, h, scale, ratio, draw);
            let flip = spec.flip && draw.unit() < 0.5;
            // Decode whole iMCU columns around the crop, one more iMCU (and 16 rows) on
            // every side where the image has them: libjpeg-turbo upsamples chroma at a
            // region's edges from the region alone, so pixels next to its borders differ
            // from a whole-image decode. Then cut the crop exactly out (torchvision crops,
            // then resizes: no filter tap reaches outside the crop).
            let align = head.crop_align.max(1);
            let x0 = r.x.saturating_sub(align) / align * align;
            let x1 = (r.x + r.w + align).min(w);
            let y0 = r.y.saturating_sub(MARGIN_ROWS);
            let y1 = (r.y + r.h + MARGIN_ROWS).min(h);
            let wide = Region::spanning(x0, y0, x1, y1);
            let part = decode(data, &head, Some(wide), spec.mode)?;
            let exact = super::crop(
                &part,
                Region {
                    x: r.x - x0,
                    y: r.y - y0,
                    w: r.w,
                    h: r.h,
                },
            );
            emit(&exact, None, flip, spec, out)
        }
    }
}

/// Resamples `pic` (or the box of it) into the sample at `out`: straight into it for uint8
/// NHWC (mirrored in place), else through a scratch buffer laid out by [`write_sample`].
fn emit(
    pic: &Picture,
    bbox: Option<(f64, f64, f64, f64)>,
    flip: bool,
    spec: &ImageSpec,
    out: &mut [u8],
) -> Result<(), ImageError> {
    if spec.element == Element::U8 && spec.layout == Layout::Nhwc {
        resample_into(pic, bbox, spec.size, out)?;
        if flip {
            mirror_rows(out, spec.size.1 as usize, pic.mode.channels());
        }
        return Ok(());
    }
    let pixels = resample(pic, bbox, spec.size)?;
    write_sample(&pixels, spec, flip, out);
    Ok(())
}

/// Mirrors every row of `out` (rows of `n` pixels of `c` bytes) in place.
fn mirror_rows(out: &mut [u8], n: usize, c: usize) {
    let half = n / 2;
    for row in out.chunks_exact_mut(n * c) {
        let (left, rest) = row.split_at_mut(half * c);
        let right = &mut rest[(n - 2 * half) * c..];
        for (a, b) in left
            .chunks_exact_mut(c)
            .zip(right.chunks_exact_mut(c).rev())
        {
            a.swap_with_slice(b);
        }
    }
}

/// The crop and resize of an already decoded (upright) picture.
fn geometry_of(
    pic: &Picture,
    spec: &ImageSpec,
    draw: &mut Draw,
) -> Result<(Vec<u8>, bool), ImageError> {
    match spec.crop {
        Crop::Full => full(pic.clone(), spec, draw),
        Crop::Center { resize } => {
            let bbox = center_box(pic.width, pic.height, resize, spec.size);
            Ok((resample(pic, Some(bbox), spec.size)?, false))
        }
        Crop::Random { scale, ratio } => {
            let r = random_resized_crop(pic.width, pic.height, scale, ratio, draw);
            let flip = spec.flip && draw.unit() < 0.5;
            Ok((resample(&super::crop(pic, r), None, spec.size)?, flip))
        }
    }
}

/// A whole picture as the sample, which must be the size `spec` says (found by
/// [`upright_size`] on the same bytes).
fn full(pic: Picture, spec: &ImageSpec, draw: &mut Draw) -> Result<(Vec<u8>, bool), ImageError> {
    if (pic.height, pic.width) != spec.size {
        return Err(ImageError::Corrupt(format!(
            "decoded {}x{} pixels where its header said {}x{}",
            pic.width, pic.height, spec.size.1, spec.size.0
        )));
    }
    Ok((pic.pixels, spec.flip && draw.unit() < 0.5))
}

/// IEEE half precision of `x` (round to nearest even).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32;
    let man = b & 0x7F_FFFF;
    if exp == 0xFF {
        return sign | 0x7C00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1F {
        return sign | 0x7C00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = (rem > mid || (rem == mid && half & 1 == 1)) as u32;
        return sign | (half + round) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1FFF;
    let round = (rem > 0x1000 || (rem == 0x1000 && half & 1 == 1)) as u32;
    sign | (half + round) as u16
}

/// Writes `pixels` (HWC, `spec.size`) into `out` in `spec`'s layout and element type,
/// mirrored left-right when `flip`.
fn write_sample(pixels: &[u8], spec: &ImageSpec, flip: bool, out: &mut [u8]) {
    let (h, w) = (spec.size.0 as usize, spec.size.1 as usize);
    let c = spec.mode.channels();
    let es = spec.element.size();
    if spec.element == Element::U8 {
        // The common case, row by row (pixel by pixel when mirrored), without the general
        // loop's per-element dispatch: it ran as long as the resize.
        match spec.layout {
            Layout::Nhwc if !flip => out.copy_from_slice(pixels),
            Layout::Nhwc => {
                for (src, dst) in pixels.chunks_exact(w * c).zip(out.chunks_exact_mut(w * c)) {
                    for (s, d) in src.chunks_exact(c).rev().zip(dst.chunks_exact_mut(c)) {
                        d.copy_from_slice(s);
                    }
                }
            }
            Layout::Nchw => {
                for (ch, plane) in out.chunks_exact_mut(h * w).enumerate() {
                    for (src, dst) in pixels.chunks_exact(w * c).zip(plane.chunks_exact_mut(w)) {
                        if flip {
                            for (d, s) in dst.iter_mut().zip(src.chunks_exact(c).rev()) {
                                *d = s[ch];
                            }
                        } else {
                            for (d, s) in dst.iter_mut().zip(src.chunks_exact(c)) {
                                *d = s[ch];
                            }
                        }
                    }
                }
            }
        }
        return;
    }
    for y in 0..h {
        for x in 0..w {
            let sx = if flip { w - 1 - x } else { x };
            for ch in 0..c {
                let v = pixels[(y * w + sx) * c + ch];
                let at = match spec.layout {
                    Layout::Nhwc => (y * w + x) * c + ch,
                    Layout::Nchw => (ch * h + y) * w + x,
                };
                match spec.element {
                    Element::U8 => out[at] = v,
                    Element::F32 | Element::F16 => {
                        let f = (v as f32 / 255.0 - spec.mean[ch]) / spec.std[ch];
                        if spec.element == Element::F32 {
                            out[at * es..at * es + 4].copy_from_slice(&f.to_ne_bytes());
                        } else {
                            out[at * es..at * es + 2].copy_from_slice(&f16_bits(f).to_ne_bytes());
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_rounding_is_half_to_even() {
        assert_eq!(round_half_even(2.5), 2.0);
        assert_eq!(round_half_even(3.5), 4.0);
        assert_eq!(round_half_even(-2.5), -2.0);
        assert_eq!(round_half_even(2.4), 2.0);
    }

    #[test]
    fn crops_lie_inside_the_image_and_repeat_per_key() {
        for (w, h) in [(500, 375), (1, 1), (3, 1000), (1000, 3)] {
            for i in 0..200 {
                let r = random_resized_crop(
                    w,
                    h,
                    (0.08, 1.0),
                    (0.75, 4.0 / 3.0),
                    &mut Draw::new(7, 1, i),
                );
                assert!(
                    r.w >= 1 && r.h >= 1 && r.x + r.w <= w && r.y + r.h <= h,
                    "{r:?}"
                );
                let again = random_resized_crop(
                    w,
                    h,
                    (0.08, 1.0),
                    (0.75, 4.0 / 3.0),
                    &mut Draw::new(7, 1, i),
                );
                assert_eq!(r, again);
            }
        }
        let a: Vec<_> = (0..20)
            .map(|i| {
                random_resized_crop(500, 375, (0.08, 1.0), (0.75, 1.33), &mut Draw::new(7, 1, i))
            })
            .collect();
        let b: Vec<_> = (0..20)
            .map(|i| {
                random_resized_crop(500, 375, (0.08, 1.0), (0.75, 1.33), &mut Draw::new(7, 2, i))
            })
            .collect();
        assert_ne!(a, b);
    }

    #[test]
    fn center_box_is_torchvision_resize_then_center_crop() {
        // 500x375 -> Resize(256): 341x256; CenterCrop(224): left round(58.5) = 58, top 16.
        let (l, t, w, h) = center_box(500, 375, 256, (224, 224));
        let s = 375.0 / 256.0;
        assert!((l - 58.0 * 500.0 / 341.0).abs() < 1e-9);
        assert!((t - 16.0 * s).abs() < 1e-9);
        assert!((w - 224.0 * 500.0 / 341.0).abs() < 1e-9);
        assert!((h - 224.0 * s).abs() < 1e-9);
    }

    /// The box lies inside the image for every size: a crop spanning a whole resized side
    /// once rounded past it (225x228 -> 224, 29x32 -> 299).
    #[test]
    fn center_box_stays_inside_the_image() {
        for resize in [32, 224, 256, 299, 342] {
            for crop in [resize, resize * 7 / 8] {
                for width in 1..400 {
                    for height in [width, width + 3, width * 2 + 1] {
                        let (l, t, w, h) = center_box(width, height, resize, (crop, crop));
                        assert!(l >= 0.0 && t >= 0.0, "{width}x{height} {resize} {crop}");
                        assert!(
                            l + w <= width as f64 && t + h <= height as f64,
                            "{width}x{height} -> {resize}, crop {crop}: {l} {t} {w} {h}"
                        );
                        let (l, t, w, h) = center_box(height, width, resize, (crop, crop));
                        assert!(l + w <= height as f64 && t + h <= width as f64);
                        assert!(l >= 0.0 && t >= 0.0);
                    }
                }
            }
        }
    }

    #[test]
    fn half_precision_matches_ieee() {
        assert_eq!(f16_bits(1.0), 0x3C00);
        assert_eq!(f16_bits(-2.0), 0xC000);
        assert_eq!(f16_bits(65504.0), 0x7BFF);
        assert_eq!(f16_bits(1e6), 0x7C00);
        assert_eq!(f16_bits(0.0), 0);
        assert_eq!(f16_bits(5.960_464_5e-8), 1); // the smallest subnormal
    }
}
